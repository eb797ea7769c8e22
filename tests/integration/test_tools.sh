#!/usr/bin/env bash
# Unmodified tools on the mount: git, tar, make and sqlite3.
. "$(dirname "$0")/lib.sh"

R=$T/root M=$T/mnt
mount_ws "$R" "$M"
cd "$M"
git init -q repo && cd repo
git config user.email t@example.com && git config user.name t
printf 'a\n' > a.txt
git add a.txt && git commit -qm first
printf 'b\n' >> a.txt
has_line '^ M a.txt' git status --porcelain || fail "git status"
git commit -qam second
[ "$(git log --oneline | wc -l)" -eq 2 ] || fail "git log"
git fsck --no-progress >/dev/null 2>&1 || fail "git fsck"
ok git
cd "$M"
tar -C /usr/include -cf "$T/inc.tar" linux
mkdir untar && tar -C untar -xf "$T/inc.tar"
diff -r /usr/include/linux untar/linux >/dev/null || fail "untarred tree differs"
ok "tar -x of $(find untar -type f | wc -l) files"
mkdir build && cd build
printf '#include <stdio.h>\nint main(void){puts("built");return 0;}\n' > hello.c
printf 'hello: hello.o\n\tcc -o $@ $^\nhello.o: hello.c\n\tcc -c -o $@ $<\n' > Makefile
make -s >/dev/null && [ "$(./hello)" = built ] || fail make
ok make
cd "$M"
sqlite3 db.sqlite 'create table t(x); insert into t values (1),(2),(3);'
[ "$(sqlite3 db.sqlite 'select sum(x) from t')" = 6 ] || fail sqlite
ok sqlite3
cd /
echo PASS

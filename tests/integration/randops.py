#!/usr/bin/env python3
"""Differential random-operation stress.

randops.py NATIVE MOUNT SEED OPS [--as UID:GID]

Runs one seeded sequence of OPS random file-system operations twice, step by
step: on the directory NATIVE and on MOUNT (a leasefs mount whose ROOT lies
on the same kind of file system).  The names are drawn from a small pool so
that operations collide (rename over open files, unlink of open files, links,
symlink loops, set-ID bits, xattrs).  Each step's outcome (a value or an
errno) must be the same on both sides, and every 50 steps and at the end the
two trees must hold the same names, types, modes, owners, link counts,
contents, symlink targets and user xattrs.  On the first difference it prints
the step, both outcomes and the sequence that led there, and exits 1.

With --as the operations run as that user and group (the caller drops to it
after creating the two top directories owned by it).
"""
import errno
import mmap
import os
import random
import stat
import sys

NAMES = ["a", "b", "c", "d", "e"]
SLOTS = 6
MAKERS = ("open", "mkdir", "pwrite", "write", "symlink")


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def stat_key(st, with_size=True):
    """The fields that must agree; times and inode numbers may not."""
    mode = st.st_mode
    size = st.st_size if with_size and not stat.S_ISDIR(mode) else None
    return (stat.S_IFMT(mode), stat.S_IMODE(mode), st.st_nlink, st.st_uid,
            st.st_gid, size)


class Side:
    """One of the two trees and the fds opened on it, by slot."""

    def __init__(self, top):
        self.top = top
        self.fds = [None] * SLOTS

    def p(self, rel):
        return os.path.join(self.top, rel)

    def close_all(self):
        for i, fd in enumerate(self.fds):
            if fd is not None:
                os.close(fd)
                self.fds[i] = None

    # ---- the operations: each returns something comparable or raises.
    def op_open(self, slot, rel, flags, mode):
        fd = os.open(self.p(rel), flags | os.O_CLOEXEC, mode)
        if self.fds[slot] is not None:
            os.close(self.fds[slot])
        self.fds[slot] = fd
        return None

    def fd(self, slot):
        fd = self.fds[slot]
        if fd is None:
            raise OSError(errno.EBADF, "empty slot")
        return fd

    def op_close(self, slot):
        fd = self.fd(slot)
        self.fds[slot] = None
        os.close(fd)

    def op_pwrite(self, slot, data, off):
        return os.pwrite(self.fd(slot), data, off)

    def op_write(self, slot, data):
        return os.write(self.fd(slot), data)

    def op_pread(self, slot, n, off):
        return os.pread(self.fd(slot), n, off)

    def op_ftruncate(self, slot, n):
        os.ftruncate(self.fd(slot), n)

    def op_fsync(self, slot):
        os.fsync(self.fd(slot))

    def op_fstat(self, slot):
        return stat_key(os.fstat(self.fd(slot)))

    def op_fchmod(self, slot, mode):
        os.fchmod(self.fd(slot), mode)

    def op_fallocate(self, slot, off, n):
        os.posix_fallocate(self.fd(slot), off, n)

    def op_seek_end(self, slot):
        fd = self.fd(slot)
        # A directory's end is the file system's cookie (ext4: 2^63-1
        # with htree), which FUSE does not pass through.
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return "dir"
        return os.lseek(fd, 0, os.SEEK_END)

    def op_mmap_write(self, slot, off, data):
        fd = self.fd(slot)
        size = os.fstat(fd).st_size
        if size == 0:
            return "empty"
        off %= size
        data = data[: size - off]
        with mmap.mmap(fd, size, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE) as m:
            m[off:off + len(data)] = data
            m.flush()
        return len(data)

    def op_mmap_read(self, slot):
        fd = self.fd(slot)
        size = os.fstat(fd).st_size
        if size == 0:
            return b""
        with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as m:
            return m[:]

    def op_copy_range(self, src, dst, n, off_in, off_out):
        return os.copy_file_range(self.fd(src), self.fd(dst), n, off_in,
                                  off_out)

    def op_truncate(self, rel, n):
        os.truncate(self.p(rel), n)

    def op_mkdir(self, rel, mode):
        os.mkdir(self.p(rel), mode)

    def op_rmdir(self, rel):
        os.rmdir(self.p(rel))

    def op_unlink(self, rel):
        os.unlink(self.p(rel))

    def op_rename(self, a, b):
        os.rename(self.p(a), self.p(b))

    def op_link(self, a, b):
        os.link(self.p(a), self.p(b), follow_symlinks=False)

    def op_symlink(self, target, rel):
        os.symlink(target, self.p(rel))

    def op_readlink(self, rel):
        return os.readlink(self.p(rel))

    def op_chmod(self, rel, mode):
        os.chmod(self.p(rel), mode)

    def op_utime(self, rel, ns):
        os.utime(self.p(rel), ns=ns, follow_symlinks=False)
        return os.lstat(self.p(rel)).st_mtime_ns

    def op_stat(self, rel):
        return stat_key(os.stat(self.p(rel)))

    def op_lstat(self, rel):
        return stat_key(os.lstat(self.p(rel)))

    def op_listdir(self, rel):
        return sorted(os.listdir(self.p(rel)))

    def op_access(self, rel, mode):
        return os.access(self.p(rel), mode)

    def op_setxattr(self, rel, name, value, flags):
        os.setxattr(self.p(rel), name, value, flags)

    def op_getxattr(self, rel, name):
        return os.getxattr(self.p(rel), name)

    def op_listxattr(self, rel):
        return sorted(n for n in os.listxattr(self.p(rel))
                      if n.startswith("user."))

    def op_removexattr(self, rel, name):
        os.removexattr(self.p(rel), name)


# Symlink targets are relative and never hold "..": whatever a sequence
# builds, no path leaves its own tree.
class Gen:
    """The seeded sequence: (operation name, arguments)."""

    OPEN_FLAGS = [os.O_RDONLY, os.O_WRONLY, os.O_RDWR]
    MODES = [0o644, 0o600, 0o755, 0o700, 0o4755, 0o2755, 0o1777, 0o000,
             0o444, 0o6711]

    def __init__(self, seed):
        self.r = random.Random(seed)

    def rel(self):
        depth = self.r.choice([1, 1, 2, 2, 3])
        return "/".join(self.r.choice(NAMES) for _ in range(depth))

    def data(self):
        n = self.r.choice([0, 1, 7, 512, 4096, 5000, 70000])
        b = self.r.randrange(256)
        return bytes((b + i) & 0xFF for i in range(n))

    def off(self):
        return self.r.choice([0, 0, 1, 4095, 4096, 10000, 200000])

    def slot(self):
        return self.r.randrange(SLOTS)

    def open_args(self):
        f = self.r.choice(self.OPEN_FLAGS)
        for bit in (os.O_CREAT, os.O_EXCL, os.O_TRUNC, os.O_APPEND,
                    os.O_NOFOLLOW, os.O_DIRECTORY):
            if self.r.random() < (0.5 if bit == os.O_CREAT else 0.12):
                f |= bit
        return (self.slot(), self.rel(), f, self.r.choice(self.MODES))

    def xname(self):
        return "user." + self.r.choice(["k", "l", "long" * 20])

    def next(self):
        r = self.r
        table = [
            (10, lambda: ("open", self.open_args())),
            (3, lambda: ("close", (self.slot(),))),
            (8, lambda: ("pwrite", (self.slot(), self.data(), self.off()))),
            (3, lambda: ("write", (self.slot(), self.data()))),
            (6, lambda: ("pread", (self.slot(), r.choice([1, 100, 70000]),
                                   self.off()))),
            (2, lambda: ("ftruncate", (self.slot(), self.off()))),
            (1, lambda: ("fsync", (self.slot(),))),
            (3, lambda: ("fstat", (self.slot(),))),
            (1, lambda: ("fchmod", (self.slot(), r.choice(self.MODES)))),
            (1, lambda: ("fallocate", (self.slot(), self.off(),
                                       r.choice([1, 8192])))),
            (1, lambda: ("seek_end", (self.slot(),))),
            (2, lambda: ("mmap_write", (self.slot(), self.off(),
                                        self.data()))),
            (1, lambda: ("mmap_read", (self.slot(),))),
            (2, lambda: ("copy_range", (self.slot(), self.slot(),
                                        r.choice([1, 5000, 100000]),
                                        self.off(), self.off()))),
            (2, lambda: ("truncate", (self.rel(), self.off()))),
            (6, lambda: ("mkdir", (self.rel(), r.choice([0o755, 0o700,
                                                         0o3777])))),
            (3, lambda: ("rmdir", (self.rel(),))),
            (4, lambda: ("unlink", (self.rel(),))),
            (6, lambda: ("rename", (self.rel(), self.rel()))),
            (3, lambda: ("link", (self.rel(), self.rel()))),
            (3, lambda: ("symlink", (r.choice(NAMES + ["b/c", "a/b", "."]),
                                     self.rel()))),
            (1, lambda: ("readlink", (self.rel(),))),
            (3, lambda: ("chmod", (self.rel(), r.choice(self.MODES)))),
            (1, lambda: ("utime", (self.rel(), (r.randrange(1 << 40),
                                                r.randrange(1 << 40))))),
            (4, lambda: ("stat", (self.rel(),))),
            (4, lambda: ("lstat", (self.rel(),))),
            (3, lambda: ("listdir", (r.choice(["."] + NAMES),))),
            (2, lambda: ("access", (self.rel(), r.choice([os.R_OK, os.W_OK,
                                                          os.X_OK,
                                                          os.F_OK])))),
            (2, lambda: ("setxattr", (self.rel(), self.xname(), self.data()[:300],
                                      r.choice([0, os.XATTR_CREATE,
                                                os.XATTR_REPLACE])))),
            (2, lambda: ("getxattr", (self.rel(), self.xname()))),
            (1, lambda: ("listxattr", (self.rel(),))),
            (1, lambda: ("removexattr", (self.rel(), self.xname()))),
        ]
        total = sum(w for w, _ in table)
        pick = r.randrange(total)
        for w, f in table:
            if pick < w:
                return f()
            pick -= w
        raise AssertionError("unreachable")


def tree(top):
    """Everything under top that must agree, as a sorted list."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, top)
            try:
                st = os.lstat(p)
            except OSError as e:   # a directory without search permission
                out.append([rel, errno.errorcode.get(e.errno, e.errno)])
                continue
            item = [rel, stat_key(st)]
            if stat.S_ISLNK(st.st_mode):
                item.append(os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                item.append(outcome(lambda: open(p, "rb").read()))
            if not stat.S_ISLNK(st.st_mode):
                item.append(outcome(lambda: sorted(
                    (n, os.getxattr(p, n)) for n in os.listxattr(p)
                    if n.startswith("user."))))
            out.append(item)
    return out


def short(v):
    s = repr(v)
    return s if len(s) < 200 else s[:200] + "..."


def main():
    native, mount, seed, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    if len(sys.argv) > 6 and sys.argv[5] == "--as":
        uid, gid = (int(x) for x in sys.argv[6].split(":"))
        for top in (native, mount):
            os.chown(top, uid, gid)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    os.umask(0o022)
    sides = [Side(native), Side(mount)]
    gen = Gen(seed)
    log = []
    succeeded = made = 0
    for step in range(ops):
        name, args = gen.next()
        log.append((name, args))
        results = [outcome(getattr(s, "op_" + name), *args) for s in sides]
        succeeded += results[0][0] == "ok"
        made += results[0][0] == "ok" and name in MAKERS
        if results[0] != results[1]:
            report(seed, step, log, "step", results)
        if os.environ.get("RANDOPS_PARANOID"):
            for k in range(SLOTS):
                r = [outcome(s.op_fstat, k) for s in sides]
                if r[0] != r[1]:
                    report(seed, step, log, "fstat of slot %d" % k, r)
        if step % 50 == 49 or step == ops - 1:
            trees = [tree(s.top) for s in sides]
            if trees[0] != trees[1]:
                diff = [(a, b) for a, b in zip(*trees) if a != b][:3]
                report(seed, step, log, "tree", diff or
                       [len(trees[0]), len(trees[1])])
    for s in sides:
        s.close_all()
    # A run that never made anything (a top directory this user cannot
    # reach) would agree and prove nothing.  (One that later locks itself
    # out, by a chmod through a symlink to ".", is fine.)
    if made < 10:
        print("randops: seed %d: only %d creations and writes succeeded" %
              (seed, made), file=sys.stderr)
        sys.exit(1)
    print("randops: seed %d, %d operations (%d succeeded): native and "
          "mount agree" % (seed, ops, succeeded))


def report(seed, step, log, what, detail):
    print("randops: seed %d step %d: %s differs" % (seed, step, what),
          file=sys.stderr)
    for i, (name, args) in enumerate(log[-15:]):
        print("  %d %s %s" % (step - len(log[-15:]) + 1 + i, name,
                              short(args)), file=sys.stderr)
    if os.environ.get("RANDOPS_LOG"):
        with open(os.environ["RANDOPS_LOG"], "w") as f:
            for i, (name, args) in enumerate(log):
                f.write("%d %s %s\n" % (i, name, short(args)))
    if what == "step":
        print("  native: %s\n  mount:  %s" % (short(detail[0]),
                                              short(detail[1])),
              file=sys.stderr)
    else:
        for d in detail:
            print("  %s" % short(d), file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()

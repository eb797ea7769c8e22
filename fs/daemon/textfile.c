/* SPDX-License-Identifier: MIT */
/* The metrics textfile (contract: textfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lease.h"
#include "textfile.h"

/* The directory, opened as its canonical path without following any
 * symlink: the directory the host lock covers. */
static int open_dir(const char *dir)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, AT_FDCWD, dir, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

int textfile_open(struct textfile *t, const char *dir, const char *hash)
{
	memset(t, 0, sizeof(*t));
	t->dirfd = -1;
	if (!dir)
		return 0;
	if (snprintf(t->name, sizeof(t->name), "leasefs-%.64s.prom", hash) >=
	    (int)sizeof(t->name) ||
	    snprintf(t->tmp, sizeof(t->tmp), "%s.tmp", t->name) >=
	    (int)sizeof(t->tmp))
		return -ENAMETOOLONG;
	t->dir = dir;
	t->dirfd = open_dir(dir);
	return t->dirfd < 0 ? t->dirfd : 0;
}

/* Whether the directory we hold is still where its host lock says: one
 * moved elsewhere (into a workspace, say) is not written any more. */
static bool in_place(const struct textfile *t)
{
	char link[PATH_MAX + 1], proc[32];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", t->dirfd);
	n = readlink(proc, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = '\0';
	return strcmp(link, t->dir) == 0;
}

/* `text` as the file, whole; nothing is left at the temp name. */
static void replace(const struct textfile *t, const char *text)
{
	size_t len = strlen(text);
	bool ok;
	int fd;

	/* A fresh file of our own, whatever another user left at that name
	 * (the directory may be shared): never opened through a link. */
	unlinkat(t->dirfd, t->tmp, 0);
	fd = openat(t->dirfd, t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
		    O_NOFOLLOW, 0644);
	if (fd < 0)
		return;
	ok = write(fd, text, len) == (ssize_t)len;
	if (close(fd) == 0 && ok)
		renameat(t->dirfd, t->tmp, t->dirfd, t->name);
	else
		unlinkat(t->dirfd, t->tmp, 0);
}

void textfile_write(struct textfile *t, const struct status_source *src)
{
	struct status st;
	char *text;

	if (t->dirfd < 0)
		return;
	/* The next one is due in a period even if this one is not written
	 * (a moved directory must not make the server spin). */
	t->next = lease_deadline_ms(TEXTFILE_PERIOD_MS);
	if (!in_place(t))
		return;
	status_take(src, &st);
	text = status_prometheus(&st);
	if (text)
		replace(t, text);
	free(text);
}

bool textfile_due(const struct textfile *t)
{
	return t->dirfd >= 0 && lease_deadline_passed(t->next);
}

int textfile_timeout_ms(const struct textfile *t)
{
	int64_t left;

	if (t->dirfd < 0)
		return -1;
	left = (t->next - lease_now_ns()) / 1000000 + 1;
	return left < 0 ? 0 : (int)left;
}

void textfile_close(struct textfile *t)
{
	if (t->dirfd < 0)
		return;
	if (in_place(t))
		unlinkat(t->dirfd, t->name, 0);
	close(t->dirfd);
	t->dirfd = -1;
}

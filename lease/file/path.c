/* SPDX-License-Identifier: MIT */
/*
 * The file backend: paths, byte locks and lock files.  The lowest unit: it calls
 * no other of the backend.
 * The layout and what the units share: file_int.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "file_int.h"

/* ---- paths ---------------------------------------------------------- */

/* "NAME" + suffix, relative to the store directory. */
int fb_rel_path(char *buf, size_t sz, const char *name, const char *sfx)
{
	int n = snprintf(buf, sz, "%s%s", name, sfx);

	return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

/* Create the parent directories of NAME under dirfd (0700). */
int fb_make_parents(int dirfd, const char *name)
{
	char buf[LEASE_NAME_MAX + 1];

	snprintf(buf, sizeof(buf), "%s", name);
	for (char *p = strchr(buf, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		int r = lease_mkdir_beneath(dirfd, buf, 0700);

		if (r < 0 && r != -EEXIST)
			return r;
		*p = '/';
	}
	return 0;
}

/* Open the directory holding NAME's files (for fsync and inotify). */
int fb_open_parent(int dirfd, const char *name)
{
	char buf[LEASE_NAME_MAX + 1];
	const char *slash = strrchr(name, '/');
	int fd;

	if (!slash)
		fd = lease_open_beneath(dirfd, ".", O_RDONLY | O_DIRECTORY, 0);
	else {
		snprintf(buf, sizeof(buf), "%.*s", (int)(slash - name), name);
		fd = lease_open_beneath(dirfd, buf, O_RDONLY | O_DIRECTORY, 0);
	}
	return fd;
}

int fb_mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	int n = snprintf(buf, sizeof(buf), "%s", path);

	if (n < 0 || (size_t)n >= sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---- byte locks ----------------------------------------------------- */

static int ofd_lock(int fd, int cmd, short type, off_t byte)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1,
	};

	return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

/* Try the byte-0 grant lock: 0, -EAGAIN if held elsewhere, or -errno. */
int fb_grant_trylock(int fd)
{
	int r = ofd_lock(fd, F_OFD_SETLK, F_WRLCK, 0);

	return r == -EACCES ? -EAGAIN : r;
}

/* Whether some open file description holds byte 0 (a live grant). */
int fb_grant_is_held(int fd, bool *held)
{
	struct flock fl = {
		.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1,
	};

	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	*held = fl.l_type != F_UNLCK;
	return 0;
}

/* Absolute path of NAME<sfx> in the store. */
int fb_abs_path(const struct file_store *fs, const char *name,
		    const char *sfx, char *buf, size_t sz)
{
	int n = snprintf(buf, sz, "%s/%s%s", fs->dir, name, sfx);

	return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

/*
 * Take the byte-1 record lock, waiting until `deadline` but at least
 * REC_LOCK_GRACE_MS (a holder only ever does one read-modify-write).
 * Returns 0 or -ETIMEDOUT / -errno.
 */
int fb_rec_lock(const struct file_store *fs, const char *name, int fd,
		    int64_t deadline)
{
	int64_t grace = lease_deadline_ms(REC_LOCK_GRACE_MS);
	char path[PATH_MAX];
	int r = fb_abs_path(fs, name, ".lock", path, sizeof(path));

	if (r == 0)
		r = lease_ofd_lock_wait(fd, path, F_WRLCK, 1, 1,
					deadline > grace ? deadline : grace);
	return r == -EAGAIN ? -ETIMEDOUT : r;
}

/* Release the record lock but keep fd (a new grant's): waiters are woken
 * explicitly, since no close tells them. */
void fb_rec_unlock(const struct file_store *fs, const char *name, int fd)
{
	char path[PATH_MAX];

	if (fb_abs_path(fs, name, ".lock", path, sizeof(path)) == 0)
		lease_ofd_unlock_notify(fd, path, 1, 1);
}

/* Open (creating if asked) NAME.lock.  Returns fd or -errno. */
int fb_open_lockfile(struct file_store *fs, const char *name, bool create)
{
	char rel[LEASE_NAME_MAX + 16];
	int r = fb_rel_path(rel, sizeof(rel), name, ".lock");

	if (r < 0)
		return r;
	if (create) {
		r = fb_make_parents(fs->dirfd, name);
		if (r < 0)
			return r;
	}
	return lease_open_beneath(fs->dirfd, rel,
				  O_RDWR | (create ? O_CREAT : 0), 0600);
}

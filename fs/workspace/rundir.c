/* SPDX-License-Identifier: MIT */
/* The host's run directory (contract in rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir.h"

#define PART_MODE (S_ISVTX | 0733)

static const char *const parts[] = { RUNDIR_ROOTS, RUNDIR_HOLDERS, RUNDIR_CTL };

/* `path` is a directory (not a symlink) of root's with exactly `mode`:
 * after creating it if absent and, when we are root, repairing it.  1 if
 * it was repaired, else 0 or -errno. */
static int ensure_dir(const char *path, mode_t mode, bool repair)
{
	struct stat st;

	if (repair && mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
		return -ENOTDIR;
	if ((st.st_mode & 07777) == mode)
		return 0;
	if (!repair)
		return -EPERM;
	return chmod(path, mode) < 0 ? -errno : 1;
}

/* Lock files root's daemons made before users shared them (0600) opened
 * to every daemon, once, when the directory itself is repaired. */
static void open_old_locks(void)
{
	DIR *d = opendir(RUNDIR_ROOTS);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		struct stat st;

		if (de->d_type == DT_REG &&
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && st.st_uid == 0)
			(void)fchmodat(dirfd(d), de->d_name, 0666, 0);
	}
	if (d)
		closedir(d);
}

int rundir_prepare(char *msg, size_t msgsz)
{
	bool root = geteuid() == 0;
	const char *at = LEASEFS_RUN_DIR;
	int r = ensure_dir(LEASEFS_RUN_DIR, 0755, root);

	for (size_t i = 0; r >= 0 && i < sizeof(parts) / sizeof(parts[0]); i++) {
		at = parts[i];
		r = ensure_dir(at, PART_MODE, root);
		if (r == 1 && strcmp(at, RUNDIR_ROOTS) == 0)
			open_old_locks();
	}
	if (r >= 0)
		return 0;
	if (root)
		snprintf(msg, msgsz, "cannot set up %s: %s", at,
			 r == -ENOTDIR ? "not a directory of root's" : strerror(-r));
	else
		snprintf(msg, msgsz, "the host's run directory %s is %s; root "
			 "sets it up (systemd-tmpfiles --create leasefs.conf, as "
			 "at boot, or any mount by root)", at,
			 r == -ENOENT ? "missing" : "not set up for users");
	return r;
}

/* fd is a regular file; made 0666 if it is ours. */
static int check_shared(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_uid == geteuid() && (st.st_mode & 0777) != 0666 &&
	    fchmod(fd, 0666) < 0)
		return -errno;
	return 0;
}

int rundir_open_shared(const char *dir, const char *name)
{
	char path[4096];
	int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, fd = -1, r;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return -ENAMETOOLONG;
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		fd = open(path, flags);
		if (fd < 0 && errno == ENOENT) {
			fd = open(path, flags | O_CREAT | O_EXCL, 0666);
			if (fd < 0 && errno == EEXIST)
				continue; /* created in between: open it */
		}
		if (fd < 0)
			return -errno;
	}
	if (fd < 0)
		return -EAGAIN;
	r = check_shared(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* SPDX-License-Identifier: MIT */
/*
 * Host-scoped lock on a workspace root's (dev, ino).  Path canonicalization
 * cannot unify two spellings made by a bind mount; the inode identity can.
 * The OFD lock dies with the daemon, so a crashed holder frees it at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"

static int mkdir_0700(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	return -errno;
}

static int lock_dir(void)
{
	int r = mkdir_0700(LEASEFS_RUN_DIR);

	if (r == 0)
		r = mkdir_0700(LEASEFS_RUN_DIR "/roots");
	return r;
}

/* Epoch recorded by the current holder; 0 if unreadable. */
static uint64_t holder_epoch(int fd)
{
	char buf[64] = { 0 };
	unsigned long long e = 0;

	if (pread(fd, buf, sizeof(buf) - 1, 0) > 0)
		sscanf(buf, "epoch %llu", &e);
	return e;
}

int hostlock_take(const char *root, int *fd_out, struct lease_err *err)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	char path[256];
	struct stat st;
	int fd, r;

	*fd_out = -1;
	if (stat(root, &st) < 0)
		return lease_err_set(err, LEASE_E_IO, -errno, root,
				     "workspace root %s: %s", root,
				     strerror(errno));
	r = lock_dir();
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, root,
				     "cannot create %s/roots: %s",
				     LEASEFS_RUN_DIR, strerror(-r));
	snprintf(path, sizeof(path), LEASEFS_RUN_DIR "/roots/%" PRIu64 "-%" PRIu64 ".lock",
		 (uint64_t)st.st_dev, (uint64_t)st.st_ino);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, -errno, root,
				     "cannot open host lock %s: %s", path,
				     strerror(errno));
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		int e = errno;
		uint64_t epoch = holder_epoch(fd);

		close(fd);
		if (e == EAGAIN || e == EACCES) {
			r = lease_err_set(err, LEASE_E_HELD, 0, root,
					  "workspace busy: %s held at epoch %" PRIu64,
					  root, epoch);
			if (err)
				err->holder_epoch = epoch;
			return r;
		}
		return lease_err_set(err, LEASE_E_IO, -e, root,
				     "cannot lock %s: %s", path, strerror(e));
	}
	*fd_out = fd;
	return 0;
}

int hostlock_note_epoch(int fd, uint64_t epoch)
{
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "epoch %" PRIu64 "\n", epoch);

	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, n, 0) != n)
		return -errno;
	return 0;
}

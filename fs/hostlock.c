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
	char buf[LEASE_NAME_MAX + 64] = { 0 };
	unsigned long long e = 0;

	if (pread(fd, buf, sizeof(buf) - 1, 0) > 0)
		sscanf(buf, "%*s epoch %llu", &e);
	return e;
}

/* Whether what keeps a writer out is read locks (shared/session mounts). */
static bool conflict_is_readers(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_RDLCK;
}

/* Record the holder.  Overwrite first, then cut the tail, so a contender
 * reading concurrently never sees an empty file. */
static int write_holder(int fd, const char *lease_name, uint64_t epoch)
{
	char buf[LEASE_NAME_MAX + 64];
	int n = snprintf(buf, sizeof(buf), "%s epoch %" PRIu64 " pid %d\n",
			 lease_name, epoch, (int)getpid());

	if (pwrite(fd, buf, (size_t)n, 0) != n || ftruncate(fd, n) < 0)
		return -errno;
	return 0;
}

/* Refused: say who keeps us out, an exclusive holder or shared mounts. */
static int busy_error(int fd, const char *root, struct lease_err *err)
{
	bool readers = conflict_is_readers(fd);
	uint64_t held = readers ? 0 : holder_epoch(fd);
	int r = readers
		? lease_err_set(err, LEASE_E_HELD, 0, root, "workspace busy: "
				"%s has shared or session mounts on this host",
				root)
		: lease_err_set(err, LEASE_E_HELD, 0, root, "workspace busy: "
				"%s held at epoch %" PRIu64, root, held);

	if (err)
		err->holder_epoch = held;
	return r;
}

int hostlock_take(const char *root, const char *lease_name, uint64_t epoch,
		  int64_t deadline, int *fd_out, struct lease_err *err)
{
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
	/* Holders let go by closing their descriptor (opened for writing):
	 * the wait is on that event. */
	r = lease_ofd_lock_wait(fd, path, lease_name ? F_WRLCK : F_RDLCK, 0, 0,
				deadline);
	if (r == -EAGAIN) {
		r = busy_error(fd, root, err);
		close(fd);
		return r;
	}
	if (r == 0 && lease_name)
		r = write_holder(fd, lease_name, epoch);
	if (r < 0) {
		close(fd);
		return lease_err_set(err, LEASE_E_IO, r, root,
				     "cannot take host lock %s: %s", path,
				     strerror(-r));
	}
	*fd_out = fd;
	return 0;
}

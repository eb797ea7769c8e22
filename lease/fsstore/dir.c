/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend: paths, the store's directories and lock files,
 * epochs as the harness writes them, our holders' records as read (the
 * layout and what the units share: fsstore_int.h).  The lowest unit: it
 * calls no other of the backend.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fsstore_int.h"

/* A reader racing the holder's rewrite may see a torn epoch: re-read. */
#define EPOCH_READS 5

/* ---- paths ---------------------------------------------------------- */

void fss_hex(const char *name, char *out)
{
	uint8_t d[32];

	lease_sha256(name, strlen(name), d);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int fss_lock_rel(char *buf, size_t sz, const char *name)
{
	return snprintf(buf, sz, "leases/%s.lock", name) < (int)sz
		? 0 : -ENAMETOOLONG;
}

int fss_openat(struct fss_store *fs, const char *rel, int flags, mode_t mode)
{
	return lease_open_beneath(fs->dirfd, rel, flags, mode);
}

/* What a root daemon makes in DIR belongs to DIR's owner. */
static void give(struct fss_store *fs, int fd)
{
	if (fs->chown && fchown(fd, fs->owner, fs->group) < 0) {
		/* the harness may then not open it; nothing else is lost */
	}
}

/* The directory `rel` beneath DIR (every component a real directory,
 * made 0700 where missing if `create`): an O_PATH fd or -errno. */
int fss_dir_open(struct fss_store *fs, const char *rel, bool create)
{
	char path[PATH_MAX];
	size_t n = strlen(rel);

	if (n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, rel, n + 1);
	for (char *p = path; create; p++) {
		char keep = *p;
		int fd;

		if (*p != '/' && *p != '\0')
			continue;
		*p = '\0';
		fd = lease_mkdir_beneath(fs->dirfd, path, 0700);
		if (fd == 0) {
			fd = fss_openat(fs, path, O_RDONLY | O_DIRECTORY, 0);
			if (fd >= 0) {
				give(fs, fd);
				close(fd);
			}
		} else if (fd != -EEXIST) {
			return fd;
		}
		*p = keep;
		if (!keep)
			break;
	}
	return fss_openat(fs, rel, O_PATH | O_DIRECTORY, 0);
}

/* Split rel into its directory (in place) and last component. */
static const char *split_last(char *rel)
{
	char *slash = strrchr(rel, '/');

	*slash = '\0';
	return slash + 1;
}

int fss_lock_open(struct fss_store *fs, const char *name, bool create)
{
	char rel[PATH_MAX];
	const char *base;
	int dfd, fd, r = fss_lock_rel(rel, sizeof(rel), name);

	if (r < 0)
		return r;
	base = split_last(rel);
	dfd = fss_dir_open(fs, rel, create);
	if (dfd < 0)
		return dfd;
	fd = lease_open_beneath(dfd, base, create ? O_RDWR | O_CREAT : O_RDONLY,
				0600);
	r = fd;
	if (fd >= 0 && create)
		give(fs, fd);
	close(dfd);
	return r;
}

/* ---- epochs --------------------------------------------------------- */

/* "DIGITS\n" or "" (0): 0, or -EINVAL. */
static int epoch_parse(const char *buf, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	*out = 0;
	if (n == 0)
		return 0;
	for (i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) {
		unsigned d = (unsigned)(buf[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (i == 0 || i + 1 != n || buf[i] != '\n')
		return -EINVAL;
	*out = v;
	return 0;
}

int fss_epoch_read(struct fss_store *fs, int fd, const char *name,
		   bool strict, uint64_t *out, struct lease_err *err)
{
	char buf[32];

	for (int i = 0; i < (strict ? 1 : EPOCH_READS); i++) {
		ssize_t n = pread(fd, buf, sizeof(buf), 0);

		if (n < 0)
			return lease_err_set(err, LEASE_E_IO, -errno, name,
					     "read lease '%s' in %s: %s", name,
					     fs->dir, strerror(errno));
		if ((size_t)n < sizeof(buf) &&
		    epoch_parse(buf, (size_t)n, out) == 0)
			return 0;
	}
	return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
			     "lease '%s' in %s: leases/%s.lock does not hold an "
			     "epoch (decimal digits and a newline); nothing was "
			     "written", name, fs->dir, name);
}

/* ---- our records ---------------------------------------------------- */

/* A record whose lock nobody holds is a dead holder's. */
bool fss_record_live(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}

int fss_holder_read(struct fss_store *fs, const char *hex, uint64_t *epoch,
		    pid_t *pid, bool *revoked, char *desc, size_t descsz)
{
	char rel[FSS_HEX_LEN + 32], buf[FSS_HOLDER_LINE + 1024];
	char state[8];
	unsigned long long e;
	int p, n, fd;

	snprintf(rel, sizeof(rel), "leasefs/holders/%s.holder", hex);
	fd = fss_openat(fs, rel, O_RDONLY, 0);
	if (fd < 0)
		return 0;
	n = (int)pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < FSS_HOLDER_LINE || !fss_record_live(fd)) {
		close(fd);
		return 0;
	}
	close(fd);
	buf[n] = '\0';
	if (sscanf(buf, "%llu %d %7s", &e, &p, state) != 3)
		return 0;
	*epoch = e;
	*pid = p;
	*revoked = strcmp(state, "revoked") == 0;
	if (desc && descsz) {
		char *nl = strchr(buf + FSS_HOLDER_LINE, '\n');

		if (nl)
			*nl = '\0';
		snprintf(desc, descsz, "%s", buf + FSS_HOLDER_LINE);
	}
	return 1;
}

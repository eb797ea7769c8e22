/* SPDX-License-Identifier: MIT */
/*
 * The file backend: records, the epoch floor, the errors they make.
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

/* ---- records -------------------------------------------------------- */

static int sha256_hex(const char *data, size_t len, char out[65])
{
	uint8_t md[32];

	lease_sha256(data, len, md);
	for (unsigned int i = 0; i < sizeof(md); i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static int state_parse(const char *s, enum lease_state *st)
{
	if (strcmp(s, "held") == 0)
		*st = LEASE_STATE_HELD;
	else if (strcmp(s, "free") == 0)
		*st = LEASE_STATE_FREE;
	else if (strcmp(s, "revoked") == 0)
		*st = LEASE_STATE_REVOKED;
	else
		return -EINVAL;
	return 0;
}

/* Holder descriptions are one printable line. */
void fb_holder_clean(char *dst, size_t sz, const char *src)
{
	size_t i = 0;

	for (; src && src[i] && i + 1 < sz; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	dst[i] = '\0';
}

static int rec_format(char *buf, size_t sz, const char *name,
		      const struct rec *rec)
{
	char hex[65];
	int n = snprintf(buf, sz, REC_MAGIC "\nname %s\nepoch %" PRIu64
			 "\nstate %s\npid %d\nholder %s\n", name, rec->epoch,
			 lease_state_str(rec->state), (int)rec->pid, rec->holder);
	int m;

	if (n < 0 || (size_t)n >= sz)
		return -ENAMETOOLONG;
	if (sha256_hex(buf, (size_t)n, hex) < 0)
		return -EIO;
	m = snprintf(buf + n, sz - (size_t)n, "sha256 %s\n", hex);
	if (m < 0 || (size_t)(n + m) >= sz)
		return -ENAMETOOLONG;
	return n + m;
}

/* Next line of `*p` (NUL-terminated in place); NULL at the end. */
static char *next_line(char **p)
{
	char *s = *p, *nl;

	if (!s || !*s)
		return NULL;
	nl = strchr(s, '\n');
	if (!nl)
		return NULL; /* every line ends in '\n' */
	*nl = '\0';
	*p = nl + 1;
	return s;
}

static const char *field(char *line, const char *key)
{
	size_t n = strlen(key);

	if (!line || strncmp(line, key, n) != 0 || line[n] != ' ')
		return NULL;
	return line + n + 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* Parse and verify a record.  Returns 0 or -EINVAL with *why set. */
static int rec_parse(char *buf, size_t len, const char *name, struct rec *rec,
		     const char **why)
{
	char hex[65], *p = buf, *l, *sum = NULL;
	const char *v;
	uint64_t u;

	for (char *q = strstr(buf, "\nsha256 "); q; q = strstr(q + 1, "\nsha256 "))
		sum = q + 1;
	*why = "checksum line missing";
	if (!sum || strlen(buf) != len || strlen(sum) != 7 + 64 + 1 ||
	    sum[7 + 64] != '\n')
		return -EINVAL;
	*why = "checksum mismatch";
	if (sha256_hex(buf, (size_t)(sum - buf), hex) < 0 ||
	    strncmp(sum + 7, hex, 64) != 0)
		return -EINVAL;
	*sum = '\0'; /* the checked body ends here */
	*why = "bad header";
	l = next_line(&p);
	if (!l || strcmp(l, REC_MAGIC) != 0)
		return -EINVAL;
	*why = "name does not match";
	v = field(next_line(&p), "name");
	if (!v || strcmp(v, name) != 0)
		return -EINVAL;
	*why = "bad epoch";
	if (parse_u64(field(next_line(&p), "epoch"), &rec->epoch) < 0)
		return -EINVAL;
	*why = "bad state";
	v = field(next_line(&p), "state");
	if (!v || state_parse(v, &rec->state) < 0)
		return -EINVAL;
	*why = "bad pid";
	if (parse_u64(field(next_line(&p), "pid"), &u) < 0 || u > INT_MAX)
		return -EINVAL;
	rec->pid = (pid_t)u;
	*why = "bad holder";
	v = field(next_line(&p), "holder");
	if (!v)
		return -EINVAL;
	fb_holder_clean(rec->holder, sizeof(rec->holder), v);
	return 0;
}

static int read_all(int fd, char *buf, size_t sz, size_t *len)
{
	size_t n = 0;

	while (n < sz) {
		ssize_t k = read(fd, buf + n, sz - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		n += (size_t)k;
	}
	*len = n;
	return 0;
}

/*
 * Read NAME.rec.  Missing record: epoch 0, free, *exists = false.
 * Failure to parse: LEASE_E_CORRUPT naming the file.
 */
int fb_rec_read(struct file_store *fs, const char *name, struct rec *rec,
		    bool *exists, struct lease_err *err)
{
	char rel[LEASE_NAME_MAX + 16], buf[REC_MAX + 1];
	const char *why = NULL;
	size_t len = 0;
	int fd, r;

	memset(rec, 0, sizeof(*rec));
	rec->state = LEASE_STATE_FREE;
	if (exists)
		*exists = false;
	r = fb_rel_path(rel, sizeof(rel), name, ".rec");
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name, "name too long");
	fd = lease_open_beneath(fs->dirfd, rel, O_RDONLY, 0);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return lease_err_set(err, LEASE_E_IO, fd, name,
				     "cannot open lease record %s/%s: %s",
				     fs->dir, rel, lease_strerror(fd));
	r = read_all(fd, buf, sizeof(buf), &len);
	close(fd);
	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot read lease record %s/%s: %s",
				     fs->dir, rel, lease_strerror(r));
	if (exists)
		*exists = true;
	buf[len < sizeof(buf) ? len : sizeof(buf) - 1] = '\0';
	if (len > REC_MAX)
		why = "record too large";
	else if (rec_parse(buf, len, name, rec, &why) == 0)
		return 0;
	return lease_err_set(err, LEASE_E_CORRUPT, 0, name,
			     "lease record %s/%s is corrupt (%s); fix or remove "
			     "it by hand, its epoch must not be reset",
			     fs->dir, rel, why);
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t k = write(fd, buf, len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}

/* Write tmp, fsync, rename over NAME.rec.  Caller holds the record lock.
 * With `ring`, NAME's holder is told as soon as the record is in place,
 * before the directory's fsync: telling it early is safe, since a holder
 * that hears of loss only ever stops writing. */
static int rec_replace(struct file_store *fs, const char *name, const char *data,
		       size_t len, bool ring)
{
	char rel[LEASE_NAME_MAX + 16], tmp[LEASE_NAME_MAX + 16];
	int fd, dfd, r;

	r = fb_rel_path(rel, sizeof(rel), name, ".rec");
	if (r == 0)
		r = fb_rel_path(tmp, sizeof(tmp), name, ".rec.tmp");
	if (r < 0)
		return r;
	fd = lease_open_beneath(fs->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC,
				0600);
	if (fd < 0)
		return fd;
	r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0)
		goto out_unlink;
	r = lease_rename_beneath(fs->dirfd, tmp, rel);
	if (r < 0)
		goto out_unlink;
	if (ring)
		fb_bell_ring(fs, name);
	dfd = fb_open_parent(fs->dirfd, name);
	if (dfd < 0)
		return dfd;
	r = fsync(dfd) < 0 ? -errno : 0;
	close(dfd);
	return r;
out_unlink:
	lease_unlink_beneath(fs->dirfd, tmp, 0);
	return r;
}

/* Durably store `rec` as NAME's record, ringing its holder's bell if
 * `ring`.  Caller holds the record lock. */
int fb_rec_store(struct file_store *fs, const char *name,
		     const struct rec *rec, bool ring, struct lease_err *err)
{
	char buf[REC_MAX];
	int n = rec_format(buf, sizeof(buf), name, rec);
	int r = n < 0 ? n : rec_replace(fs, name, buf, (size_t)n, ring);

	if (r < 0)
		return lease_err_set(err, LEASE_E_IO, r, name,
				     "cannot write lease record for '%s' in %s: %s",
				     name, fs->dir, lease_strerror(r));
	return 0;
}

int fb_rec_write(struct file_store *fs, const char *name,
		     const struct rec *rec, struct lease_err *err)
{
	return fb_rec_store(fs, name, rec, false, err);
}

/* ---- epoch floor ------------------------------------------------------ */

/*
 * Store-wide floor, kept as the record of a pseudo-name no lease can have
 * ('!' cannot start a segment): every epoch ever granted to a name whose
 * files were removed (forgotten) is at most the floor, and a name without
 * a record starts above it.  Raised durably before any file is removed.
 */
#define FLOOR_NAME "!floor"

int fb_floor_read(struct file_store *fs, uint64_t *floor,
		      struct lease_err *err)
{
	struct rec rec;
	int r = fb_rec_read(fs, FLOOR_NAME, &rec, NULL, err);

	*floor = r == 0 ? rec.epoch : 0;
	return r;
}

int fb_floor_raise(struct file_store *fs, uint64_t epoch, int64_t deadline)
{
	struct rec rec;
	int fd = fb_open_lockfile(fs, FLOOR_NAME, true), r;

	if (fd < 0)
		return fd;
	r = fb_rec_lock(fs, FLOOR_NAME, fd, deadline);
	if (r == 0)
		r = fb_rec_read(fs, FLOOR_NAME, &rec, NULL, NULL);
	if (r == 0 && rec.epoch < epoch) {
		rec.epoch = epoch;
		rec.state = LEASE_STATE_FREE;
		r = fb_rec_write(fs, FLOOR_NAME, &rec, NULL);
	}
	close(fd);
	return r;
}

/* Whether fd is the lock file still linked at name's path. */
bool fb_lockfile_current(struct file_store *fs, const char *name, int fd)
{
	char rel[LEASE_NAME_MAX + 16];
	struct stat a, b;

	return fb_rel_path(rel, sizeof(rel), name, ".lock") == 0 &&
	       fstat(fd, &a) == 0 &&
	       fstatat(fs->dirfd, rel, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

int fb_held_error(const char *name, const struct rec *rec,
		      struct lease_err *err)
{
	/* A revoked record carries the epoch that superseded the holder. */
	uint64_t e = rec->state == LEASE_STATE_REVOKED && rec->epoch
		? rec->epoch - 1 : rec->epoch;
	int r = lease_err_set(err, LEASE_E_HELD, 0, name,
			      "lease '%s' %s at epoch %" PRIu64
			      " by pid %d%s%s", name,
			      rec->state == LEASE_STATE_REVOKED ?
			      "was revoked and is not yet released" : "is held",
			      e, (int)rec->pid, rec->holder[0] ? " " : "",
			      rec->holder);

	if (err)
		err->holder_epoch = e;
	return r;
}

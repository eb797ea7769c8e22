/* SPDX-License-Identifier: MIT */
/*
 * The fsstore backend: who holds flock(LOCK_EX) on a lock file, by three
 * looks, each trusted only where it cannot be wrong.  None of them takes
 * a lock on a lock file, so looking never makes a harness acquirer's
 * LOCK_NB fail.
 *
 *  1. /proc/locks.  A line read is a lock that was there, so a FLOCK
 *     WRITE line for the file names a holder.  But /proc/locks is no
 *     snapshot: it is read a page at a time, each read starting at a
 *     record's index, and a lock dropped before that index between two
 *     reads moves every later line up by one, past the reader.  So "no
 *     line" is the truth only if the whole of it came in one read.
 *  2. Else a leasefs holder's record at the lock file's epoch whose own
 *     flock is held (tried on a file only leasefs opens): the record
 *     outlives the grant's lock, so that holder may still hold it.
 *  3. Else the open files of every process this one may inspect: /proc
 *     and /proc/PID/fd list in pid and fd order, each read resuming at a
 *     number rather than an index, so a process that holds the lock all
 *     along is not passed over; a descriptor whose path ends in ".lock"
 *     has its fdinfo read, which lists the locks of that one open file at
 *     once.  Only names are read, never a file's attributes: a stat could
 *     hang on a stopped FUSE daemon's file.
 *
 * Holders outside this pid namespace are not seen (nor does /proc/locks
 * show them).  A view keeps what looks 1 and 3 saw, so that a walk over
 * many names (lease list) reads /proc/locks and the open files once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fsstore_int.h"

/* One flock(LOCK_EX) seen: the inode (its superblock's device) and the
 * pid that took it. */
struct fss_flock {
	unsigned maj, min;
	unsigned long long ino;
	pid_t pid;
};

void fss_view_init(struct fss_view *v)
{
	memset(v, 0, sizeof(*v));
}

void fss_view_free(struct fss_view *v)
{
	free(v->locks);
	free(v->open);
	fss_view_init(v);
}

/* ---- lock lines ------------------------------------------------------ */

/* Past the spaces, then past `word` if it is there (else NULL). */
static const char *skip_word(const char *p, const char *word)
{
	size_t n = strlen(word);

	while (*p == ' ' || *p == '\t')
		p++;
	return strncmp(p, word, n) == 0 ? p + n : NULL;
}

/* Past the spaces and one word of anything but spaces. */
static const char *skip_any(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	while (*p && *p != ' ' && *p != '\t' && *p != '\n')
		p++;
	return p;
}

/*
 * A lock line, "[lock:\t]N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INO 0 EOF"
 * (MAJ and MIN in hex): whether it is a flock LOCK_EX, and what it locks.
 * A waiter's line ("N: -> FLOCK ...") is not.  By hand, not sscanf: a
 * host may have thousands of lines.
 */
static bool parse_flock_ex(const char *line, struct fss_flock *out)
{
	const char *p = strncmp(line, "lock:", 5) == 0 ? line + 5 : line;
	char *e;

	p = skip_any(p); /* "N:" */
	if (!(p = skip_word(p, "FLOCK")))
		return false;
	p = skip_any(p); /* ADVISORY */
	if (!(p = skip_word(p, "WRITE")))
		return false;
	out->pid = (pid_t)strtol(p, &e, 10);
	if (e == p || *e != ' ')
		return false;
	p = e;
	out->maj = (unsigned)strtoul(p, &e, 16);
	if (e == p || *e != ':')
		return false;
	p = e + 1;
	out->min = (unsigned)strtoul(p, &e, 16);
	if (e == p || *e != ':')
		return false;
	p = e + 1;
	out->ino = strtoull(p, &e, 10);
	return e != p && *e == ' ';
}

/* Append every flock LOCK_EX of `text`'s lines to *arr (n, cap).  0 or
 * -ENOMEM. */
static int collect(const char *text, struct fss_flock **arr, size_t *n,
		   size_t *cap)
{
	for (const char *l = text; *l; ) {
		const char *end = strchr(l, '\n');
		struct fss_flock f;

		if (!end)
			end = l + strlen(l);
		if (parse_flock_ex(l, &f)) {
			if (*n == *cap) {
				size_t c = *cap ? *cap * 2 : 64;
				struct fss_flock *more = realloc(*arr, c * sizeof(**arr));

				if (!more)
					return -ENOMEM;
				*arr = more;
				*cap = c;
			}
			(*arr)[(*n)++] = f;
		}
		l = *end ? end + 1 : end;
	}
	return 0;
}

/* The holder of `st` among `arr`: 1 with *pid if one locks its inode
 * (on its device, or, failing that, on another: a filesystem whose stat
 * reports another device than its superblock's, as btrfs subvolumes
 * do), else 0. */
static int match(const struct fss_flock *arr, size_t n, const struct stat *st,
		 pid_t *pid)
{
	int best = 0;

	for (size_t i = 0; i < n && best < 2; i++) {
		int m;

		if (arr[i].ino != (unsigned long long)st->st_ino)
			continue;
		m = arr[i].maj == major(st->st_dev) &&
		    arr[i].min == minor(st->st_dev) ? 2 : 1;
		if (m > best) {
			best = m;
			*pid = arr[i].pid;
		}
	}
	return best > 0;
}

/* All of an open file, read to its end: 0 with a NUL-terminated
 * malloc'ed *out and the number of reads that returned data, or -errno. */
static int read_all(int fd, char **out, int *reads)
{
	size_t len = 0, cap = 16384;
	char *buf = malloc(cap);
	ssize_t n;

	*reads = 0;
	while (buf) {
		if (cap - len < 8192) {
			char *more = realloc(buf, cap * 2);

			if (!more)
				break;
			buf = more;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		if (n == 0) {
			buf[len] = '\0';
			*out = buf;
			return 0;
		}
		len += (size_t)n;
		++*reads;
	}
	n = buf ? -errno : -ENOMEM;
	free(buf);
	return (int)n;
}

/* ---- look 1: /proc/locks ------------------------------------------------ */

static int load_proc_locks(struct fss_view *v)
{
	char *text = NULL;
	size_t cap = 0;
	int reads, r, fd = open("/proc/locks", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	r = read_all(fd, &text, &reads);
	close(fd);
	if (r < 0)
		return r;
	r = collect(text, &v->locks, &v->nlocks, &cap);
	free(text);
	v->whole = reads <= 1;
	v->loaded = r == 0;
	return r;
}

/* ---- look 2: our record ------------------------------------------------- */

static int record_holder(struct fss_store *fs, const char *name,
			 uint64_t epoch, pid_t *pid)
{
	char hex[FSS_HEX_LEN + 1];
	uint64_t he;
	bool revoked;

	fss_hex(name, hex);
	return fss_holder_read(fs, hex, &he, pid, &revoked, NULL, 0) &&
	       he == epoch;
}

/* ---- look 3: the open files ---------------------------------------------- */

/* Whether a descriptor's target (the link's text) names a lock file. */
static bool link_is_lock_file(int fddir, const char *fdname)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(fddir, fdname, target, sizeof(target) - 1);

	return n > 5 && memcmp(target + n - 5, ".lock", 5) == 0;
}

/* The flocks of one descriptor of the /proc/PID directory `piddir`. */
static int fd_locks(int piddir, const char *fdname, struct fss_view *v,
		    size_t *cap)
{
	char rel[NAME_MAX + 8], *text = NULL;
	int reads, r, fd;

	snprintf(rel, sizeof(rel), "fdinfo/%s", fdname);
	fd = openat(piddir, rel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; /* closed meanwhile */
	r = read_all(fd, &text, &reads);
	close(fd);
	if (r == 0)
		r = collect(text, &v->open, &v->nopen, cap);
	free(text);
	return r == -ENOMEM ? r : 0;
}

/* The flocks of one process's open lock files. */
static int process_locks(int piddir, struct fss_view *v, size_t *cap)
{
	int fddir = openat(piddir, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (fddir < 0)
		return 0; /* gone, or not ours to inspect */
	d = fdopendir(fddir);
	if (!d) {
		close(fddir);
		return -errno;
	}
	while (r == 0 && (de = readdir(d)) != NULL)
		if (de->d_name[0] != '.' && link_is_lock_file(dirfd(d), de->d_name))
			r = fd_locks(piddir, de->d_name, v, cap);
	closedir(d);
	return r;
}

static int scan_open_files(struct fss_view *v)
{
	DIR *proc = opendir("/proc");
	struct dirent *de;
	size_t cap = 0;
	int r = 0;

	if (!proc)
		return -errno;
	while (r == 0 && (de = readdir(proc)) != NULL) {
		int piddir;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		piddir = openat(dirfd(proc), de->d_name,
				O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (piddir < 0)
			continue;
		r = process_locks(piddir, v, &cap);
		close(piddir);
	}
	closedir(proc);
	v->scanned = r == 0;
	return r;
}

/* ---- the three looks ------------------------------------------------------ */

int fss_lock_held_in(struct fss_view *v, struct fss_store *fs,
		     const char *name, int fd, uint64_t epoch, pid_t *pid)
{
	struct stat st;
	int r;

	*pid = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!v->loaded && (r = load_proc_locks(v)) < 0)
		return r;
	if (match(v->locks, v->nlocks, &st, pid))
		return 1;
	if (v->whole)
		return 0;
	if (record_holder(fs, name, epoch, pid))
		return 1;
	*pid = 0;
	if (!v->scanned && (r = scan_open_files(v)) < 0)
		return r;
	return match(v->open, v->nopen, &st, pid);
}

int fss_lock_held(struct fss_store *fs, const char *name, int fd,
		  uint64_t epoch, pid_t *pid)
{
	struct fss_view v;
	int r;

	fss_view_init(&v);
	r = fss_lock_held_in(&v, fs, name, fd, epoch, pid);
	fss_view_free(&v);
	return r;
}

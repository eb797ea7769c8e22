/* SPDX-License-Identifier: MIT */
/*
 * The backing core: open files.  create, open, write and the rest of an
 * open file's life.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core.h"

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020   /* Linux 6.9 */
#endif

/* Flags for opening the backing file on behalf of an open or create.
 * O_NOFOLLOW is the kernel's business (it resolved the name); an open
 * through /proc/self/fd must not carry it, and create adds its own. */
static int backing_flags(int flags)
{
	return (flags | O_CLOEXEC) &
	       ~(O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT | O_NOFOLLOW);
}

/* A create's flags; for FUSE_TMPFILE (served by the transport as a
 * create) O_EXCL means "never linkable" and is kept. */
static int create_flags(int flags)
{
	bool tmpfile = (flags & O_TMPFILE) == O_TMPFILE;

	return backing_flags(flags) | (tmpfile ? flags & O_EXCL : 0);
}

/* A referenced entry for the object open at fd (whose stat is st). */
static int entry_from_fd(struct lfs *fs, int fd, struct lfs_entry *e)
{
	char p[PROC_FD_PATH_MAX];
	int pfd = openat(fs->proc_fd, fd_name(p, fd), O_PATH | O_CLOEXEC);

	if (pfd < 0)
		return neg_errno();
	e->inode = table_ref_or_add(fs, pfd, &e->st);
	return e->inode ? 0 : -ENOMEM;
}

/*
 * Always O_EXCL and O_NOFOLLOW: the kernel sends CREATE only for a name it
 * believes absent, so an existing name (a symlink among them) means its
 * cache is stale.  ESTALE makes it look the name up again and open what is
 * there through the mount, where a symlink resolves in the caller's view.
 * The fd or -errno.
 */
static int make_file(int dirfd, const char *name, int flags, mode_t mode,
		     bool excl)
{
	int fd;

	if ((flags & O_TMPFILE) == O_TMPFILE) {
		/* Unnamed: in the directory itself, never under a name. */
		fd = openat(dirfd, ".", flags, mode);
		return fd < 0 ? neg_errno() : fd;
	}
	fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
	if (fd >= 0)
		return fd;
	return errno == EEXIST && !excl ? -ESTALE : neg_errno();
}

/* The file made as `c`, under its umask. */
static int create_as(struct lfs *fs, struct lfs_inode *dir, const char *name,
		     mode_t mode, int flags, const struct caller *c,
		     const struct admission *adm)
{
	int dirfd = inode_fd(fs, dir), rc;
	struct acting a;

	if (dirfd < 0)
		return dirfd;
	rc = caller_enter_admitted(fs, c, &mode, adm, &a);
	if (!rc)
		rc = make_file(dirfd, name, create_flags(flags), mode,
			       (flags & O_EXCL) != 0);
	caller_leave(fs, &a);
	inode_fd_put(dir, dirfd);
	return rc;
}

int core_create(struct lfs *fs, struct lfs_inode *dir, const char *name,
		mode_t mode, int flags, const struct caller *c,
		const struct admission *adm, struct lfs_entry *e,
		struct lfs_open *o)
{
	int rc = open_get(fs, c->uid);

	*o = (struct lfs_open){ .fd = -1, .uid = c->uid };
	if (rc < 0)
		return rc;
	rc = o->fd = create_as(fs, dir, name, mode & ~(mode_t)S_IFMT, flags,
			       c, adm);
	if (rc >= 0)
		rc = fstat(o->fd, &e->st) < 0 ? neg_errno() : 0;
	if (!rc)
		rc = entry_from_fd(fs, o->fd, e);
	if (rc < 0)
		core_release(fs, o);
	return rc < 0 ? rc : 0;
}

int reopen_inode(struct lfs *fs, struct lfs_inode *inode, int flags,
		 const struct caller *c, const struct admission *adm)
{
	int ifd = inode_fd(fs, inode), rc;
	char p[PROC_FD_PATH_MAX];
	struct acting a;

	if (ifd < 0)
		return ifd;
	rc = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (!rc && (rc = openat(fs->proc_fd, fd_name(p, ifd), flags)) < 0)
		rc = neg_errno();
	caller_leave(fs, &a);
	inode_fd_put(inode, ifd);
	return rc;
}

int core_open(struct lfs *fs, struct lfs_inode *inode, int flags, bool kill,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_open *o, bool *changed)
{
	struct stat before;
	int rc = open_get(fs, c->uid);

	*o = (struct lfs_open){ .fd = -1, .uid = c->uid };
	*changed = false;
	if (rc < 0)
		return rc;
	rc = o->fd = reopen_inode(fs, inode, backing_flags(flags), c, adm);
	/* An O_TRUNC open: the kernel's kill flag, judged after the truncate
	 * (the backing open truncated already; no owner changed). */
	if (rc >= 0 && (flags & O_TRUNC) && has_sxid(o->fd, &before))
		rc = settle_sxid(fs, o->fd, &before, kill, c, changed);
	if (rc < 0) {
		core_release(fs, o);
		return rc;
	}
	opened(fs, o->fd);
	return 0;
}

/* The open file goes, with its place in the caller's budget. */
void core_release(struct lfs *fs, const struct lfs_open *o)
{
	if (o->fd >= 0)
		close(o->fd);
	open_put(fs, o->uid);
}

ssize_t core_read(int fd, char *buf, size_t size, off_t off)
{
	size_t got = 0;

	while (got < size) {
		ssize_t n = pread(fd, buf + got, size - got, off + (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return neg_errno();
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* ---- writes ------------------------------------------------------------- */

/* pwritev at `off` on an fd that may be O_APPEND: the bytes written or
 * -errno.  Where the kernel predates RWF_NOAPPEND (6.9), through a reopen
 * of the same file without O_APPEND, which needs the acting caller's write
 * permission at that moment. */
static ssize_t pwrite_noappend(int fd, const struct iovec *iov, int n,
			       off_t off)
{
	char p[PROC_FD_PATH_MAX];
	ssize_t w = pwritev2(fd, iov, n, off, RWF_NOAPPEND);
	int wfd;

	if (w >= 0)
		return w;
	if (errno != EOPNOTSUPP && errno != EINVAL)
		return neg_errno();
	wfd = open(proc_path(p, fd), O_WRONLY | O_CLOEXEC);
	if (wfd < 0)
		return neg_errno();
	w = pwritev(wfd, iov, n, off);
	w = w < 0 ? neg_errno() : w;
	close(wfd);
	return w;
}

/* The pipe's `len` bytes, read into memory: the buffer, or NULL. */
static char *drain_pipe(int pipe_fd, size_t len, size_t *got)
{
	char *buf = malloc(len ? len : 1);
	ssize_t n = 0;

	*got = 0;
	while (buf && *got < len) {
		n = read(pipe_fd, buf + *got, len - *got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		*got += (size_t)n;
	}
	if (buf && n < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Memory at `off` (the kernel's offset even on an O_APPEND fd when
 * `noappend`). */
static ssize_t write_mem(int fd, const struct iovec *iov, int n, off_t off,
			 bool noappend)
{
	ssize_t w;

	if (noappend)
		return pwrite_noappend(fd, iov, n, off);
	w = pwritev(fd, iov, n, off);
	return w < 0 ? neg_errno() : w;
}

/* From the pipe, spliced (one call; a short write is the answer), or read
 * into memory where the backing fs cannot splice or `noappend` needs a
 * positioned write. */
static ssize_t write_pipe(int fd, const struct write_src *src, off_t off,
			  bool noappend)
{
	struct iovec iov;
	ssize_t n = -1;
	size_t got;

	if (!noappend) {
		loff_t pos = off;

		n = splice(src->pipe_fd, NULL, fd, &pos, src->len,
			   SPLICE_F_NONBLOCK);
		if (n >= 0)
			return n;
		if (errno != EINVAL)
			return neg_errno();
	}
	iov.iov_base = drain_pipe(src->pipe_fd, src->len, &got);
	if (!iov.iov_base)
		return -ENOMEM;
	iov.iov_len = got;
	n = write_mem(fd, &iov, 1, off, noappend);
	free(iov.iov_base);
	return n;
}

static bool fd_appends(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_APPEND);
}

/*
 * As the caller: the backing filesystem clears set-user-ID and
 * capabilities on a write exactly as natively for this caller.  The
 * kernel's write-back of shared-mmap'd pages (`writepage`) is meant for
 * its offset, but on a backing fd opened O_APPEND a write lands at the
 * end of the file: the pages would be lost and the file would grow.  Such
 * a write goes where it was meant.
 */
ssize_t core_write(struct lfs *fs, int fd, const struct write_src *src,
		   off_t off, bool writepage, bool kill,
		   const struct caller *c, const struct admission *adm,
		   bool *changed)
{
	struct stat before;
	bool sxid = has_sxid(fd, &before);
	bool noappend;
	struct acting a;
	ssize_t n;

	*changed = false;
	n = caller_enter_admitted(fs, c, NULL, adm, &a);
	noappend = writepage && fd_appends(fd);
	if (n == 0 && src->pipe_fd >= 0)
		n = write_pipe(fd, src, off, noappend);
	else if (n == 0)
		n = write_mem(fd, src->iov, src->iovcnt, off, noappend);
	caller_leave(fs, &a);
	if (n >= 0 && sxid) {
		int k = settle_sxid(fs, fd, &before, kill, c, changed);

		n = k < 0 ? k : n;
	}
	return n;
}

int core_flush(int fd)
{
	int dfd = dup(fd);

	if (dfd < 0 || close(dfd) < 0)
		return neg_errno();
	return 0;
}

int core_fsync(int fd, bool datasync)
{
	int res = datasync ? fdatasync(fd) : fsync(fd);

	return res < 0 ? neg_errno() : 0;
}

int core_fallocate(struct lfs *fs, int fd, int mode, off_t off, off_t len,
		   const struct caller *c, const struct admission *adm)
{
	struct acting a;
	int rc;

	rc = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (!rc && fallocate(fd, mode, off, len) < 0)
		rc = neg_errno();
	caller_leave(fs, &a);
	return rc;
}

ssize_t core_copy_file_range(struct lfs *fs, int fd_in, off_t off_in,
			     int fd_out, off_t off_out, size_t len,
			     unsigned flags, const struct caller *c,
			     const struct admission *adm)
{
	struct acting a;
	ssize_t n;

	n = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (n == 0 && (n = copy_file_range(fd_in, &off_in, fd_out, &off_out,
					   len, flags)) < 0)
		n = neg_errno();
	caller_leave(fs, &a);
	return n;
}

off_t core_lseek(int fd, off_t off, int whence)
{
	off_t res = lseek(fd, off, whence);

	return res < 0 ? neg_errno() : res;
}

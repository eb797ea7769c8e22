/* SPDX-License-Identifier: MIT */
/*
 * The passthrough: open files. create, open, read, write and the
 * rest of a file handle's life.
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lfs_int.h"

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020   /* Linux 6.9 */
#endif

/* ---- files -------------------------------------------------------------- */

static void open_reply_flags(struct lfs *fs, struct fuse_file_info *fi)
{
	/* Exclusive and held: this mount is the only legitimate writer, so
	 * cached pages stay valid across opens. */
	fi->keep_cache = atomic_load(&fs->keep_cache);
	/* O_DIRECT: the backing file is opened without it (its alignment
	 * rules would apply to the daemon's buffers), and the kernel's page
	 * cache is bypassed for this open instead. */
	fi->direct_io = (fi->flags & O_DIRECT) != 0;
	/* Locks are the kernel's and the backing fs reports errors at write
	 * time, so close needs no FLUSH round trip. */
	fi->noflush = 1;
}

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
static int entry_from_fd(struct lfs *fs, int fd, const struct stat *st,
			 struct fuse_entry_param *e)
{
	char p[PROC_FD_PATH_MAX];
	int pfd = openat(fs->proc_fd, fd_name(p, fd), O_PATH | O_CLOEXEC);
	struct lfs_inode *inode;

	if (pfd < 0)
		return neg_errno();
	inode = table_ref_or_add(fs, pfd, st);
	if (!inode)
		return -ENOMEM;
	entry_fill(fs, inode, st, e);
	return 0;
}

/*
 * Always O_EXCL and O_NOFOLLOW: the kernel sends CREATE only for a name it
 * believes absent, so an existing name (a symlink among them) means its
 * cache is stale.  ESTALE makes it look the name up again and open what is
 * there through the mount, where a symlink resolves in the caller's view.
 */
static int make_file(void *a_)
{
	struct make_args *a = a_;

	if ((a->open_flags & O_TMPFILE) == O_TMPFILE) {
		/* Unnamed: in the directory itself, never under a name. */
		a->fd_out = openat(a->dirfd, ".", a->open_flags, a->mode);
		return a->fd_out < 0 ? neg_errno() : 0;
	}
	a->fd_out = openat(a->dirfd, a->name,
			   a->open_flags | O_CREAT | O_EXCL | O_NOFOLLOW,
			   a->mode);
	if (a->fd_out >= 0)
		return 0;
	return errno == EEXIST && !a->excl ? -ESTALE : neg_errno();
}

/* The open file of a failed or unanswered open or create goes, with its
 * place in the caller's budget. */
static void drop_open(struct lfs *fs, int fd, uid_t uid)
{
	if (fd >= 0)
		close(fd);
	open_put(fs, uid);
}

void lfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	uid_t uid = fuse_req_ctx(req)->uid;
	struct make_args a = {
		.dirfd = -1, .name = name,
		.mode = mode & ~(mode_t)S_IFMT,
		.open_flags = create_flags(fi->flags),
		.excl = (fi->flags & O_EXCL) != 0,
		.fd_out = -1,
	};
	struct fuse_entry_param e;
	struct io_mode m;
	struct stat st;
	int rc = open_get(fs, uid);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	rc = a.dirfd = inode_fd(fs, dir);
	if (a.dirfd >= 0)
		rc = as_caller_masked(req, make_file, &a, &a.mode);
	inode_fd_put(dir, a.dirfd);
	if (!rc)
		rc = fstat(a.fd_out, &st) < 0 ? neg_errno() : 0;
	if (!rc)
		rc = entry_from_fd(fs, a.fd_out, &st, &e);
	if (rc < 0) {
		drop_open(fs, a.fd_out, uid);
		reply_err(req, rc);
		return;
	}
	fi->fh = fh_make(a.fd_out, uid);
	open_reply_flags(fs, fi);
	rc = iomode_opened(req, inode_of(fs, e.ino), a.fd_out, fi->flags,
			   false, &m);
	if (rc < 0) {
		drop_open(fs, a.fd_out, uid);
		table_unref(fs, inode_of(fs, e.ino), 1);
		reply_err(req, rc);
		return;
	}
	iomode_apply(&m, fi);
	if (fuse_reply_create(req, &e, fi) != 0) {
		/* The kernel will not release a handle it never received. */
		iomode_released(fs, fuse_req_userdata(req), inode_of(fs, e.ino));
		drop_open(fs, a.fd_out, uid);
		table_unref(fs, inode_of(fs, e.ino), 1);
	}
}

struct reopen_args {
	int proc_fd;
	int ifd;
	int flags;
	int fd_out;
};

/* The inode itself, through its O_PATH fd (a magic link, never a name). */
static int reopen_fn(void *a_)
{
	struct reopen_args *a = a_;
	char p[PROC_FD_PATH_MAX];

	a->fd_out = openat(a->proc_fd, fd_name(p, a->ifd), a->flags);
	return a->fd_out < 0 ? neg_errno() : 0;
}

int reopen_inode(fuse_req_t req, struct lfs_inode *inode, int flags)
{
	struct lfs *fs = req_fs(req);
	struct reopen_args a = { .proc_fd = fs->proc_fd,
				 .ifd = inode_fd(fs, inode),
				 .flags = flags, .fd_out = -1 };
	int rc = a.ifd < 0 ? a.ifd : as_caller(req, reopen_fn, &a);

	inode_fd_put(inode, a.ifd);
	return rc < 0 ? rc : a.fd_out;
}

void lfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	uid_t uid = fuse_req_ctx(req)->uid;
	struct stat before;
	struct io_mode m;
	int fd = -1, rc = open_get(fs, uid);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	rc = fd = reopen_inode(req, inode, backing_flags(fi->flags));
	/* An O_TRUNC open: the kernel's kill flag, judged after the truncate
	 * (the backing open truncated already; no owner changed). */
	if (fd >= 0 && (fi->flags & O_TRUNC) && has_sxid(fd, &before))
		rc = settle_sxid(req, ino, fd, &before);
	if (rc < 0) {
		drop_open(fs, fd, uid);
		reply_err(req, rc);
		return;
	}
	opened(fs, fd);
	fi->fh = fh_make(fd, uid);
	open_reply_flags(fs, fi);
	rc = iomode_opened(req, inode, fd, fi->flags, true, &m);
	if (rc < 0) {
		drop_open(fs, fd, uid);
		reply_err(req, rc);
		return;
	}
	if (iomode_reply_open(req, fi, &m) != 0) {
		iomode_released(fs, fuse_req_userdata(req), inode);
		drop_open(fs, fd, uid);
	}
}

/* Up to `size` bytes at `off` into buf: how many (fewer only at end of
 * file), or -errno. */
static ssize_t pread_full(int fd, char *buf, size_t size, off_t off)
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

/* Where the wire lets the reply be built in place (FUSE over io_uring:
 * the request's ring buffer), the file is read straight into it, one
 * copy and one system call; else the reply is spliced from the file. */
void lfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	const struct lfs_session *s = fuse_req_userdata(req);
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
	char *dst = s->wire && s->wire->reply_buffer ?
		    s->wire->reply_buffer(size) : NULL;

	(void)ino; /* the handle names the file */
	if (dst) {
		ssize_t n = pread_full(fh_fd(fi), dst, size, off);

		if (n < 0)
			reply_err(req, (int)n);
		else
			fuse_reply_buf(req, dst, (size_t)n);
		return;
	}
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fh_fd(fi);
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

/* pwrite at `off` on an fd that may be O_APPEND: the bytes written or
 * -errno.  Where the kernel predates RWF_NOAPPEND (6.9), through a reopen
 * of the same file without O_APPEND, which needs the acting caller's write
 * permission at that moment. */
static ssize_t pwrite_noappend(int fd, void *buf, size_t len, off_t off)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	char p[PROC_FD_PATH_MAX];
	ssize_t n = pwritev2(fd, &iov, 1, off, RWF_NOAPPEND);
	int wfd;

	if (n >= 0)
		return n;
	if (errno != EOPNOTSUPP && errno != EINVAL)
		return neg_errno();
	wfd = open(proc_path(p, fd), O_WRONLY | O_CLOEXEC);
	if (wfd < 0)
		return neg_errno();
	n = pwrite(wfd, buf, len, off);
	n = n < 0 ? neg_errno() : n;
	close(wfd);
	return n;
}

/* The kernel's write-back of shared-mmap'd pages (fi->writepage) is meant
 * for its offset, but on a backing fd opened O_APPEND a write lands at the
 * end of the file: the pages would be lost and the file would grow.  Such
 * a write is taken into memory and written where it was meant. */
static ssize_t write_back_pages(struct fuse_bufvec *in, int fd, off_t off)
{
	size_t size = fuse_buf_size(in);
	struct fuse_bufvec mem = FUSE_BUFVEC_INIT(size);
	ssize_t n;

	mem.buf[0].mem = malloc(size ? size : 1);
	if (!mem.buf[0].mem)
		return -ENOMEM;
	n = fuse_buf_copy(&mem, in, 0);
	if (n >= 0)
		n = pwrite_noappend(fd, mem.buf[0].mem, (size_t)n, off);
	free(mem.buf[0].mem);
	return n;
}

static bool fd_appends(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_APPEND);
}

void lfs_write_buf(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_bufvec *in, off_t off,
			  struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	struct stat before;
	bool sxid = has_sxid(fh_fd(fi), &before);
	ssize_t n;

	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = fh_fd(fi);
	out.buf[0].pos = off;
	/* As the caller: the backing filesystem clears set-user-ID and
	 * capabilities on a write exactly as natively for this caller. */
	act_as_caller(req);
	n = may_mutate(req);
	if (n == 0 && fi->writepage && fd_appends(fh_fd(fi)))
		n = write_back_pages(in, fh_fd(fi), off);
	else if (n == 0)
		n = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
	if (n >= 0 && sxid) {
		int k = settle_sxid(req, ino, fh_fd(fi), &before);

		n = k < 0 ? k : n;
	}
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

/* Close-time errors of the backing fs (e.g. NFS) surface here. */
void lfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd = dup(fh_fd(fi));

	(void)ino; /* the handle names the file */
	if (fd < 0 || close(fd) < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_err(req, 0);
}

void lfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);

	iomode_released(fs, fuse_req_userdata(req), inode_of(fs, ino));
	drop_open(fs, fh_fd(fi), fh_uid(fi));
	fuse_reply_err(req, 0);
}

void lfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	int res = datasync ? fdatasync(fh_fd(fi)) : fsync(fh_fd(fi));

	(void)ino; /* the handle names the file */
	reply_err(req, res < 0 ? neg_errno() : 0);
}

void lfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t offset, off_t length,
			  struct fuse_file_info *fi)
{
	int res = may_mutate(req);

	(void)ino; /* the handle names the file */
	if (res == 0)
		res = fallocate(fh_fd(fi), mode, offset, length) < 0 ? neg_errno() : 0;
	reply_err(req, res);
}

void lfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
				off_t off_in, struct fuse_file_info *fi_in,
				fuse_ino_t ino_out, off_t off_out,
				struct fuse_file_info *fi_out, size_t len,
				int flags)
{
	ssize_t n = may_mutate(req);

	(void)ino_in;
	(void)ino_out; /* the handles name the files */
	if (n == 0 && (n = copy_file_range(fh_fd(fi_in), &off_in, fh_fd(fi_out),
					   &off_out, len, (unsigned)flags)) < 0)
		n = neg_errno();
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

void lfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	off_t res = lseek(fh_fd(fi), off, whence);

	(void)ino; /* the handle names the file */
	if (res < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_lseek(req, res);
}

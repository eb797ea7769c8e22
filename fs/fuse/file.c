/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's front end: open files.  create, open, read, write and
 * the rest of a file handle's life (the backing calls: core/file.c; how
 * the kernel serves each open: iomode.c).
 * (Conventions: lfs.c; shared internals: lfs_int.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "lfs_int.h"

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

/* The admission of an open: only one that can change ROOT was let in as
 * a mutation (ops.h, MAY_WRITE). */
static struct admission open_admission(fuse_req_t req, int flags)
{
	return lfs_open_writes(flags) ? admission_of(req)
				      : (struct admission){ 0 };
}

void lfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		mode_t mode, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	struct fuse_entry_param out;
	struct lfs_entry e;
	struct lfs_open o;
	struct io_mode m;
	int rc = core_create(fs, inode_of(fs, parent), name, mode, fi->flags,
			     &c, &adm, &e, &o);

	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	entry_fill(fs, &e, &out);
	fi->fh = fh_make(o.fd, o.uid);
	open_reply_flags(fs, fi);
	rc = iomode_opened(req, e.inode, o.fd, fi->flags, false, &m);
	if (rc < 0) {
		core_release(fs, &o);
		table_unref(fs, e.inode, 1);
		reply_err(req, rc);
		return;
	}
	iomode_apply(&m, fi);
	if (fuse_reply_create(req, &out, fi) != 0) {
		/* The kernel will not release a handle it never received. */
		iomode_released(fs, fuse_req_userdata(req), e.inode);
		core_release(fs, &o);
		table_unref(fs, e.inode, 1);
	}
}

void lfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct caller c = caller_of(req);
	struct admission adm = open_admission(req, fi->flags);
	struct lfs_open o;
	struct io_mode m;
	bool changed = false;
	int rc = iomode_may_open(fs, inode, fi->flags);

	if (rc == 0)
		rc = core_open(fs, inode, fi->flags, kill_flagged(req), &c,
			       &adm, &o, &changed);

	if (changed)
		mode_changed(req, ino);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fi->fh = fh_make(o.fd, o.uid);
	open_reply_flags(fs, fi);
	rc = iomode_opened(req, inode, o.fd, fi->flags, true, &m);
	if (rc < 0) {
		core_release(fs, &o);
		reply_err(req, rc);
		return;
	}
	if (iomode_reply_open(req, fi, &m) != 0) {
		iomode_released(fs, fuse_req_userdata(req), inode);
		core_release(fs, &o);
	}
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
		ssize_t n = core_read(fh_fd(fi), dst, size, off);

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

/* A FUSE write's bytes as the core takes them: one pipe, or memory (a
 * vector of several buffers is first copied into *flat). */
static int write_src_of(struct fuse_bufvec *in, struct write_src *src,
			struct iovec *iov, void **flat)
{
	const struct fuse_buf *b = &in->buf[0];
	size_t size = fuse_buf_size(in);
	struct fuse_bufvec mem = FUSE_BUFVEC_INIT(size);
	ssize_t n;

	*src = (struct write_src){ .iov = iov, .iovcnt = 1, .pipe_fd = -1,
				   .len = size };
	*flat = NULL;
	if (in->count == 1 && in->idx == 0 && in->off == 0) {
		if (!(b->flags & FUSE_BUF_IS_FD)) {
			*iov = (struct iovec){ .iov_base = b->mem,
					       .iov_len = size };
			return 0;
		}
		if (!(b->flags & FUSE_BUF_FD_SEEK)) {
			src->pipe_fd = b->fd;
			return 0;
		}
	}
	*flat = mem.buf[0].mem = malloc(size ? size : 1);
	if (!*flat)
		return -ENOMEM;
	n = fuse_buf_copy(&mem, in, 0);
	if (n < 0)
		return (int)n;
	*iov = (struct iovec){ .iov_base = *flat, .iov_len = (size_t)n };
	src->len = (size_t)n;
	return 0;
}

void lfs_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in,
		   off_t off, struct fuse_file_info *fi)
{
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	struct write_src src;
	struct iovec iov;
	bool changed = false;
	void *flat;
	ssize_t n = write_src_of(in, &src, &iov, &flat);

	if (n == 0)
		n = core_write(req_fs(req), fh_fd(fi), &src, off, fi->writepage,
			       kill_flagged(req), &c, &adm, &changed);
	free(flat);
	if (changed)
		mode_changed(req, ino);
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

void lfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the file */
	reply_err(req, core_flush(fh_fd(fi)));
}

void lfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_open o = fh_open(fi);

	iomode_released(fs, fuse_req_userdata(req), inode_of(fs, ino));
	core_release(fs, &o);
	fuse_reply_err(req, 0);
}

void lfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	       struct fuse_file_info *fi)
{
	(void)ino; /* the handle names the file */
	reply_err(req, core_fsync(fh_fd(fi), datasync != 0));
}

void lfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
		   off_t length, struct fuse_file_info *fi)
{
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);

	(void)ino; /* the handle names the file */
	reply_err(req, core_fallocate(req_fs(req), fh_fd(fi), mode, offset,
				      length, &c, &adm));
}

void lfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			 struct fuse_file_info *fi_in, fuse_ino_t ino_out,
			 off_t off_out, struct fuse_file_info *fi_out,
			 size_t len, int flags)
{
	struct caller c = caller_of(req);
	struct admission adm = admission_of(req);
	ssize_t n = core_copy_file_range(req_fs(req), fh_fd(fi_in), off_in,
					 fh_fd(fi_out), off_out, len,
					 (unsigned)flags, &c, &adm);

	(void)ino_in;
	(void)ino_out; /* the handles name the files */
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

void lfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	       struct fuse_file_info *fi)
{
	off_t res = core_lseek(fh_fd(fi), off, whence);

	(void)ino; /* the handle names the file */
	if (res < 0)
		reply_err(req, (int)res);
	else
		fuse_reply_lseek(req, res);
}

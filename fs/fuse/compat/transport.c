/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/fuse.h>

#include "fs.h"
#include "ring.h"
#include "transport.h"

/* The protocol minor that brought FUSE_TMPFILE (uapi history). */
#define MINOR_TMPFILE 37

/* FUSE passthrough, protocol 7.40 (kernel 6.9); <linux/fuse.h> of Debian
 * 12 predates it.  max_stack_depth is fuse_init_out's first unused word,
 * backing_id fuse_open_out's padding. */
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37)
#define FOPEN_PASSTHROUGH (1 << 7)
struct fuse_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define FUSE_DEV_IOC_BACKING_OPEN _IOW(FUSE_DEV_IOC_MAGIC, 1, struct fuse_backing_map)
#define FUSE_DEV_IOC_BACKING_CLOSE _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t)
#endif
/* Protocol 7.39 (kernel 6.6): an open answered FOPEN_DIRECT_IO may be
 * mapped shared (the kernel keeps its pages coherent with the direct
 * writes).  Debian 12's <linux/fuse.h> predates it. */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif
/* Backing files on a filesystem that is itself stacked (overlayfs) are
 * refused: one level, so that leasefs can still be a lower layer. */
#define PASSTHROUGH_STACK_DEPTH 1
/* The kernel's FUSE_MIN_READ_BUFFER and FUSE_DEFAULT_MAX_PAGES_PER_REQ:
 * floors of its ring payload size (fs/fuse). */
#define KERNEL_MIN_PAYLOAD 8192u
#define KERNEL_DEFAULT_MAX_PAGES 32u

struct transport {
	struct fuse_session *se;
	struct transport_opts opts;
	/* Set by the worker that reads INIT, read by the one that sends its
	 * reply (the kernel sends nothing else before that reply) and by
	 * status readers: atomics, no lock. */
	_Atomic uint64_t init_unique;   /* 0: INIT not seen yet */
	_Atomic uint64_t offered;       /* the kernel's INIT flags */
	atomic_bool uring_switch;       /* INIT did not offer io_uring, and
					 * the kernel has the switch for it */
	_Atomic uint32_t kernel_minor;
	atomic_bool killpriv_v2;        /* negotiated */
	atomic_bool direct_io_mmap;     /* negotiated */
	atomic_bool initialized;
	/* FUSE passthrough: negotiated by the INIT reply's sender, turned
	 * off by the first refusal that holds for every file; counters for
	 * status. */
	atomic_bool passthrough;
	_Atomic int passthrough_err;
	atomic_ullong backing_files, backing_opens;
	/* The io_uring queues, once INIT's reply offered them: set by the
	 * worker that sends that reply, stopped by transport_run() after the
	 * workers ended (status readers still read their counters), freed
	 * by transport_free(). */
	_Atomic(struct ring *) ring;
	_Atomic int ring_err;           /* why they could not be set up */
	/* Workers: `finished` is posted by each worker that leaves its loop. */
	sem_t finished;
	/* lock protects workers, nworkers and stopping. */
	pthread_mutex_t lock;
	pthread_t workers[TRANSPORT_MAX_WORKERS];
	unsigned nworkers, max_workers;
	bool stopping;
	atomic_uint idle;               /* workers waiting for a request */
	_Atomic int err;                /* first receive error, or 0 */
};

/* Per worker thread: the request being processed (see the header), and a
 * pipe to peek at spliced requests' headers through. */
static __thread bool tl_kill_suidgid;
static __thread int tl_peek[2] = { -1, -1 };
/* The open reply this thread sends next: its backing id (0: none). */
static __thread int tl_backing_id;
static __thread bool tl_backing_direct;

bool transport_kill_suidgid(void)
{
	return tl_kill_suidgid;
}

/* ---- custom io: plain syscalls, with INIT's reply amended ----------- */

static ssize_t io_read(int fd, void *buf, size_t len, void *ud)
{
	(void)ud;
	return read(fd, buf, len);
}

static struct transport *transport_of(void *ud)
{
	return ((struct lfs_session *)ud)->transport;
}

static void ring_request(void *ud, void *req, size_t size);

/* The kernel's max payload for this INIT reply (the larger of max_write
 * and max_pages, with its floors), which every ring buffer must hold. */
static size_t ring_payload(const struct fuse_init_out *out)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t pages = KERNEL_DEFAULT_MAX_PAGES, p = KERNEL_MIN_PAYLOAD;

	if ((out->flags & FUSE_MAX_PAGES) && out->max_pages > pages)
		pages = out->max_pages;
	if (out->max_write > p)
		p = out->max_write;
	if (pages * page > p)
		p = pages * page;
	return (p + page - 1) / page * page;
}

/* FUSE over io_uring, if offered and wanted: the reply offers it only
 * once every queue is set up, since the kernel holds all requests until
 * every queue has registered. */
static void offer_ring(struct transport *t, struct fuse_init_out *out)
{
	struct ring *ring;
	int r;

	if (!t->opts.io_uring || !(atomic_load(&t->offered) & FUSE_OVER_IO_URING))
		return;
	r = ring_new(fuse_session_fd(t->se), ring_payload(out), ring_request,
		     t, &ring);
	if (r < 0) {
		atomic_store(&t->ring_err, r);
		return;
	}
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= (uint32_t)(FUSE_OVER_IO_URING >> 32);
	atomic_store(&t->ring, ring);
}

/* FUSE passthrough, if offered and wanted (the kernel takes it only
 * without the writeback cache, which leasefs never asks for). */
static void offer_passthrough(struct transport *t, struct fuse_init_out *out)
{
	if (!t->opts.passthrough || !(atomic_load(&t->offered) & FUSE_PASSTHROUGH) ||
	    (out->flags & FUSE_WRITEBACK_CACHE))
		return;
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= (uint32_t)(FUSE_PASSTHROUGH >> 32);
	out->unused[0] = PASSTHROUGH_STACK_DEPTH;
	atomic_store(&t->passthrough, true);
}

/* Shared mappings of direct_io opens, if offered and wanted. */
static void offer_direct_mmap(struct transport *t, struct fuse_init_out *out)
{
	if (!t->opts.direct_io_mmap ||
	    !(atomic_load(&t->offered) & FUSE_DIRECT_IO_ALLOW_MMAP))
		return;
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= (uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
	atomic_store(&t->direct_io_mmap, true);
}

/* INIT's reply: what libfuse 3.14 cannot ask for, if the kernel offers it
 * and the daemon wants it. */
static void amend_init_reply(struct transport *t, struct iovec *iov, int count)
{
	struct fuse_out_header *oh = iov[0].iov_base;
	struct fuse_init_out *out;
	uint64_t offered = atomic_load(&t->offered);

	if (count < 2 || oh->error != 0 || iov[1].iov_len < 24)
		return;
	out = iov[1].iov_base;
	if (t->opts.killpriv_v2 && (offered & FUSE_HANDLE_KILLPRIV_V2)) {
		out->flags |= FUSE_HANDLE_KILLPRIV_V2;
		/* v1 (the kernel clears on its own, then asks) stays off. */
		out->flags &= ~(uint32_t)FUSE_HANDLE_KILLPRIV;
		atomic_store(&t->killpriv_v2, true);
	}
	if (iov[1].iov_len >= sizeof(*out)) {
		offer_direct_mmap(t, out);
		offer_passthrough(t, out);
		offer_ring(t, out);
	}
	atomic_store(&t->initialized, true);
}

/* INIT's reply went out (sent) or not: the queues register, or go. */
static void init_replied(struct transport *t, bool sent)
{
	struct ring *ring = atomic_load(&t->ring);

	if (!ring)
		return;
	if (sent)
		ring_start(ring);
	else
		ring_stop(ring);
}

/* A -errno result in the custom io's terms: -1 and errno. */
static ssize_t as_syscall(ssize_t r)
{
	if (r >= 0)
		return r;
	errno = (int)-r;
	return -1;
}

/* A successful open reply that transport_wire_ops.next_reply() named:
 * the backing id, and the flags the kernel requires with it (no kept
 * page cache: the inode's pages are not used in passthrough). */
static void amend_open_reply(struct iovec *iov, int count)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	struct fuse_open_out *o;

	if (count < 2 || iov[0].iov_len < sizeof(*oh) || oh->error != 0 ||
	    iov[1].iov_len != sizeof(*o))
		return;
	o = iov[1].iov_base;
	o->open_flags &= ~(uint32_t)FOPEN_KEEP_CACHE;
	o->open_flags |= FOPEN_PASSTHROUGH;
	if (tl_backing_direct)
		o->open_flags |= FOPEN_DIRECT_IO;
	o->padding = (uint32_t)tl_backing_id;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud)
{
	struct transport *t = transport_of(ud);
	uint64_t init = atomic_load(&t->init_unique);
	bool is_init;
	ssize_t n;

	if (tl_backing_id) {
		amend_open_reply(iov, count);
		tl_backing_id = 0;
	}
	n = ring_reply(iov, count);

	if (n != -ENOENT)
		return as_syscall(n);
	is_init = init && count > 0 &&
		  iov[0].iov_len >= sizeof(struct fuse_out_header) &&
		  ((struct fuse_out_header *)iov[0].iov_base)->unique == init &&
		  atomic_compare_exchange_strong(&t->init_unique, &init, 0);
	if (is_init)
		amend_init_reply(t, iov, count);
	n = writev(fd, iov, count);
	if (is_init)
		init_replied(t, n >= 0);
	return n;
}

static ssize_t io_splice_receive(int fdin, off_t *offin, int fdout,
				 off_t *offout, size_t len, unsigned int flags,
				 void *ud)
{
	(void)ud;
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* A reply spliced from a pipe: into its ring entry when it answers a
 * ring request. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout,
			      off_t *offout, size_t len, unsigned int flags,
			      void *ud)
{
	(void)ud;
	if (ring_serving())
		return as_syscall(ring_reply_pipe(fdin, len));
	return splice(fdin, offin, fdout, offout, len, flags);
}

static const struct fuse_custom_io io = {
	.read = io_read,
	.writev = io_writev,
	.splice_receive = io_splice_receive,
	.splice_send = io_splice_send,
};

/* ---- looking at requests before libfuse does --------------------------- */

static void saw_init(struct transport *t, const struct fuse_in_header *in,
		     size_t size)
{
	const struct fuse_init_in *ii = (const void *)(in + 1);
	uint64_t flags;

	if (size < sizeof(*in) + 16)
		return;
	flags = ii->flags;
	if (size >= sizeof(*in) + 20 && (flags & FUSE_INIT_EXT))
		flags |= (uint64_t)ii->flags2 << 32;
	atomic_store(&t->offered, flags);
	if (!(flags & FUSE_OVER_IO_URING))
		atomic_store(&t->uring_switch, ring_kernel_has_switch());
	atomic_store(&t->kernel_minor, ii->minor);
	atomic_store(&t->init_unique, in->unique);
}

/* FUSE_TMPFILE has FUSE_CREATE's layout and reply: served as a create
 * whose flags say O_TMPFILE (a create from the kernel never does). */
static void tmpfile_as_create(struct fuse_in_header *in, size_t size)
{
	struct fuse_create_in *ci = (void *)(in + 1);

	if (size < sizeof(*in) + sizeof(*ci))
		return;
	in->opcode = FUSE_CREATE;
	ci->flags |= O_TMPFILE;
}

/* Whether a request whose op header (`hdr` bytes) has `bit` set in the
 * 32-bit field at `off` asks the filesystem to clear set-user/group-ID. */
static bool kill_flag(const struct fuse_in_header *in, size_t size, size_t hdr,
		      size_t off, uint32_t bit)
{
	uint32_t v;

	if (size < sizeof(*in) + hdr)
		return false;
	memcpy(&v, (const char *)(in + 1) + off, sizeof(v));
	return v & bit;
}

/* A request in memory: look, and amend where libfuse needs it. */
static void inspect_mem(struct transport *t, struct fuse_in_header *in,
			size_t size)
{
	if (size < sizeof(*in))
		return;
	switch (in->opcode) {
	case FUSE_INIT:
		saw_init(t, in, size);
		break;
	case FUSE_WRITE:
		tl_kill_suidgid = kill_flag(in, size, sizeof(struct fuse_write_in),
					    offsetof(struct fuse_write_in, write_flags),
					    FUSE_WRITE_KILL_SUIDGID);
		break;
	case FUSE_SETATTR:
		tl_kill_suidgid = kill_flag(in, size, sizeof(struct fuse_setattr_in),
					    offsetof(struct fuse_setattr_in, valid),
					    FATTR_KILL_SUIDGID);
		break;
	case FUSE_OPEN:
		tl_kill_suidgid = kill_flag(in, size, sizeof(struct fuse_open_in),
					    offsetof(struct fuse_open_in, open_flags),
					    FUSE_OPEN_KILL_SUIDGID);
		break;
	case FUSE_TMPFILE:
		if (t->opts.tmpfile)
			tmpfile_as_create(in, size);
		break;
	default:
		break;
	}
}

/* A spliced request (only a large WRITE is left in the pipe): its headers
 * are read by libfuse later, so they are peeked at through a tee. */
static void inspect_spliced(int pipe_rd)
{
	char hdr[sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in)];
	const struct fuse_in_header *in = (const void *)hdr;
	const struct fuse_write_in *wi = (const void *)(in + 1);
	ssize_t n;

	if (tl_peek[0] < 0 && pipe2(tl_peek, O_CLOEXEC | O_NONBLOCK) < 0)
		return;
	n = tee(pipe_rd, tl_peek[1], sizeof(hdr), SPLICE_F_NONBLOCK);
	if (n <= 0)
		return;
	n = read(tl_peek[0], hdr, (size_t)n);
	if (n == (ssize_t)sizeof(hdr) && in->opcode == FUSE_WRITE)
		tl_kill_suidgid = wi->write_flags & FUSE_WRITE_KILL_SUIDGID;
	/* Anything left (a short read) would confuse the next peek. */
	while (read(tl_peek[0], hdr, sizeof(hdr)) > 0)
		;
}

/* The kernel flags a direct write of a caller without CAP_FSETID whether
 * KILLPRIV_V2 was settled or not, so a spliced write is always looked at. */
static void inspect(struct transport *t, struct fuse_buf *buf)
{
	tl_kill_suidgid = false;
	if (!(buf->flags & FUSE_BUF_IS_FD))
		inspect_mem(t, buf->mem, buf->size);
	else
		inspect_spliced(buf->fd);
}

/* A request from an io_uring queue (ring.h), on the queue's thread. */
static void ring_request(void *ud, void *req, size_t size)
{
	struct transport *t = ud;
	struct fuse_buf buf = { .mem = req, .size = size };

	inspect(t, &buf);
	fuse_session_process_buf(t->se, &buf);
}

/* ---- the worker loop ---------------------------------------------------- */

static void *worker(void *arg);

/* One more worker, if the limit allows: 0 or -errno. */
static int grow(struct transport *t)
{
	int r = 0;

	pthread_mutex_lock(&t->lock);
	if (!t->stopping && t->nworkers < t->max_workers) {
		r = -pthread_create(&t->workers[t->nworkers], NULL, worker, t);
		if (r == 0)
			t->nworkers++;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* A worker's own resources; also run when it is cancelled in a wait. */
static void worker_end(void *arg)
{
	struct fuse_buf *buf = arg;

	free(buf->mem);
	buf->mem = NULL;
	if (tl_peek[0] >= 0) {
		close(tl_peek[0]);
		close(tl_peek[1]);
		tl_peek[0] = tl_peek[1] = -1;
	}
}

/* Receive and process until the session ends.  Cancellation is allowed
 * only while waiting for a request (as libfuse's own loop does). */
static void *worker(void *arg)
{
	struct transport *t = arg;
	struct fuse_buf buf = { 0 };

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cleanup_push(worker_end, &buf);
	while (!fuse_session_exited(t->se)) {
		int r;

		atomic_fetch_add(&t->idle, 1);
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		r = fuse_session_receive_buf(t->se, &buf);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		/* The last idle worker took a request: start another, as
		 * libfuse's loop does (failing to is not fatal: this one
		 * serves). */
		if (atomic_fetch_sub(&t->idle, 1) == 1 && r > 0)
			(void)grow(t);
		if (r == -EINTR || r == -EAGAIN)
			continue;
		if (r <= 0) {
			if (r < 0) {
				int zero = 0;

				atomic_compare_exchange_strong(&t->err, &zero, r);
			}
			break;
		}
		inspect(t, &buf);
		fuse_session_process_buf(t->se, &buf);
	}
	pthread_cleanup_pop(1);
	sem_post(&t->finished);
	return NULL;
}

/* Up to one worker per CPU, at least two so that one blocking call
 * (fsync, a cold read) does not stall the mount; two are started and more
 * only when every worker is busy, so an idle mount holds two.  Measured on
 * 2 cores: 2 workers beat 4 on serial metadata (rename 10-11k/s vs
 * 6.5-8k/s) and tie on untar; 1 worker is slowest everywhere. */
static unsigned default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 2)
		return 2;
	return n > TRANSPORT_MAX_WORKERS ? TRANSPORT_MAX_WORKERS : (unsigned)n;
}

int transport_run(struct transport *t, unsigned threads)
{
	unsigned started;
	int r = 0;

	t->max_workers = threads ? threads : default_threads();
	if (t->max_workers > TRANSPORT_MAX_WORKERS)
		t->max_workers = TRANSPORT_MAX_WORKERS;
	for (unsigned i = 0; i < 2 && r == 0; i++)
		r = grow(t);
	pthread_mutex_lock(&t->lock);
	started = t->nworkers;
	pthread_mutex_unlock(&t->lock);
	/* One worker is enough to serve; none is not. */
	if (started > 0) {
		sem_wait(&t->finished);
		fuse_session_exit(t->se);
		r = 0;
	}
	pthread_mutex_lock(&t->lock);
	t->stopping = true;
	started = t->nworkers;
	pthread_mutex_unlock(&t->lock);
	for (unsigned i = 0; i < started; i++)
		pthread_cancel(t->workers[i]);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t->workers[i], NULL);
	ring_stop(atomic_load(&t->ring));
	if (started > 0 && atomic_load(&t->err) < 0)
		r = atomic_load(&t->err);
	return r;
}

void transport_stop(struct transport *t)
{
	fuse_session_exit(t->se);
	sem_post(&t->finished);
}

int transport_new(struct fuse_session *se, const struct transport_opts *o,
		  struct transport **out)
{
	struct transport *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	t->se = se;
	t->opts = *o;
	pthread_mutex_init(&t->lock, NULL);
	if (sem_init(&t->finished, 0, 0) < 0) {
		r = -errno;
		goto fail_sem;
	}
	r = fuse_session_custom_io(se, &io, fuse_session_fd(se));
	if (r < 0)
		goto fail_io;
	*out = t;
	return 0;
fail_io:
	sem_destroy(&t->finished);
fail_sem:
	pthread_mutex_destroy(&t->lock);
	free(t);
	return r;
}

void transport_free(struct transport *t)
{
	if (!t)
		return;
	ring_free(atomic_exchange(&t->ring, NULL));
	sem_destroy(&t->finished);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Which transport serves and why; `rs` are the queues' stats, if any. */
static enum transport_why why_transport(struct transport *t, bool ring,
					const struct ring_stats *rs)
{
	if (rs->registered)
		return TRANSPORT_IO_URING;
	if (!t->opts.io_uring)
		return TRANSPORT_NOT_WANTED;
	if (!atomic_load(&t->initialized))
		return TRANSPORT_SETTING_UP;
	if (!(atomic_load(&t->offered) & FUSE_OVER_IO_URING))
		return atomic_load(&t->uring_switch) ? TRANSPORT_TURNED_OFF
						     : TRANSPORT_NOT_IN_KERNEL;
	if (!ring || rs->error || atomic_load(&t->ring_err))
		return TRANSPORT_REFUSED;
	return TRANSPORT_SETTING_UP;
}

void transport_state(const struct transport *t, struct transport_state *out)
{
	struct transport *m = (struct transport *)t;
	bool init = atomic_load(&m->initialized);
	uint32_t minor = atomic_load(&m->kernel_minor);
	struct ring *ring = atomic_load(&m->ring);
	struct ring_stats rs = { 0 };
	int pt_err = atomic_load(&m->passthrough_err);

	if (ring)
		ring_stats(ring, &rs);
	*out = (struct transport_state){
		.initialized = init,
		.kernel_minor = minor,
		.killpriv_v2 = atomic_load(&m->killpriv_v2),
		.direct_io_mmap = atomic_load(&m->direct_io_mmap),
		.tmpfile = init && t->opts.tmpfile && minor >= MINOR_TMPFILE,
		.io_uring_offered = (atomic_load(&m->offered) & FUSE_OVER_IO_URING) != 0,
		.io_uring = rs.registered,
		.io_uring_queues = rs.queues,
		.io_uring_requests = rs.requests,
		.io_uring_error = rs.error ? rs.error : atomic_load(&m->ring_err),
		.why = why_transport(m, ring != NULL, &rs),
		.passthrough = atomic_load(&m->passthrough),
		.backing_files = atomic_load(&m->backing_files),
		.backing_opens = atomic_load(&m->backing_opens),
		.passthrough_error = pt_err ? pt_err : t->opts.passthrough_error,
	};
}

/* ---- FUSE passthrough's backing files ----------------------------------- */

static bool backing_available(struct transport *t)
{
	return t && atomic_load(&t->passthrough);
}

static bool direct_mmap(struct transport *t)
{
	return t && atomic_load(&t->direct_io_mmap);
}

/* Refusals that no other file would escape: no CAP_SYS_ADMIN, a stacked
 * backing filesystem, a kernel without passthrough. */
static bool refuses_all(int err)
{
	return err == -EPERM || err == -ELOOP || err == -EOPNOTSUPP ||
	       err == -ENOTTY;
}

static int backing_open(struct transport *t, int fd)
{
	struct fuse_backing_map map = { .fd = fd };
	int id = ioctl(fuse_session_fd(t->se), FUSE_DEV_IOC_BACKING_OPEN, &map);

	if (id > 0) {
		atomic_fetch_add(&t->backing_files, 1);
		atomic_fetch_add(&t->backing_opens, 1);
		return id;
	}
	id = id < 0 ? -errno : -EIO;
	if (refuses_all(id)) {
		atomic_store(&t->passthrough_err, id);
		atomic_store(&t->passthrough, false);
	}
	return id;
}

static void backing_close(struct transport *t, int id)
{
	uint32_t v = (uint32_t)id;

	if (ioctl(fuse_session_fd(t->se), FUSE_DEV_IOC_BACKING_CLOSE, &v) == 0)
		atomic_fetch_sub(&t->backing_files, 1);
}

static void backing_next_reply(int id, bool direct_io)
{
	tl_backing_id = id;
	tl_backing_direct = direct_io;
}

const struct lfs_wire_ops transport_wire_ops = {
	.passthrough = backing_available,
	.backing_open = backing_open,
	.backing_close = backing_close,
	.next_reply = backing_next_reply,
	.direct_mmap = direct_mmap,
	.reply_buffer = ring_reply_buffer,
};

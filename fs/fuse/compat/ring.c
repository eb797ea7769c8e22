/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include "ring.h"

/* Entries per queue.  A queue's thread serves one request at a time;
 * a second entry lets the kernel hand it the next one in the same wakeup. */
#define QUEUE_DEPTH 2
/* Room before each payload for the in header and the op header, so that
 * a request is rebuilt contiguous without moving its payload. */
#define HEADROOM 4096u
_Static_assert(sizeof(struct fuse_uring_req_header) + sizeof(struct fuse_in_header) +
	       FUSE_URING_OP_IN_OUT_SZ <= HEADROOM, "headroom");
#define TAG_STOP 0      /* user_data of the stop poll; entries are pointers */

struct entry {
	struct queue *q;
	struct fuse_uring_req_header *hdr;
	char *base;             /* HEADROOM + payload bytes, mmap'ed */
	struct iovec iov[2];    /* header, payload: what REGISTER passes */
	/* Set and read by the queue's thread only: the request being
	 * served, and whether the entry has carried one (so was accepted). */
	uint64_t unique;
	bool replied;
	bool served;
};

struct queue {
	struct ring *ring;
	unsigned qid;
	pthread_t thread;
	bool started;           /* thread created and not joined; read and
				 * written by ring_new()'s and ring_stop()'s
				 * caller only */
	struct io_uring uring;
	bool uring_ok;
	struct entry ent[QUEUE_DEPTH];
	unsigned live;          /* entries the kernel still holds */
};

struct ring {
	int devfd;
	size_t payload;
	ring_process_fn *process;
	void *ud;
	int stopfd;             /* eventfd: readable once the ring stops */
	unsigned nqueues;
	struct queue *queues;
	/* lock protects ready, failed, go and stop: the hand-over between
	 * ring_new()/ring_start()/ring_free() and the queue threads (go is
	 * also read by ring_stats()). */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned ready;         /* queues set up */
	int failed;             /* first set-up error, or 0 */
	bool go, stop;
	atomic_bool refused;    /* the kernel refused a REGISTER */
	_Atomic uint64_t requests;
	_Atomic int error;
};

/* The entry this thread is serving (see ring_reply()). */
static __thread struct entry *tl_ent;

bool ring_serving(void)
{
	return tl_ent != NULL;
}

static void note_error(struct ring *r, int err)
{
	int zero = 0;

	atomic_compare_exchange_strong(&r->error, &zero, err);
}

/* ---- replies ------------------------------------------------------------ */

/* The reply's header goes where the in header was; its `payload` bytes
 * are already in the payload buffer.  The reply's length. */
static ssize_t replied(struct entry *e, const struct fuse_out_header *oh,
		       size_t payload)
{
	memcpy(e->hdr->in_out, oh, sizeof(*oh));
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)payload;
	e->replied = true;
	return (ssize_t)(sizeof(*oh) + payload);
}

static ssize_t reply_error(struct entry *e, int err)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = err,
				      .unique = e->unique };

	return replied(e, &oh, 0);
}

ssize_t ring_reply(const struct iovec *iov, int count)
{
	struct entry *e = tl_ent;
	const struct fuse_out_header *oh;
	size_t total = 0, off = 0;

	if (!e || count < 1 || iov[0].iov_len != sizeof(*oh))
		return -ENOENT;
	oh = iov[0].iov_base;
	if (oh->unique != e->unique)
		return -ENOENT;
	for (int i = 1; i < count; i++)
		total += iov[i].iov_len;
	if (total > e->q->ring->payload)
		return reply_error(e, -EIO);
	for (int i = 1; i < count; i++) {
		char *dst = (char *)e->iov[1].iov_base + off;

		if (iov[i].iov_base != dst)
			memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	return replied(e, oh, total);
}

void *ring_reply_buffer(size_t size)
{
	struct entry *e = tl_ent;

	return e && size <= e->q->ring->payload ? e->iov[1].iov_base : NULL;
}

/* Exactly `len` bytes from a pipe; 0 or -errno. */
static int read_full(int fd, char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = read(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t ring_reply_pipe(int pipe_rd, size_t len)
{
	struct entry *e = tl_ent;
	struct fuse_out_header oh;
	int r;

	if (!e)
		return -ENOENT;
	/* A reply from a ring thread is its request's: libfuse replies on
	 * the thread that processes the request, and notifications are
	 * never spliced. */
	if (len < sizeof(oh) || len - sizeof(oh) > e->q->ring->payload)
		return -EIO;
	r = read_full(pipe_rd, (char *)&oh, sizeof(oh));
	if (r == 0)
		r = read_full(pipe_rd, e->iov[1].iov_base, len - sizeof(oh));
	if (r < 0)
		return r;
	if (oh.unique != e->unique)
		return -EIO;
	return replied(e, &oh, len - sizeof(oh));
}

/* ---- one queue ---------------------------------------------------------- */

static struct io_uring_sqe *cmd_sqe(struct queue *q, struct entry *e,
				    uint32_t op, uint64_t commit_id)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->uring);
	struct fuse_uring_cmd_req *req;

	/* The queue is sized for every entry's command at once; should it
	 * ever be full, hand what it holds to the kernel and retry. */
	if (!sqe && io_uring_submit(&q->uring) >= 0)
		sqe = io_uring_get_sqe(&q->uring);
	if (!sqe)
		return NULL;
	memset(sqe, 0, 2 * sizeof(*sqe));       /* a 128-byte SQE */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = q->ring->devfd;
	sqe->cmd_op = op;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	if (op == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
	req = (struct fuse_uring_cmd_req *)sqe->cmd;
	req->qid = (uint16_t)q->qid;
	req->commit_id = commit_id;
	return sqe;
}

/* One mapping: the ring header at its start, the payload at HEADROOM
 * (the request is rebuilt just before the payload, clear of the header). */
static int entry_init(struct queue *q, struct entry *e)
{
	size_t len = HEADROOM + q->ring->payload;

	e->q = q;
	e->base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (e->base == MAP_FAILED) {
		e->base = NULL;
		return -errno;
	}
	e->hdr = (struct fuse_uring_req_header *)e->base;
	e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
	e->iov[1] = (struct iovec){ e->base + HEADROOM, q->ring->payload };
	return 0;
}

static void entry_fini(struct queue *q, struct entry *e)
{
	if (e->base)
		munmap(e->base, HEADROOM + q->ring->payload);
	e->base = NULL;
	e->hdr = NULL;
}

/* On its CPU, for the kernel's locality; not fatal where the cpuset
 * forbids it. */
static void pin(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	(void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static int queue_setup(struct queue *q)
{
	struct io_uring_params p = {
		.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER |
			 IORING_SETUP_DEFER_TASKRUN,
	};
	struct io_uring_sqe *sqe;
	int r;

	pin(q->qid);
	r = io_uring_queue_init_params(QUEUE_DEPTH * 2, &q->uring, &p);
	if (r == -EINVAL) {     /* a kernel without deferred task work */
		p = (struct io_uring_params){ .flags = IORING_SETUP_SQE128 };
		r = io_uring_queue_init_params(QUEUE_DEPTH * 2, &q->uring, &p);
	}
	if (r < 0)
		return r;
	q->uring_ok = true;
	for (unsigned i = 0; i < QUEUE_DEPTH; i++) {
		r = entry_init(q, &q->ent[i]);
		if (r < 0)
			return r;
	}
	/* The stop signal: a poll on the ring's eventfd. */
	sqe = io_uring_get_sqe(&q->uring);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, q->ring->stopfd, POLLIN);
	io_uring_sqe_set_data64(sqe, TAG_STOP);
	return 0;
}

static int queue_register(struct queue *q)
{
	for (unsigned i = 0; i < QUEUE_DEPTH; i++) {
		if (!cmd_sqe(q, &q->ent[i], FUSE_IO_URING_CMD_REGISTER, 0))
			return -EBUSY;
	}
	q->live = QUEUE_DEPTH;
	return 0;
}

/* Rebuild the request in front of its payload, serve it, queue the
 * commit of its reply (which also fetches the next request). */
static void serve(struct queue *q, struct entry *e)
{
	struct fuse_uring_req_header *h = e->hdr;
	struct fuse_in_header in;
	size_t psz = h->ring_ent_in_out.payload_sz, oplen;
	uint64_t commit_id = h->ring_ent_in_out.commit_id;
	char *start;

	memcpy(&in, h->in_out, sizeof(in));
	e->unique = in.unique;
	e->replied = false;
	if (in.len < sizeof(in) + psz || psz > q->ring->payload ||
	    (oplen = in.len - sizeof(in) - psz) > sizeof(h->op_in)) {
		note_error(q->ring, -EPROTO);
		reply_error(e, -EIO);
	} else {
		start = (char *)e->iov[1].iov_base - sizeof(in) - oplen;
		memcpy(start, &in, sizeof(in));
		memcpy(start + sizeof(in), h->op_in, oplen);
		atomic_fetch_add_explicit(&q->ring->requests, 1,
					  memory_order_relaxed);
		tl_ent = e;
		q->ring->process(q->ring->ud, start, in.len);
		tl_ent = NULL;
		if (!e->replied)
			reply_error(e, -EIO);
	}
	if (!cmd_sqe(q, e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, commit_id))
		note_error(q->ring, -EBUSY);
}

/* One completion: false once the queue is to stop. */
static bool complete(struct queue *q, const struct io_uring_cqe *cqe)
{
	struct entry *e = (struct entry *)(uintptr_t)cqe->user_data;

	if (cqe->user_data == TAG_STOP)
		return false;
	if (cqe->res == -EAGAIN) {
		/* Registered before the kernel took INIT's reply: again. */
		if (!cmd_sqe(q, e, FUSE_IO_URING_CMD_REGISTER, 0))
			note_error(q->ring, -EBUSY);
		return true;
	}
	if (cqe->res < 0) {
		/* The connection ended (ENOTCONN, ECONNABORTED) or the ring
		 * is going (ECANCELED); anything else is a failure. */
		if (cqe->res != -ENOTCONN && cqe->res != -ECONNABORTED &&
		    cqe->res != -ECANCELED) {
			note_error(q->ring, cqe->res);
			/* The kernel then serves through /dev/fuse. */
			if (!e->served)
				atomic_store(&q->ring->refused, true);
		}
		q->live--;
		return q->live > 0;
	}
	e->served = true;
	serve(q, e);
	return true;
}

static void queue_serve(struct queue *q)
{
	bool run = true;

	while (run) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		int r = io_uring_submit_and_wait(&q->uring, 1);

		/* EBUSY: completions to reap first; EAGAIN, ENOMEM: the
		 * kernel is short of memory for now.  Anything else is a bug
		 * in what was submitted, and this queue's CPU stays unserved
		 * until umount (status shows the error). */
		if (r < 0 && r != -EINTR && r != -EBUSY && r != -EAGAIN &&
		    r != -ENOMEM) {
			note_error(q->ring, r);
			break;
		}
		io_uring_for_each_cqe(&q->uring, head, cqe) {
			n++;
			if (!complete(q, cqe))
				run = false;
		}
		io_uring_cq_advance(&q->uring, n);
	}
}

static void queue_teardown(struct queue *q)
{
	/* Closing the ring cancels what the kernel still holds. */
	if (q->uring_ok)
		io_uring_queue_exit(&q->uring);
	q->uring_ok = false;
	for (unsigned i = 0; i < QUEUE_DEPTH; i++)
		entry_fini(q, &q->ent[i]);
}

/* Report set-up, wait for ring_start() or ring_free(): whether to go. */
static bool hand_over(struct queue *q, int setup)
{
	struct ring *r = q->ring;
	bool go;

	pthread_mutex_lock(&r->lock);
	r->ready++;
	if (setup < 0 && r->failed == 0)
		r->failed = setup;
	pthread_cond_broadcast(&r->cond);
	while (!r->go && !r->stop)
		pthread_cond_wait(&r->cond, &r->lock);
	go = r->go && !r->stop && setup == 0;
	pthread_mutex_unlock(&r->lock);
	return go;
}

static void *queue_main(void *arg)
{
	struct queue *q = arg;
	int r = queue_setup(q);

	if (hand_over(q, r)) {
		r = queue_register(q);
		if (r < 0)
			note_error(q->ring, r);
		else
			queue_serve(q);
	}
	queue_teardown(q);
	return NULL;
}

/* ---- the ring ------------------------------------------------------------- */

int ring_cpu_count(const char *list)
{
	unsigned long n = 0;
	const char *p = list;

	for (;;) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b = a;

		if (end == p)
			return -EINVAL;
		p = end;
		if (*p == '-') {
			b = strtoul(p + 1, &end, 10);
			if (end == p + 1 || b < a)
				return -EINVAL;
			p = end;
		}
		n += b - a + 1;
		if (n > INT_MAX)
			return -EINVAL;
		if (*p != ',')
			break;
		p++;
	}
	return *p == '\0' || *p == '\n' ? (int)n : -EINVAL;
}

bool ring_kernel_has_switch(void)
{
	return access(RING_KERNEL_SWITCH, F_OK) == 0;
}

/* The kernel's num_possible_cpus(): one queue for each. */
static int possible_cpus(void)
{
	char buf[4096];
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);
	ssize_t len;

	if (fd < 0)
		return -errno;
	len = read(fd, buf, sizeof(buf) - 1);
	if (len < 0)
		len = -errno;
	close(fd);
	if (len < 0)
		return (int)len;
	buf[len] = '\0';
	return ring_cpu_count(buf);
}

/* Start every queue's thread and wait until each has set up: 0 or the
 * first error. */
static int start_queues(struct ring *r)
{
	unsigned started = 0;
	int err = 0;

	for (unsigned i = 0; i < r->nqueues && err == 0; i++) {
		struct queue *q = &r->queues[i];

		q->ring = r;
		q->qid = i;
		err = -pthread_create(&q->thread, NULL, queue_main, q);
		q->started = err == 0;
		started += q->started;
	}
	pthread_mutex_lock(&r->lock);
	while (r->ready < started)
		pthread_cond_wait(&r->cond, &r->lock);
	if (err == 0)
		err = r->failed;
	pthread_mutex_unlock(&r->lock);
	return err;
}

int ring_new(int devfd, size_t payload, ring_process_fn *process, void *ud,
	     struct ring **out)
{
	struct ring *r = calloc(1, sizeof(*r));
	int n, err;

	if (!r)
		return -ENOMEM;
	r->devfd = devfd;
	r->payload = payload;
	r->process = process;
	r->ud = ud;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	n = possible_cpus();
	if (r->stopfd < 0 || n < 0) {
		err = r->stopfd < 0 ? -errno : n;
		goto fail;
	}
	r->nqueues = (unsigned)n;
	r->queues = calloc(r->nqueues, sizeof(*r->queues));
	if (!r->queues) {
		err = -ENOMEM;
		goto fail;
	}
	err = start_queues(r);
	if (err < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	ring_free(r);
	return err;
}

void ring_start(struct ring *r)
{
	pthread_mutex_lock(&r->lock);
	r->go = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

void ring_stop(struct ring *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (r->stopfd >= 0)
		(void)eventfd_write(r->stopfd, 1);
	for (unsigned i = 0; r->queues && i < r->nqueues; i++) {
		if (r->queues[i].started)
			pthread_join(r->queues[i].thread, NULL);
		r->queues[i].started = false;
	}
}

void ring_free(struct ring *r)
{
	if (!r)
		return;
	ring_stop(r);
	if (r->stopfd >= 0)
		close(r->stopfd);
	free(r->queues);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

void ring_stats(const struct ring *r, struct ring_stats *out)
{
	struct ring *m = (struct ring *)r;
	bool go;

	pthread_mutex_lock(&m->lock);
	go = m->go;
	pthread_mutex_unlock(&m->lock);
	*out = (struct ring_stats){
		.queues = r->nqueues,
		.registered = go && !atomic_load(&m->refused),
		.requests = atomic_load(&m->requests),
		.error = atomic_load(&m->error),
	};
}

/* SPDX-License-Identifier: MIT */
/*
 * FUSE over io_uring (kernel protocol 7.42, CONFIG_FUSE_IO_URING, the fuse
 * module's enable_uring parameter): the kernel hands requests to per-CPU
 * queues of registered buffers, and one COMMIT_AND_FETCH returns a reply
 * and waits for the next request, in place of a write and a read on
 * /dev/fuse.  Forgets, interrupts and notifications stay on /dev/fuse.
 *
 * One queue per possible CPU (the kernel's count: every queue must be
 * registered before the kernel uses any), each served by one thread of its
 * own, pinned to its CPU, with its own ring.  A request is rebuilt in
 * place into the layout /dev/fuse delivers (in header, op header, payload)
 * and handed to the owner's process callback; the reply comes back through
 * ring_reply() or ring_reply_pipe() on the same thread.
 *
 * Knows nothing of libfuse; the transport (transport.c) wires it in.
 */
#ifndef LEASEFS_RING_H
#define LEASEFS_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <linux/fuse.h>

/* The uapi of protocol 7.42, which Debian 12's <linux/fuse.h> (7.38)
 * predates: declared from Documentation/filesystems/fuse-io-uring.rst and
 * the documented header layout. */
#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING (1ULL << 41)
#define FUSE_URING_IN_OUT_HEADER_SZ 128
#define FUSE_URING_OP_IN_OUT_SZ 128

struct fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;     /* the request's unique, echoed in the commit */
	uint32_t payload_sz;    /* bytes valid in the payload, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct fuse_uring_req_header {
	char in_out[FUSE_URING_IN_OUT_HEADER_SZ];   /* in / out header */
	char op_in[FUSE_URING_OP_IN_OUT_SZ];        /* the opcode's header */
	struct fuse_uring_ent_in_out ring_ent_in_out;
};

enum fuse_uring_cmd {
	FUSE_IO_URING_CMD_INVALID = 0,
	FUSE_IO_URING_CMD_REGISTER = 1,
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};

/* In the 80-byte command area of a 128-byte SQE. */
struct fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};
#endif

struct ring;

/* Called on a queue's thread with one request laid out as /dev/fuse
 * delivers it (`size` is its in header's len).  Its reply must be sent on
 * the same thread before the callback returns; a request left without one
 * is answered EIO. */
typedef void ring_process_fn(void *ud, void *req, size_t size);

/*
 * Set up every queue for the mounted /dev/fuse `devfd`: threads, rings and
 * buffers of `payload` bytes each (at least the kernel's max payload for
 * the INIT reply about to be sent).  Nothing is registered yet; call
 * before the INIT reply offers FUSE_OVER_IO_URING, so that the reply
 * offers it only when every queue can serve.  0 or -errno.
 */
int ring_new(int devfd, size_t payload, ring_process_fn *process, void *ud,
	     struct ring **out);

/* After the kernel accepted the INIT reply: register the buffers, from
 * which point the kernel sends requests through the queues. */
void ring_start(struct ring *r);

/* Stop every queue and join its thread (any state; again is a no-op).
 * ring_stats() stays valid until ring_free(). */
void ring_stop(struct ring *r);

/* ring_stop(), then free everything. */
void ring_free(struct ring *r);

/*
 * If the calling thread is serving a ring request and `iov` is that
 * request's reply, copy the reply into the request's ring entry: the
 * reply's length, or -errno.  -ENOENT: not a ring reply (send it on
 * /dev/fuse).  A payload given at ring_reply_buffer() is not copied.
 */
ssize_t ring_reply(const struct iovec *iov, int count);

/* The request's ring entry payload, where a reply payload of up to
 * `size` bytes may be built in place; NULL when the calling thread serves
 * no ring request or the entry cannot hold `size` bytes. */
void *ring_reply_buffer(size_t size);

/* As ring_reply(), for a reply of `len` bytes waiting in pipe `pipe_rd`;
 * -ENOENT before anything was read when the thread serves no ring
 * request. */
ssize_t ring_reply_pipe(int pipe_rd, size_t len);

/* Whether the calling thread is serving a ring request. */
bool ring_serving(void);

/* The fuse module's switch for FUSE over io_uring, which the kernel
 * consults at each INIT and when a queue registers: a kernel without it
 * cannot offer io_uring. */
#define RING_KERNEL_SWITCH "/sys/module/fuse/parameters/enable_uring"

/* Whether this kernel has that switch (whatever its value). */
bool ring_kernel_has_switch(void);

/* How many CPUs a kernel CPU list ("0-3,8,10-11") names, or -EINVAL. */
int ring_cpu_count(const char *list);

struct ring_stats {
	unsigned queues;
	bool registered;        /* registering, and the kernel refused none */
	uint64_t requests;      /* served through the queues */
	int error;              /* the first failure (-errno), or 0 */
};

void ring_stats(const struct ring *r, struct ring_stats *out);

#endif

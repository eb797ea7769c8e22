/* SPDX-License-Identifier: MIT */
/*
 * The FUSE wire beyond what libfuse 3.14 can ask for.  The transport owns
 * the session's worker loop (fuse_session_receive_buf() and
 * fuse_session_process_buf() on threads of its own) and its I/O (custom io
 * on the mounted /dev/fuse fd), so that it can
 *  - see the kernel's INIT and add to the reply the flags libfuse does not
 *    know (FUSE_HANDLE_KILLPRIV_V2), when the kernel offers them;
 *  - serve FUSE_TMPFILE, which libfuse answers ENOSYS, as a create of an
 *    unnamed file (the passthrough's create with O_TMPFILE in its flags);
 *  - pass the kernel's per-request "kill suid/sgid" flags, which libfuse
 *    drops, to the passthrough (transport_kill_suidgid());
 *  - serve requests through FUSE over io_uring (ring.h) when the kernel
 *    offers it: the INIT reply asks for it once the queues are set up,
 *    replies to ring requests go back through their entries, and the
 *    /dev/fuse workers keep serving what the kernel still sends there
 *    (forgets, interrupts, requests before the queues registered);
 *  - negotiate FUSE passthrough (kernel >= 6.9) and register backing files
 *    for it (FUSE_DEV_IOC_BACKING_OPEN), amending the open reply with the
 *    backing id libfuse 3.14's fuse_open_out has no field for, and
 *    shared mappings of direct_io opens (FUSE_DIRECT_IO_ALLOW_MMAP, kernel
 *    >= 6.6) (transport_wire_ops).
 * The kernel's structures come from its uapi header (<linux/fuse.h>).
 *
 * Each piece goes with the libfuse release that makes it unnecessary
 * (README.md here: the table of end dates); the compat-end test fails
 * once the installed libfuse has one.  The session then runs libfuse's
 * own loop again and this folder, with its copies of <linux/fuse.h>
 * declarations, is deleted.
 */
#ifndef LEASEFS_TRANSPORT_H
#define LEASEFS_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "fs.h"

struct fuse_session;
struct transport;

/* The most /dev/fuse worker threads a mount runs. */
#define TRANSPORT_MAX_WORKERS 16

/* What the daemon asks for; each is used only if the kernel offers it. */
struct transport_opts {
	bool killpriv_v2;
	bool tmpfile;
	bool io_uring;          /* FUSE over io_uring (ring.h) */
	bool passthrough;       /* FUSE passthrough of reads (needs
				 * CAP_SYS_ADMIN for its backing files) */
	bool direct_io_mmap;    /* direct_io opens may be mapped shared */
	int passthrough_error;  /* -errno: why it was not asked for */
};

/* Which transport serves, and when it is /dev/fuse, why not io_uring. */
enum transport_why {
	TRANSPORT_IO_URING,        /* requests come through the queues */
	TRANSPORT_NOT_WANTED,      /* the daemon did not ask (LEASEFS_IO_URING=0) */
	TRANSPORT_NOT_IN_KERNEL,   /* no enable_uring parameter at INIT */
	TRANSPORT_TURNED_OFF,      /* enable_uring was N at INIT */
	TRANSPORT_REFUSED,         /* offered, but the queues could not be set
				    * up or the kernel refused one
				    * (io_uring_error says why) */
	TRANSPORT_SETTING_UP,      /* offered, the queues still registering */
};

/* What INIT settled (all false until the kernel's INIT was answered). */
struct transport_state {
	bool initialized;
	uint32_t kernel_minor;     /* the kernel's protocol minor */
	bool killpriv_v2;          /* the kernel clears nothing itself */
	bool direct_io_mmap;       /* direct_io opens may be mapped shared */
	bool tmpfile;              /* open(O_TMPFILE) is served */
	bool io_uring_offered;     /* the kernel has it enabled */
	bool io_uring;             /* requests come through the queues */
	unsigned io_uring_queues;
	uint64_t io_uring_requests; /* served through the queues */
	int io_uring_error;        /* -errno: why not, or a queue's failure */
	enum transport_why why;    /* which transport serves, and why */
	bool passthrough;          /* negotiated, and no backing file refused
				    * for a reason that holds for every file */
	uint64_t backing_files;    /* backing files registered now */
	uint64_t backing_opens;    /* ... ever */
	int passthrough_error;     /* -errno: why the kernel stopped taking them */
};

/* On a mounted session (after fuse_session_mount()): installs the custom
 * io.  0 or -errno. */
int transport_new(struct fuse_session *se, const struct transport_opts *o,
		  struct transport **out);
void transport_free(struct transport *t);

/* Serve with `threads` workers (0: the default) until the session ends.
 * 0 or -errno. */
int transport_run(struct transport *t, unsigned threads);

/* End transport_run() now, even while the kernel connection lives on (a
 * copy of the mount in another mount namespace keeps it): its workers are
 * cancelled where they wait for a request.  The daemon exits after that,
 * and closing /dev/fuse then ends the connection in every namespace. */
void transport_stop(struct transport *t);

void transport_state(const struct transport *t, struct transport_state *out);

/* Whether the request this worker thread is processing carries the
 * kernel's FUSE_WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID or
 * FUSE_OPEN_KILL_SUIDGID: the caller lacks CAP_FSETID and the filesystem
 * must clear set-user-ID (and set-group-ID with group execute) itself.
 * Valid while one request is processed, on its worker thread. */
bool transport_kill_suidgid(void);

/* What the passthrough asks of the wire (fs.h), over this transport's
 * /dev/fuse; the session's `transport` member is theirs. */
extern const struct lfs_wire_ops transport_wire_ops;

#endif

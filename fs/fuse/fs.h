/* SPDX-License-Identifier: MIT */
/*
 * The leasefs passthrough: a FUSE low-level passthrough of one root, as an
 * object and an ops table.  It decides no policy and knows nothing of
 * leases; the daemon composes it:
 *
 *   passthrough (fs.h)   the operations over ROOT
 *   gate (gate.h)        admits each mutating operation through the
 *                        coordinator, EROFS when it refuses
 *   session (session.h)  the FUSE session: mount, worker loop, unmount
 *
 * Its units are listed in lfs_int.h, which is theirs alone.
 */
#ifndef LEASEFS_FS_H
#define LEASEFS_FS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "lfs_config.h"

struct lfs;
struct gate;
struct transport;

/*
 * What the passthrough asks of the FUSE wire, beyond libfuse 3.14, when it
 * answers an open; the transport provides it (compat/transport.h).
 * Registered backing files are the kernel's: an open answered with one has
 * its reads and mmaps served from it without the daemon.
 */
struct lfs_wire_ops {
	/* Whether INIT settled FUSE passthrough and the kernel still takes
	 * backing files. */
	bool (*passthrough)(struct transport *t);
	/* Register the file open at fd (any mode, O_PATH too): its id
	 * (> 0), or -errno (-EPERM, -ELOOP, -EOPNOTSUPP: no file will do,
	 * and passthrough() says false from now on). */
	int (*backing_open)(struct transport *t, int fd);
	void (*backing_close)(struct transport *t, int id);
	/* The open reply this thread sends next serves the file from
	 * backing `id`: reads and writes through the daemon still when
	 * `direct_io`, only mmaps from the backing file then. */
	void (*next_reply)(int id, bool direct_io);
	/* Whether INIT settled FUSE_DIRECT_IO_ALLOW_MMAP: an open answered
	 * FOPEN_DIRECT_IO may be mapped shared. */
	bool (*direct_mmap)(struct transport *t);
	/* Where this thread's reply payload of `size` bytes may be built so
	 * that sending it (fuse_reply_buf) copies nothing; NULL: nowhere,
	 * reply as usual. */
	void *(*reply_buffer)(size_t size);
};

/* What a session's userdata points to: the layers of one mount.  The
 * daemon builds it; each layer reads its own member. */
struct lfs_session {
	struct lfs *fs;
	struct gate *gate;
	struct transport *transport; /* its custom io finds itself here */
	/* Whether the request this thread serves carries the kernel's "kill
	 * suid/sgid" flag (the transport sees it; libfuse drops it).  NULL:
	 * never. */
	bool (*kill_suidgid)(void);
	struct fuse_session *se;     /* for notifications to the kernel */
	/* The admission of a request `gate` let in as a mutation, checked
	 * again right before each backing call that changes ROOT; a negative
	 * errno refuses it (gate_recheck(): gate.h).  NULL: never refused. */
	int (*recheck)(const struct gate *g);
	/* Called once, from the worker answering the kernel's INIT: from
	 * here on the mount serves.  NULL: nobody asks. */
	void (*serving)(void *ud);
	void *serving_ud;
	/* The wire's passthrough and direct opens (NULL: neither). */
	const struct lfs_wire_ops *wire;
};

/* Open ROOT and build the inode table; no FUSE session yet.  0 or -errno
 * (-EPERM: a privileged daemon that still holds supplementary groups). */
int lfs_new(const struct lfs_config *cfg, struct lfs **out);
void lfs_free(struct lfs *fs);
/* Whether reads may be served by FUSE passthrough: 1 (the transport
 * should negotiate it), 0 (cfg.passthrough is off) or -errno (asked for,
 * but it cannot be set up: -EPERM for an unprivileged daemon, -EOPNOTSUPP
 * for a root without file handles). */
int lfs_passthrough(const struct lfs *fs);
/* The passthrough's operations; their userdata is a struct lfs_session. */
const struct fuse_lowlevel_ops *lfs_ops(void);

/*
 * After lease loss, first: reads must change nothing in ROOT, so every
 * file the passthrough has open, and every one it opens from now on, is
 * read without updating its atime (O_NOATIME; a symlink's atime may still
 * move once, on a readlink the kernel has not cached).  Quick; call from a
 * non-FUSE thread before acknowledging the loss.  Files the kernel reads
 * itself (FUSE passthrough) are read without atime from then on too.
 */
void lfs_stop_atime(struct lfs *fs);

/*
 * After lease loss: the root now belongs to someone else, so stop trusting
 * the kernel's caches.  Short timeouts from here on, no page cache kept
 * across opens, and every cached inode's pages and attributes dropped now
 * (bytes written to a shared mapping after loss never reached ROOT and
 * must not be served to readers).  Call from a non-FUSE thread.
 */
void lfs_after_loss(struct lfs *fs, struct fuse_session *se);

#endif

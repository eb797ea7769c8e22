/* SPDX-License-Identifier: MIT */
/*
 * leasefs lease library: exclusive, named, epoch-carrying leases over a
 * pluggable store.  No FUSE in here; the daemon and the unit tests link it.
 *
 * Conventions
 *  - Every function that can fail returns 0 or a negative errno.  Where a
 *    caller passes a `struct lease_err *`, it is filled on failure with the
 *    kind, a message naming what was wrong and, for LEASE_E_HELD, the
 *    holder's epoch.  `err` may be NULL.
 *  - Deadlines are absolute CLOCK_MONOTONIC nanoseconds (lease_deadline_ms()).
 *    A deadline of 0 means "already passed".
 *  - Thread-safety: a store and its leases may be used from any thread.
 *    A single lease object must not be freed while another thread uses it.
 */
#ifndef LEASEFS_LEASE_H
#define LEASEFS_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "beneath.h"

#define LEASE_NAME_MAX 512
#define LEASE_MSG_MAX 512

/* Error kinds.  Each maps to exactly one errno (lease_errkind_errno()). */
enum lease_errkind {
	LEASE_OK = 0,
	LEASE_E_HELD,        /* -EBUSY: a live holder has the name */
	LEASE_E_BADNAME,     /* -EINVAL: name breaks the grammar; no storage touched */
	LEASE_E_UNREACHABLE, /* -EHOSTUNREACH: store cannot be reached/opened */
	LEASE_E_TIMEOUT,     /* -ETIMEDOUT: deadline passed */
	LEASE_E_CORRUPT,     /* -EUCLEAN: a stored record is unreadable */
	LEASE_E_LOST,        /* -ENOLINK: the lease was lost */
	LEASE_E_SHUTDOWN,    /* -ESHUTDOWN: admission closed by shutdown */
	LEASE_E_USAGE,       /* -EINVAL: bad argument other than a name (URI, placement, ...) */
	LEASE_E_IO,          /* any other errno from the store */
	LEASE_E_SETUP,       /* -ENOMEDIUM: the store is not set up as its owner
			      * sets it up (nothing was changed; the message
			      * says what is missing and who makes it) */
};

struct lease_err {
	enum lease_errkind kind;
	int code;              /* negative errno, equal to the return value */
	uint64_t holder_epoch; /* LEASE_E_HELD: the current holder's epoch */
	char name[LEASE_NAME_MAX + 1];
	char msg[LEASE_MSG_MAX];
};

/* Fill `err` (if non-NULL) and return the kind's negative errno
 * (or `code` for LEASE_E_IO).  printf-style message. */
int lease_err_set(struct lease_err *err, enum lease_errkind kind, int code,
		  const char *name, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
int lease_errkind_errno(enum lease_errkind kind);
/* A revoke of a name nobody holds: LEASE_E_IO, -ENOENT, naming it. */
int lease_err_not_held(struct lease_err *err, const char *name);
/* Not an error (LEASE_OK, returns 0): the revoke stands, but the holder
 * at `epoch` is not a leasefs mount and was not told; it keeps the name
 * until `until` ("it releases or exits", ...). */
int lease_err_untold(struct lease_err *err, const char *name, uint64_t epoch,
		     const char *until);
const char *lease_errkind_str(enum lease_errkind kind);

/* ---- time ---------------------------------------------------------- */
int64_t lease_now_ns(void);             /* CLOCK_MONOTONIC */
int64_t lease_deadline_ms(int64_t ms);  /* now + ms */
bool lease_deadline_passed(int64_t deadline);

/* ---- names --------------------------------------------------------- */
/*
 * Grammar: 1..512 bytes of '/'-separated segments, each [a-z0-9][a-z0-9_.-]*,
 * no empty segment.  Returns 0 or -EINVAL with err->msg naming the rule.
 */
int lease_name_validate(const char *name, struct lease_err *err);

/* Random v4 UUID, lowercase; `out` >= 37 bytes. */
int lease_uuid_random(char *out, size_t outsz);
bool lease_uuid_valid(const char *uuid);

/* SHA-256 of data (FIPS 180-4). */
void lease_sha256(const void *data, size_t len, uint8_t out[32]);

/* Files in a store its owner can write, and the canonical root:
 * beneath.h. */
/* strerror(-neg_errno), saying what -LEASE_ENOTREG means. */
const char *lease_strerror(int neg_errno);

/* ---- OFD locks, waited for on events -------------------------------- */
/*
 * Take an OFD lock of `type` on [start, start+len) of fd (len 0: to the
 * end), whose file is at `path`, waiting until `deadline` for the holder.
 * Holders must let go by closing their descriptor of the file, or with
 * lease_ofd_unlock_notify(): the wait is on the close event that raises
 * (a poll backing off to 64 ms only when no inotify instance is to be
 * had).  0, -EAGAIN (still held at the deadline) or -errno.
 */
int lease_ofd_lock_wait(int fd, const char *path, short type, off_t start,
			off_t len, int64_t deadline);
/* Unlock [start, start+len) of fd and wake lease_ofd_lock_wait() waiters. */
void lease_ofd_unlock_notify(int fd, const char *path, off_t start, off_t len);

/*
 * A bounded wait for inotify events `mask` on one path, for waiters that
 * re-check their condition after every wake.  Without an inotify instance
 * (fs.inotify.max_user_instances used up) it degrades to a poll backing
 * off from 1 to 64 ms.  open: 0 or -errno (no instance is not an error).
 * wait: 0 after an event or a poll interval, -EAGAIN at the deadline.
 */
struct lease_close_watch {
	int ino;        /* -1: polling */
	int backoff_ms;
};
int lease_close_watch_open(struct lease_close_watch *w, const char *path,
			   uint32_t mask);
/* One more path on the same wait (a missing path is skipped). */
int lease_close_watch_add(struct lease_close_watch *w, const char *path,
			  uint32_t mask);
int lease_close_watch_wait(struct lease_close_watch *w, int64_t deadline);
void lease_close_watch_close(struct lease_close_watch *w);

/* ---- stores and leases --------------------------------------------- */
struct lease_store;
struct lease;

/* Why a loss notification fired. */
enum lease_loss {
	LEASE_LOSS_NONE = 0,
	LEASE_LOSS_RELEASED, /* our own release() */
	LEASE_LOSS_EXPIRED,  /* TTL / safe-until passed */
	LEASE_LOSS_REVOKED,  /* operator revoke */
	LEASE_LOSS_TAKEOVER, /* another holder got a newer epoch */
	LEASE_LOSS_STORE,    /* store failure made holding unverifiable */
};
const char *lease_loss_str(enum lease_loss why);

/*
 * Loss callback: called exactly once per lease, from whatever thread
 * observed the loss (a backend watcher thread or the releasing thread).
 * It must not block and must not call back into the lease.
 */
typedef void (*lease_loss_cb)(struct lease *lease, enum lease_loss why,
			      void *userdata);

/*
 * Open a store by URI:
 *   "file:DIR"  file backend, DIR the lease directory (created 0700)
 *   "file"      file backend at LEASE_FILE_DEFAULT_DIR
 *   "etcd://H:P[,H:P...][/prefix]", "etcds://..."  (when built in)
 * Options (TTL, TLS files) come from `opts`, which may be NULL.
 */
#define LEASE_FILE_DEFAULT_DIR "/var/lib/leasefs/leases"
/*
 * Reachability callback: a store with a server (etcd, pg, NATS) calls it
 * once per transition of what its renewals of held leases find: the
 * server stopped answering (reachable false, away_ms 0), or answers again
 * (reachable true, away_ms since it stopped).  Never per request, never
 * per retry; never while no lease is held (nothing is asked then).  From
 * the store's own thread: it must not block and must not call into the
 * store.  Losses are reported as before (LEASE_LOSS_STORE once holding
 * became unverifiable), independently.
 */
typedef void (*lease_reach_cb)(bool reachable, int64_t away_ms, void *userdata);
struct lease_store_opts {
	int64_t ttl_ms;        /* etcd: lease TTL; 0 = default 15000 */
	const char *ca_file;   /* etcds: */
	const char *cert_file;
	const char *key_file;
	const char *holder;    /* free-form holder description, e.g. session id */
	lease_reach_cb on_reach; /* NULL: none */
	void *reach_userdata;
};
int lease_store_open(const char *uri, const struct lease_store_opts *opts,
		     struct lease_store **out, struct lease_err *err);
void lease_store_close(struct lease_store *store);
/* The local directory a store URI names (file: stores), without opening
 * it; NULL for stores that have none. */
const char *lease_uri_local_dir(const char *uri);
/* `uri` for showing: a password in its authority ("scheme://user:PASS@")
 * becomes "***", in every URI of a comma-separated list.  `out` gets as
 * much as fits. */
void lease_uri_redact(const char *uri, char *out, size_t outsz);
/* Whether lease_uri_redact() would change `uri`. */
bool lease_uri_has_secret(const char *uri);
/* Local directory backing the store, or NULL when it has none. */
const char *lease_store_local_dir(const struct lease_store *store);

/*
 * Acquire `name` exclusively.  On contention, retries until `deadline`
 * (a deadline already passed means a single try) and then fails with
 * LEASE_E_HELD and err->holder_epoch.  Every other failure has its own kind.
 */
int lease_acquire(struct lease_store *store, const char *name,
		  int64_t deadline, struct lease **out, struct lease_err *err);

/*
 * Acquire `name` exclusively within `scopes`: names that enclose it (for
 * a workspace root, the root names of the directories above it), each
 * valid and distinct from `name`.  While the grant lives, and after a
 * revoke until its holder is fenced, a grant of any of its scopes is
 * refused; and the grant itself is refused while any scope is granted or
 * fenced, or while some grant lives within `name`.  Such a refusal is
 * LEASE_E_HELD with err->name the name that holds it (a scope, `name`, or
 * the grant within) and err->holder_epoch its epoch.  lease_acquire() is
 * this with no scopes.
 */
int lease_acquire_in(struct lease_store *store, const char *name,
		     const char *const *scopes, size_t nscopes,
		     int64_t deadline, struct lease **out,
		     struct lease_err *err);

uint64_t lease_epoch(const struct lease *lease);
const char *lease_name(const struct lease *lease);
struct lease_store *lease_store_of(const struct lease *lease);

/* Readable (EPOLLIN) once the lease is lost or released; never reset.
 * Owned by the lease.  */
int lease_loss_fd(const struct lease *lease);
/* Register the loss callback.  If loss already happened, it is called now. */
void lease_set_loss_cb(struct lease *lease, lease_loss_cb cb, void *userdata);
/* Loss state: lock-free, one atomic load. */
bool lease_is_lost(const struct lease *lease);
enum lease_loss lease_loss_reason(const struct lease *lease);
/*
 * Local safe-until deadline (CLOCK_MONOTONIC ns) after which the lease
 * counts as lost even without a notification; 0 = no deadline (the store
 * fences natively).  Lock-free, one atomic load; may move forward as
 * keepalives succeed.
 */
int64_t lease_safe_until(const struct lease *lease);

/*
 * Release: fires the loss notification (LEASE_LOSS_RELEASED) first, then
 * clears the entry in the store if and only if it still carries this
 * lease's epoch.  Idempotent: repeats return 0 and do no store I/O.
 * Bounded by `deadline`; on failure the store's own mechanism (TTL, lock
 * drop on close) remains the backstop.
 */
int lease_release(struct lease *lease, int64_t deadline);
/*
 * Release, then forget the name: a store that keeps records per name
 * removes them if the name is still free at this lease's epoch.  A later
 * grant of the name still gets a higher epoch (the store keeps a floor),
 * so this never resets an epoch.  For names that are not reused, such as
 * a session's.  0 or -errno of the release or the removal.
 */
int lease_release_forget(struct lease *lease, int64_t deadline);
/*
 * After loss, while mutations admitted before it may still land: keep a
 * successor out for longer.  Stores that fence by a holder's lock do so
 * anyway; a TTL store keeps its fence entry alive while the holder can
 * reach it.  Cheap to call often.
 */
void lease_hold_fenced(struct lease *lease);
/* Free the object; releases first (bounded by 1 s) if not yet released. */
void lease_free(struct lease *lease);

/* ---- operator view -------------------------------------------------- */
enum lease_state { LEASE_STATE_FREE, LEASE_STATE_HELD, LEASE_STATE_REVOKED };
const char *lease_state_str(enum lease_state st);

struct lease_info {
	char name[LEASE_NAME_MAX + 1];
	uint64_t epoch;         /* high-water mark: the last epoch granted */
	enum lease_state state;
	pid_t holder_pid;       /* 0 if unknown */
	char holder[1024];      /* backend-specific holder description */
	/* Grants that live within this name (it is one of their scopes),
	 * fenced ones included; one of them, by name and epoch. */
	unsigned within;
	char within_name[LEASE_NAME_MAX + 1];
	uint64_t within_epoch;
};

typedef int (*lease_list_cb)(const struct lease_info *info, void *userdata);
int lease_list(struct lease_store *store, lease_list_cb cb, void *userdata,
	       struct lease_err *err);
int lease_show(struct lease_store *store, const char *name,
	       struct lease_info *info, struct lease_err *err);
/*
 * How a revoked holder stopped being a writer.  Invariant of every store:
 * a revoked name is granted to a successor only after one of the first two
 * has happened, so two holders never both believe they may write.
 */
enum lease_fence {
	LEASE_FENCE_ACKED,   /* the holder saw its loss, drained and released */
	LEASE_FENCE_EXPIRED, /* it did not answer, but its safe-until bound
				(TTL stores) has passed: it cannot believe
				itself healthy any more */
	LEASE_FENCE_PENDING, /* neither by the deadline: the name stays shut
				to successors until one of them happens */
	LEASE_FENCE_SUCCEEDED, /* a successor already holds it: one of the
				  first two happened, the store no longer
				  says which */
};

/*
 * Force loss on the current holder of `name`: its epoch is superseded and
 * its loss notification fires.  -ENOENT (LEASE_E_IO) if nothing is held.
 * With `fence` non-NULL, also wait (until `deadline`) for the holder to be
 * fenced and say how; a deadline that passes first is LEASE_FENCE_PENDING
 * with a return of 0 (the revoke itself stands).
 */
int lease_revoke(struct lease_store *store, const char *name, int64_t deadline,
		 enum lease_fence *fence, struct lease_err *err);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of `leasefs mount`: the mount's life from the leases to
 * the orderly end.
 *
 *   open:   session lease, root lease (coord), host lock, passthrough +
 *           gate + FUSE session, control socket, event thread
 *   serve:  FUSE workers; the event thread takes signals, umount requests
 *           and loss (acknowledge after the drain, drop caches, read-only)
 *   end:    close admission, drain, unmount, release root then session
 *
 * Errors travel as 0/-errno with a struct lfs_err (error.h) naming what
 * failed; the lease library's are converted where they come in.  Only the
 * coordinator's after_acquire hook speaks struct lease_err, its contract.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "fs.h"
#include "gate.h"
#include "hostlock.h"
#include "roots.h"
#include "session.h"
#include "transport.h"

/* Descriptors a daemon keeps for itself, outside the passthrough's
 * budget: control clients, watchers and umount waiters (up to 115), the
 * lease store's (leases, bells, records, connections), eventfds, the FUSE
 * device, and per FUSE thread (workers, io_uring queues) its splice and
 * peek pipes.  A lower open files limit than FD_SPARE more is refused
 * before anything is taken. */
#define FD_RESERVE_BASE 256
#define FD_RESERVE_PER_THREAD 6
#define FD_SPARE 256
/* FUSE_HANDLE_KILLPRIV_V2 when the kernel offers it (README: measured). */
#define KILLPRIV_V2_DEFAULT true
/* FUSE over io_uring when the kernel has it enabled (README: measured). */
#define IO_URING_DEFAULT true
#define DRAIN_TIMEOUT_MS 10000
#define FENCE_STEP_MS 200
#define RO_RETRY_MIN_MS 50
#define RO_RETRY_MAX_MS 2000

/* Written once before threads start, then read-only, except `stopping`. */
struct daemon {
	struct mount_opts *opts;
	struct lease_store *store;
	struct coord *coord;
	struct lfs *fs;
	struct gate *gate;
	struct lfs_session sess;  /* the session's userdata */
	struct fuse_session *se;
	struct transport *transport;
	struct control *ctl;
	int64_t acquire_deadline; /* --wait, absolute; bounds the host lock too */
	/* The host lock on the root: the event thread frees it once the loss
	 * is acknowledged, the teardown after joining it. */
	struct hostlock *root_lock;
	/* Host locks on the directories the daemon writes outside ROOT (the
	 * metrics directory, a file store): until the daemon exits. */
	struct hostlock *dir_locks[2];
	char session_id[37];      /* --session, else a random one */
	char session_root[PATH_MAX]; /* session placement: ROOT/<session id> */
	char holder[PATH_MAX + 64];  /* the store's holder description */
	int event_fd;            /* umount requests and loss, for the event thread */
	/* To the waiting parent, until on_serving() (a FUSE worker) reports;
	 * the main thread reads it only after the workers are joined. */
	int report_fd;
	int signal_fd;
	pthread_t event_thread;
	bool event_thread_started;
	atomic_bool stopping;
	atomic_bool lost;
	atomic_bool fence_due;   /* shared placement: a lease to acknowledge */
};

static void on_loss(void *ud, enum lease_loss why)
{
	struct daemon *d = ud;

	(void)why;
	/* An unfenced placement never turns read-only; it only acknowledges. */
	if (placement_get(d->opts->placement)->fenced)
		atomic_store(&d->lost, true);
	else
		atomic_store(&d->fence_due, true);
	/* An eventfd add of 1 fails only on overflow: readable anyway. */
	(void)eventfd_write(d->event_fd, 1);
}

static void on_umount(void *ud)
{
	struct daemon *d = ud;

	atomic_store(&d->stopping, true);
	(void)eventfd_write(d->event_fd, 1);
}

/* The host lock on the served root, in the placement's mode; X carries our
 * lease and epoch, for a refused contender. */
static int lock_root(struct daemon *d, const char *root, const char *lease_name,
		     uint64_t epoch, struct lease_err *err)
{
	struct hostlock_spec spec = {
		.path = root,
		.mode = placement_get(d->opts->placement)->lock,
		.what = "workspace",
		.lease_name = lease_name,
		.epoch = epoch,
		.mountpoint = d->opts->mountpoint,
	};

	return hostlock_take(&spec, d->acquire_deadline, &d->root_lock, err);
}

/*
 * Exclusive placement: the root lease is held; now the host lock, with
 * our lease's epoch (the store's high-water mark, which is ours while we
 * hold the name).  Every store: one host has one exclusive writer per
 * tree, whatever store each mount uses.
 */
static int after_acquire(void *ud, const char *root, struct lease_err *err)
{
	struct daemon *d = ud;
	struct lease_info info = { 0 };
	char name[LEASE_NAME_MAX + 1];
	int r;

	if (!placement_get(d->opts->placement)->root_lease)
		return 0;
	r = ws_root_name(root, name, sizeof(name));
	if (r < 0)
		return r;
	if (lease_show(d->store, name, &info, NULL) < 0)
		info.epoch = 0;
	return lock_root(d, root, name, info.epoch, err);
}

static void log_line(void *ud, const char *msg)
{
	(void)ud;
	fprintf(stderr, "leasefs: %s\n", msg);
}

static void log_release(void *ud, const char *name, int64_t deadline)
{
	(void)ud;
	(void)deadline;
	fprintf(stderr, "leasefs: releasing %s\n", name);
}

/*
 * Stop serving: close admission and drain, then unmount and end the FUSE
 * loop (a copy of the mount in another mount namespace, a container's,
 * keeps the connection alive after our unmount: the loop is ended all the
 * same, and the daemon's exit ends the connection there).  Never touches
 * the mount point through the filesystem itself: its workers may be gone.
 */
static void begin_stop(struct daemon *d)
{
	coord_close_admission(d->coord, DRAIN_TIMEOUT_MS);
	fuse_session_exit(d->se);
	fuse_session_unmount(d->se);
	transport_stop(d->transport);
}

/* What the event thread still owes a loss. */
struct loss_work {
	bool seen;
	bool fenced;        /* drained and released: successors may come */
	bool caches_dropped;
	bool ro_done;
	int ro_tries;
	int64_t ro_next;    /* CLOCK_MONOTONIC ns of the next remount try */
};

static void loss_begin(struct daemon *d)
{
	fprintf(stderr, "leasefs: lease lost (%s); %s is read-only now\n",
		lease_loss_str(coord_loss_reason(d->coord)), d->opts->mountpoint);
}

/* Fenced: nothing of ours writes the root any more; let its next owner
 * (on this host) in. */
static void drop_hostlock(struct daemon *d)
{
	hostlock_free(d->root_lock);
	d->root_lock = NULL;
}

/*
 * After loss: make the superblock read-only, so statfs says so everywhere.
 * The kernel answers EBUSY while a file is open for writing; retry, backing
 * off to RO_RETRY_MAX_MS, for as long as the daemon runs.  Returns the
 * poll timeout for the next try, or -1 when there is nothing left to do.
 */
static int remount_step(struct daemon *d, int *tries)
{
	int r = session_remount_readonly(d->opts->mountpoint);

	if (r == 0)
		return -1;
	if (r != -EBUSY) {
		fprintf(stderr, "leasefs: cannot make %s read-only: %s; the gate "
			"still refuses every mutation\n", d->opts->mountpoint,
			strerror(-r));
		return -1;
	}
	if (*tries == 0)
		fprintf(stderr, "leasefs: %s has files open for writing; the "
			"read-only remount waits for them to close\n",
			d->opts->mountpoint);
	++*tries;
	return *tries >= 5 ? RO_RETRY_MAX_MS : RO_RETRY_MIN_MS << *tries;
}

/*
 * One round of work after loss, in order of urgency: acknowledge the loss
 * to the store once in-flight mutations drained (a successor waits for
 * it), drop the caches that assumed we own the root, make the superblock
 * read-only.  Returns the poll timeout for the next round (-1: done).
 */
static int loss_step(struct daemon *d, struct loss_work *w)
{
	int64_t now, next_ms;

	if (!w->seen) {
		w->seen = true;
		lfs_stop_atime(d->fs); /* before any acknowledgement */
		loss_begin(d);
	}
	if (!w->fenced) {
		w->fenced = coord_fence(d->coord, FENCE_STEP_MS) != -ETIMEDOUT;
		if (w->fenced)
			drop_hostlock(d);
	}
	/* Dropping a file's pages waits for the page locks of writes in
	 * flight: only once they drained, so that this thread keeps holding
	 * the fence (coord_fence) for as long as one is stuck. */
	if (w->fenced && !w->caches_dropped) {
		lfs_after_loss(d->fs, d->se);
		w->caches_dropped = true;
	}
	now = lease_now_ns();
	if (!w->ro_done && now >= w->ro_next) {
		int wait = remount_step(d, &w->ro_tries);

		w->ro_done = wait < 0;
		w->ro_next = now + (int64_t)wait * 1000000;
	}
	if (!w->fenced)
		return 0; /* coord_fence itself waited FENCE_STEP_MS */
	if (w->ro_done)
		return -1;
	next_ms = (w->ro_next - now) / 1000000;
	return next_ms > 0 ? (int)next_ms : 0;
}

/* Signals, umount requests and loss, handled off the FUSE threads. */
static void *event_thread(void *p)
{
	struct daemon *d = p;
	struct pollfd pfd[2] = {
		{ .fd = d->signal_fd, .events = POLLIN },
		{ .fd = d->event_fd, .events = POLLIN },
	};
	struct loss_work lw = { 0 };
	int timeout = -1;

	for (;;) {
		int r = poll(pfd, 2, timeout);

		if (r < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(d->signal_fd, &si, sizeof(si)) > 0)
				atomic_store(&d->stopping, true);
		}
		if (pfd[1].revents & POLLIN) {
			eventfd_t v;

			if (eventfd_read(d->event_fd, &v) < 0)
				continue;
		}
		if (atomic_load(&d->stopping)) {
			begin_stop(d);
			break;
		}
		if (atomic_load(&d->lost))
			timeout = loss_step(d, &lw);
		else if (atomic_exchange(&d->fence_due, false))
			coord_fence(d->coord, 0);
	}
	return NULL;
}

static int block_signals(struct daemon *d)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	/* A shell starts background jobs with SIGINT ignored, and an ignored
	 * signal never reaches a signalfd: SIGINT and SIGTERM always mean
	 * orderly shutdown.  (SIGHUP keeps its disposition, for nohup.) */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	/* A client that hangs up must never kill the daemon. */
	signal(SIGPIPE, SIG_IGN);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
		return -EINVAL;
	d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	d->event_fd = eventfd(0, EFD_CLOEXEC);
	return d->signal_fd < 0 || d->event_fd < 0 ? -errno : 0;
}

/*
 * Shared and session placements write into ROOT without a root lease, so
 * they must not start while another session holds ROOT exclusively: the
 * store's root lease is checked (across hosts, at this moment), and the
 * host lock is taken as S (ROOT, or ROOT/<session id>), which also keeps
 * an exclusive mount at, above or below it out on this host for as long
 * as this one lives.  Nothing is touched in ROOT before this.
 */
/* Refused if `path` (the served directory or one above it) has its root
 * lease held or revoked and not yet fenced, or, for the served directory,
 * if a workspace inside it is held. */
static int root_free(struct daemon *d, const char *served, const char *path,
		     struct lfs_err *err)
{
	struct lease_info info = { 0 }, inner = { 0 };
	struct lease_err le = { 0 };
	char name[LEASE_NAME_MAX + 1];
	int r = ws_root_name(path, name, sizeof(name));

	if (r == 0)
		r = lease_show(d->store, name, &info, &le);
	if (r < 0)
		return lfs_err_from_lease(err, r, &le);
	if (info.state != LEASE_STATE_FREE && strcmp(path, served) == 0)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s "
				"held at epoch %" PRIu64, served, info.epoch);
	if (info.state != LEASE_STATE_FREE)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s is "
				"inside workspace %s, held at epoch %" PRIu64,
				served, path, info.epoch);
	if (strcmp(path, served) == 0 && info.within &&
	    lease_show(d->store, info.within_name, &inner, NULL) == 0)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace busy: %s "
				"contains workspace %s, held at epoch %" PRIu64
				" (lease %s)", served, inner.holder,
				info.within_epoch, info.within_name);
	return 0;
}

static int share_root(struct daemon *d, struct lfs_err *err)
{
	const struct placement *pl = placement_get(d->opts->placement);
	const char *served = pl->own_dir ? d->session_root : d->opts->canon_root;
	char up[PATH_MAX];
	struct lease_err le = { 0 };
	int r;

	if (pl->root_lease)
		return 0;
	r = root_free(d, served, served, err);
	snprintf(up, sizeof(up), "%s", served);
	while (r == 0 && ws_path_parent(up))
		r = root_free(d, served, up, err);
	if (r < 0)
		return r;
	r = lock_root(d, served, NULL, 0, &le);
	return lfs_err_from_lease(err, r, &le);
}

/* The session id (--session or a random one) and, for session placement,
 * the directory it serves. */
static int pick_session(struct daemon *d, struct lfs_err *err)
{
	const char *root = d->opts->canon_root;
	int r = 0;

	if (d->opts->session)
		snprintf(d->session_id, sizeof(d->session_id), "%s",
			 d->opts->session);
	else
		r = lease_uuid_random(d->session_id, sizeof(d->session_id));
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r, "random session id: %s",
				strerror(-r));
	if (snprintf(d->session_root, sizeof(d->session_root), "%s/%s",
		     strcmp(root, "/") == 0 ? "" : root, d->session_id) >=
	    (int)sizeof(d->session_root))
		return lfs_fail(err, EXIT_USAGE, -ENAMETOOLONG, "workspace "
				"root %s: name too long", root);
	return 0;
}

/* IS host locks on the directories the daemon writes besides ROOT: the
 * metrics directory and a file store's, so that no exclusive mount at or
 * above them starts while this daemon may write there. */
static int lock_dirs(struct daemon *d, struct lfs_err *err)
{
	const char *store = lease_uri_local_dir(d->opts->leases);
	char canon[PATH_MAX];
	struct lease_err le = { 0 };
	struct hostlock_spec spec = { .mode = HOSTLOCK_IS,
				      .mountpoint = d->opts->mountpoint };
	int r = 0;

	if (d->opts->metrics_dir) {
		spec.path = d->opts->metrics_dir;
		spec.what = "metrics directory";
		r = hostlock_take(&spec, d->acquire_deadline, &d->dir_locks[0], &le);
	}
	if (r == 0 && store &&
	    (r = ws_canonical_root(store, canon, sizeof(canon))) < 0)
		return lfs_fail(err, EXIT_FAIL, r, "lease directory %s: %s",
				store, strerror(-r));
	if (r == 0 && store) {
		spec.path = canon;
		spec.what = "lease directory";
		r = hostlock_take(&spec, d->acquire_deadline, &d->dir_locks[1], &le);
	}
	return lfs_err_from_lease(err, r, &le);
}

/*
 * With --wait, a busy root is said once ("...; waiting up to N s") before
 * the wait, so that whoever started the mount knows what it waits for.
 */
static int coord_open_waiting(struct daemon *d, struct coord_config *cfg,
			      struct lfs_err *err)
{
	int64_t deadline = cfg->acquire_deadline;
	struct lease_err le = { 0 };
	int r;

	if (d->opts->wait_s > 0) {
		cfg->acquire_deadline = 0;
		r = coord_open(cfg, &d->coord, &le);
		cfg->acquire_deadline = deadline;
		if (r == 0 || le.kind != LEASE_E_HELD)
			return lfs_err_from_lease(err, r, &le);
		fprintf(stderr, "leasefs: %s; waiting up to %.0f s\n", le.msg,
			d->opts->wait_s);
	}
	return lfs_err_from_lease(err, coord_open(cfg, &d->coord, &le), &le);
}

static int open_coord(struct daemon *d, struct lfs_err *err)
{
	struct mount_opts *o = d->opts;
	struct lease_store_opts so = {
		.ttl_ms = (int64_t)(o->ttl_s * 1000),
		.ca_file = getenv("LEASEFS_ETCD_CA"),
		.cert_file = getenv("LEASEFS_ETCD_CERT"),
		.key_file = getenv("LEASEFS_ETCD_KEY"),
	};
	struct coord_config cfg = {
		.placement = o->placement,
		.root = o->canon_root,
		.acquire_deadline = d->acquire_deadline,
		.after_acquire = after_acquire,
		.after_acquire_userdata = d,
		.on_loss = on_loss,
		.on_loss_userdata = d,
		.log = log_line,
		.log_userdata = d,
	};
	struct lease_err le = { 0 };
	int r = pick_session(d, err);

	if (r == 0)
		r = lock_dirs(d, err);
	if (r < 0)
		return r;
	/* What a refused contender reads of us in the store. */
	snprintf(d->holder, sizeof(d->holder), "%s (session %s)",
		 placement_get(o->placement)->own_dir ? d->session_root :
		 o->canon_root,
		 d->session_id);
	cfg.session_id = d->session_id;
	so.holder = d->holder;
	r = lease_store_open(o->leases, &so, &d->store, &le);
	if (r < 0)
		return lfs_err_from_lease(err, r, &le);
	r = share_root(d, err);
	if (r < 0)
		return r;
	cfg.store = d->store;
	r = coord_open_waiting(d, &cfg, err);
	if (r < 0)
		return r;
	coord_set_release_observer(d->coord, log_release, d);
	return 0;
}

/* `s` escaped for libfuse's option parser, where ',' separates options
 * and '\\' quotes the next character. */
static char *opt_escape(const char *s)
{
	char *out = malloc(strlen(s) * 2 + 1), *d = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		if (*s == ',' || *s == '\\')
			*d++ = '\\';
		*d++ = *s;
	}
	*d = '\0';
	return out;
}

static int build_fuse_args(struct mount_opts *o, const char *root,
			   struct fuse_args *args)
{
	char *fsname = NULL, *esc = opt_escape(root);
	int r = 0;

	if (!esc || asprintf(&fsname, "fsname=leasefs:%s,subtype=leasefs", esc) < 0) {
		free(esc);
		return -ENOMEM;
	}
	free(esc);
	if (fuse_opt_add_arg(args, "leasefs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, fsname))
		r = -ENOMEM;
	if (!r && geteuid() == 0 &&
	    (fuse_opt_add_arg(args, "-o") ||
	     fuse_opt_add_arg(args, "allow_other,default_permissions")))
		r = -ENOMEM;
	if (!r && o->fuse_opts &&
	    (fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, o->fuse_opts)))
		r = -ENOMEM;
	/* After the user's options, so that nothing can weaken them. */
	if (!r && (fuse_opt_add_arg(args, "-o") ||
		   fuse_opt_add_arg(args, "nosuid,nodev")))
		r = -ENOMEM;
	if (!r && o->debug && fuse_opt_add_arg(args, "-d"))
		r = -ENOMEM;
	free(fsname);
	return r;
}

/* What the daemon keeps of RLIMIT_NOFILE for itself (see FD_RESERVE_BASE):
 * it grows with the FUSE threads a mount may run. */
static long fd_reserve(void)
{
	long cpus = get_nprocs_conf();

	return FD_RESERVE_BASE +
	       FD_RESERVE_PER_THREAD * (TRANSPORT_MAX_WORKERS + (cpus > 0 ? cpus : 1));
}

/*
 * The one place a placement becomes policy.  Exclusive and session
 * placements have the served directory to themselves (the root lease, or
 * a private ROOT/<uuid>), so the kernel may keep names, attributes and
 * pages for long; under shared placement others write too: 1 s.
 */
static struct lfs_config policy_for(const struct mount_opts *o,
				     const char *root)
{
	bool sole_writer = placement_get(o->placement)->sole_writer;
	const char *inode_fds = getenv("LEASEFS_INODE_FDS");
	struct rlimit rl = { .rlim_cur = RLIM_INFINITY };
	long fds = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		fds = (long)rl.rlim_cur - fd_reserve();

	return (struct lfs_config){
		.root = root,
		.entry_timeout = sole_writer ? 86400.0 : 1.0,
		.attr_timeout = sole_writer ? 86400.0 : 1.0,
		.keep_cache = sole_writer,
		.sole_writer = sole_writer,
		.max_read = o->max_read,
		.fd_limit = fds,
		.inode_fds = inode_fds ? strtol(inode_fds, NULL, 10) : 0,
		.files_per_user = o->files_per_user,
	};
}

static void on_serving(void *ud);

/* "0" or "1" in the environment, else `dflt` (for A/B runs and tests). */
static bool env_flag(const char *name, bool dflt)
{
	const char *v = getenv(name);

	return v && (v[0] == '0' || v[0] == '1') && !v[1] ? v[0] == '1' : dflt;
}

/* Compose the layers (passthrough, gate in front) into a FUSE session and
 * mount it. */
static int open_fs(struct daemon *d, struct lfs_err *err)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct lfs_config cfg = policy_for(d->opts, coord_root(d->coord));
	const char *unknown = NULL;
	int r = lfs_new(&cfg, &d->fs);

	if (r == 0)
		r = gate_new(d->coord, lfs_ops(), &d->gate, &unknown);
	if (r == -EOPNOTSUPP)
		return lfs_fail(err, EXIT_FAIL, r, "the passthrough serves the "
				"FUSE operation '%s', which the gate's op table "
				"does not know", unknown);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot start the filesystem on %s: %s",
				     cfg.root, strerror(-r));
	d->sess = (struct lfs_session){ .fs = d->fs, .gate = d->gate,
					.recheck = gate_recheck,
					.kill_suidgid = transport_kill_suidgid,
					.serving = on_serving, .serving_ud = d };
	r = build_fuse_args(d->opts, cfg.root, &args);
	if (r == 0) {
		d->se = fuse_session_new(&args, gate_ops(d->gate),
					 sizeof(struct fuse_lowlevel_ops), &d->sess);
		d->sess.se = d->se;
		r = d->se ? 0 : -EINVAL;
	}
	fuse_opt_free_args(&args);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot start the FUSE session on %s: %s",
				     cfg.root, strerror(-r));
	if (fuse_session_mount(d->se, d->opts->mountpoint) != 0)
		return lfs_fail(err, EXIT_FAIL, -EIO,
				     "cannot mount on %s", d->opts->mountpoint);
	r = session_apply_attrs(d->opts->mountpoint, &d->opts->attrs);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r, "cannot apply the atime "
				"options to %s: %s", d->opts->mountpoint,
				strerror(-r));
	r = transport_new(d->se, &(struct transport_opts){
				  .killpriv_v2 = env_flag("LEASEFS_KILLPRIV_V2",
							  KILLPRIV_V2_DEFAULT),
				  .tmpfile = env_flag("LEASEFS_TMPFILE", true),
				  .io_uring = env_flag("LEASEFS_IO_URING",
						       IO_URING_DEFAULT) },
			  &d->transport);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r, "cannot set up the FUSE "
				"transport on %s: %s", d->opts->mountpoint,
				strerror(-r));
	d->sess.transport = d->transport;
	return 0;
}

static int start_services(struct daemon *d, struct lfs_err *err)
{
	struct daemon_info info = {
		.status = {
			.coord = d->coord,
			.gate = d->gate,
			.transport = d->transport,
			.backend = d->opts->leases,
			.mountpoint = d->opts->mountpoint,
		},
		.metrics_dir = d->opts->metrics_dir,
		.on_umount = on_umount,
		.userdata = d,
	};
	int r = control_start(&info, &d->ctl);

	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot open the control socket for %s: %s",
				     d->opts->mountpoint, strerror(-r));
	r = -pthread_create(&d->event_thread, NULL, event_thread, d);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot start the event thread: %s",
				     strerror(-r));
	d->event_thread_started = true;
	return 0;
}

/* Orderly end: stop serving, unmount, release root then session. */
static int teardown(struct daemon *d)
{
	int r = 0;

	if (d->event_thread_started) {
		on_umount(d); /* the event thread closes admission and exits */
		pthread_join(d->event_thread, NULL);
	}
	if (d->se)
		fuse_session_unmount(d->se);
	/* Unmounted: nothing new reaches the root through us.  What was
	 * admitted must land before anything is let go (a write stuck in the
	 * kernel keeps the leases, however long); then the host lock goes
	 * first, so a successor never sees it outlive the root lease. */
	while (d->coord &&
	       coord_close_admission(d->coord, DRAIN_TIMEOUT_MS) == -ETIMEDOUT)
		;
	drop_hostlock(d);
	if (d->coord)
		r = coord_shutdown(d->coord, DRAIN_TIMEOUT_MS);
	control_stop(d->ctl);
	if (d->se)
		fuse_session_destroy(d->se);
	transport_free(d->transport);
	gate_free(d->gate);
	lfs_free(d->fs);
	coord_free(d->coord);
	lease_store_close(d->store);
	for (size_t i = 0; i < sizeof(d->dir_locks) / sizeof(d->dir_locks[0]); i++)
		hostlock_free(d->dir_locks[i]);
	return r;
}

/* Tell the waiting parent how the mount went (one byte: the exit code). */
static void report(int *fd, int code)
{
	unsigned char b = (unsigned char)code;

	if (*fd < 0)
		return;
	if (write(*fd, &b, 1) != 1)
		perror("leasefs: report to parent");
	close(*fd);
	*fd = -1;
}

static void detach_stdio(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return;
	dup2(fd, STDIN_FILENO);
	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
}

/* Highest fd limit the kernel allows a process (fs.nr_open). */
static rlim_t nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	unsigned long long v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return (rlim_t)v;
}

/* One fd per inode the kernel holds: raise the hard limit to nr_open when
 * privileged (the shell's hard limit is often only a few thousand), else
 * the soft limit to the hard one. */
static void raise_nofile(void)
{
	struct rlimit rl;
	rlim_t max = nr_open();

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (max > rl.rlim_max) {
		struct rlimit up = { .rlim_cur = max, .rlim_max = max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/*
 * The daemon process as the passthrough needs it: fds for every inode,
 * modes taken as sent (each worker applies the caller's umask itself),
 * and, when privileged, no supplementary groups a caller could borrow.
 */
static int process_setup(struct lfs_err *err)
{
	struct rlimit rl;

	raise_nofile();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur < (rlim_t)(fd_reserve() + FD_SPARE))
		return lfs_fail(err, EXIT_FAIL, -EMFILE, "the open files limit "
				"is %llu; a mount needs at least %ld",
				(unsigned long long)rl.rlim_cur,
				fd_reserve() + FD_SPARE);
	umask(0);
	if (geteuid() == 0 && setgroups(0, NULL) < 0)
		return lfs_fail(err, EXIT_FAIL, -errno, "cannot drop "
				"supplementary groups: %s", strerror(errno));
	return 0;
}

/* The kernel's INIT is answered: the waiting parent may return. */
static void on_serving(void *ud)
{
	struct daemon *d = ud;

	report(&d->report_fd, EXIT_OK);
	if (!d->opts->foreground)
		detach_stdio();
	/* What the start freed (store, host locks, mountinfo) goes back to
	 * the system: an idle daemon is one of a thousand. */
	malloc_trim(0);
}

static int run_daemon(struct mount_opts *o, int report_fd)
{
	struct daemon d = { .opts = o, .signal_fd = -1,
			    .event_fd = -1, .report_fd = -1 };
	struct lfs_err err = { 0 };
	int r, code;

	d.acquire_deadline = lease_deadline_ms((int64_t)(o->wait_s * 1000));
	r = process_setup(&err);
	if (r < 0)
		goto fail;
	r = block_signals(&d);
	if (r < 0) {
		lfs_fail(&err, EXIT_FAIL, r,
			      "cannot set up signal handling: %s", strerror(-r));
		goto fail;
	}
	r = open_coord(&d, &err);
	if (r < 0)
		goto fail;
	r = open_fs(&d, &err);
	if (r < 0)
		goto fail;
	r = start_services(&d, &err);
	if (r < 0)
		goto fail;
	d.report_fd = report_fd;
	r = transport_run(d.transport, 0);
	/* The loop has joined its workers: on_serving() ran, or never will. */
	report_fd = d.report_fd;
	if (report_fd >= 0) {
		/* Without a worker nothing answered INIT. */
		r = lfs_fail(&err, EXIT_FAIL, -EAGAIN, "cannot start serving "
			     "%s: no FUSE worker thread could start",
			     o->mountpoint);
		goto fail;
	}
	if (r < 0)
		fprintf(stderr, "leasefs: session loop: %s\n", strerror(-r));
	code = teardown(&d) == 0 && r == 0 ? EXIT_OK : EXIT_FAIL;
	goto close_fds;
fail:
	fprintf(stderr, "leasefs: %s\n", err.msg);
	code = lfs_exit_code(r, &err);
	teardown(&d);
	report(&report_fd, code);
close_fds:
	if (d.signal_fd >= 0)
		close(d.signal_fd);
	if (d.event_fd >= 0)
		close(d.event_fd);
	return code;
}

/* Background: the parent returns only once the child says it is serving
 * (or failed, with the child's exit code). */
static int daemonize_and_run(struct mount_opts *o)
{
	unsigned char code = EXIT_FAIL;
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		perror("leasefs: pipe");
		return EXIT_FAIL;
	}
	pid = fork();
	if (pid < 0) {
		perror("leasefs: fork");
		return EXIT_FAIL;
	}
	if (pid == 0) {
		close(p[0]);
		setsid();
		return run_daemon(o, p[1]);
	}
	close(p[1]);
	if (read(p[0], &code, 1) != 1)
		code = EXIT_FAIL; /* the daemon died before reporting */
	close(p[0]);
	return code;
}

int daemon_mount(struct mount_opts *o)
{
	return o->foreground ? run_daemon(o, -1) : daemonize_and_run(o);
}

/* SPDX-License-Identifier: MIT */
/*
 * The daemon: its mount. The layers composed into a FUSE session:
 * the options libfuse gets, the policy a placement becomes, the transport.
 * (The whole: daemon.c; shared internals: daemon_int.h.)
 */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <unistd.h>
#include <sys/sysinfo.h>

#include "daemon_int.h"

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

/*
 * The source mount(8), findmnt and df show is ROOT itself, as canonical as
 * mount(8) makes an fstab line's (the type, fuse.leasefs, says what
 * serves it): `mount -a` then finds the line mounted and leaves it.
 */
static int build_fuse_args(struct mount_opts *o, const char *root,
			   struct fuse_args *args)
{
	char *fsname = NULL, *esc = opt_escape(root);
	int r = 0;

	if (!esc || asprintf(&fsname, "fsname=%s,subtype=leasefs", esc) < 0) {
		free(esc);
		return -ENOMEM;
	}
	free(esc);
	if (fuse_opt_add_arg(args, "leasefs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, fsname))
		r = -ENOMEM;
	/* Root's daemon serves every user; a user's, itself alone unless it
	 * asked for others (fusermount3 lets it where /etc/fuse.conf says
	 * user_allow_other).  The kernel checks permissions on both. */
	if (!r && (fuse_opt_add_arg(args, "-o") ||
		   fuse_opt_add_arg(args, geteuid() == 0 || o->allow_other
					  ? "allow_other,default_permissions"
					  : "default_permissions")))
		r = -ENOMEM;
	if (!r && o->fuse_opts &&
	    (fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, o->fuse_opts)))
		r = -ENOMEM;
	/* After the user's options, so that nothing can weaken them; an
	 * observer's mount is read-only whatever -o said. */
	if (!r && (fuse_opt_add_arg(args, "-o") ||
		   fuse_opt_add_arg(args, placement_get(o->placement)->writes
					  ? "nosuid,nodev" : "nosuid,nodev,ro")))
		r = -ENOMEM;
	if (!r && o->debug && fuse_opt_add_arg(args, "-d"))
		r = -ENOMEM;
	free(fsname);
	return r;
}

/* What the daemon keeps of RLIMIT_NOFILE for itself (see FD_RESERVE_BASE):
 * it grows with the FUSE threads a mount may run. */
long fd_reserve(void)
{
	long cpus = get_nprocs_conf();

	return FD_RESERVE_BASE +
	       FD_RESERVE_PER_THREAD * (TRANSPORT_MAX_WORKERS + (cpus > 0 ? cpus : 1));
}

/* "0" or "1" in the environment, else `dflt` (for A/B runs and tests). */
static bool env_flag(const char *name, bool dflt)
{
	const char *v = getenv(name);

	return v && (v[0] == '0' || v[0] == '1') && !v[1] ? v[0] == '1' : dflt;
}

/*
 * The one place a placement becomes policy.  Exclusive and session
 * placements have the served directory to themselves (the root lease, or
 * a private ROOT/<uuid>), so the kernel may keep names, attributes and
 * pages for long; under shared and observer placements others write too:
 * names and attributes for 1 s, and an open reads the file afresh.
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
		.allow_stacked_root = o->allow_stacked_root,
		/* LEASEFS_SUBUID_FILE: tests only (a private copy). */
		.subuid_path = getenv("LEASEFS_SUBUID_FILE")
			? getenv("LEASEFS_SUBUID_FILE") : "/etc/subuid",
		.passthrough = o->passthrough >= 0 ? o->passthrough != 0
			: env_flag("LEASEFS_PASSTHROUGH", PASSTHROUGH_DEFAULT),
		.direct_writes = env_flag("LEASEFS_DIRECT_WRITES",
					  DIRECT_WRITES_DEFAULT),
	};
}


int open_fs(struct daemon *d, void (*serving)(void *ud), struct lfs_err *err)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct lfs_config cfg = policy_for(d->opts, coord_root(d->coord));
	const char *unknown = NULL;
	int pt, r = lfs_new(&cfg, &d->fs);

	/* An observer never writes ROOT: not even an access time. */
	if (r == 0 && !placement_get(d->opts->placement)->writes)
		lfs_stop_atime(d->fs);
	if (r == 0)
		r = gate_new(d->coord, lfs_ops(), &d->gate, &unknown);
	if (r == -EOPNOTSUPP)
		return lfs_fail(err, EXIT_FAIL, r, "the passthrough serves the "
				"FUSE operation '%s', which the gate's op table "
				"does not know", unknown);
	if (r == -EXDEV)
		return lfs_fail(err, EXIT_USAGE, r, "workspace root %s is on "
				"FUSE or overlayfs now (it was not when checked); "
				"--allow-stacked-root serves it anyway", cfg.root);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot start the filesystem on %s: %s",
				     cfg.root, strerror(-r));
	d->sess = (struct lfs_session){ .fs = d->fs, .gate = d->gate,
					.recheck = gate_recheck,
					.kill_suidgid = transport_kill_suidgid,
					.serving = serving, .serving_ud = d,
					.wire = &transport_wire_ops };
	r = build_fuse_args(d->opts, d->opts->canon_root, &args);
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
	pt = lfs_passthrough(d->fs);
	r = transport_new(d->se, &(struct transport_opts){
				  .killpriv_v2 = env_flag("LEASEFS_KILLPRIV_V2",
							  KILLPRIV_V2_DEFAULT),
				  .tmpfile = env_flag("LEASEFS_TMPFILE", true),
				  .io_uring = env_flag("LEASEFS_IO_URING",
						       IO_URING_DEFAULT),
				  .passthrough = pt > 0,
				  .passthrough_error = pt < 0 ? pt : 0,
				  .direct_io_mmap = cfg.direct_writes },
			  &d->transport);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r, "cannot set up the FUSE "
				"transport on %s: %s", d->opts->mountpoint,
				strerror(-r));
	d->sess.transport = d->transport;
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * leasefs: the command line, and the client commands.
 *
 *   leasefs mount [options] ROOT MOUNTPOINT
 *   leasefs status MOUNTPOINT [--json]
 *   leasefs umount MOUNTPOINT
 *   leasefs lease list|show NAME|revoke NAME [--leases=URI]
 *
 * Exit codes: 0 ok, 64 usage, 75 workspace busy, 3 revoked but not fenced,
 * 1 anything else.  Every internal function returns 0 or -errno with a
 * struct lfs_err (error.h) naming what failed and its exit code.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "roots.h"


#define UMOUNT_TIMEOUT_MS 30000
/* lease revoke: how long to wait for the holder to be fenced; covers the
 * default etcd TTL (15 s) plus its fence margin. */
#define REVOKE_TIMEOUT_S 30.0

static const char usage_text[] =
	"usage: leasefs mount [--placement=exclusive|session|shared] [--leases=URI]\n"
	"                     [--session=UUID] [--wait=SECONDS] [--ttl=SECONDS]\n"
	"                     [--metrics-dir=DIR] [--files-per-user=N]\n"
	"                     [-o OPT] [-f] [-d] ROOT MOUNTPOINT\n"
	"       leasefs status MOUNTPOINT [--json]\n"
	"       leasefs umount MOUNTPOINT\n"
	"       leasefs watch MOUNTPOINT\n"
	"       leasefs metrics MOUNTPOINT\n"
	"       leasefs ROOT MOUNTPOINT -o OPT[,OPT...]   (mount(8), fstab)\n"
	"       leasefs lease list [--leases=URI]\n"
	"       leasefs lease show NAME [--leases=URI]\n"
	"       leasefs lease revoke NAME [--leases=URI] [--timeout=SECONDS]\n";

static int usage_error(struct lfs_err *err, const char *fmt, const char *arg)
{
	return lfs_fail(err, EXIT_USAGE, -EINVAL, fmt, arg ? arg : "");
}

static const char *default_leases(void)
{
	const char *env = getenv("LEASEFS_LEASES");

	return env && *env ? env : "file:" LEASE_FILE_DEFAULT_DIR;
}

/* ---- mount options ------------------------------------------------ */


static int parse_seconds(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || *out < 0 || *out > 1e6 ? -EINVAL : 0;
}

/*
 * Mount options a user may pass, and what becomes of each.  Everything
 * else is refused: leasefs sets fsname, subtype, allow_other and
 * default_permissions itself, and the mount is always nosuid and nodev (a
 * root daemon serving other users must not let a file in ROOT become a
 * setuid program or a device).  "suid" and "dev", which mount(8) adds from
 * fstab's "defaults", are ignored.  The atime family is applied by leasefs
 * itself once mounted (libfuse 3.14 knows only noatime).
 */
enum opt_kind {
	OPT_FUSE,     /* passed to libfuse */
	OPT_ALWAYS,   /* always on; accepted, nothing to do */
	OPT_IGNORED,  /* what mount(8) adds from fstab */
	OPT_ATIME,    /* the mount's atime mode (last one wins) */
	OPT_DIRATIME, /* nodiratime / diratime */
	OPT_LAZYTIME, /* the superblock's lazytime */
};

static const struct mount_opt {
	const char *name;
	enum opt_kind kind;
	int value;    /* OPT_ATIME: MOUNT_ATTR_*; others: 1 on, 0 off */
} mount_opt_table[] = {
	{ "ro", OPT_FUSE, 0 }, { "rw", OPT_FUSE, 0 },
	{ "exec", OPT_FUSE, 0 }, { "noexec", OPT_FUSE, 0 },
	{ "sync", OPT_FUSE, 0 }, { "async", OPT_FUSE, 0 },
	{ "dirsync", OPT_FUSE, 0 },
	{ "nosuid", OPT_ALWAYS, 0 }, { "nodev", OPT_ALWAYS, 0 },
	{ "allow_other", OPT_ALWAYS, 0 }, { "default_permissions", OPT_ALWAYS, 0 },
	{ "suid", OPT_IGNORED, 0 }, { "dev", OPT_IGNORED, 0 },
	{ "defaults", OPT_IGNORED, 0 }, { "auto", OPT_IGNORED, 0 },
	{ "noauto", OPT_IGNORED, 0 }, { "nofail", OPT_IGNORED, 0 },
	{ "_netdev", OPT_IGNORED, 0 }, { "user", OPT_IGNORED, 0 },
	{ "nouser", OPT_IGNORED, 0 }, { "users", OPT_IGNORED, 0 },
	/* "atime" and "nostrictatime" ask for the kernel's default. */
	{ "atime", OPT_ATIME, MOUNT_ATTR_RELATIME },
	{ "relatime", OPT_ATIME, MOUNT_ATTR_RELATIME },
	{ "nostrictatime", OPT_ATIME, MOUNT_ATTR_RELATIME },
	{ "noatime", OPT_ATIME, MOUNT_ATTR_NOATIME },
	{ "strictatime", OPT_ATIME, MOUNT_ATTR_STRICTATIME },
	{ "norelatime", OPT_ATIME, MOUNT_ATTR_STRICTATIME },
	{ "nodiratime", OPT_DIRATIME, 1 }, { "diratime", OPT_DIRATIME, 0 },
	{ "lazytime", OPT_LAZYTIME, 1 }, { "nolazytime", OPT_LAZYTIME, 0 },
};

static const struct mount_opt *find_mount_opt(const char *opt)
{
	for (size_t i = 0; i < sizeof(mount_opt_table) / sizeof(mount_opt_table[0]); i++)
		if (strcmp(mount_opt_table[i].name, opt) == 0)
			return &mount_opt_table[i];
	return NULL;
}

/* "max_read=N" with N a positive decimal that fits the kernel's field. */
static bool max_read_ok(const char *opt, unsigned *out)
{
	unsigned long long v;
	char *end;

	if (strncmp(opt, "max_read=", 9) != 0 || opt[9] < '0' || opt[9] > '9')
		return false;
	errno = 0;
	v = strtoull(opt + 9, &end, 10);
	if (errno || *end || v == 0 || v > UINT32_MAX)
		return false;
	*out = (unsigned)v;
	return true;
}

/* Append `opt` to the comma-joined options passed to libfuse. */
static int pass_to_fuse(struct mount_opts *o, const char *opt,
			struct lfs_err *err)
{
	char *joined;

	if (asprintf(&joined, "%s%s%s", o->fuse_opts ? o->fuse_opts : "",
		     o->fuse_opts ? "," : "", opt) < 0)
		return lfs_fail(err, EXIT_FAIL, -ENOMEM, "out of memory");
	free(o->fuse_opts);
	o->fuse_opts = joined;
	return 0;
}

/* One option of -o: passed on, recorded, dropped or refused. */
static int take_fuse_opt(struct mount_opts *o, const char *opt,
			 struct lfs_err *err)
{
	const struct mount_opt *m = find_mount_opt(opt);

	if (!m) {
		/* libfuse wants it both as a mount option and from init(). */
		if (max_read_ok(opt, &o->max_read))
			return pass_to_fuse(o, opt, err);
		if (strncmp(opt, "x-", 2) == 0)
			return 0;
		return usage_error(err, "mount option '%s' is not allowed", opt);
	}
	switch (m->kind) {
	case OPT_FUSE:
		return pass_to_fuse(o, opt, err);
	case OPT_ATIME:
		o->attrs.atime = (unsigned)m->value;
		o->attrs.atime_set = true;
		return 0;
	case OPT_DIRATIME:
		o->attrs.nodiratime = m->value;
		return 0;
	case OPT_LAZYTIME:
		o->attrs.lazytime = m->value;
		return 0;
	case OPT_ALWAYS:
	case OPT_IGNORED:
		return 0;
	}
	return 0;
}

static int add_fuse_opt(struct mount_opts *o, const char *arg,
			struct lfs_err *err)
{
	char *copy = strdup(arg), *save = NULL;
	int r = copy ? 0 : lfs_fail(err, EXIT_FAIL, -ENOMEM, "out of memory");

	for (char *opt = copy ? strtok_r(copy, ",", &save) : NULL; opt && !r;
	     opt = strtok_r(NULL, ",", &save))
		r = take_fuse_opt(o, opt, err);
	free(copy);
	return r;
}

enum { OPT_PLACEMENT = 256, OPT_LEASES, OPT_SESSION, OPT_WAIT, OPT_TTL,
       OPT_METRICS_DIR, OPT_FILES_PER_USER,
       OPT_JSON };

static const struct option mount_longopts[] = {
	{ "placement", required_argument, NULL, OPT_PLACEMENT },
	{ "leases", required_argument, NULL, OPT_LEASES },
	{ "session", required_argument, NULL, OPT_SESSION },
	{ "wait", required_argument, NULL, OPT_WAIT },
	{ "ttl", required_argument, NULL, OPT_TTL },
	{ "metrics-dir", required_argument, NULL, OPT_METRICS_DIR },
	{ "files-per-user", required_argument, NULL, OPT_FILES_PER_USER },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static int parse_mount_opt(struct mount_opts *o, int c, struct lfs_err *err)
{
	switch (c) {
	case OPT_PLACEMENT:
		if (placement_parse(optarg, &o->placement) < 0)
			return usage_error(err, "bad --placement '%s' (expected "
					   "exclusive, session or shared)", optarg);
		return 0;
	case OPT_LEASES: o->leases = optarg; return 0;
	case OPT_SESSION:
		if (!lease_uuid_valid(optarg))
			return usage_error(err, "bad --session '%s' (expected a "
					   "lowercase UUID)", optarg);
		o->session = optarg;
		return 0;
	case OPT_WAIT:
		if (parse_seconds(optarg, &o->wait_s) < 0)
			return usage_error(err, "bad --wait '%s' (expected seconds)",
					   optarg);
		return 0;
	case OPT_TTL:
		if (parse_seconds(optarg, &o->ttl_s) < 0 || o->ttl_s < 1)
			return usage_error(err, "bad --ttl '%s' (expected seconds >= 1)",
					   optarg);
		return 0;
	case OPT_METRICS_DIR: {
		struct stat st;

		if (stat(optarg, &st) < 0 || !S_ISDIR(st.st_mode) ||
		    optarg[0] != '/' || !realpath(optarg, o->metrics_canon))
			return usage_error(err, "bad --metrics-dir '%s' (expected "
					   "an existing absolute directory)", optarg);
		o->metrics_dir = o->metrics_canon;
		return 0;
	}
	case OPT_FILES_PER_USER: {
		char *end;

		errno = 0;
		o->files_per_user = strtol(optarg, &end, 10);
		if (errno || end == optarg || *end || o->files_per_user < 1)
			return usage_error(err, "bad --files-per-user '%s' "
					   "(expected a count >= 1)", optarg);
		return 0;
	}
	case 'o': return add_fuse_opt(o, optarg, err);
	case 'f': o->foreground = true; return 0;
	case 'd': o->debug = o->foreground = true; return 0;
	default: return usage_error(err, "%s", "bad option");
	}
}

/*
 * A mount point that answers ENOTCONN is a crashed daemon's; so is one
 * that answers ECONNABORTED (the connection was torn down while the
 * request waited) or ECANCELED (FUSE over io_uring: the request reached a
 * queue whose daemon had died).  On io_uring the kernel ends a dead
 * daemon's queues asynchronously, a few ms after the process is gone, and
 * answers those two meanwhile.  Asked with
 * statfs, which FUSE never answers from a cache (stat may be served from
 * cached attributes for as long as the attribute timeout).
 */
static bool is_stale_mount(const char *path)
{
	struct statfs sf;

	return statfs(path, &sf) < 0 &&
	       (errno == ENOTCONN || errno == ECONNABORTED || errno == ECANCELED);
}

/* Detach a crashed daemon's mount on `path`; 0 if there is none. */
static int clean_stale_mount(const char *path)
{
	if (!is_stale_mount(path))
		return 0;
	fprintf(stderr, "leasefs: %s is a stale mount (daemon gone); "
		"detaching it\n", path);
	if (umount2(path, MNT_DETACH) < 0)
		return -errno;
	return 0;
}

/* Kernel pseudo filesystems: never a workspace. */
static bool is_pseudo_fs(const char *path)
{
	static const unsigned long magic[] = {
		PROC_SUPER_MAGIC, SYSFS_MAGIC, CGROUP_SUPER_MAGIC,
		CGROUP2_SUPER_MAGIC, DEVPTS_SUPER_MAGIC, SECURITYFS_MAGIC,
		DEBUGFS_MAGIC, TRACEFS_MAGIC, BPF_FS_MAGIC, 0x65735543 /* fusectl */,
		0x62656570 /* configfs */, PSTOREFS_MAGIC, EFIVARFS_MAGIC, SELINUX_MAGIC,
		BINFMTFS_MAGIC, NSFS_MAGIC,
	};
	struct statfs sf;

	if (statfs(path, &sf) < 0)
		return false;
	for (size_t i = 0; i < sizeof(magic) / sizeof(magic[0]); i++)
		if ((unsigned long)sf.f_type == magic[i])
			return true;
	return false;
}

static int resolve_paths(struct mount_opts *o, const char *mnt,
			 struct lfs_err *err)
{
	char *reply = NULL;
	struct stat st;
	int r;

	r = clean_stale_mount(mnt);
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "cannot detach stale mount %s: %s; run "
				     "'fusermount3 -uz %s'", mnt, strerror(-r), mnt);
	if (stat(mnt, &st) < 0 || !S_ISDIR(st.st_mode))
		return usage_error(err, "mount point %s is not a directory", mnt);
	if (!realpath(mnt, o->mountpoint))
		return lfs_fail(err, EXIT_FAIL, -errno,
				     "mount point %s: %s", mnt, strerror(errno));
	r = ws_canonical_root(o->root, o->canon_root, sizeof(o->canon_root));
	if (r < 0)
		return lfs_fail(err, EXIT_FAIL, r,
				     "workspace root %s: %s", o->root, strerror(-r));
	if (stat(o->canon_root, &st) < 0 || !S_ISDIR(st.st_mode))
		return usage_error(err, "workspace root %s is not a directory",
				   o->root);
	if (is_pseudo_fs(o->canon_root))
		return usage_error(err, "workspace root %s is on a kernel pseudo "
				   "filesystem", o->canon_root);
	r = control_request(o->mountpoint, "status", &reply);
	free(reply);
	if (r == 0)
		return usage_error(err, "mount point %s is already served by a "
				   "leasefs daemon; unmount it first",
				   o->mountpoint);
	if (ws_path_within(o->mountpoint, o->canon_root) ||
	    ws_path_within(o->canon_root, o->mountpoint))
		return usage_error(err, "mount point and workspace root %s "
				   "overlap", o->canon_root);
	return 0;
}

/*
 * The coordinator refuses a lease directory inside the workspace, but only
 * after the store is open, and opening a file store creates its directory.
 * Refuse it here first, with the same check, so that a refused mount
 * touches nothing in ROOT.  (Session placement serves BASE/<uuid>, not yet
 * known; the coordinator checks it.)
 */
static int check_lease_dir(const struct mount_opts *o, struct lfs_err *err)
{
	struct lease_err le = { 0 };

	if (placement_get(o->placement)->own_dir)
		return 0;
	return lfs_err_from_lease(err, coord_check_lease_dir(o->canon_root,
				  lease_uri_local_dir(o->leases), &le), &le);
}

/* The command line's syntax: options and the two operands. */
static int parse_mount(int argc, char **argv, struct mount_opts *o,
		       struct lfs_err *err)
{
	int c, r;

	o->placement = PLACEMENT_EXCLUSIVE;
	o->leases = default_leases();
	o->attrs.nodiratime = o->attrs.lazytime = -1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+o:fdh", mount_longopts, NULL)) != -1) {
		if (c == 'h' || c == '?')
			return usage_error(err, "%s", "bad arguments to mount");
		r = parse_mount_opt(o, c, err);
		if (r < 0)
			return r;
	}
	if (argc - optind != 2)
		return usage_error(err, "%s", "mount needs ROOT and MOUNTPOINT");
	/* A process-local store cannot make anything exclusive. */
	if (strcmp(o->leases, "mem") == 0 || strncmp(o->leases, "mem:", 4) == 0)
		return usage_error(err, "lease store '%s' is for tests only; a "
				   "mount needs file: or etcd://", o->leases);
	o->root = argv[optind];
	o->mnt_arg = argv[optind + 1];
	return 0;
}

/* What the operands name: refusals here are about the paths, not the
 * syntax, so they come without the usage text. */
static int check_operands(struct mount_opts *o, struct lfs_err *err)
{
	int r = resolve_paths(o, o->mnt_arg, err);

	if (r == 0 && o->metrics_dir &&
	    ws_path_within(o->metrics_dir, o->canon_root))
		return usage_error(err, "--metrics-dir %s is inside the "
				   "workspace root; the daemon never writes "
				   "its root but for its callers", o->metrics_dir);
	return r < 0 ? r : check_lease_dir(o, err);
}

static int cmd_mount(int argc, char **argv)
{
	struct mount_opts o = { 0 };
	struct lfs_err err = { 0 };
	int r = parse_mount(argc, argv, &o, &err), code;

	if (r < 0) {
		fprintf(stderr, "leasefs: %s\n", err.msg);
		if (err.exit == EXIT_USAGE)
			fputs(usage_text, stderr);
		free(o.fuse_opts);
		return lfs_exit_code(r, &err);
	}
	r = check_operands(&o, &err);
	if (r < 0) {
		fprintf(stderr, "leasefs: %s\n", err.msg);
		free(o.fuse_opts);
		return lfs_exit_code(r, &err);
	}
	code = daemon_mount(&o);
	free(o.fuse_opts);
	return code;
}

/* ---- clients ------------------------------------------------------- */

static int canonical_mountpoint(const char *arg, char *out)
{
	if (realpath(arg, out))
		return 0;
	if (errno == ENOTCONN) /* a dead daemon's mount: keep the spelling */
		return snprintf(out, PATH_MAX, "%s", arg) < PATH_MAX ? 0 : -ENAMETOOLONG;
	return -errno;
}

static void print_status_table(const char *json)
{
	struct json_object *obj = json_tokener_parse(json);

	if (!obj) {
		fputs(json, stdout);
		return;
	}
	json_object_object_foreach(obj, key, val)
		printf("%-10s %s\n", key, json_object_get_string(val));
	json_object_put(obj);
}

static int no_daemon(const char *arg, int r)
{
	fprintf(stderr, "leasefs: no leasefs daemon serves %s: %s\n", arg,
		strerror(-r));
	return EXIT_FAIL;
}

static int cmd_status(int argc, char **argv)
{
	char mnt[PATH_MAX], *buf = NULL;
	bool json = false;
	const char *arg = NULL;
	int r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (!arg)
			arg = argv[i];
		else
			arg = NULL, i = argc;
	}
	if (!arg) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	r = canonical_mountpoint(arg, mnt);
	if (r == 0)
		r = control_request(mnt, "status", &buf);
	if (r < 0)
		return no_daemon(arg, r);
	if (json)
		fputs(buf, stdout);
	else
		print_status_table(buf);
	free(buf);
	return EXIT_OK;
}

/* One pushed line: print it; a loss ends the watch. */
static int watch_line(const char *line, void *ud)
{
	json_object *o = json_tokener_parse(line);
	json_object *st = NULL;
	bool lost;

	(void)ud;
	puts(line);
	fflush(stdout);
	lost = o && json_object_object_get_ex(o, "state", &st) &&
	       strcmp(json_object_get_string(st), "lost") == 0;
	json_object_put(o);
	return lost;
}

/* The line for a mount that went away without a loss. */
static void print_gone(const char *mnt)
{
	json_object *o = json_object_new_object();
	char buf[64];

	status_time_now(buf, sizeof(buf));
	json_object_object_add(o, "mountpoint", json_object_new_string(mnt));
	json_object_object_add(o, "state", json_object_new_string("gone"));
	json_object_object_add(o, "time", json_object_new_string(buf));
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	fflush(stdout);
	json_object_put(o);
}

/*
 * leasefs watch MOUNTPOINT: the state now, then each change, as the
 * daemon pushes them (no polling).  Exit 0 on loss, EXIT_GONE when the
 * mount goes away first (umount, daemon killed).
 */
/* `CMD MOUNTPOINT`: the canonical mount point into mnt; 0, or the exit
 * code for a usage error (-1: mnt could not be resolved, r set). */
static int one_mountpoint(int argc, char **argv, char mnt[PATH_MAX], int *r)
{
	if (argc != 2) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	*r = canonical_mountpoint(argv[1], mnt);
	return 0;
}

static int cmd_watch(int argc, char **argv)
{
	char mnt[PATH_MAX];
	int r = 0, code = one_mountpoint(argc, argv, mnt, &r);

	if (code)
		return code;
	if (r == 0)
		r = control_watch(mnt, watch_line, NULL);
	if (r < 0)
		return no_daemon(argv[1], r);
	if (r > 0)
		return EXIT_OK;
	print_gone(mnt);
	return EXIT_GONE;
}

/* leasefs metrics MOUNTPOINT: the Prometheus text exposition. */
static int cmd_metrics(int argc, char **argv)
{
	char mnt[PATH_MAX], *buf = NULL;
	int r = 0, code = one_mountpoint(argc, argv, mnt, &r);

	if (code)
		return code;
	if (r == 0)
		r = control_request(mnt, "metrics", &buf);
	if (r < 0)
		return no_daemon(argv[1], r);
	fputs(buf, stdout);
	free(buf);
	return EXIT_OK;
}

static int cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX];
	int r;

	if (argc != 2) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	r = canonical_mountpoint(argv[1], mnt);
	if (r == 0)
		r = control_umount(mnt, UMOUNT_TIMEOUT_MS);
	/* No daemon serves it, but a crashed one's mount is there: detach. */
	if ((r == -ENOENT || r == -ECONNREFUSED) && is_stale_mount(argv[1]))
		r = clean_stale_mount(argv[1]);
	if (r < 0) {
		fprintf(stderr, "leasefs: cannot unmount %s: %s%s\n", argv[1],
			strerror(-r), r == -ENOENT || r == -ECONNREFUSED ?
			" (no leasefs daemon serves it; for a stale mount run "
			"'fusermount3 -uz' on it)" : "");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int print_info(const struct lease_info *in, void *ud)
{
	(void)ud;
	printf("%-8s epoch %-6" PRIu64 " pid %-7d %s  %s\n",
	       lease_state_str(in->state), in->epoch, (int)in->holder_pid,
	       in->name, in->holder);
	return 0;
}

/* Revoke, then wait for the holder to be fenced; 1 if it was not. */
static int revoke_and_wait(struct lease_store *st, const char *name,
			   double timeout_s, struct lease_err *err)
{
	enum lease_fence fence;
	int r = lease_revoke(st, name, lease_deadline_ms((int64_t)(timeout_s * 1000)),
			     &fence, err);

	if (r < 0)
		return r;
	switch (fence) {
	case LEASE_FENCE_ACKED:
		printf("revoked %s: the holder acknowledged (drained and "
		       "released); a successor may acquire it now\n", name);
		return 0;
	case LEASE_FENCE_EXPIRED:
		printf("revoked %s: the holder did not answer, but its TTL has "
		       "run out, so it cannot write any more; a successor may "
		       "acquire it now\n", name);
		return 0;
	case LEASE_FENCE_PENDING:
		break;
	}
	fprintf(stderr, "leasefs: revoked %s, but the holder has not "
		"acknowledged within %.0f s (stopped, or stuck in a write); no "
		"successor can acquire it until it does, its TTL runs out or it "
		"exits\n", name, timeout_s);
	return 1;
}

static int lease_op(struct lease_store *st, const char *verb,
		    const char *name, double timeout_s, struct lease_err *err)
{
	struct lease_info info = { 0 };
	int r;

	if (strcmp(verb, "list") == 0)
		return lease_list(st, print_info, NULL, err);
	if (strcmp(verb, "show") == 0) {
		r = lease_show(st, name, &info, err);
		if (r == 0)
			printf("name:  %s\nepoch: %" PRIu64 "\nstate: %s\npid:   %d\n"
			       "holder: %s\n", info.name, info.epoch,
			       lease_state_str(info.state), (int)info.holder_pid,
			       info.holder);
		return r;
	}
	return revoke_and_wait(st, name, timeout_s, err);
}

static int cmd_lease(int argc, char **argv)
{
	const char *uri = default_leases(), *verb = NULL, *name = NULL;
	struct lease_err le = { 0 };
	struct lfs_err err = { 0 };
	struct lease_store *st = NULL;
	double timeout_s = REVOKE_TIMEOUT_S;
	int r, npos = 0;

	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--leases=", 9) == 0)
			uri = argv[i] + 9;
		else if (strncmp(argv[i], "--timeout=", 10) == 0 &&
			 parse_seconds(argv[i] + 10, &timeout_s) == 0)
			continue;
		else if (npos == 0 && ++npos)
			verb = argv[i];
		else if (npos == 1 && ++npos)
			name = argv[i];
		else
			npos = 99;
	}
	if (!verb || npos > 2 ||
	    !(strcmp(verb, "list") == 0 ? !name :
	      (strcmp(verb, "show") == 0 || strcmp(verb, "revoke") == 0) && name)) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	r = lease_store_open(uri, NULL, &st, &le);
	if (r == 0)
		r = lease_op(st, verb, name, timeout_s, &le);
	if (lfs_err_from_lease(&err, r, &le) < 0)
		fprintf(stderr, "leasefs: lease %s: %s\n", verb, err.msg);
	lease_store_close(st);
	return r > 0 ? EXIT_UNFENCED : lfs_exit_code(r, &err);
}

/* leasefs's own keys inside -o (the mount(8)/fstab form). */
static const char *const own_keys[] = {
	"leases", "placement", "session", "wait", "ttl", "metrics-dir",
	"files-per-user", NULL,
};

/* "key=value" with one of own_keys: the key's length, else 0. */
static size_t own_key(const char *opt)
{
	const char *eq = strchr(opt, '=');

	for (size_t i = 0; eq && own_keys[i]; i++)
		if ((size_t)(eq - opt) == strlen(own_keys[i]) &&
		    strncmp(opt, own_keys[i], (size_t)(eq - opt)) == 0)
			return (size_t)(eq - opt);
	return 0;
}

/* A growing argument vector; `owned` are the strings it must free. */
struct argv_buf {
	char **v;
	size_t n, cap;
	char **owned;
	size_t nowned, capowned;
};

static int grow(void ***p, size_t *cap, size_t need, size_t elem)
{
	void **q;
	size_t c = *cap ? *cap : 8;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* Append arg (borrowed); 0 or -ENOMEM. */
static int argv_add(struct argv_buf *a, char *arg)
{
	if (grow((void ***)&a->v, &a->cap, a->n + 2, sizeof(*a->v)) < 0)
		return -ENOMEM;
	a->v[a->n++] = arg;
	a->v[a->n] = NULL;
	return 0;
}

/* Take ownership of arg, freed with the vector (NULL: out of memory). */
static int argv_own(struct argv_buf *a, char *arg)
{
	if (!arg || grow((void ***)&a->owned, &a->capowned, a->nowned + 1,
			 sizeof(*a->owned)) < 0) {
		free(arg);
		return -ENOMEM;
	}
	a->owned[a->nowned++] = arg;
	return 0;
}

/* Append arg and take ownership of it. */
static int argv_add_owned(struct argv_buf *a, char *arg)
{
	int r = argv_own(a, arg);

	return r < 0 ? r : argv_add(a, arg);
}

static void argv_free(struct argv_buf *a)
{
	for (size_t i = 0; i < a->nowned; i++)
		free(a->owned[i]);
	free(a->owned);
	free(a->v);
}

/* One option from inside -o: leasefs's own key becomes --KEY=VALUE ('+'
 * joins etcd endpoints there), anything else stays a -o option. */
static int fstab_opt(struct argv_buf *a, char *opt)
{
	char *arg;

	if (!own_key(opt)) {
		int r = argv_add(a, "-o");

		return r < 0 ? r : argv_add(a, opt);
	}
	if (asprintf(&arg, "--%s", opt) < 0)
		return -ENOMEM;
	if (strncmp(opt, "leases=", 7) == 0)
		for (char *p = arg; *p; p++)
			if (*p == '+')
				*p = ',';
	return argv_add_owned(a, arg);
}

/*
 * The form mount(8) uses through mount.fuse3 (fstab, mount -t fuse.leasefs):
 *   leasefs ROOT MOUNTPOINT -o OPT[,OPT...] ...
 * turned into `leasefs mount --KEY=VALUE... -o OTHER ROOT MOUNTPOINT`, so
 * that one parser checks both forms.  Inside -o, ',' separates options, so
 * several etcd endpoints are written with '+' (leases=etcd://a:1+b:2).
 * Any number of options of any length.
 */
static int cmd_mount_fstab(int argc, char **argv)
{
	struct argv_buf a = { 0 };
	int r = argv_add(&a, "mount"), code = EXIT_FAIL;

	for (int i = 3; i < argc && r == 0; i++) {
		char *copy, *save = NULL;

		if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc) {
			fprintf(stderr, "leasefs: '%s': after ROOT MOUNTPOINT only "
				"-o OPTIONS may follow\n", argv[i]);
			argv_free(&a);
			return EXIT_USAGE;
		}
		copy = strdup(argv[++i]);
		r = argv_own(&a, copy); /* its pieces are the arguments */
		for (char *o = r ? NULL : strtok_r(copy, ",", &save); o && !r;
		     o = strtok_r(NULL, ",", &save))
			r = fstab_opt(&a, o);
	}
	if (r == 0)
		r = argv_add(&a, argv[1]);
	if (r == 0)
		r = argv_add(&a, argv[2]);
	if (r == 0)
		code = cmd_mount((int)a.n, a.v);
	else
		fprintf(stderr, "leasefs: out of memory\n");
	argv_free(&a);
	return code;
}

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the command */
} commands[] = {
	{ "mount", cmd_mount },
	{ "status", cmd_status },
	{ "umount", cmd_umount },
	{ "watch", cmd_watch },
	{ "metrics", cmd_metrics },
	{ "lease", cmd_lease },
};

int main(int argc, char **argv)
{
	for (size_t i = 0; argc >= 2 && i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	if (argc >= 3 && argv[1][0] != '-')
		return cmd_mount_fstab(argc, argv);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
			  strcmp(argv[1], "-h") == 0)) {
		fputs(usage_text, stdout);
		return EXIT_OK;
	}
	fputs(usage_text, stderr);
	return EXIT_USAGE;
}

/* SPDX-License-Identifier: MIT */
/*
 * The command line: the one parser of mount options, `leasefs mount`'s
 * --options and -o (fstab.c rewrites mount(8)'s form into them).
 * (The commands: main.c; shared: cli.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/mount.h>

#include "cli.h"
#include "log.h"

int usage_error(struct lfs_err *err, const char *fmt, const char *arg)
{
	return lfs_fail(err, EXIT_USAGE, -EINVAL, fmt, arg ? arg : "");
}

/* $XDG_STATE_HOME, else ~/.local/state (the XDG base directories). */
static int user_state_dir(char *out, size_t sz)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	struct passwd *pw;

	if (xdg && xdg[0] == '/')
		return (size_t)snprintf(out, sz, "%s", xdg) < sz ? 0 : -ENAMETOOLONG;
	if (!home || home[0] != '/') {
		pw = getpwuid(getuid());
		home = pw ? pw->pw_dir : NULL;
	}
	if (!home || home[0] != '/')
		return -ENOENT;
	return (size_t)snprintf(out, sz, "%s/.local/state", home) < sz ? 0 : -ENAMETOOLONG;
}

/* mkdir -p, 0700 for what it creates. */
static void mkdir_parents(char *path)
{
	for (char *p = strchr(path + 1, '/'); ; p = strchr(p + 1, '/')) {
		if (p)
			*p = '\0';
		(void)mkdir(path, 0700);
		if (!p)
			return;
		*p = '/';
	}
}

/* Root's store is the host's (LEASE_FILE_DEFAULT_DIR); a user's is its
 * own, persistent like root's (epochs are never reset, so not under
 * $XDG_RUNTIME_DIR, which goes at logout). */
const char *default_leases(void)
{
	static char user_uri[PATH_MAX + 8];
	const char *env = getenv("LEASEFS_LEASES");
	char dir[PATH_MAX - 32];

	if (env && *env)
		return env;
	if (getuid() == 0)
		return "file:" LEASE_FILE_DEFAULT_DIR;
	if (!user_uri[0] && user_state_dir(dir, sizeof(dir)) == 0) {
		snprintf(user_uri, sizeof(user_uri), "file:%s/leasefs/leases", dir);
		mkdir_parents(user_uri + 5);
	}
	/* No home to keep it in: root's, which refuses the user plainly. */
	return user_uri[0] ? user_uri : "file:" LEASE_FILE_DEFAULT_DIR;
}

int absolute_store_uri(const char *uri, char *out, size_t sz)
{
	static const char *const local[] = { "file:", "fsstore:" };
	char cwd[PATH_MAX];

	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
		size_t n = strlen(local[i]);

		if (strncmp(uri, local[i], n) != 0 || uri[n] == '/' || !uri[n])
			continue;
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		return (size_t)snprintf(out, sz, "%s%s/%s", local[i],
					strcmp(cwd, "/") == 0 ? "" : cwd,
					uri + n) < sz ? 0 : -ENAMETOOLONG;
	}
	return (size_t)snprintf(out, sz, "%s", uri) < sz ? 0 : -ENAMETOOLONG;
}

/* ---- mount options ------------------------------------------------ */


int parse_seconds(const char *s, double *out)
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
 * setuid program or a device).  A mount by a user other than root is the
 * user's alone unless it asks for allow_other (as sshfs's is).  "suid" and "dev", which mount(8) adds from
 * fstab's "defaults", are ignored.  The atime family is applied by leasefs
 * itself once mounted (libfuse 3.14 knows only noatime).
 */
enum opt_kind {
	OPT_FUSE,     /* passed to libfuse */
	OPT_ALWAYS,   /* always on; accepted, nothing to do */
	OPT_ALLOW_OTHER, /* root's mounts: always; a user's: asked for */
	OPT_IGNORED,  /* what mount(8) adds from fstab */
	OPT_ATIME,    /* the mount's atime mode (last one wins) */
	OPT_DIRATIME, /* nodiratime / diratime */
	OPT_LAZYTIME, /* the superblock's lazytime */
	OPT_STACKED,  /* allow_stacked_root: --allow-stacked-root */
	OPT_PASSTHROUGH, /* passthrough / nopassthrough (last one wins) */
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
	{ "allow_other", OPT_ALLOW_OTHER, 0 }, { "default_permissions", OPT_ALWAYS, 0 },
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
	{ "allow_stacked_root", OPT_STACKED, 1 },
	{ "passthrough", OPT_PASSTHROUGH, 1 },
	{ "nopassthrough", OPT_PASSTHROUGH, 0 },
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
	case OPT_ALLOW_OTHER:
		o->allow_other = true;
		return 0;
	case OPT_STACKED:
		o->allow_stacked_root = true;
		return 0;
	case OPT_PASSTHROUGH:
		o->passthrough = m->value;
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
       OPT_METRICS_DIR, OPT_FILES_PER_USER, OPT_OWNER, OPT_LOG_LEVEL,
       OPT_ALLOW_STACKED_ROOT };

/*
 * `leasefs mount`'s options: the one table.  getopt's tables, the keys
 * mount(8)'s form takes inside -o (mount_own_key) and `leasefs mount
 * --help` are all made from it, and test_cli_conventions.sh checks
 * leasefs(8)'s OPTIONS and MOUNT OPTIONS against that --help.
 */
static const struct cli_option {
	const char *name;  /* long name, NULL: a short option only */
	int val;           /* the short option, or OPT_* */
	const char *arg;   /* its value's name, NULL: takes none */
	const char *help;
} mount_options[] = {
	{ "placement", OPT_PLACEMENT, "PLACEMENT",
	  "exclusive (default): takes the root lease;\n"
	  "session: serves ROOT/UUID, no root lease;\n"
	  "shared: no root lease, never read-only;\n"
	  "observer: a read-only view that keeps no\n"
	  "writer out" },
	{ "leases", OPT_LEASES, "URI",
	  "the lease store: file:DIR, fsstore:DIR,\n"
	  "etcd://, etcds://, postgresql://, postgres://,\n"
	  "nats://, nats+tls:// (default: $LEASEFS_LEASES,\n"
	  "else the file store)" },
	{ "session", OPT_SESSION, "UUID", "the session id (default: random)" },
	{ "wait", OPT_WAIT, "SECONDS",
	  "keep trying while the root is busy or the\n"
	  "store unreachable" },
	{ "ttl", OPT_TTL, "SECONDS",
	  "the lease TTL on a store with TTLs (etcd,\n"
	  "postgresql, nats)" },
	{ "metrics-dir", OPT_METRICS_DIR, "DIR",
	  "also write the metrics to DIR/leasefs-HASH.prom" },
	{ "files-per-user", OPT_FILES_PER_USER, "N",
	  "files one caller uid may have open" },
	{ "owner", OPT_OWNER, "USER[:GROUP]",
	  "who may status, watch, metrics and umount it\n"
	  "besides root" },
	{ "log-level", OPT_LOG_LEVEL, "LEVEL",
	  "error, warning, notice, info (default) or debug" },
	{ "allow-stacked-root", OPT_ALLOW_STACKED_ROOT, NULL,
	  "serve a ROOT on another FUSE filesystem or on\n"
	  "overlayfs; leasefs cannot see through it: who\n"
	  "writes the files behind the layer never meets\n"
	  "this lease (a ROOT on leasefs: always 75)" },
	{ NULL, 'o', "OPT[,OPT...]", "mount options (below)" },
	{ NULL, 'f', NULL, "stay in the foreground, messages to stderr" },
	{ NULL, 'd', NULL, "FUSE debug output (implies -f)" },
};

#define NMOUNT_OPTIONS (sizeof(mount_options) / sizeof(mount_options[0]))

/* getopt's view of the table (':' first: a missing value is told from an
 * unknown option; options may follow the operands, as GNU getopt has it,
 * and "--" ends them). */
static void getopt_tables(struct option *lo, char *so)
{
	size_t n = 0;

	*so++ = ':';
	for (size_t i = 0; i < NMOUNT_OPTIONS; i++) {
		const struct cli_option *c = &mount_options[i];

		if (c->name)
			lo[n++] = (struct option){ c->name, c->arg ? required_argument
								   : no_argument,
						   NULL, c->val };
		if (!c->name) {
			*so++ = (char)c->val;
			if (c->arg)
				*so++ = ':';
		}
	}
	lo[n] = (struct option){ 0 };
	*so = '\0';
}

void print_mount_options(FILE *f)
{
	fputs("Options:\n", f);
	for (size_t i = 0; i < NMOUNT_OPTIONS; i++) {
		const struct cli_option *c = &mount_options[i];
		char head[64];
		const char *h = c->help;

		if (c->name)
			snprintf(head, sizeof(head), "--%s%s%s", c->name,
				 c->arg ? "=" : "", c->arg ? c->arg : "");
		else
			snprintf(head, sizeof(head), "-%c%s%s", c->val,
				 c->arg ? " " : "", c->arg ? c->arg : "");
		for (bool first = true; *h; first = false) {
			size_t n = strcspn(h, "\n");

			fprintf(f, "  %-22s %.*s\n", first ? head : "", (int)n, h);
			h += n + (h[n] == '\n');
		}
	}
	fputs("\nMount options (-o), besides the KEY=VALUE form of each option above\n"
	      "that takes a value ('_' may stand for '-' in KEY):\n ", f);
	for (size_t i = 0, col = 1; i < sizeof(mount_opt_table) / sizeof(mount_opt_table[0]); i++) {
		const char *name = mount_opt_table[i].name;

		if (col + strlen(name) + 2 > 78) {
			fputs("\n ", f);
			col = 1;
		}
		col += (size_t)fprintf(f, " %s", name);
	}
	fputs(" max_read=N x-*\n", f);
}

/* A user or group by name or number: 0, or -ENOENT. */
static int user_id(const char *s, uid_t *out)
{
	struct passwd *pw = getpwnam(s);
	char *end;
	unsigned long v;

	if (pw) {
		*out = pw->pw_uid;
		return 0;
	}
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || (uid_t)v != v)
		return -ENOENT;
	*out = (uid_t)v;
	return 0;
}

static int group_id(const char *s, gid_t *out)
{
	struct group *gr = getgrnam(s);
	char *end;
	unsigned long v;

	if (gr) {
		*out = gr->gr_gid;
		return 0;
	}
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || (gid_t)v != v)
		return -ENOENT;
	*out = (gid_t)v;
	return 0;
}

/* --owner=USER[:GROUP]: root may name anyone; a user only itself. */
static int owner_opt(struct mount_opts *o, const char *arg, struct lfs_err *err)
{
	char user[256];
	const char *colon = strchr(arg, ':');

	snprintf(user, sizeof(user), "%.*s", colon ? (int)(colon - arg) : (int)strlen(arg),
		 arg);
	if (user_id(user, &o->owner_uid) < 0)
		return usage_error(err, "bad --owner '%s' (no such user)", arg);
	if (colon && group_id(colon + 1, &o->owner_gid) < 0)
		return usage_error(err, "bad --owner '%s' (no such group)", arg);
	o->owner_group = colon != NULL;
	if (getuid() != 0 && o->owner_uid != getuid())
		return lfs_fail(err, EXIT_DENIED, -EPERM, "--owner=%s: only root "
				"may make a mount someone else's", arg);
	return 0;
}

static int parse_mount_opt(struct mount_opts *o, int c, struct lfs_err *err)
{
	switch (c) {
	case OPT_PLACEMENT:
		if (placement_parse(optarg, &o->placement) < 0)
			return usage_error(err, "bad --placement '%s' (expected "
					   "exclusive, session, shared or observer)",
					   optarg);
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
	case OPT_OWNER: return owner_opt(o, optarg, err);
	case OPT_LOG_LEVEL:
		o->log_level = log_parse_level(optarg);
		if (o->log_level < 0)
			return usage_error(err, "bad --log-level '%s' (expected "
					   "error, warning, notice, info or debug)",
					   optarg);
		return 0;
	case OPT_ALLOW_STACKED_ROOT: o->allow_stacked_root = true; return 0;
	case 'o': return add_fuse_opt(o, optarg, err);
	case 'f': o->foreground = true; return 0;
	case 'd': o->debug = o->foreground = true; return 0;
	default: return usage_error(err, "%s", "bad option");
	}
}

/* Whether `val` is a long option's (getopt's optopt for a long option
 * given a value it takes none of). */
static bool lo_has_val(const struct option *lo, int val)
{
	for (; lo->name; lo++)
		if (lo->val == val)
			return true;
	return false;
}

/* The command line's syntax: options and the two operands. */
int parse_mount(int argc, char **argv, struct mount_opts *o,
		       struct lfs_err *err)
{
	struct option lo[NMOUNT_OPTIONS + 1];
	char so[2 * NMOUNT_OPTIONS + 2];
	int c, r;

	getopt_tables(lo, so);
	o->owner_uid = getuid();
	o->owner_gid = getgid();
	o->placement = PLACEMENT_EXCLUSIVE;
	o->leases = default_leases();
	o->log_level = LOG_INFO;
	o->attrs.nodiratime = o->attrs.lazytime = -1;
	o->passthrough = -1;
	optind = 1;
	opterr = 0; /* its messages would begin "mount:" */
	while ((c = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		if (c == ':')
			return usage_error(err, "option '%s' requires a value",
					   argv[optind - 1]);
		if (c == '?' && optopt && !lo_has_val(lo, optopt))
			return lfs_fail(err, EXIT_USAGE, -EINVAL,
					"invalid option -- '%c'", optopt);
		if (c == '?')
			return usage_error(err, "unrecognized option '%s'",
					   argv[optind - 1]);
		r = parse_mount_opt(o, c, err);
		if (r < 0)
			return r;
	}
	if (argc - optind != 2)
		return usage_error(err, "%s", argc - optind < 2 ?
				   "ROOT and MOUNTPOINT are needed" :
				   "too many operands (ROOT and MOUNTPOINT are needed)");
	if (absolute_store_uri(o->leases, o->leases_abs, sizeof(o->leases_abs)) < 0)
		return usage_error(err, "--leases '%s': name too long", o->leases);
	o->leases = o->leases_abs;
	/* A process-local store cannot make anything exclusive. */
	if (strcmp(o->leases, "mem") == 0 || strncmp(o->leases, "mem:", 4) == 0)
		return usage_error(err, "lease store '%s' is for tests only; a "
				   "mount needs a shared store (file:, fsstore:, "
				   "etcd://, postgresql://, nats://)", o->leases);
	o->root = argv[optind];
	o->mnt_arg = argv[optind + 1];
	return 0;
}

/* Whether `key` (n bytes) spells `name`, a '_' standing for a '-' (mount
 * options are spelled with '_': log_level=, metrics_dir=). */
static bool key_is(const char *key, size_t n, const char *name)
{
	if (strlen(name) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((key[i] == '_' ? '-' : key[i]) != name[i])
			return false;
	return true;
}

/* "key=value" with the key one of mount's long options that takes a value
 * (leasefs's own keys inside -o, the mount(8)/fstab form): the key's
 * length, else 0. */
size_t mount_own_key(const char *opt)
{
	const char *eq = strchr(opt, '=');

	for (size_t i = 0; eq && i < NMOUNT_OPTIONS; i++)
		if (mount_options[i].name && mount_options[i].arg &&
		    key_is(opt, (size_t)(eq - opt), mount_options[i].name))
			return (size_t)(eq - opt);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * The command line: `leasefs mount`. The operands checked (paths, the
 * lease directory, a stale mount on the mount point), then the daemon.
 * (The commands: main.c; shared: cli.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>

#include <json-c/json.h>

#include "cli.h"

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
bool is_stale_mount(const char *path)
{
	struct statfs sf;

	return statfs(path, &sf) < 0 &&
	       (errno == ENOTCONN || errno == ECONNABORTED || errno == ECANCELED);
}

/*
 * Root detaches exactly the mount `path` names now: the path is walked
 * once with no symbolic link followed (a user who owns a component of it
 * cannot swap in a link to another mount), the mount is pinned by that
 * fd, and umount2() is given the fd's magic link, which names the pinned
 * mount and nothing else.
 */
static int detach_pinned(const char *path)
{
	char proc[64];
	int fd = lease_open_canonical_dir(path, O_PATH), r;

	if (fd < 0)
		return fd;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	r = umount2(proc, MNT_DETACH) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Detach the mount on `path`: root itself, a user through fusermount3
 * (which lets a user detach only its own mounts). */
static int detach(const char *path)
{
	char *argv[] = { "fusermount3", "-uz", "--", (char *)path, NULL };
	int status;
	pid_t pid;

	if (geteuid() == 0)
		return detach_pinned(path);
	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) != 0)
		return -ENOENT;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

/* Detach a crashed daemon's mount on `path`; 0 if there is none. */
int clean_stale_mount(const char *path)
{
	if (!is_stale_mount(path))
		return 0;
	fprintf(stderr, "leasefs: %s is a stale mount (daemon gone); "
		"detaching it\n", path);
	return detach(path);
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

/* " (pid P, ROOT)" of the daemon serving `mnt`, from its status; "" if
 * it does not say.  The buffer is static (one message at a time). */
static const char *served_by(const char *mnt)
{
	static char buf[PATH_MAX + 64];
	char *reply = NULL;
	struct json_object *o = NULL, *pid, *root;

	buf[0] = '\0';
	if (control_request(mnt, "status", &reply) == 0)
		o = json_tokener_parse(reply);
	if (o && json_object_object_get_ex(o, "pid", &pid) &&
	    json_object_object_get_ex(o, "root", &root))
		snprintf(buf, sizeof(buf), " (pid %d, root %s)",
			 json_object_get_int(pid), json_object_get_string(root));
	json_object_put(o);
	free(reply);
	return buf;
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
				     "'umount -l %s' (root) or 'fusermount3 -uz %s'",
				     mnt, strerror(-r), mnt, mnt);
	if (stat(mnt, &st) < 0)
		return usage_error(err, errno == ENOENT ? "mount point %s does "
				   "not exist" : "mount point %s: cannot stat it", mnt);
	if (!S_ISDIR(st.st_mode))
		return usage_error(err, "mount point %s is not a directory", mnt);
	if (!realpath(mnt, o->mountpoint))
		return lfs_fail(err, EXIT_FAIL, -errno,
				     "mount point %s: %s", mnt, strerror(errno));
	r = ws_canonical_root(o->root, o->canon_root, sizeof(o->canon_root));
	if (r == -ENOENT)
		return usage_error(err, "workspace root %s does not exist", o->root);
	if (r < 0)
		return lfs_fail(err, r == -EACCES ? EXIT_DENIED : EXIT_FAIL, r,
				     "workspace root %s: %s", o->root, strerror(-r));
	if (stat(o->canon_root, &st) < 0 && errno == ENOENT)
		return usage_error(err, "workspace root %s does not exist", o->root);
	if (stat(o->canon_root, &st) < 0 || !S_ISDIR(st.st_mode))
		return usage_error(err, "workspace root %s is not a directory",
				   o->root);
	if (is_pseudo_fs(o->canon_root))
		return usage_error(err, "workspace root %s is on a kernel pseudo "
				   "filesystem", o->canon_root);
	r = check_stacked_root(o, err);
	if (r < 0)
		return r;
	r = control_request(o->mountpoint, "status", &reply);
	free(reply);
	if (r == 0)
		return lfs_fail(err, EXIT_BUSY, -EBUSY, "mount point %s is busy: "
				"a leasefs daemon serves it%s; unmount it first",
				o->mountpoint, served_by(o->mountpoint));
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

/* ---- a mount by a user other than root -------------------------------- */

/* `path` is a setuid-root executable. */
static bool setuid_root(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
	       (st.st_mode & S_ISUID) && access(path, X_OK) == 0;
}

/* The helper libfuse mounts through for a user: it looks in /usr/bin,
 * then in $PATH. */
static bool have_fusermount(void)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL;
	bool found = setuid_root("/usr/bin/fusermount3");

	copy = !found && path ? strdup(path) : NULL;
	for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		char p[PATH_MAX];

		found = (size_t)snprintf(p, sizeof(p), "%s/fusermount3", dir) < sizeof(p) &&
			setuid_root(p);
	}
	free(copy);
	return found;
}

/* /etc/fuse.conf has a line "user_allow_other". */
static bool fuse_conf_allows_other(void)
{
	FILE *f = fopen("/etc/fuse.conf", "re");
	char line[256];
	bool yes = false;

	while (f && !yes && fgets(line, sizeof(line), f)) {
		line[strcspn(line, " \t\n#")] = '\0';
		yes = strcmp(line, "user_allow_other") == 0;
	}
	if (f)
		fclose(f);
	return yes;
}

/*
 * A user mounts only a root it may read and write (so that no user can
 * lease, and keep others from, a root it could not use), through
 * fusermount3 on /dev/fuse, and lets others in only where root allowed it.
 * Checked before any lease is taken.
 */
static int check_user_mount(const struct mount_opts *o, struct lfs_err *err)
{
	int fd;

	bool writes = placement_get(o->placement)->writes;

	if (getuid() == 0)
		return 0;
	/* An observer keeps nobody out: reading the root is enough. */
	if (access(o->canon_root, writes ? R_OK | W_OK | X_OK : R_OK | X_OK) < 0)
		return lfs_fail(err, EXIT_DENIED, -errno, "workspace root %s: %s "
				"(a user mounts only a root it may read%s)",
				o->canon_root, strerror(errno),
				writes ? " and write" : "");
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == EACCES)
		return lfs_fail(err, EXIT_UNAVAILABLE, -EACCES, "cannot open "
				"/dev/fuse: %s (users may not open it on this "
				"host; it is 0666 where udev makes it)",
				strerror(EACCES));
	if (fd < 0)
		return lfs_fail(err, EXIT_UNAVAILABLE, -errno, "cannot open "
				"/dev/fuse: %s (the fuse module is not loaded, or "
				"a container was started without /dev/fuse)",
				strerror(errno));
	close(fd);
	if (!have_fusermount())
		return lfs_fail(err, EXIT_UNAVAILABLE, -ENOENT, "no setuid-root "
				"fusermount3 in /usr/bin or $PATH: a user's mount "
				"is made through it (Debian: apt install fuse3)");
	if (o->allow_other && !fuse_conf_allows_other())
		return lfs_fail(err, EXIT_DENIED, -EPERM, "-o allow_other: "
				"/etc/fuse.conf does not say user_allow_other, so "
				"only root may let other users into a mount");
	return 0;
}

/* What the operands name: refusals here are about the paths, not the
 * syntax, so they come without the usage text. */
static int check_operands(struct mount_opts *o, struct lfs_err *err)
{
	int r = resolve_paths(o, o->mnt_arg, err);

	if (r == 0)
		r = check_user_mount(o, err);
	if (r == 0 && o->metrics_dir &&
	    ws_path_within(o->metrics_dir, o->canon_root))
		return usage_error(err, "--metrics-dir %s is inside the "
				   "workspace root; the daemon never writes "
				   "its root but for its callers", o->metrics_dir);
	return r < 0 ? r : check_lease_dir(o, err);
}

int cmd_mount(int argc, char **argv)
{
	struct mount_opts o = { 0 };
	struct lfs_err err = { 0 };
	int r = parse_mount(argc, argv, &o, &err), code;

	if (r < 0) {
		free(o.fuse_opts);
		if (err.exit == EXIT_USAGE)
			return cli_usage_error("mount", "%s", err.msg);
		fprintf(stderr, "leasefs mount: %s\n", err.msg);
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

/* SPDX-License-Identifier: MIT */
/*
 * The command line: `leasefs lease`, the operator's commands on a
 * lease store: list, show, revoke.
 * (The commands: main.c; shared: cli.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* lease revoke: how long to wait for the holder to be fenced; covers the
 * default etcd TTL (15 s) plus its fence margin. */
#define REVOKE_TIMEOUT_S 30.0
/* lease list as root: how long one user's store may take to be listed
 * (it is read as its owner, who can make it slow, never hang root). */
#define USER_STORE_TIMEOUT_S 5

#include <json-c/json.h>

#include "cli.h"

static int print_info(const struct lease_info *in, void *ud)
{
	(void)ud;
	printf("%-8s epoch %-6" PRIu64 " pid %-7d %s  %s\n",
	       lease_state_str(in->state), in->epoch, (int)in->holder_pid,
	       in->name, in->holder);
	return 0;
}

/* Revoke, then wait for the holder to be fenced; 1 if it was not. */
static int revoke_and_wait(struct lease_store *st, const char *uri,
			   const char *name, double timeout_s,
			   struct lease_err *err)
{
	enum lease_fence fence;
	int r = lease_revoke(st, name, lease_deadline_ms((int64_t)(timeout_s * 1000)),
			     &fence, err);

	if (r < 0)
		return r;
	switch (fence) {
	case LEASE_FENCE_ACKED:
		printf("revoked %s in %s: the holder acknowledged (drained and "
		       "released); a successor may acquire it now\n", name, uri);
		return 0;
	case LEASE_FENCE_EXPIRED:
		printf("revoked %s in %s: the holder did not answer, but its TTL "
		       "has run out, so it cannot write any more; a successor "
		       "may acquire it now\n", name, uri);
		return 0;
	case LEASE_FENCE_SUCCEEDED:
		printf("revoked %s in %s: a successor holds it already, granted "
		       "after the holder released or its TTL ran out\n", name, uri);
		return 0;
	case LEASE_FENCE_PENDING:
		break;
	}
	if (err->msg[0])
		fprintf(stderr, "leasefs lease revoke: revoked %s in %s, but %s\n",
			name, uri, err->msg);
	else
		fprintf(stderr, "leasefs lease revoke: revoked %s in %s, but the "
			"holder has not acknowledged within %.0f s (stopped, or "
			"stuck in a write); no successor can acquire it until it "
			"does, its TTL runs out or it exits\n", name, uri,
			timeout_s);
	return 1;
}

static int lease_op(struct lease_store *st, const char *uri, const char *verb,
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
			       "holder: %s\nstore: %s\n", info.name, info.epoch,
			       lease_state_str(info.state), (int)info.holder_pid,
			       info.holder, uri);
		return r;
	}
	return revoke_and_wait(st, uri, name, timeout_s, err);
}

/*
 * A local store another user owns is that user's records: root works on
 * it as its owner (so that nothing it writes there becomes root's and
 * locks the owner out), and nobody else can open it at all (0700).
 * 0, or -errno.
 */
static int become_store_owner(const char *uri)
{
	const char *dir = lease_uri_local_dir(uri);
	struct passwd *pw;
	struct stat st;

	if (geteuid() != 0 || !dir || stat(dir, &st) < 0 || st.st_uid == 0)
		return 0;
	pw = getpwuid(st.st_uid);
	if ((pw ? initgroups(pw->pw_name, st.st_gid) : setgroups(0, NULL)) < 0 ||
	    setresgid(st.st_gid, st.st_gid, st.st_gid) < 0 ||
	    setresuid(st.st_uid, st.st_uid, st.st_uid) < 0)
		return -errno;
	return 0;
}

/* A user's default store (default_leases() as that user), if it has one. */
static bool user_store(const struct passwd *pw, char *uri, size_t sz)
{
	struct stat st;

	if (pw->pw_uid == 0 || !pw->pw_dir || pw->pw_dir[0] != '/' ||
	    (size_t)snprintf(uri, sz, "file:%s/.local/state/leasefs/leases",
			     pw->pw_dir) >= sz)
		return false;
	return stat(uri + 5, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == pw->pw_uid;
}

static int print_user_info(const struct lease_info *in, void *ud)
{
	printf("%-8s epoch %-6" PRIu64 " pid %-7d %s  %s (user %s)\n",
	       lease_state_str(in->state), in->epoch, (int)in->holder_pid,
	       in->name, in->holder, (const char *)ud);
	return 0;
}

/* Reap `pid` within `ms`: 0, or -ETIMEDOUT after killing it (a child
 * stuck where the kernel does not let SIGKILL in is left to init). */
static int child_wait(pid_t pid, int ms, int *status)
{
	int64_t deadline = lease_deadline_ms(ms);
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0), r = -ETIMEDOUT;

	while (pfd >= 0 && !lease_deadline_passed(deadline)) {
		struct pollfd p = { .fd = pfd, .events = POLLIN };
		int64_t left = (deadline - lease_now_ns()) / 1000000 + 1;

		if (poll(&p, 1, (int)left) > 0)
			break;
	}
	if (pfd < 0 || !lease_deadline_passed(deadline))
		r = 0; /* exited (or no pidfd: the child's own alarm bounds it) */
	else
		kill(pid, SIGKILL);
	if (pfd >= 0)
		close(pfd);
	while (waitpid(pid, status, r < 0 ? WNOHANG : 0) < 0 && errno == EINTR)
		;
	return r;
}

/* One user's store listed in a child that is that user (root keeps its
 * own identity for the next).  0, or -1 if it could not be listed whole
 * (said on stderr). */
static int list_user_store(const struct passwd *pw, const char *uri)
{
	struct lease_store *st = NULL;
	struct lease_err le = { 0 };
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		int r;

		alarm(USER_STORE_TIMEOUT_S); /* the bound, should the parent's fail */
		r = become_store_owner(uri);

		if (r == 0)
			r = lease_store_open(uri, NULL, &st, &le);
		if (r == 0)
			r = lease_list(st, print_user_info, pw->pw_name, &le);
		if (r < 0)
			fprintf(stderr, "leasefs: lease list: user %s's store %s: %s\n",
				pw->pw_name, uri, le.msg[0] ? le.msg : strerror(-r));
		lease_store_close(st);
		fflush(stdout);
		_exit(r < 0);
	}
	if (pid < 0) {
		fprintf(stderr, "leasefs: lease list: user %s's store %s: %s\n",
			pw->pw_name, uri, strerror(errno));
		return -1;
	}
	if (child_wait(pid, USER_STORE_TIMEOUT_S * 1000, &status) < 0) {
		fprintf(stderr, "leasefs: lease list: user %s's store %s did not "
			"answer within %d s; skipped\n", pw->pw_name, uri,
			USER_STORE_TIMEOUT_S);
		return -1;
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Root's `lease list` of the host's store: every user's store too, each
 * one whatever the others did.  How many could not be listed. */
static int list_user_stores(void)
{
	char uri[PATH_MAX + 64];
	struct passwd *pw;
	int failed = 0;

	fflush(stdout);
	setpwent();
	while ((pw = getpwent()) != NULL)
		if (user_store(pw, uri, sizeof(uri)) &&
		    list_user_store(pw, uri) < 0)
			failed++;
	endpwent();
	return failed;
}

/* What `lease show|revoke` was told, and what that names. */
struct lease_target {
	const char *uri;           /* the store asked */
	char uri_abs[PATH_MAX + 16];
	char name[LEASE_NAME_MAX + 1]; /* the lease */
	char mount_uri[PATH_MAX + 64]; /* a mount point's own store */
	bool uri_given;            /* --leases (a mount point's store then
				    * gives way), or $LEASEFS_LEASES */
	bool flag_given;           /* --leases */
};

/* A mount point's lease and store, from its daemon's status.  0, -1 if
 * `path` is no leasefs mount, or an exit code (message printed). */
static int target_of_mount(const char *verb, const char *arg, const char *path,
			   struct lease_target *t)
{
	char seen[PATH_MAX], *reply = NULL;
	struct json_object *o = NULL, *lease, *backend;
	int r = control_request(path, "status", &reply), code = EXIT_FAIL;

	if (r < 0 && ws_leasefs_mount(NULL, path, seen, sizeof(seen)) < 0)
		return -1; /* not a mount: a ROOT */
	if (r == -EACCES)
		fprintf(stderr, "leasefs lease %s: %s: permission denied (only "
			"root and the mount's owner may ask its daemon)\n", verb, arg);
	else if (r < 0)
		fprintf(stderr, "leasefs lease %s: %s is a stale leasefs mount: "
			"its daemon is gone; clear it with 'umount -l %s' (root) "
			"or 'fusermount3 -uz %s'\n", verb, arg, arg, arg);
	if (r < 0)
		return r == -EACCES ? EXIT_DENIED : EXIT_FAIL;
	o = json_tokener_parse(reply);
	free(reply);
	if (o && json_object_object_get_ex(o, "lease", &lease) &&
	    json_object_object_get_ex(o, "backend", &backend)) {
		snprintf(t->name, sizeof(t->name), "%s", json_object_get_string(lease));
		snprintf(t->mount_uri, sizeof(t->mount_uri), "%s",
			 json_object_get_string(backend));
		code = 0;
	} else {
		fprintf(stderr, "leasefs lease %s: the daemon of %s did not say "
			"its lease\n", verb, arg);
	}
	json_object_put(o);
	if (code)
		return code;
	/* The mount's own store, unless --leases named one. */
	if (!t->flag_given)
		t->uri = t->mount_uri;
	if (strstr(t->uri, "***")) {
		fprintf(stderr, "leasefs lease %s: the store of %s, %s, hides its "
			"password; name it with --leases\n", verb, arg, t->uri);
		return EXIT_USAGE;
	}
	return 0;
}

/*
 * NAME, ROOT or MOUNTPOINT: a lease name as the store has it; a path
 * (beginning with '/' or '.', or not a lease name but an existing
 * directory) is a leasefs mount point, whose lease in its own store is
 * meant, or a workspace root, whose root lease is.  0, or an exit code
 * (message printed).
 */
static int resolve_target(const char *verb, const char *arg,
			  struct lease_target *t)
{
	char canon[PATH_MAX];
	struct lease_err le = { 0 };
	struct stat st;
	bool name_ok = lease_name_validate(arg, &le) == 0;
	bool path = arg[0] == '/' || arg[0] == '.' ||
		    (!name_ok && stat(arg, &st) == 0);
	int r;

	if (!path) {
		if (!name_ok)
			return cli_usage_error("lease", "'%s': %s (give a lease "
					       "name, a workspace root or a "
					       "mount point)", arg, le.msg);
		snprintf(t->name, sizeof(t->name), "%s", arg);
		return 0;
	}
	if (stat(arg, &st) < 0 && errno == ENOENT && !is_stale_mount(arg)) {
		fprintf(stderr, "leasefs lease %s: %s does not exist\n", verb, arg);
		return EXIT_USAGE;
	}
	if (!realpath(arg, canon) && is_stale_mount(arg))
		snprintf(canon, sizeof(canon), "%s", arg);
	r = target_of_mount(verb, arg, canon, t);
	if (r >= 0)
		return r;
	r = ws_canonical_root(arg, canon, sizeof(canon));
	if (r == 0)
		r = ws_root_name(canon, t->name, sizeof(t->name));
	if (r < 0) {
		fprintf(stderr, "leasefs lease %s: workspace root %s: %s\n", verb,
			arg, strerror(-r));
		return EXIT_FAIL;
	}
	return 0;
}

/* The arguments: VERB [TARGET] and the options, anywhere.  0, or the
 * exit code of a usage error (printed). */
static int parse_lease_args(int argc, char **argv, const char **verb,
			    const char **target, double *timeout_s,
			    struct lease_target *t)
{
	int npos = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strncmp(a, "--leases=", 9) == 0) {
			t->uri = a + 9;
			t->uri_given = t->flag_given = true;
		} else if (strncmp(a, "--timeout=", 10) == 0) {
			if (parse_seconds(a + 10, timeout_s) < 0)
				return cli_usage_error("lease", "bad --timeout "
						       "'%s' (expected seconds)",
						       a + 10);
		} else if (a[0] == '-') {
			return cli_usage_error("lease", "unrecognized option '%s'", a);
		} else if (npos == 0 && ++npos) {
			*verb = a;
		} else if (npos == 1 && ++npos) {
			*target = a;
		} else {
			return cli_usage_error("lease", "unexpected operand '%s'", a);
		}
	}
	if (!*verb)
		return cli_usage_error("lease", "list, show or revoke is needed");
	if (strcmp(*verb, "list") == 0 && *target)
		return cli_usage_error("lease", "list takes no operand ('%s')",
				       *target);
	if (strcmp(*verb, "list") != 0 && strcmp(*verb, "show") != 0 &&
	    strcmp(*verb, "revoke") != 0)
		return cli_usage_error("lease", "unknown lease command '%s'", *verb);
	if (strcmp(*verb, "list") != 0 && !*target)
		return cli_usage_error("lease", "%s needs a lease name, a "
				       "workspace root or a mount point", *verb);
	return 0;
}

int cmd_lease(int argc, char **argv)
{
	const char *verb = NULL, *target = NULL;
	struct lease_err le = { 0 };
	struct lfs_err err = { 0 };
	struct lease_store *st = NULL;
	struct lease_target t = { .uri = default_leases(),
				  .uri_given = getenv("LEASEFS_LEASES") != NULL };
	double timeout_s = REVOKE_TIMEOUT_S;
	int r, unlisted = 0, code = parse_lease_args(argc, argv, &verb, &target, &timeout_s, &t);

	if (code == 0 && target)
		code = resolve_target(verb, target, &t);
	if (code == 0 && absolute_store_uri(t.uri, t.uri_abs, sizeof(t.uri_abs)) < 0)
		code = cli_usage_error("lease", "--leases '%s': name too long", t.uri);
	if (code)
		return code;
	t.uri = t.uri_abs;
	bool host_list = getuid() == 0 && strcmp(verb, "list") == 0 && !t.uri_given;

	r = become_store_owner(t.uri);
	if (r < 0)
		lease_err_set(&le, LEASE_E_IO, r, t.uri, "cannot act as the owner "
			      "of the store: %s", strerror(-r));
	if (r == 0)
		r = lease_store_open(t.uri, NULL, &st, &le);
	if (r == 0 && strcmp(verb, "list") == 0)
		printf("store: %s\n", t.uri);
	if (r == 0)
		r = lease_op(st, t.uri, verb, t.name, timeout_s, &le);
	/* A user's store that could not be listed fails the list, once the
	 * others are. */
	if (r == 0 && host_list)
		unlisted = list_user_stores();
	if (lfs_err_from_lease(&err, r, &le) < 0)
		fprintf(stderr, "leasefs lease %s: %s%sstore %s: %s\n", verb,
			t.name, t.name[0] ? " in " : "", t.uri, err.msg);
	lease_store_close(st);
	if (r > 0)
		return EXIT_UNFENCED;
	return r == 0 && unlisted ? EXIT_FAIL : lfs_exit_code(r, &err);
}

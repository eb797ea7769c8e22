/* SPDX-License-Identifier: MIT */
/*
 * The command line: the client commands. status, watch, metrics and
 * umount, over the mount's control socket.
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
#include <sys/stat.h>
#include <unistd.h>
#include <json-c/json.h>

#define UMOUNT_TIMEOUT_MS 30000

#include "cli.h"

/* ---- clients ------------------------------------------------------- */

static int canonical_mountpoint(const char *arg, char *out)
{
	if (realpath(arg, out))
		return 0;
	if (errno == ENOTCONN) /* a dead daemon's mount: keep the spelling */
		return snprintf(out, PATH_MAX, "%s", arg) < PATH_MAX ? 0 : -ENAMETOOLONG;
	return -errno;
}

/* "transport  dev-fuse (turned off by LEASEFS_IO_URING=0)": which FUSE
 * transport serves, and why not io_uring. */
static void print_transport(struct json_object *fuse)
{
	struct json_object *t = NULL, *why = NULL;

	if (!json_object_object_get_ex(fuse, "transport", &t))
		return;
	printf("%-10s %s", "transport", json_object_get_string(t));
	if (json_object_object_get_ex(fuse, "transport_reason", &why))
		printf(" (%s)", json_object_get_string(why));
	putchar('\n');
}

static void print_status_table(const char *json)
{
	struct json_object *obj = json_tokener_parse(json);

	if (!obj) {
		fputs(json, stdout);
		return;
	}
	json_object_object_foreach(obj, key, val) {
		if (strcmp(key, "fuse") == 0)
			print_transport(val);
		printf("%-10s %s\n", key, json_object_get_string(val));
	}
	json_object_put(obj);
}

/*
 * Why `cmd` got no answer for `arg` (r: the control socket's error): not
 * allowed, a stale mount (its daemon gone: the kernel answers ENOTCONN, or
 * a leasefs mount is there and its socket is, but nothing listens), a
 * live leasefs mount whose socket is not found from here (its daemon
 * serves it under another path: a bind mount, another mount namespace),
 * a path that does not exist, or no leasefs mount.
 */
static int no_daemon(const char *cmd, const char *arg, int r)
{
	char mnt[PATH_MAX], seen[PATH_MAX];
	bool leasefs = (r == -ECONNREFUSED || r == -ENOENT) && realpath(arg, mnt) &&
		       ws_leasefs_mount(NULL, mnt, seen, sizeof(seen)) == 0;
	struct stat st;

	if (r == -EACCES) {
		fprintf(stderr, "leasefs %s: %s: permission denied (only root and "
			"the mount's owner may watch or control it)\n", cmd, arg);
		return EXIT_DENIED;
	}
	if (is_stale_mount(arg) || (leasefs && r == -ECONNREFUSED)) {
		fprintf(stderr, "leasefs %s: %s is a stale leasefs mount: its "
			"daemon is gone; clear it with 'umount -l %s' (root) or "
			"'fusermount3 -uz %s' (its user)\n", cmd, arg, arg, arg);
		return EXIT_FAIL;
	}
	if (leasefs) {
		fprintf(stderr, "leasefs %s: %s is a leasefs mount whose daemon "
			"does not answer here: it serves the mount under another "
			"path (this is a bind mount of it, or a copy in another "
			"mount namespace) or is still starting; name the mount "
			"point it was mounted on\n", cmd, arg);
		return EXIT_FAIL;
	}
	if (stat(arg, &st) < 0 && errno == ENOENT) {
		fprintf(stderr, "leasefs %s: %s does not exist\n", cmd, arg);
		return EXIT_FAIL;
	}
	if (r == -ENOENT || r == -ECONNREFUSED)
		fprintf(stderr, "leasefs %s: no leasefs daemon serves %s (it is "
			"not a leasefs mount point)\n", cmd, arg);
	else
		fprintf(stderr, "leasefs %s: no leasefs daemon serves %s (%s)\n",
			cmd, arg, strerror(-r));
	return EXIT_FAIL;
}

int cmd_status(int argc, char **argv)
{
	char mnt[PATH_MAX], *buf = NULL;
	bool json = false;
	const char *arg = NULL;
	int r;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (argv[i][0] == '-' && argv[i][1])
			return cli_usage_error(argv[0], "unrecognized option "
					       "'%s'", argv[i]);
		else if (!arg)
			arg = argv[i];
		else
			return cli_usage_error(argv[0], "unexpected operand "
					       "'%s'", argv[i]);
	}
	if (!arg)
		return cli_usage_error(argv[0], "MOUNTPOINT is needed");
	r = canonical_mountpoint(arg, mnt);
	if (r == 0)
		r = control_request(mnt, "status", &buf);
	if (r < 0)
		return no_daemon(argv[0], arg, r);
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
	if (argc < 2)
		return cli_usage_error(argv[0], "MOUNTPOINT is needed");
	if (argv[1][0] == '-' && argv[1][1])
		return cli_usage_error(argv[0], "unrecognized option '%s'", argv[1]);
	if (argc > 2)
		return cli_usage_error(argv[0], "unexpected operand '%s'", argv[2]);
	*r = canonical_mountpoint(argv[1], mnt);
	return 0;
}

int cmd_watch(int argc, char **argv)
{
	char mnt[PATH_MAX];
	int r = 0, code = one_mountpoint(argc, argv, mnt, &r);

	if (code)
		return code;
	if (r == 0)
		r = control_watch(mnt, watch_line, NULL);
	if (r < 0)
		return no_daemon(argv[0], argv[1], r);
	if (r > 0)
		return EXIT_OK;
	print_gone(mnt);
	return EXIT_GONE;
}

/* leasefs metrics MOUNTPOINT: the Prometheus text exposition. */
int cmd_metrics(int argc, char **argv)
{
	char mnt[PATH_MAX], *buf = NULL;
	int r = 0, code = one_mountpoint(argc, argv, mnt, &r);

	if (code)
		return code;
	if (r == 0)
		r = control_request(mnt, "metrics", &buf);
	if (r < 0)
		return no_daemon(argv[0], argv[1], r);
	fputs(buf, stdout);
	free(buf);
	return EXIT_OK;
}

int cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX];
	int r = 0, code = one_mountpoint(argc, argv, mnt, &r);

	if (code)
		return code;
	if (r == 0)
		r = control_umount(mnt, UMOUNT_TIMEOUT_MS);
	/* No daemon serves it, but a crashed one's mount is there: detach. */
	if ((r == -ENOENT || r == -ECONNREFUSED) && is_stale_mount(argv[1]))
		r = clean_stale_mount(argv[1]);
	if (r == -EACCES || r == -ENOENT || r == -ECONNREFUSED)
		return no_daemon(argv[0], argv[1], r);
	if (r < 0) {
		fprintf(stderr, "leasefs umount: cannot unmount %s: %s\n",
			argv[1], strerror(-r));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

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

static int no_daemon(const char *arg, int r)
{
	if (r == -EACCES) {
		fprintf(stderr, "leasefs: %s: permission denied (only root and "
			"the mount's owner may watch or control it)\n", arg);
		return EXIT_DENIED;
	}
	fprintf(stderr, "leasefs: no leasefs daemon serves %s: %s\n", arg,
		strerror(-r));
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

int cmd_watch(int argc, char **argv)
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
int cmd_metrics(int argc, char **argv)
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

int cmd_umount(int argc, char **argv)
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
	if (r == -EACCES)
		return no_daemon(argv[1], r);
	if (r < 0) {
		fprintf(stderr, "leasefs: cannot unmount %s: %s%s\n", argv[1],
			strerror(-r), r == -ENOENT || r == -ECONNREFUSED ?
			" (no leasefs daemon serves it; for a stale mount run "
			"'fusermount3 -uz' on it)" : "");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

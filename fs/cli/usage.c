/* SPDX-License-Identifier: MIT */
/*
 * The command line: what each command says of itself (its synopsis, its
 * help), usage errors, and the commands that only print (version, help).
 * Below every command: they report usage errors through it.
 * (The commands: main.c; shared: cli.h.)
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Each command's texts, in the order `leasefs --help` lists them. */
static const struct usage {
	const char *name;
	const char *usage; /* the synopsis lines, after "leasefs " */
	const char *about; /* --help: what it does */
	void (*options)(FILE *f); /* --help: its options, if it has many */
} usages[] = {
	{ "mount", "mount [OPTIONS] ROOT MOUNTPOINT\n",
	  "Mount ROOT on MOUNTPOINT once its lease is held; the daemon stays in\n"
	  "the background (with -f, in the foreground).\n", print_mount_options },
	{ "status", "status [--json] MOUNTPOINT\n",
	  "Print the mount's root, placement, session, lease, epoch, state,\n"
	  "store (backend) and daemon pid; one JSON object with --json.\n", NULL },
	{ "watch", "watch MOUNTPOINT\n",
	  "Print the state as JSON, then one line per change as it happens; exit 0\n"
	  "on a loss, 4 when the mount goes away first.\n", NULL },
	{ "metrics", "metrics MOUNTPOINT\n",
	  "Print the mount's metrics (Prometheus text format).\n", NULL },
	{ "umount", "umount MOUNTPOINT\n",
	  "Orderly shutdown of the daemon serving MOUNTPOINT; a stale mount (its\n"
	  "daemon gone) is detached.\n", NULL },
	{ "lease",
	  "lease list [--leases=URI]\n"
	  "lease show NAME|ROOT|MOUNTPOINT [--leases=URI]\n"
	  "lease revoke NAME|ROOT|MOUNTPOINT [--leases=URI] [--timeout=SECONDS]\n",
	  "The lease store, as an operator sees it.  A ROOT names its root lease in\n"
	  "--leases's store; a MOUNTPOINT names the mount's lease in the mount's own\n"
	  "store.  revoke forces a loss on the holder and waits (default 30 s) until\n"
	  "it is fenced; exit 3 if it was not.\n"
	  "\n"
	  "  --leases=URI       the store (default: $LEASEFS_LEASES, else the file store)\n"
	  "  --timeout=SECONDS  revoke: how long to wait for the fence\n", NULL },
	{ "hostd", "hostd [--idle-exit=SECONDS]\n",
	  "The host lock arbiter (root of the host only; socket-activated by\n"
	  "leasefs-hostd.socket): takes host locks for users' and user-namespace\n"
	  "mounts and hands the locked descriptors back.  --idle-exit: exit after\n"
	  "that many idle seconds (60 when socket-activated).\n", NULL },
	{ "version", "version\n", "Print the version.\n", NULL },
	{ "help", "help [COMMAND]\n",
	  "Print the usage of every command, or COMMAND's help.\n", NULL },
};

#define NUSAGES (sizeof(usages) / sizeof(usages[0]))

static const struct usage *find_usage(const char *name)
{
	for (size_t i = 0; name && i < NUSAGES; i++)
		if (strcmp(name, usages[i].name) == 0)
			return &usages[i];
	return NULL;
}

/* `c`'s synopsis lines, the first after "usage: ", the others aligned. */
static void print_synopsis(const struct usage *c, FILE *f)
{
	const char *line = c->usage;

	for (bool first = true; *line; first = false) {
		size_t n = strcspn(line, "\n");

		fprintf(f, "%s leasefs %.*s\n", first ? "usage:" : "      ",
			(int)n, line);
		line += n + (line[n] == '\n');
	}
}

/* Every command's synopsis (leasefs --help, leasefs with no command). */
void cli_print_all(FILE *f)
{
	fputs("usage: leasefs COMMAND [ARGS]\n\n", f);
	for (size_t i = 0; i < NUSAGES; i++) {
		const char *line = usages[i].usage;

		while (*line) {
			size_t n = strcspn(line, "\n");

			fprintf(f, "  leasefs %.*s\n", (int)n, line);
			line += n + (line[n] == '\n');
		}
	}
	fputs("  leasefs ROOT MOUNTPOINT -o OPT[,OPT...]   (mount(8), fstab)\n"
	      "\n'leasefs COMMAND --help' for a command's options; leasefs(8).\n",
	      f);
}

int cli_usage(const char *cmd)
{
	const struct usage *c = find_usage(cmd);

	if (!c) {
		cli_print_all(stderr);
		return EXIT_USAGE;
	}
	print_synopsis(c, stderr);
	fprintf(stderr, "Try 'leasefs %s --help' for more information.\n", cmd);
	return EXIT_USAGE;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "leasefs %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return cli_usage(cmd);
}

/* `cmd --help`: its synopsis, what it does and its options, to stdout. */
int cli_print_help(const char *cmd)
{
	const struct usage *c = find_usage(cmd);

	if (!c)
		return cli_usage(cmd);
	print_synopsis(c, stdout);
	printf("\n%s", c->about);
	if (c->options) {
		putchar('\n');
		c->options(stdout);
	}
	printf("\n  %-22s %s\n", "-h, --help", "print this help and exit");
	printf("\nSee leasefs(8).\n");
	return EXIT_OK;
}

int cmd_version(int argc, char **argv)
{
	if (argc > 1)
		return cli_usage_error(argv[0], "unexpected argument '%s'", argv[1]);
	printf("leasefs %s\n", LEASEFS_VERSION);
	return EXIT_OK;
}

int cmd_help(int argc, char **argv)
{
	if (argc == 1) {
		cli_print_all(stdout);
		return EXIT_OK;
	}
	if (argc > 2 || !find_usage(argv[1]))
		return cli_usage_error(argv[0], "unknown command '%s'", argv[1]);
	return cli_print_help(argv[1]);
}

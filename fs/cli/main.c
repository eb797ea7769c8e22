/* SPDX-License-Identifier: MIT */
/*
 * leasefs: the command line.  main() dispatches on the command word:
 *
 *   leasefs mount [options] ROOT MOUNTPOINT       mount.c, options.c
 *   leasefs ROOT MOUNTPOINT -o OPT[,OPT...]       fstab.c (mount(8))
 *   leasefs status|watch|metrics|umount MOUNTPOINT clients.c
 *   leasefs lease list|show|revoke ...            lease_cmd.c
 *   leasefs hostd [--idle-exit=SECONDS]           hostd_cmd.c
 *   leasefs version | --version | help [COMMAND] | --help
 *
 * Conventions (util-linux's): `--help` (or `-h`) anywhere among a
 * command's arguments prints that command's help to stdout and exits 0,
 * before anything else is parsed; a usage error prints what was wrong,
 * prefixed "leasefs COMMAND:", and that command's short usage to stderr,
 * exit 64.
 *
 * Exit codes: 0 ok, 64 usage, 75 workspace busy, 76 no host lock arbiter, 3 revoked but not fenced,
 * 4 the mount went away (watch), 1 anything else.  Every internal
 * function returns 0 or -errno with a struct lfs_err (error.h) naming what
 * failed and its exit code.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the command */
	const char *usage; /* the synopsis lines, after "leasefs " */
	const char *about; /* --help: what it does */
	void (*options)(FILE *f); /* --help: its options, if it has many */
} commands[] = {
	{ "mount", cmd_mount, "mount [OPTIONS] ROOT MOUNTPOINT\n",
	  "Mount ROOT on MOUNTPOINT once its lease is held; the daemon stays in\n"
	  "the background (with -f, in the foreground).\n", print_mount_options },
	{ "status", cmd_status, "status [--json] MOUNTPOINT\n",
	  "Print the mount's root, placement, session, lease, epoch, state,\n"
	  "store (backend) and daemon pid; one JSON object with --json.\n", NULL },
	{ "watch", cmd_watch, "watch MOUNTPOINT\n",
	  "Print the state as JSON, then one line per change as it happens; exit 0\n"
	  "on a loss, 4 when the mount goes away first.\n", NULL },
	{ "metrics", cmd_metrics, "metrics MOUNTPOINT\n",
	  "Print the mount's metrics (Prometheus text format).\n", NULL },
	{ "umount", cmd_umount, "umount MOUNTPOINT\n",
	  "Orderly shutdown of the daemon serving MOUNTPOINT; a stale mount (its\n"
	  "daemon gone) is detached.\n", NULL },
	{ "lease", cmd_lease,
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
	{ "hostd", cmd_hostd, "hostd [--idle-exit=SECONDS]\n",
	  "The host lock arbiter (root of the host only; socket-activated by\n"
	  "leasefs-hostd.socket): takes host locks for users' and user-namespace\n"
	  "mounts and hands the locked descriptors back.  --idle-exit: exit after\n"
	  "that many idle seconds (60 when socket-activated).\n", NULL },
	{ "version", cmd_version, "version\n", "Print the version.\n", NULL },
	{ "help", cmd_help, "help [COMMAND]\n",
	  "Print the usage of every command, or COMMAND's help.\n", NULL },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; name && i < NCOMMANDS; i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

/* `c`'s synopsis lines, the first after "usage: ", the others aligned. */
static void print_synopsis(const struct command *c, FILE *f)
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
static void print_all(FILE *f)
{
	fputs("usage: leasefs COMMAND [ARGS]\n\n", f);
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const char *line = commands[i].usage;

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
	const struct command *c = find_command(cmd);

	if (!c) {
		print_all(stderr);
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
static int print_help(const struct command *c)
{
	print_synopsis(c, stdout);
	printf("\n%s", c->about);
	if (c->options) {
		putchar('\n');
		c->options(stdout);
	}
	printf("\n  %-22s %s\n", "-h, --help", "print this help and exit");
	printf(""
	       "\nSee leasefs(8).\n");
	return EXIT_OK;
}

/*
 * Whether --help or -h is among a command's arguments (before "--"), an
 * option's value aside (`-o -h` is -o's).  Asked before anything else is
 * parsed, so that `umount --help` unmounts nothing.
 */
static bool wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return true;
		if (strcmp(argv[i], "-o") == 0)
			i++;
	}
	return false;
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
	const struct command *c;

	if (argc == 1) {
		print_all(stdout);
		return EXIT_OK;
	}
	c = find_command(argv[1]);
	if (argc > 2 || !c)
		return cli_usage_error(argv[0], "unknown command '%s'", argv[1]);
	return print_help(c);
}

/*
 * The arguments the commands parse are a copy; a password in a store URI
 * is blanked in the process's own argv, which ps shows for as long as the
 * daemon lives (README: better kept in PGPASSFILE or a creds file).  NULL
 * when out of memory.
 */
static char **private_args(int argc, char **argv)
{
	char **copy = calloc((size_t)argc + 1, sizeof(*copy));

	for (int i = 0; copy && i < argc; i++) {
		copy[i] = strdup(argv[i]);
		if (!copy[i])
			return copy; /* short: the caller frees and fails */
		if (lease_uri_has_secret(argv[i])) {
			size_t n = strlen(argv[i]);

			lease_uri_redact(copy[i], argv[i], n + 1);
			memset(argv[i] + strlen(argv[i]), 0, n - strlen(argv[i]));
		}
	}
	return copy;
}

static void args_free(char **args, int argc)
{
	for (int i = 0; args && i < argc; i++)
		free(args[i]);
	free(args);
}

static int run(int argc, char **argv)
{
	const struct command *c = argc >= 2 ? find_command(argv[1]) : NULL;

	if (c)
		return wants_help(argc - 1, argv + 1) ? print_help(c)
						      : c->run(argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
			  strcmp(argv[1], "-h") == 0)) {
		print_all(stdout);
		return EXIT_OK;
	}
	if (argc >= 2 && (strcmp(argv[1], "--version") == 0 ||
			  strcmp(argv[1], "-V") == 0))
		return cmd_version(1, argv + 1);
	if (argc >= 3 && argv[1][0] != '-')
		return cmd_mount_fstab(argc, argv);
	if (argc >= 2) {
		fprintf(stderr, "leasefs: unknown command '%s'\n", argv[1]);
		fputs("Try 'leasefs --help' for the commands.\n", stderr);
		return EXIT_USAGE;
	}
	print_all(stderr);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	char **args = private_args(argc, argv);
	int code = EXIT_FAIL;

	if (args && (argc == 0 || args[argc - 1]))
		code = run(argc, args);
	else
		fputs("leasefs: out of memory\n", stderr);
	args_free(args, argc);
	return code;
}

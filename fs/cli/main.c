/* SPDX-License-Identifier: MIT */
/*
 * leasefs: the command line.  main() dispatches on the command word:
 *
 *   leasefs mount [options] ROOT MOUNTPOINT       mount.c, options.c
 *   leasefs ROOT MOUNTPOINT -o OPT[,OPT...]       fstab.c (mount(8))
 *   leasefs status|watch|metrics|umount MOUNTPOINT clients.c
 *   leasefs lease list|show|revoke ...            lease_cmd.c
 *   leasefs hostd [--idle-exit=SECONDS]           hostd_cmd.c
 *   leasefs version | --version | help [COMMAND] | --help   usage.c
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* What runs each command word (its texts: usage.c). */
static const struct command {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the command */
} commands[] = {
	{ "mount", cmd_mount },
	{ "status", cmd_status },
	{ "watch", cmd_watch },
	{ "metrics", cmd_metrics },
	{ "umount", cmd_umount },
	{ "lease", cmd_lease },
	{ "hostd", cmd_hostd },
	{ "version", cmd_version },
	{ "help", cmd_help },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; name && i < NCOMMANDS; i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
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
		return wants_help(argc - 1, argv + 1) ? cli_print_help(c->name)
						      : c->run(argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
			  strcmp(argv[1], "-h") == 0)) {
		cli_print_all(stdout);
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
	cli_print_all(stderr);
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

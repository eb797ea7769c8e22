/* SPDX-License-Identifier: MIT */
/*
 * leasefs: the command line.  main() dispatches on the command word:
 *
 *   leasefs mount [options] ROOT MOUNTPOINT       mount.c, options.c
 *   leasefs ROOT MOUNTPOINT -o OPT[,OPT...]       fstab.c (mount(8))
 *   leasefs status|watch|metrics|umount MOUNTPOINT clients.c
 *   leasefs lease list|show NAME|revoke NAME      lease_cmd.c
 *   leasefs hostd [--idle-exit=SECONDS]           hostd_cmd.c
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

const char usage_text[] =
	"usage: leasefs mount [--placement=exclusive|session|shared] [--leases=URI]\n"
	"                     [--session=UUID] [--wait=SECONDS] [--ttl=SECONDS]\n"
	"                     [--metrics-dir=DIR] [--files-per-user=N]\n"
	"                     [--owner=USER[:GROUP]]\n"
	"                     [-o OPT] [-f] [-d] ROOT MOUNTPOINT\n"
	"       leasefs status MOUNTPOINT [--json]\n"
	"       leasefs umount MOUNTPOINT\n"
	"       leasefs watch MOUNTPOINT\n"
	"       leasefs metrics MOUNTPOINT\n"
	"       leasefs ROOT MOUNTPOINT -o OPT[,OPT...]   (mount(8), fstab)\n"
	"       leasefs lease list [--leases=URI]\n"
	"       leasefs lease show NAME [--leases=URI]\n"
	"       leasefs lease revoke NAME [--leases=URI] [--timeout=SECONDS]\n"
	"       leasefs hostd [--idle-exit=SECONDS]   (root: the host lock arbiter)\n";

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
	{ "hostd", cmd_hostd },
};

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

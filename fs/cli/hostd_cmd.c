/* SPDX-License-Identifier: MIT */
/* leasefs hostd [--idle-exit=SECONDS]: the host lock arbiter (hostd.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hostd.h"

int cmd_hostd(int argc, char **argv)
{
	struct hostd_opts o = { 0 };
	char msg[512] = "";
	int r;

	for (int i = 1; i < argc; i++) {
		char *end;

		if (strncmp(argv[i], "--idle-exit=", 12) == 0) {
			o.idle_exit_s = (int)strtol(argv[i] + 12, &end, 10);
			if (*end == '\0' && end != argv[i] + 12 && o.idle_exit_s >= 0)
				continue;
		}
		return cli_usage_error(argv[0], "bad argument '%s'", argv[i]);
	}
	/* LEASEFS_SUBUID_FILE: tests only (a private copy). */
	o.subuid_path = getenv("LEASEFS_SUBUID_FILE") ? getenv("LEASEFS_SUBUID_FILE")
						      : "/etc/subuid";
	/* Socket activation: exit when idle; what is locked stays locked. */
	if (!o.idle_exit_s && getenv("LISTEN_FDS"))
		o.idle_exit_s = 60;
	r = hostd_run(&o, msg, sizeof(msg));
	if (msg[0])
		fprintf(stderr, "leasefs hostd: %s\n", msg);
	return r == 0 ? EXIT_OK : r == -EPERM ? EXIT_DENIED : EXIT_FAIL;
}

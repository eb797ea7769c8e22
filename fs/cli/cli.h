/* SPDX-License-Identifier: MIT */
/* The command line's units, shared among themselves (map: main.c).
 * Calls go one way: main.c to the commands and usage.c, fstab.c to
 * mount.c; nothing calls main.c, and usage.c no command. */
#ifndef LEASEFS_CLI_H
#define LEASEFS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "daemon.h"
#include "roots.h"

/* The commands: argv[0] is the command word.  Each one's --help was
 * answered before it runs (main.c). */
int cmd_mount(int argc, char **argv);       /* mount.c */
/* ROOT on another leasefs mount: EXIT_BUSY naming its holder; on another
 * FUSE filesystem or overlayfs: EXIT_USAGE unless allow_stacked_root. */
int check_stacked_root(const struct mount_opts *o, struct lfs_err *err); /* stacked.c */
int cmd_mount_fstab(int argc, char **argv); /* fstab.c: argv[1] is ROOT */
int cmd_status(int argc, char **argv);      /* clients.c */
int cmd_watch(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_lease(int argc, char **argv);       /* lease_cmd.c */
int cmd_hostd(int argc, char **argv);       /* hostd_cmd.c */
int cmd_version(int argc, char **argv);     /* usage.c */
int cmd_help(int argc, char **argv);

/* usage.c: below every command (main.c dispatches). */
/* `cmd`'s short usage to stderr; EXIT_USAGE. */
int cli_usage(const char *cmd);
/* "leasefs CMD: <message>" and CMD's short usage to stderr; EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* `cmd --help` to stdout: EXIT_OK (EXIT_USAGE for no such command). */
int cli_print_help(const char *cmd);
/* Every command's synopsis. */
void cli_print_all(FILE *f);

/* options.c */
/* `leasefs mount --help`'s options, from the parser's own table. */
void print_mount_options(FILE *f);
/* A store URI as given, with a relative file: or fsstore: directory made
 * absolute (against the working directory), into out (PATH_MAX + 16):
 * a store named the same from any directory.  0 or -ENAMETOOLONG. */
int absolute_store_uri(const char *uri, char *out, size_t sz);
/* `leasefs mount`'s options and operands into *o (syntax only). */
int parse_mount(int argc, char **argv, struct mount_opts *o,
		struct lfs_err *err);
/* A usage error (EXIT_USAGE) with `fmt` naming `arg`. */
int usage_error(struct lfs_err *err, const char *fmt, const char *arg);
/* --leases's default: $LEASEFS_LEASES, else the file store's. */
const char *default_leases(void);
/* Non-negative seconds, at most 1e6: 0 or -EINVAL. */
int parse_seconds(const char *s, double *out);
/* "key=value" with the key one of mount's long options that takes a
 * value (leasefs's own keys inside fstab's -o): the key's length, else 0. */
size_t mount_own_key(const char *opt);

/* mount.c */
/* Whether `path` is a mount whose daemon is gone (statfs: ENOTCONN...). */
bool is_stale_mount(const char *path);
/* Detach a crashed daemon's mount on `path`; 0 if there is none. */
int clean_stale_mount(const char *path);

#endif

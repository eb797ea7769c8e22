/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's policy, decided by the daemon; FUSE-free, so that the
 * backing core (core.h) and the front end (fs.h) share it.
 */
#ifndef LEASEFS_LFS_CONFIG_H
#define LEASEFS_LFS_CONFIG_H

#include <stdbool.h>

/* Policy, decided by the daemon from the placement. */
struct lfs_config {
	const char *root;          /* canonical root to serve */
	double entry_timeout;      /* seconds the kernel may cache names */
	double attr_timeout;       /* ... and attributes */
	bool keep_cache;           /* page cache and listings kept across opens */
	bool sole_writer;          /* nothing else writes ROOT: the kernel need
				    * not revalidate pages or listings */
	unsigned max_read;         /* -o max_read, which init() must repeat;
				    * 0 = none */
	long fd_limit;             /* descriptors the passthrough may hold:
				    * inodes' and callers' open files */
	long inode_fds;            /* inodes that keep an O_PATH fd before
				    * falling back to file handles; 0 = three
				    * quarters of fd_limit */
	long files_per_user;       /* files and directories one person (a
				    * uid and its subordinate uids) may have
				    * open; 0 = a quarter of what the inodes
				    * and uid 0's reserve leave of fd_limit */
	const char *subuid_path;   /* the subordinate uid ranges (/etc/subuid);
				    * NULL: none */
	bool allow_stacked_root;   /* root may be on FUSE or overlayfs; else
				    * lfs_new() refuses it with -EXDEV (the
				    * command checked it before; this is the
				    * root as the daemon opened it) */
	bool passthrough;          /* serve read-only opens' reads from the
				    * backing file in the kernel (FUSE
				    * passthrough), where the session's
				    * wire allows it */
	bool direct_writes;        /* serve a write-only open of an idle
				    * inode, and every open that joins it,
				    * past the page cache (iomode.c), where
				    * the wire lets such opens be mapped */
};

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Workspace roots (roots.c): what a root is called, to the kernel and to
 * the lease store.
 */
#ifndef LEASEFS_ROOTS_H
#define LEASEFS_ROOTS_H

#include <stdbool.h>
#include <stddef.h>

#include "lease.h"

/* Where the daemons of one host keep their shared state (host locks,
 * control sockets): root's, 0700. */
#define LEASEFS_RUN_DIR "/run/leasefs"

/*
 * Canonical workspace root: absolute, lexically cleaned, symlinks resolved;
 * for a path that does not exist yet, the longest existing ancestor is
 * resolved and the rest appended.  `out` has room for PATH_MAX bytes.
 */
int ws_canonical_root(const char *path, char *out, size_t outsz);

/* Absolute and lexically clean: no ".", "..", repeated or trailing "/".
 * (What a canonical root looks like, without resolving symlinks.) */
bool ws_path_clean(const char *path);

/* The directory above canonical `path`, in place; false at "/". */
bool ws_path_parent(char *path);

/* Component-wise: `path` is `root` or lies below it (both canonical). */
bool ws_path_within(const char *path, const char *root);

/* A path field of /proc/self/mountinfo with its octal escapes (\040 for
 * a space and the like) undone, in place. */
void ws_mountinfo_unescape(char *s);

/*
 * The leasefs mounts this mount namespace sees (/proc/self/mountinfo,
 * type fuse.leasefs): with `source` non-NULL, the mount point of the
 * first whose source (ROOT, fsname) is `source`; with `point` non-NULL,
 * whether `point` is one (out then gets it again).  0 found, -ENOENT, or
 * -errno reading mountinfo.
 */
int ws_leasefs_mount(const char *source, const char *point, char *out,
		     size_t outsz);

/* "workspace-roots/<hex sha256 of canonical root>"; `out` >= 81 bytes. */
int ws_root_name(const char *canonical_root, char *out, size_t outsz);
/* "sessions/<uuid>"; `out` >= 46 bytes.  uuid must be a lowercase RFC 4122
 * textual UUID. */
int ws_session_name(const char *uuid, char *out, size_t outsz);

#endif

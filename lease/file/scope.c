/* SPDX-License-Identifier: MIT */
/*
 * The file backend: scopes, markers of the grants within a name.
 * The layout and what the units share: file_int.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "file_int.h"

/* ---- scopes ---------------------------------------------------------- */

/* "SCOPE.in/NAME" with NAME's '/' as '!' (no name has a '!'), or with
 * name NULL the directory "SCOPE.in". */
int fb_marker_rel(char *buf, size_t sz, const char *scope, const char *name)
{
	int n = snprintf(buf, sz, "%s.in%s%s", scope, name ? "/" : "",
			 name ? name : "");

	if (n < 0 || (size_t)n >= sz)
		return -ENAMETOOLONG;
	for (char *p = buf + strlen(scope) + 4; name && *p; p++)
		if (*p == '/')
			*p = '!';
	return 0;
}

/* Create and write-lock NAME's marker in `scope`: fd or -errno. */
static int marker_take(struct file_store *fs, const char *scope,
		       const char *name)
{
	char rel[2 * LEASE_NAME_MAX + 16];
	int fd, r = fb_make_parents(fs->dirfd, scope);

	if (r == 0)
		r = fb_marker_rel(rel, sizeof(rel), scope, NULL);
	if (r == 0 && (r = lease_mkdir_beneath(fs->dirfd, rel, 0700)) == -EEXIST)
		r = 0;
	if (r == 0)
		r = fb_marker_rel(rel, sizeof(rel), scope, name);
	if (r < 0)
		return r;
	fd = lease_open_beneath(fs->dirfd, rel, O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		return fd;
	r = fb_grant_trylock(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* Every scope's marker, locked; on failure none.  *fds has sc->n. */
int fb_markers_take(struct file_store *fs, const char *name,
			const struct lease_scopes *sc, int **fds,
			struct lease_err *err)
{
	int r = 0;

	*fds = calloc(sc->n ? sc->n : 1, sizeof(**fds));
	if (!*fds)
		return lease_err_set(err, LEASE_E_IO, -ENOMEM, name, "out of memory");
	for (size_t i = 0; i < sc->n; i++)
		(*fds)[i] = -1;
	for (size_t i = 0; i < sc->n && r == 0; i++) {
		r = (*fds)[i] = marker_take(fs, sc->names[i], name);
		if (r >= 0)
			r = 0;
	}
	if (r < 0) {
		fb_close_markers(*fds, sc->n);
		*fds = NULL;
		return lease_err_set(err, LEASE_E_IO, r, name, "cannot mark "
				     "'%s' within its scopes: %s", name,
				     lease_strerror(r));
	}
	return 0;
}

/* Whether the grant lock (byte 0) of `name` is held; its record in *rec. */
bool fb_name_granted(struct file_store *fs, const char *name, struct rec *rec)
{
	char rel[LEASE_NAME_MAX + 16];
	bool held = false;
	int fd;

	if (fb_rel_path(rel, sizeof(rel), name, ".lock") < 0)
		return false;
	fd = lease_open_beneath(fs->dirfd, rel, O_RDONLY, 0);
	if (fd < 0)
		return false;
	if (fb_grant_is_held(fd, &held) < 0)
		held = false;
	close(fd);
	if (held && fb_rec_read(fs, name, rec, NULL, NULL) < 0)
		memset(rec, 0, sizeof(*rec));
	return held;
}

/* The grants living within `name` (locked markers in NAME.in): how many,
 * and the name of one in first (of LEASE_NAME_MAX + 1 bytes). */
unsigned fb_grants_within(struct file_store *fs, const char *name,
			      char *first)
{
	char rel[LEASE_NAME_MAX + 16];
	struct dirent *de;
	unsigned n = 0;
	int dfd;
	DIR *d;

	if (fb_marker_rel(rel, sizeof(rel), name, NULL) < 0)
		return 0;
	dfd = lease_open_beneath(fs->dirfd, rel, O_RDONLY | O_DIRECTORY, 0);
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		bool held = false;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fd = lease_open_beneath(dirfd(d), de->d_name, O_RDONLY, 0);
		if (fd < 0)
			continue;
		if (fb_grant_is_held(fd, &held) == 0 && held && n++ == 0) {
			snprintf(first, LEASE_NAME_MAX + 1, "%s", de->d_name);
			for (char *p = first; *p; p++)
				if (*p == '!')
					*p = '/';
		}
		close(fd);
	}
	closedir(d);
	return n;
}

/*
 * After `name`'s grant lock and its markers are taken: refused if a scope
 * is granted (or fenced) or something is granted within `name`.
 */
int fb_scopes_refuse(struct file_store *fs, const char *name,
			 const struct lease_scopes *sc, struct lease_err *err)
{
	char inner[LEASE_NAME_MAX + 1];
	struct rec rec;

	for (size_t i = 0; i < sc->n; i++)
		if (fb_name_granted(fs, sc->names[i], &rec))
			return fb_held_error(sc->names[i], &rec, err);
	if (fb_grants_within(fs, name, inner) == 0)
		return 0;
	if (fb_rec_read(fs, inner, &rec, NULL, NULL) < 0)
		memset(&rec, 0, sizeof(rec));
	return fb_held_error(inner, &rec, err);
}

/* Record the grant and start its watcher.  Caller holds both locks on
 * lock_fd and the markers; on success both belong to *out. */

/* SPDX-License-Identifier: MIT */
/*
 * Workspace roots: canonical paths, and the lease names of roots and
 * sessions (the seed's names, shared with the harness's stores).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "roots.h"

/* ---- canonical roots ----------------------------------------------- */

/*
 * Lexically clean absolute path `in` into `out`: no '.', no '..', no
 * repeated or trailing '/'.  '..' at the root stays at the root.
 */
static int lexical_clean(const char *in, char *out, size_t outsz)
{
	size_t n = 0;
	const char *p = in;

	if (outsz < 2)
		return -ERANGE;
	out[0] = '\0';
	while (*p) {
		const char *seg;
		size_t sl;

		while (*p == '/')
			p++;
		seg = p;
		while (*p && *p != '/')
			p++;
		sl = (size_t)(p - seg);
		if (sl == 0 || (sl == 1 && seg[0] == '.'))
			continue;
		if (sl == 2 && seg[0] == '.' && seg[1] == '.') {
			while (n > 0 && out[n] != '/')
				n--;
			out[n] = '\0';
			continue;
		}
		if (n + 1 + sl + 1 > outsz)
			return -ENAMETOOLONG;
		out[n++] = '/';
		memcpy(out + n, seg, sl);
		n += sl;
		out[n] = '\0';
	}
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return 0;
}

/* Make `path` absolute against the current directory, into `out`. */
static int make_absolute(const char *path, char *out, size_t outsz)
{
	char cwd[PATH_MAX];
	int n;

	if (path[0] == '/') {
		n = snprintf(out, outsz, "%s", path);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		n = snprintf(out, outsz, "%s/%s", cwd, path);
	}
	if (n < 0 || (size_t)n >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * Resolve the longest existing prefix of the clean absolute path `clean`
 * with realpath(3) and append the remaining (already clean) components.
 */
static int resolve_existing(char *clean, char *out, size_t outsz)
{
	char resolved[PATH_MAX];
	size_t cut = strlen(clean);
	const char *rest;
	int n;

	for (;;) {
		char saved = clean[cut];
		bool ok;
		int e;

		clean[cut] = '\0';
		ok = realpath(cut ? clean : "/", resolved) != NULL;
		e = errno;
		clean[cut] = saved;
		if (ok)
			break;
		if (e != ENOENT || cut == 0)
			return -e;
		do
			cut--;
		while (cut > 0 && clean[cut] != '/');
	}
	rest = clean + cut;
	if (strcmp(resolved, "/") == 0 && *rest == '/')
		n = snprintf(out, outsz, "%s", rest);
	else
		n = snprintf(out, outsz, "%s%s", resolved, rest);
	if (n < 0 || (size_t)n >= outsz)
		return -ENAMETOOLONG;
	return 0;
}

int ws_canonical_root(const char *path, char *out, size_t outsz)
{
	char abs[PATH_MAX], clean[PATH_MAX];
	int r;

	if (!path || !*path || !out)
		return -EINVAL;
	r = make_absolute(path, abs, sizeof(abs));
	if (r < 0)
		return r;
	r = lexical_clean(abs, clean, sizeof(clean));
	if (r < 0)
		return r;
	return resolve_existing(clean, out, outsz);
}

/* ---- lease names for roots and sessions ----------------------------- */

#define ROOT_PREFIX "workspace-roots/"
#define SESSION_PREFIX "sessions/"

int ws_root_name(const char *canonical_root, char *out, size_t outsz)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned int mdlen = 32;
	size_t plen = sizeof(ROOT_PREFIX) - 1;
	uint8_t md[32];

	if (!canonical_root || !*canonical_root || !out)
		return -EINVAL;
	lease_sha256(canonical_root, strlen(canonical_root), md);
	if (outsz < plen + 2 * (size_t)mdlen + 1)
		return -ERANGE;
	memcpy(out, ROOT_PREFIX, plen);
	for (unsigned int i = 0; i < mdlen; i++) {
		out[plen + 2 * i] = hex[md[i] >> 4];
		out[plen + 2 * i + 1] = hex[md[i] & 0xf];
	}
	out[plen + 2 * mdlen] = '\0';
	return 0;
}

int ws_session_name(const char *uuid, char *out, size_t outsz)
{
	int n;

	if (!uuid || !out || !lease_uuid_valid(uuid))
		return -EINVAL;
	n = snprintf(out, outsz, SESSION_PREFIX "%s", uuid);
	if (n < 0 || (size_t)n >= outsz)
		return -ERANGE;
	return 0;
}

bool ws_path_clean(const char *path)
{
	char clean[PATH_MAX];

	return path && path[0] == '/' &&
	       lexical_clean(path, clean, sizeof(clean)) == 0 &&
	       strcmp(clean, path) == 0;
}

bool ws_path_within(const char *path, const char *root)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return true;
	return strncmp(path, root, n) == 0 &&
	       (path[n] == '\0' || path[n] == '/');
}

bool ws_path_parent(char *path)
{
	char *slash = strrchr(path, '/');

	if (!slash || strcmp(path, "/") == 0)
		return false;
	if (slash == path)
		slash[1] = '\0';
	else
		*slash = '\0';
	return true;
}

void ws_mountinfo_unescape(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
				      (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = '\0';
}

/* A mountinfo line's mount point, filesystem type and source (the fields
 * after " - "), unescaped in place; false if it has not got them. */
static bool mountinfo_fields(char *line, char **point, char **type,
			     char **source)
{
	char *dash = strstr(line, " - "), *save = NULL, *f = line;

	if (!dash)
		return false;
	*dash = '\0';
	for (int i = 0; i < 5 && f; i++)
		f = strtok_r(i ? NULL : line, " ", &save);
	*point = f;
	*type = strtok_r(dash + 3, " ", &save);
	*source = *type ? strtok_r(NULL, " ", &save) : NULL;
	if (!*point || !*source)
		return false;
	ws_mountinfo_unescape(*point);
	ws_mountinfo_unescape(*source);
	return true;
}

int ws_leasefs_mount(const char *source, const char *point, char *out,
		     size_t outsz)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *mp, *type, *src;
	size_t cap = 0;
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (r == -ENOENT && getline(&line, &cap, f) > 0) {
		if (!mountinfo_fields(line, &mp, &type, &src) ||
		    strcmp(type, "fuse.leasefs") != 0 ||
		    (source && strcmp(src, source) != 0) ||
		    (point && strcmp(mp, point) != 0))
			continue;
		r = (size_t)snprintf(out, outsz, "%s", mp) < outsz ? 0 : -ENAMETOOLONG;
	}
	free(line);
	fclose(f);
	return r;
}

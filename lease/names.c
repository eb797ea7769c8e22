/* SPDX-License-Identifier: MIT */
/*
 * Lease names: the name grammar, canonical workspace roots, root and
 * session lease names, UUIDs.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>


#include "lease.h"

/* ---- name grammar -------------------------------------------------- */

static bool seg_start_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static bool seg_char_ok(char ch)
{
	return seg_start_ok(ch) || ch == '_' || ch == '.' || ch == '-';
}

static int bad(struct lease_err *err, const char *name, const char *fmt,
	       size_t pos, char ch)
{
	unsigned char u = (unsigned char)ch;

	return lease_err_set(err, LEASE_E_BADNAME, 0, name, fmt, pos,
			     (u >= 0x20 && u < 0x7f) ? ch : '?', u);
}

/* Checks one character at `pos`; `seg_first` says it opens a segment. */
static int check_char(const char *name, size_t pos, bool seg_first,
		      struct lease_err *err)
{
	char ch = name[pos];

	if (ch >= 'A' && ch <= 'Z')
		return bad(err, name,
			   "invalid lease name: uppercase letter at position %zu "
			   "('%c', 0x%02x) (rule: lowercase only)", pos, ch);
	if (seg_first && !seg_start_ok(ch) && seg_char_ok(ch))
		return bad(err, name,
			   "invalid lease name: segment starts at position %zu "
			   "with '%c' (0x%02x) (rule: segment must start with "
			   "[a-z0-9])", pos, ch);
	if (!seg_char_ok(ch))
		return bad(err, name,
			   "invalid lease name: character at position %zu "
			   "'%c' (0x%02x) (rule: allowed characters are "
			   "[a-z0-9_.-] and '/')", pos, ch);
	return 0;
}

/* Checks a '/' at `pos` in a name of `len` bytes. */
static int check_slash(const char *name, size_t pos, size_t len,
		       struct lease_err *err)
{
	if (pos == 0)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name,
				     "invalid lease name: '/' at position %zu "
				     "(rule: no leading '/')", pos);
	if (pos == len - 1)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name,
				     "invalid lease name: '/' at position %zu "
				     "(rule: no trailing '/')", pos);
	if (name[pos - 1] == '/')
		return lease_err_set(err, LEASE_E_BADNAME, 0, name,
				     "invalid lease name: '/' at position %zu "
				     "(rule: no empty segment)", pos);
	return 0;
}

int lease_name_validate(const char *name, struct lease_err *err)
{
	size_t len;
	int r;

	if (!name || !*name)
		return lease_err_set(err, LEASE_E_BADNAME, 0, "",
				     "invalid lease name: empty (rule: length "
				     "1..%d bytes)", LEASE_NAME_MAX);
	len = strnlen(name, LEASE_NAME_MAX + 1);
	if (len > LEASE_NAME_MAX)
		return lease_err_set(err, LEASE_E_BADNAME, 0, name,
				     "invalid lease name: longer than %d bytes "
				     "at position %d (rule: length 1..%d bytes)",
				     LEASE_NAME_MAX, LEASE_NAME_MAX,
				     LEASE_NAME_MAX);
	for (size_t i = 0; i < len; i++) {
		if (name[i] == '/')
			r = check_slash(name, i, len, err);
		else
			r = check_char(name, i, i == 0 || name[i - 1] == '/',
				       err);
		if (r < 0)
			return r;
	}
	return 0;
}

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

int lease_canonical_root(const char *path, char *out, size_t outsz)
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

int lease_root_name(const char *canonical_root, char *out, size_t outsz)
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

int lease_session_name(const char *uuid, char *out, size_t outsz)
{
	int n;

	if (!uuid || !out || !lease_uuid_valid(uuid))
		return -EINVAL;
	n = snprintf(out, outsz, SESSION_PREFIX "%s", uuid);
	if (n < 0 || (size_t)n >= outsz)
		return -ERANGE;
	return 0;
}

/* ---- UUIDs ------------------------------------------------------------ */

static int fill_random(unsigned char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = getrandom(buf + got, len - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

int lease_uuid_random(char *out, size_t outsz)
{
	unsigned char b[16];
	int r;

	if (!out || outsz < 37)
		return -ERANGE;
	r = fill_random(b, sizeof(b));
	if (r < 0)
		return r;
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	snprintf(out, outsz,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
	return 0;
}

bool lease_uuid_valid(const char *uuid)
{
	if (!uuid || strlen(uuid) != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		char ch = uuid[i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? ch != '-' :
		    !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return false;
	}
	return true;
}

bool lease_path_within(const char *path, const char *root)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return true;
	return strncmp(path, root, n) == 0 &&
	       (path[n] == '\0' || path[n] == '/');
}

bool lease_path_parent(char *path)
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

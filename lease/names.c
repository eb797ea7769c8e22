/* SPDX-License-Identifier: MIT */
/*
 * Lease names: the name grammar, and UUIDs.
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

/* SPDX-License-Identifier: MIT */
/*
 * Who a caller is for the open-file budget: a person, not a uid.  A uid
 * inside a subordinate range (/etc/subuid: the uids newuidmap gives a
 * user's containers and `unshare --map-auto`) is its range's owner, so a
 * person with 65,536 uids has one budget (fs/fuse/README.md, "Budgets").
 *
 * The file is read once, before the mount serves anything: opened
 * O_NONBLOCK|O_NOFOLLOW (a FIFO or a symlink there is refused, not
 * waited on), at most PERSONS_FILE_MAX bytes and PERSONS_RANGES_MAX
 * ranges; a line that does not parse is skipped.  Owners are numeric or
 * names; names are resolved from /etc/passwd read the same way, never
 * through NSS (which may ask a network service and wait): a name not
 * there keeps a person of its own, which all its ranges share.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

#define PERSONS_FILE_MAX (4 << 20)
#define PERSONS_RANGES_MAX 16384
#define PASSWD_PATH "/etc/passwd"

/* A person key that is no uid (above every uid_t): names not in
 * /etc/passwd, by their first line's index, and root's own ranges. */
#define PERSON_NAMED(i) ((UINT64_C(1) << 32) | (uint64_t)(i))
#define PERSON_ROOTS_SUBUIDS (UINT64_C(2) << 32)

/* The whole of a small regular file, NUL-terminated, malloc'ed; NULL
 * (errno set) if it is missing, not regular, or too big. */
static char *slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t n = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > PERSONS_FILE_MAX) {
		errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	while (buf && n < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);

		if (k <= 0)
			break; /* shrank meanwhile: what was read */
		n += (size_t)k;
	}
	if (buf)
		buf[n] = '\0';
out:
	close(fd);
	return buf;
}

/* A decimal uid (no sign, no junk): 0, or -EINVAL. */
static int parse_u32(const char *s, uint32_t *out)
{
	unsigned long long v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || (v = v * 10 + (unsigned)(*s - '0')) > UINT32_MAX)
			return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

/* `name`'s uid in the passwd text (NULL: none read): 0 or -ENOENT. */
static int passwd_uid(const char *passwd, const char *name, uint32_t *uid)
{
	size_t len = strlen(name);

	for (const char *p = passwd; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		const char *c;
		char num[16];
		size_t k;

		if (strncmp(p, name, len) != 0 || p[len] != ':')
			continue;
		c = strchr(p + len + 1, ':');  /* past the password field */
		if (!c)
			return -ENOENT;
		k = strcspn(c + 1, ":\n");
		if (k == 0 || k >= sizeof(num))
			return -ENOENT;
		memcpy(num, c + 1, k);
		num[k] = '\0';
		return parse_u32(num, uid);
	}
	return -ENOENT;
}

/* The person of one line's owner. */
static uint64_t owner_person(const char *passwd, const char *owner, size_t line)
{
	uint32_t uid;

	if (parse_u32(owner, &uid) < 0 && passwd_uid(passwd, owner, &uid) < 0)
		return PERSON_NAMED(line);
	return uid == 0 ? PERSON_ROOTS_SUBUIDS : uid;
}

static int range_cmp(const void *a, const void *b)
{
	const struct subrange *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* "OWNER:START:COUNT" into r (person left for the caller): 0 or -EINVAL. */
static int parse_line(char *line, char **owner, struct subrange *r)
{
	char *start = strchr(line, ':'), *count;
	uint32_t s, c;

	if (!start)
		return -EINVAL;
	*start++ = '\0';
	count = strchr(start, ':');
	if (!count || !*line)
		return -EINVAL;
	*count++ = '\0';
	if (parse_u32(start, &s) < 0 || parse_u32(count, &c) < 0 || c == 0 ||
	    (uint64_t)s + c > UINT32_MAX)
		return -EINVAL;
	*owner = line;
	r->start = s;
	r->end = s + c;
	return 0;
}

/* Later lines name the person of an earlier line's unresolved name. */
static uint64_t same_name(struct persons *p, char **names, const char *owner,
			  uint64_t person)
{
	for (size_t i = 0; i < p->n; i++)
		if (names[i] && strcmp(names[i], owner) == 0)
			return p->r[i].person;
	return person;
}

/* Lines in text, at most PERSONS_RANGES_MAX. */
static size_t lines_in(const char *text)
{
	size_t n = 1;

	for (const char *c = text; (c = strchr(c, '\n')) != NULL; c++)
		n++;
	return n < PERSONS_RANGES_MAX ? n : PERSONS_RANGES_MAX;
}

int persons_load(struct persons *p, const char *path)
{
	char *text, *passwd, *save = NULL, **names, *l;
	size_t cap, line = 0;

	memset(p, 0, sizeof(*p));
	if (!path || !(text = slurp(path)))
		return !path || errno == ENOENT ? 0 : -errno;
	passwd = slurp(PASSWD_PATH);
	cap = lines_in(text);
	p->r = calloc(cap, sizeof(*p->r));
	names = calloc(cap, sizeof(*names));
	for (l = strtok_r(text, "\n", &save); p->r && names && l && p->n < cap;
	     l = strtok_r(NULL, "\n", &save), line++) {
		struct subrange r;
		char *owner;

		if (l[0] == '#' || parse_line(l, &owner, &r) < 0) {
			p->skipped++;
			continue;
		}
		r.person = owner_person(passwd, owner, line);
		if (r.person == PERSON_NAMED(line)) {
			r.person = same_name(p, names, owner, r.person);
			names[p->n] = owner;
		}
		p->r[p->n++] = r;
	}
	if (p->r && names)
		qsort(p->r, p->n, sizeof(*p->r), range_cmp);
	else
		persons_free(p);
	free(names);
	free(passwd);
	free(text);
	return p->r || !cap ? 0 : -ENOMEM;
}

uint64_t persons_of(const struct persons *p, uid_t uid)
{
	size_t lo = 0, hi = p->n;

	if (uid == 0)
		return 0; /* root is root, whatever a range says */
	while (lo < hi) {  /* the last range starting at or below uid */
		size_t mid = lo + (hi - lo) / 2;

		if (p->r[mid].start <= uid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && uid < p->r[lo - 1].end)
		return p->r[lo - 1].person;
	return uid;
}

void persons_free(struct persons *p)
{
	free(p->r);
	memset(p, 0, sizeof(*p));
}

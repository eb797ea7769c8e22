/* SPDX-License-Identifier: MIT */
/*
 * The command line: the form mount(8) uses, turned into `leasefs mount`'s
 * own arguments, so that one parser (options.c) checks both forms.
 * (The commands: main.c; shared: cli.h.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A growing argument vector; `owned` are the strings it must free. */
struct argv_buf {
	char **v;
	size_t n, cap;
	char **owned;
	size_t nowned, capowned;
};

static int grow(void ***p, size_t *cap, size_t need, size_t elem)
{
	void **q;
	size_t c = *cap ? *cap : 8;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* Append arg (borrowed); 0 or -ENOMEM. */
static int argv_add(struct argv_buf *a, char *arg)
{
	if (grow((void ***)&a->v, &a->cap, a->n + 2, sizeof(*a->v)) < 0)
		return -ENOMEM;
	a->v[a->n++] = arg;
	a->v[a->n] = NULL;
	return 0;
}

/* Take ownership of arg, freed with the vector (NULL: out of memory). */
static int argv_own(struct argv_buf *a, char *arg)
{
	if (!arg || grow((void ***)&a->owned, &a->capowned, a->nowned + 1,
			 sizeof(*a->owned)) < 0) {
		free(arg);
		return -ENOMEM;
	}
	a->owned[a->nowned++] = arg;
	return 0;
}

/* Append arg and take ownership of it. */
static int argv_add_owned(struct argv_buf *a, char *arg)
{
	int r = argv_own(a, arg);

	return r < 0 ? r : argv_add(a, arg);
}

static void argv_free(struct argv_buf *a)
{
	for (size_t i = 0; i < a->nowned; i++)
		free(a->owned[i]);
	free(a->owned);
	free(a->v);
}

/* One option from inside -o: leasefs's own key becomes --KEY=VALUE ('+'
 * joins etcd endpoints there; KEY may be spelled with '_' for '-'),
 * anything else stays a -o option. */
static int fstab_opt(struct argv_buf *a, char *opt)
{
	size_t key = mount_own_key(opt);
	char *arg;

	if (!key) {
		int r = argv_add(a, "-o");

		return r < 0 ? r : argv_add(a, opt);
	}
	if (asprintf(&arg, "--%s", opt) < 0)
		return -ENOMEM;
	for (size_t i = 2; i < key + 2; i++)
		if (arg[i] == '_')
			arg[i] = '-';
	if (strncmp(opt, "leases=", 7) == 0)
		for (char *p = arg; *p; p++)
			if (*p == '+')
				*p = ',';
	return argv_add_owned(a, arg);
}

/*
 * The form mount(8) uses through mount.fuse3 (fstab, mount -t fuse.leasefs):
 *   leasefs ROOT MOUNTPOINT -o OPT[,OPT...] ...
 * turned into `leasefs mount --KEY=VALUE... -o OTHER ROOT MOUNTPOINT`, so
 * that one parser checks both forms.  Inside -o, ',' separates options, so
 * several etcd endpoints are written with '+' (leases=etcd://a:1+b:2).
 * Any number of options of any length.
 */
int cmd_mount_fstab(int argc, char **argv)
{
	struct argv_buf a = { 0 };
	int r = argv_add(&a, "mount"), code = EXIT_FAIL;

	for (int i = 3; i < argc && r == 0; i++) {
		char *copy, *save = NULL;

		if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc) {
			fprintf(stderr, "leasefs: '%s': after ROOT MOUNTPOINT only "
				"-o OPTIONS may follow\n", argv[i]);
			argv_free(&a);
			return EXIT_USAGE;
		}
		copy = strdup(argv[++i]);
		r = argv_own(&a, copy); /* its pieces are the arguments */
		for (char *o = r ? NULL : strtok_r(copy, ",", &save); o && !r;
		     o = strtok_r(NULL, ",", &save))
			r = fstab_opt(&a, o);
	}
	if (r == 0)
		r = argv_add(&a, argv[1]);
	if (r == 0)
		r = argv_add(&a, argv[2]);
	if (r == 0)
		code = cmd_mount((int)a.n, a.v);
	else
		fprintf(stderr, "leasefs: out of memory\n");
	argv_free(&a);
	return code;
}

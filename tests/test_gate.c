/* SPDX-License-Identifier: MIT */
/*
 * The gate, without a mount: fake inner operations that record their
 * calls, a mem-store coordinator, and this file's own fuse_req_userdata()
 * and fuse_reply_err() (link seams: the test does not link libfuse).
 *
 * Table-driven: every operation of the passthrough's table, with whether
 * the gate must treat it as mutating.  While the lease is held every call
 * reaches the inner op; after loss exactly the mutating ones answer EROFS
 * without reaching it, and every other one still does.  Admission is
 * always left again (the coordinator drains to zero).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coord.h"
#include "roots.h"
#include "gate.h"
#include "ops.h"
#include "mem.h"
#include "testutil.h"

/* ---- link seams ---------------------------------------------------------- */

/* What a fake request carries: the session's layers and the reply. */
struct fake_req {
	struct lfs_session sess;
	int replied_err;     /* -1: no error reply */
};

void *fuse_req_userdata(fuse_req_t req)
{
	return &((struct fake_req *)(void *)req)->sess;
}

int fuse_reply_err(fuse_req_t req, int err)
{
	((struct fake_req *)(void *)req)->replied_err = err;
	return 0;
}

/* ---- fake inner operations, one per op of the table ------------------- */

static const char *inner_called; /* the last inner op that ran */

/* Takes every argument of an op, so the fakes use all their parameters. */
static void fake_touch(fuse_req_t req, ...)
{
	(void)req;
}

#define FAKE(op, kind, doc, params, args)       \
	static void fake_##op params            \
	{                                       \
		fake_touch args;                \
		inner_called = #op;             \
	}
LFS_OPS(FAKE)

static const struct fuse_lowlevel_ops fake_inner = {
#define FAKE_SET(op, kind, doc, params, args) .op = fake_##op,
	LFS_OPS(FAKE_SET)
};

/* ---- the table ---------------------------------------------------------- */

struct gated_call {
	const char *what;    /* how it is invoked */
	const char *inner;   /* the inner op it must reach */
	bool mutating;       /* this test's own judgment: it can change ROOT */
	void (*call)(const struct fuse_lowlevel_ops *o, fuse_req_t r);
};

static struct fuse_file_info fi_rdonly = { .flags = O_RDONLY };
static struct fuse_file_info fi_wronly = { .flags = O_WRONLY };
static struct fuse_file_info fi_rdwr = { .flags = O_RDWR };
static struct fuse_file_info fi_trunc = { .flags = O_RDONLY | O_TRUNC };
static struct stat st;
static struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
static struct fuse_forget_data fd1 = { .ino = 2, .nlookup = 1 };

#define CALL(id, expr)                                                  \
	static void call_##id(const struct fuse_lowlevel_ops *o, fuse_req_t r) \
	{                                                               \
		o->expr;                                                \
	}

CALL(lookup, lookup(r, 1, "n"))
CALL(forget, forget(r, 2, 1))
CALL(forget_multi, forget_multi(r, 1, &fd1))
CALL(getattr, getattr(r, 1, NULL))
CALL(setattr, setattr(r, 1, &st, FUSE_SET_ATTR_MODE, NULL))
CALL(readlink, readlink(r, 2))
CALL(mknod, mknod(r, 1, "n", S_IFIFO | 0600, 0))
CALL(mkdir, mkdir(r, 1, "n", 0700))
CALL(symlink, symlink(r, "t", 1, "n"))
CALL(link, link(r, 2, 1, "n"))
CALL(unlink, unlink(r, 1, "n"))
CALL(rmdir, rmdir(r, 1, "n"))
CALL(rename, rename(r, 1, "a", 1, "b", 0))
CALL(create, create(r, 1, "n", 0600, &fi_wronly))
CALL(open_rdonly, open(r, 2, &fi_rdonly))
CALL(open_wronly, open(r, 2, &fi_wronly))
CALL(open_rdwr, open(r, 2, &fi_rdwr))
CALL(open_trunc, open(r, 2, &fi_trunc))
CALL(read, read(r, 2, 4096, 0, &fi_rdonly))
CALL(write_buf, write_buf(r, 2, &bv, 0, &fi_wronly))
CALL(flush, flush(r, 2, &fi_wronly))
CALL(release, release(r, 2, &fi_wronly))
CALL(fsync, fsync(r, 2, 0, &fi_wronly))
CALL(fallocate, fallocate(r, 2, 0, 0, 4096, &fi_wronly))
CALL(copy_file_range, copy_file_range(r, 2, 0, &fi_rdonly, 3, 0, &fi_wronly, 1, 0))
CALL(lseek, lseek(r, 2, 0, SEEK_DATA, &fi_rdonly))
CALL(opendir, opendir(r, 1, &fi_rdonly))
CALL(readdir, readdir(r, 1, 4096, 0, &fi_rdonly))
CALL(readdirplus, readdirplus(r, 1, 4096, 0, &fi_rdonly))
CALL(releasedir, releasedir(r, 1, &fi_rdonly))
CALL(fsyncdir, fsyncdir(r, 1, 0, &fi_rdonly))
CALL(statfs, statfs(r, 1))
CALL(setxattr, setxattr(r, 2, "user.k", "v", 1, 0))
CALL(getxattr, getxattr(r, 2, "user.k", 0))
CALL(listxattr, listxattr(r, 2, 0))
CALL(removexattr, removexattr(r, 2, "user.k"))

#define ROW(id, inner, mutating) { #id, #inner, mutating, call_##id }

static const struct gated_call table[] = {
	ROW(lookup, lookup, false),
	ROW(forget, forget, false),
	ROW(forget_multi, forget_multi, false),
	ROW(getattr, getattr, false),
	ROW(setattr, setattr, true),
	ROW(readlink, readlink, false),
	ROW(mknod, mknod, true),
	ROW(mkdir, mkdir, true),
	ROW(symlink, symlink, true),
	ROW(link, link, true),
	ROW(unlink, unlink, true),
	ROW(rmdir, rmdir, true),
	ROW(rename, rename, true),
	ROW(create, create, true),
	ROW(open_rdonly, open, false),
	ROW(open_wronly, open, true),
	ROW(open_rdwr, open, true),
	ROW(open_trunc, open, true),
	ROW(read, read, false),
	ROW(write_buf, write_buf, true),
	ROW(flush, flush, false),
	ROW(release, release, false),
	ROW(fsync, fsync, false),
	ROW(fallocate, fallocate, true),
	ROW(copy_file_range, copy_file_range, true),
	ROW(lseek, lseek, false),
	ROW(opendir, opendir, false),
	ROW(readdir, readdir, false),
	ROW(readdirplus, readdirplus, false),
	ROW(releasedir, releasedir, false),
	ROW(fsyncdir, fsyncdir, false),
	ROW(statfs, statfs, false),
	ROW(setxattr, setxattr, true),
	ROW(getxattr, getxattr, false),
	ROW(listxattr, listxattr, false),
	ROW(removexattr, removexattr, true),
};

static size_t rows_mutating(void)
{
	size_t n = 0;

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		n += table[i].mutating;
	return n;
}

/* ---- fixture ------------------------------------------------------------ */

struct fx {
	struct lease_store *store;
	char *root;
	struct coord *coord;
	struct gate *gate;
	struct fake_req req;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct coord_config cfg = { .placement = PLACEMENT_EXCLUSIVE };
	struct lease_err err = { 0 };

	assert_non_null(f);
	f->store = tu_open_store("mem", NULL);
	f->root = tu_mkdtemp("gate");
	cfg.root = f->root;
	cfg.store = f->store;
	if (coord_open(&cfg, &f->coord, &err) != 0)
		fail_msg("coord_open: %s", err.msg);
	assert_int_equal(gate_new(f->coord, &fake_inner, &f->gate, NULL), 0);
	f->req.sess.gate = f->gate;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	gate_free(f->gate);
	coord_free(f->coord);
	lease_store_close(f->store);
	tu_rmrf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* Invoke one row; returns the error replied by the gate (-1: none). */
static int invoke(struct fx *f, const struct gated_call *c)
{
	inner_called = NULL;
	f->req.replied_err = -1;
	c->call(gate_ops(f->gate), (fuse_req_t)(void *)&f->req);
	return f->req.replied_err;
}

static void lose_root(struct fx *f)
{
	char name[LEASE_NAME_MAX + 1];
	char canon[PATH_MAX];

	assert_int_equal(ws_canonical_root(f->root, canon, sizeof(canon)), 0);
	assert_int_equal(ws_root_name(canon, name, sizeof(name)), 0);
	assert_int_equal(lease_mem_force_loss(f->store, name,
					      LEASE_LOSS_TAKEOVER), 0);
	assert_int_not_equal(coord_healthy(f->coord), 0);
}

/* ---- tests -------------------------------------------------------------- */

static void test_held_everything_passes(void **state)
{
	struct fx *f = *state;

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct gated_call *c = &table[i];
		int err = invoke(f, c);

		if (err != -1)
			fail_msg("%s refused with %d while held", c->what, err);
		if (!inner_called || strcmp(inner_called, c->inner) != 0)
			fail_msg("%s did not reach inner %s", c->what, c->inner);
	}
}

/* The re-check the layer behind asks right before a backing call: 0
 * while the lease is healthy, -EROFS once it is lost (a mutation admitted
 * before the loss is refused there). */
static void test_recheck_after_loss(void **state)
{
	struct fx *f = *state;

	assert_int_equal(gate_recheck(f->gate), 0);
	lose_root(f);
	assert_int_equal(gate_recheck(f->gate), -EROFS);
}

static void test_lost_exactly_mutations_refused(void **state)
{
	struct fx *f = *state;
	size_t refused = 0;

	lose_root(f);
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct gated_call *c = &table[i];
		int err = invoke(f, c);

		if (c->mutating && (err != EROFS || inner_called))
			fail_msg("%s after loss: replied %d, inner %s", c->what,
				 err, inner_called ? inner_called : "not run");
		if (!c->mutating && (err != -1 || !inner_called ||
				     strcmp(inner_called, c->inner) != 0))
			fail_msg("%s after loss: replied %d, inner %s (must pass)",
				 c->what, err, inner_called ? inner_called : "not run");
		refused += c->mutating;
	}
	/* Each refusal was counted under its op, and nothing else was. */
	uint64_t counted = 0;

	for (size_t i = 0; i < gate_nops(); i++)
		counted += gate_refused(f->gate, i);
	assert_int_equal(counted, refused);
	/* Every admission was left again: the coordinator is drained. */
	assert_int_equal(coord_fence(f->coord, 0), 0);
}

/* Ops the inner table lacks stay absent: the gate adds no entry. */
static void test_absent_ops_stay_absent(void **state)
{
	struct fuse_lowlevel_ops inner = { .lookup = fake_lookup };
	struct fx *f = *state;
	struct gate *g;

	assert_int_equal(gate_new(f->coord, &inner, &g, NULL), 0);
	assert_null(gate_ops(g)->write_buf);
	assert_null(gate_ops(g)->open);
	assert_non_null(gate_ops(g)->lookup);
	gate_free(g);
}

static size_t op_index(const char *name)
{
	for (size_t i = 0; i < gate_nops(); i++)
		if (strcmp(gate_op_name(i), name) == 0)
			return i;
	fail_msg("no counter for %s", name);
	return 0;
}

/* Every request is counted under its operation; refusals too. */
static void test_counts(void **state)
{
	struct fx *f = *state;
	size_t n = sizeof(table) / sizeof(table[0]);
	uint64_t total = 0, refused = 0;

	for (size_t i = 0; i < n; i++)
		invoke(f, &table[i]);
	lose_root(f);
	for (size_t i = 0; i < n; i++)
		invoke(f, &table[i]);
	for (size_t i = 0; i < gate_nops(); i++) {
		total += gate_requests(f->gate, i);
		refused += gate_refused(f->gate, i);
		if (!gate_op_mutating(i))
			assert_int_equal(gate_refused(f->gate, i), 0);
	}
	assert_int_equal(total, 2 * n);
	assert_int_equal(refused, rows_mutating());
	assert_int_equal(gate_requests(f->gate, op_index("open")), 8);
	assert_int_equal(gate_refused(f->gate, op_index("open")), 3);
	assert_int_equal(gate_refused(f->gate, op_index("rename")), 1);
	assert_int_equal(gate_requests(f->gate, op_index("lookup")), 2);
}

static size_t op_index(const char *name);

/* The rows call every op of the table, and what this test judges mutating
 * is what the gate treats as mutating (open: when it can write). */
static void test_table_agrees(void **state)
{
	struct fx *f = *state;

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		size_t op = op_index(table[i].inner);

		if (strcmp(table[i].inner, "open") != 0 &&
		    gate_op_mutating(op) != table[i].mutating)
			fail_msg("%s: the gate says %s, this test says %s",
				 table[i].what,
				 gate_op_mutating(op) ? "mutating" : "not",
				 table[i].mutating ? "mutating" : "not");
		invoke(f, &table[i]);
	}
	for (size_t i = 0; i < gate_nops(); i++)
		if (gate_requests(f->gate, i) == 0)
			fail_msg("no row calls %s", gate_op_name(i));
}

/* Default-deny: an inner table with an op the op table does not know is
 * refused, and the op named. */
static void test_unknown_op_refused(void **state)
{
	struct fx *f = *state;
	struct fuse_lowlevel_ops inner = fake_inner;
	const char *unknown = NULL;
	struct gate *g = NULL;

	inner.ioctl = (void *)fake_lookup;
	assert_int_equal(gate_new(f->coord, &inner, &g, &unknown), -EOPNOTSUPP);
	assert_null(g);
	assert_string_equal(unknown, "ioctl");
	inner = fake_inner;
	inner.flock = (void *)fake_lookup;
	assert_int_equal(gate_new(f->coord, &inner, &g, &unknown), -EOPNOTSUPP);
	assert_string_equal(unknown, "flock");
}

static const char *doc_files[2];

/* A file's text with every run of white space made one space. */
static char *flat_text(const char *path)
{
	FILE *fp = fopen(path, "re");
	char *out, *o;
	int ch, sp = 0;

	if (!fp)
		fail_msg("cannot open %s", path);
	out = o = malloc(1 << 20);
	assert_non_null(out);
	while ((ch = fgetc(fp)) != EOF && o - out < (1 << 20) - 2) {
		if (ch == ' ' || ch == '\n' || ch == '\t') {
			sp = 1;
			continue;
		}
		if (sp && o > out)
			*o++ = ' ';
		sp = 0;
		*o++ = (char)ch;
	}
	*o = '\0';
	fclose(fp);
	return out;
}

/* README and leasefs(8) list the mutating ops exactly as the table has
 * them: "a, b, ... and z". */
static void test_docs_list_mutating_ops(void **state)
{
	char list[2048] = "";
	size_t n = 0, k = 0, len;

	(void)state;
	for (size_t i = 0; i < gate_nops(); i++)
		n += gate_op_doc(i) != NULL;
	for (size_t i = 0; i < gate_nops(); i++) {
		if (!gate_op_doc(i))
			continue;
		len = strlen(list);
		snprintf(list + len, sizeof(list) - len, "%s%s",
			 k == 0 ? "" : k + 1 == n ? " and " : ", ", gate_op_doc(i));
		k++;
	}
	for (int d = 0; d < 2; d++) {
		char *text;

		if (!doc_files[d])
			skip();
		text = flat_text(doc_files[d]);
		if (!strstr(text, list))
			fail_msg("%s does not list the mutating operations as "
				 "the op table has them: \"%s\"", doc_files[d], list);
		free(text);
	}
}

int main(int argc, char **argv)
{
	doc_files[0] = argc > 1 ? argv[1] : NULL;
	doc_files[1] = argc > 2 ? argv[2] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_table_agrees, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_op_refused, setup, teardown),
		cmocka_unit_test(test_docs_list_mutating_ops),
		cmocka_unit_test_setup_teardown(test_held_everything_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_exactly_mutations_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recheck_after_loss, setup, teardown),
		cmocka_unit_test_setup_teardown(test_absent_ops_stay_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts, setup, teardown),
	};

	return cmocka_run_group_tests_name("gate", tests, NULL, NULL);
}

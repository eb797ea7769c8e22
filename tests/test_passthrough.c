/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's FUSE front end, over a temp dir, without a mount: its
 * INIT, the translation of a request into a reply (a negative entry), how
 * opens are served, and the gate built over its real ops table.  Its
 * operations are called with fake requests (this file defines the
 * fuse_req_* and fuse_reply_* functions the front end calls, which take
 * precedence over libfuse's).  The backing calls themselves are
 * test_backing's, without any of this.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "coord.h"
#include "fs.h"
#include "gate.h"
#include "testutil.h"

/* ---- fake requests --------------------------------------------------------- */

struct fake_req {
	struct lfs_session sess;
	struct fuse_ctx ctx;
	int err;                      /* fuse_reply_err; -1: none */
	bool entry, attr, create, open;
	struct fuse_entry_param e;
	struct stat st;
	struct fuse_file_info fi;
};

static struct fake_req *fake(fuse_req_t req)
{
	return (struct fake_req *)(void *)req;
}

void *fuse_req_userdata(fuse_req_t req)
{
	return &fake(req)->sess;
}

const struct fuse_ctx *fuse_req_ctx(fuse_req_t req)
{
	return &fake(req)->ctx;
}

int fuse_reply_err(fuse_req_t req, int err)
{
	fake(req)->err = err;
	return 0;
}

void fuse_reply_none(fuse_req_t req)
{
	(void)req;
}

int fuse_reply_entry(fuse_req_t req, const struct fuse_entry_param *e)
{
	fake(req)->entry = true;
	fake(req)->e = *e;
	return 0;
}

int fuse_reply_attr(fuse_req_t req, const struct stat *attr, double timeout)
{
	(void)timeout;
	fake(req)->attr = true;
	fake(req)->st = *attr;
	return 0;
}

int fuse_reply_create(fuse_req_t req, const struct fuse_entry_param *e,
		      const struct fuse_file_info *fi)
{
	fake(req)->create = true;
	fake(req)->e = *e;
	fake(req)->fi = *fi;
	return 0;
}

int fuse_reply_open(fuse_req_t req, const struct fuse_file_info *fi)
{
	fake(req)->open = true;
	fake(req)->fi = *fi;
	return 0;
}

/* ---- fixture ------------------------------------------------------------- */

struct fx {
	char *root;
	struct lfs *fs;
	struct fake_req req;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct lfs_config cfg = { .entry_timeout = 1, .attr_timeout = 1,
				  .keep_cache = true, .direct_writes = true };

	assert_non_null(f);
	/* As the daemon's process setup does: a privileged passthrough
	 * refuses to run with supplementary groups of its own. */
	if (geteuid() == 0)
		assert_int_equal(setgroups(0, NULL), 0);
	f->root = tu_mkdtemp("pt");
	cfg.root = f->root;
	assert_int_equal(lfs_new(&cfg, &f->fs), 0);
	f->req.sess.fs = f->fs;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	lfs_free(f->fs);
	tu_rmrf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* A fresh request from the test process itself, umask 022. */
static fuse_req_t req_of(struct fx *f)
{
	struct lfs_session sess = f->req.sess;

	memset(&f->req, 0, sizeof(f->req));
	f->req.sess = sess;
	f->req.err = -1;
	f->req.ctx = (struct fuse_ctx){ .uid = geteuid(), .gid = getegid(),
					.pid = getpid(), .umask = 022 };
	return (fuse_req_t)(void *)&f->req;
}

static char *backing(struct fx *f, const char *name)
{
	static char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", f->root, name);
	return p;
}

static void put_file(struct fx *f, const char *name, const char *text)
{
	FILE *fp = fopen(backing(f, name), "we");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

/* Look `name` up in the root; its node id (0: a negative entry). */
static fuse_ino_t lookup(struct fx *f, const char *name)
{
	lfs_ops()->lookup(req_of(f), FUSE_ROOT_ID, name);
	if (f->req.err != -1)
		fail_msg("lookup %s: error %d", name, f->req.err);
	assert_true(f->req.entry);
	return f->req.e.ino;
}

/* ---- INIT ------------------------------------------------------------------ */

static struct fuse_conn_info init_with(struct fx *f, unsigned capable)
{
	struct fuse_conn_info conn = { .capable = capable };

	lfs_ops()->init(&f->req.sess, &conn);
	return conn;
}

static void test_wants_only_offered_bits(void **state)
{
	static const unsigned offers[] = {
		0,
		FUSE_CAP_SPLICE_READ,
		FUSE_CAP_SPLICE_WRITE | FUSE_CAP_READDIRPLUS,
		FUSE_CAP_POSIX_ACL,
		FUSE_CAP_DONT_MASK | FUSE_CAP_ASYNC_READ,
		FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV,
		~0u,
	};
	struct fx *f = *state;

	for (size_t i = 0; i < sizeof(offers) / sizeof(offers[0]); i++) {
		struct fuse_conn_info c = init_with(f, offers[i]);

		if (c.want & ~c.capable)
			fail_msg("offered %#x, wanted %#x: asks for %#x not offered",
				 c.capable, c.want, c.want & ~c.capable);
		assert_false(c.want & FUSE_CAP_WRITEBACK_CACHE);
		assert_false(c.want & FUSE_CAP_HANDLE_KILLPRIV);
	}
}

static void test_takes_what_it_relies_on(void **state)
{
	struct fx *f = *state;
	struct fuse_conn_info c = init_with(f, ~0u);
	unsigned need = FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK |
			FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_READDIRPLUS |
			FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE;

	assert_int_equal(c.want & need, need);
	c = init_with(f, FUSE_CAP_SPLICE_READ);
	assert_int_equal(c.want, FUSE_CAP_SPLICE_READ);
}

/* ---- operations ------------------------------------------------------------ */

/* A name resolves to its inode, twice to the same node; a missing name is
 * a negative entry the kernel may cache; the dots are refused. */
static void test_lookup(void **state)
{
	struct fx *f = *state;
	struct stat st;
	fuse_ino_t a, b;

	put_file(f, "f", "x");
	assert_int_equal(stat(backing(f, "f"), &st), 0);
	a = lookup(f, "f");
	assert_int_not_equal(a, 0);
	assert_int_equal(f->req.e.attr.st_ino, st.st_ino);
	b = lookup(f, "f");
	assert_int_equal(a, b);
	assert_int_equal(lookup(f, "missing"), 0);
	assert_true(f->req.e.entry_timeout > 0);
	lfs_ops()->lookup(req_of(f), FUSE_ROOT_ID, "..");
	assert_int_equal(f->req.err, EINVAL);
	lfs_ops()->forget(req_of(f), a, 2);
}

/* ---- how opens are served ------------------------------------------------- */

/* A wire that lets direct_io opens be mapped shared, or not, and has no
 * passthrough. */
static bool wire_mmap;

static bool no_passthrough(struct transport *t)
{
	(void)t;
	return false;
}

static bool fake_direct_mmap(struct transport *t)
{
	(void)t;
	return wire_mmap;
}

static const struct lfs_wire_ops fake_wire = {
	.passthrough = no_passthrough,
	.direct_mmap = fake_direct_mmap,
};

/* Open `ino` with `flags`; the reply's file info. */
static struct fuse_file_info open_as(struct fx *f, fuse_ino_t ino, int flags)
{
	struct fuse_file_info fi = { .flags = flags };

	lfs_ops()->open(req_of(f), ino, &fi);
	if (f->req.err != -1)
		fail_msg("open %#x: error %d", flags, f->req.err);
	assert_true(f->req.open);
	return f->req.fi;
}

static void release(struct fx *f, fuse_ino_t ino, struct fuse_file_info *fi)
{
	lfs_ops()->release(req_of(f), ino, fi);
	assert_int_equal(f->req.err, 0);
}

/* A write-only open of an idle inode starts a direct period: it and every
 * open that joins are direct; once it ends, the next open drops the page
 * cache (a mapping may have read under a direct write) and the one after
 * keeps it again.  A writer joining a cached period stays cached; an
 * O_DIRECT writer in it makes the next period drop the cache too. */
static void test_direct_periods(void **state)
{
	struct fx *f = *state;
	struct fuse_file_info fi = { .flags = O_WRONLY | O_CREAT }, w, r, r2;
	fuse_ino_t ino;

	wire_mmap = true;
	f->req.sess.wire = &fake_wire;
	lfs_ops()->create(req_of(f), FUSE_ROOT_ID, "w", 0644, &fi);
	assert_true(f->req.create);
	w = f->req.fi;
	ino = f->req.e.ino;
	assert_true(w.direct_io);
	r = open_as(f, ino, O_RDONLY);
	assert_true(r.direct_io);
	release(f, ino, &w);
	release(f, ino, &r);

	r = open_as(f, ino, O_RDONLY);
	assert_false(r.direct_io);
	assert_false(r.keep_cache);
	r2 = open_as(f, ino, O_RDONLY);
	assert_true(r2.keep_cache);
	w = open_as(f, ino, O_WRONLY);
	assert_false(w.direct_io);          /* joins the cached period */
	assert_true(w.keep_cache);
	release(f, ino, &w);
	release(f, ino, &r2);
	release(f, ino, &r);

	w = open_as(f, ino, O_WRONLY | O_TRUNC);
	assert_true(w.direct_io);
	release(f, ino, &w);
	w = open_as(f, ino, O_RDWR);
	assert_false(w.direct_io);
	assert_false(w.keep_cache);
	/* An O_DIRECT writer in a cached period writes past the cache too. */
	r = open_as(f, ino, O_RDWR | O_DIRECT);
	assert_true(r.direct_io);
	release(f, ino, &r);
	release(f, ino, &w);
	r = open_as(f, ino, O_RDONLY);
	assert_false(r.keep_cache);
	release(f, ino, &r);
	lfs_ops()->forget(req_of(f), ino, 1);
}

/* No direct period where it is off, or where the wire could not map a
 * direct open (a reader joining it could not mmap the file); read-write
 * creates are cached. */
static void test_no_direct_period(void **state)
{
	static const struct {
		bool mmap, wire;
		int flags;
	} cases[] = {
		{ false, true, O_WRONLY | O_CREAT },
		{ true, true, O_RDWR | O_CREAT },
		{ true, false, O_WRONLY | O_CREAT },
	};
	struct fx *f = *state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fuse_file_info fi = { .flags = cases[i].flags };
		char name[16];

		wire_mmap = cases[i].mmap;
		f->req.sess.wire = cases[i].wire ? &fake_wire : NULL;
		snprintf(name, sizeof(name), "n%zu", i);
		lfs_ops()->create(req_of(f), FUSE_ROOT_ID, name, 0644, &fi);
		assert_true(f->req.create);
		fi = f->req.fi;
		if (fi.direct_io)
			fail_msg("case %zu served direct", i);
		release(f, f->req.e.ino, &fi);
	}
}

/* A wire with passthrough: backing files get id 7; what the next open
 * reply was told, and how many backing files are open. */
static int pt_reply_id, pt_files;
static bool pt_reply_direct;

static bool yes(struct transport *t)
{
	(void)t;
	return true;
}

static int fake_backing_open(struct transport *t, int fd)
{
	(void)t;
	(void)fd;
	pt_files++;
	return 7;
}

static void fake_backing_close(struct transport *t, int id)
{
	(void)t;
	assert_int_equal(id, 7);
	pt_files--;
}

static void fake_next_reply(int id, bool direct_io)
{
	if (id) {
		pt_reply_id = id;
		pt_reply_direct = direct_io;
	}
}

static const struct lfs_wire_ops pt_wire = {
	.passthrough = yes,
	.backing_open = fake_backing_open,
	.backing_close = fake_backing_close,
	.next_reply = fake_next_reply,
	.direct_mmap = yes,
};

/* The fixture with passthrough asked for (on where the process may). */
static int setup_pt(void **state)
{
	struct lfs_config cfg = { .entry_timeout = 1, .attr_timeout = 1,
				  .keep_cache = true, .direct_writes = true,
				  .passthrough = true };
	struct fx *f;

	setup(state);
	f = *state;
	lfs_free(f->fs);
	cfg.root = f->root;
	assert_int_equal(lfs_new(&cfg, &f->fs), 0);
	f->req.sess.fs = f->fs;
	f->req.sess.wire = &pt_wire;
	pt_files = 0;
	return 0;
}

/* Open `ino` with `flags`; the backing id its reply named (0: none). */
static int pt_open(struct fx *f, fuse_ino_t ino, int flags,
		   struct fuse_file_info *fi)
{
	pt_reply_id = 0;
	*fi = open_as(f, ino, flags);
	return pt_reply_id;
}

/* Read-only opens of a file of 1 MiB or more start a passthrough period;
 * a write-only open joins it direct; a read-write open (which the kernel
 * would map from the backing file, past the gate) is refused with
 * ETXTBSY, and the file is not passed through again; small files never
 * are. */
static void test_passthrough_periods(void **state)
{
	struct fx *f = *state;
	struct fuse_file_info r, r2, w, fi = { .flags = O_RDWR };
	fuse_ino_t big, small;

	if (lfs_passthrough(f->fs) != 1)
		skip();                 /* not root, or no file handles */
	put_file(f, "small", "small");
	put_file(f, "big", "");
	assert_int_equal(truncate(backing(f, "big"), 1 << 20), 0);
	small = lookup(f, "small");
	big = lookup(f, "big");

	assert_int_equal(pt_open(f, small, O_RDONLY, &r), 0);
	release(f, small, &r);

	assert_int_equal(pt_open(f, big, O_RDONLY, &r), 7);
	assert_int_equal(pt_files, 1);
	assert_int_equal(pt_open(f, big, O_RDONLY, &r2), 7);
	assert_int_equal(pt_open(f, big, O_WRONLY, &w), 7);
	assert_true(pt_reply_direct);
	lfs_ops()->open(req_of(f), big, &fi);
	assert_int_equal(f->req.err, ETXTBSY);
	assert_false(f->req.open);
	release(f, big, &w);
	release(f, big, &r2);
	release(f, big, &r);
	assert_int_equal(pt_files, 0);

	assert_int_equal(pt_open(f, big, O_RDONLY, &r), 0);
	assert_false(r.direct_io);
	release(f, big, &r);
	assert_int_equal(pt_files, 0);
}

/* ---- the gate over the real table ----------------------------------------- */

/* The gate knows every operation the passthrough serves (default-deny
 * would refuse one it did not), and wraps each. */
static void test_gate_over_real_ops(void **state)
{
	struct fx *f = *state;
	struct lease_store *store = tu_open_store("mem", NULL);
	struct coord_config cfg = { .placement = PLACEMENT_EXCLUSIVE,
				    .root = f->root, .store = store };
	const struct fuse_lowlevel_ops *in = lfs_ops(), *out;
	void (*const *a)(void) = (void (*const *)(void))(const void *)in;
	const char *unknown = NULL;
	struct coord *c = NULL;
	struct gate *g = NULL;
	int r;

	assert_int_equal(coord_open(&cfg, &c, NULL), 0);
	r = gate_new(c, in, &g, &unknown);
	if (r < 0)
		fail_msg("gate over lfs_ops(): %d (unknown op %s)", r,
			 unknown ? unknown : "-");
	out = gate_ops(g);
	for (size_t i = 0; i < sizeof(*in) / sizeof(*a); i++) {
		void (*const *b)(void) = (void (*const *)(void))(const void *)out;

		if (a[i] && !b[i])
			fail_msg("op at %zu served by the passthrough, not by "
				 "the gate", i);
	}
	assert_ptr_not_equal(out->write_buf, in->write_buf);
	assert_ptr_not_equal(out->lookup, in->lookup);
	assert_ptr_equal(out->init, in->init);
	gate_free(g);
	coord_free(c);
	lease_store_close(store);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_wants_only_offered_bits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_takes_what_it_relies_on, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_direct_periods, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_direct_period, setup, teardown),
		cmocka_unit_test_setup_teardown(test_passthrough_periods, setup_pt, teardown),
		cmocka_unit_test_setup_teardown(test_gate_over_real_ops, setup, teardown),
	};

	return cmocka_run_group_tests_name("passthrough", tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* Name grammar, canonical roots, root and session lease names, UUIDs. */
#include <errno.h>
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
#include <openssl/evp.h>

#include "lease.h"
#include "roots.h"
#include "testutil.h"

/* ---- grammar ----------------------------------------------------------- */

static void assert_bad(const char *name, const char *rule)
{
	struct lease_err err = { 0 };
	char want[LEASE_NAME_MAX + 1];

	assert_int_equal(lease_name_validate(name, &err), -EINVAL);
	assert_int_equal(err.kind, LEASE_E_BADNAME);
	assert_int_equal(err.code, -EINVAL);
	if (!strstr(err.msg, rule))
		fail_msg("name '%.40s': message '%s' does not name rule '%s'",
			 name, err.msg, rule);
	snprintf(want, sizeof(want), "%s", name);
	assert_string_equal(err.name, want);
}

static void test_bad_empty(void **state)
{
	(void)state;
	assert_bad("", "rule: length");
	assert_int_equal(lease_name_validate(NULL, NULL), -EINVAL);
}

static void test_bad_too_long(void **state)
{
	char name[LEASE_NAME_MAX + 2];

	(void)state;
	memset(name, 'a', LEASE_NAME_MAX + 1);
	name[LEASE_NAME_MAX + 1] = '\0';
	assert_bad(name, "rule: length");
}

static void test_bad_slashes(void **state)
{
	(void)state;
	assert_bad("/abc", "rule: no leading '/'");
	assert_bad("abc/", "rule: no trailing '/'");
	assert_bad("abc//def", "rule: no empty segment");
	assert_bad("/", "rule: no leading '/'");
}

static void test_bad_uppercase(void **state)
{
	(void)state;
	assert_bad("Abc", "rule: lowercase only");
	assert_bad("abc/deF", "rule: lowercase only");
}

static void test_bad_segment_start(void **state)
{
	(void)state;
	assert_bad("-abc", "rule: segment must start with [a-z0-9]");
	assert_bad(".abc", "rule: segment must start with [a-z0-9]");
	assert_bad("_abc", "rule: segment must start with [a-z0-9]");
	assert_bad("abc/-def", "rule: segment must start with [a-z0-9]");
	assert_bad("abc/./def", "rule: segment must start with [a-z0-9]");
}

static void test_bad_chars(void **state)
{
	(void)state;
	assert_bad("a b", "rule: allowed characters");
	assert_bad("a@b", "rule: allowed characters");
	assert_bad("sessions/x:y", "rule: allowed characters");
	assert_bad("a\tb", "rule: allowed characters");
	assert_bad("caf\xc3\xa9", "rule: allowed characters");
}

static void test_bad_position_named(void **state)
{
	struct lease_err err = { 0 };

	(void)state;
	assert_int_equal(lease_name_validate("abc/de@f", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "position 6"));
	assert_int_equal(lease_name_validate("ab//c", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "position 3"));
}

static void test_valid_names(void **state)
{
	static const char *const ok[] = {
		"a", "0", "sessions/0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b",
		"workspace-roots/abc123", "a.b_c-d", "a/b/c/d", "9lives/x.y",
		"a-", "a.", "a_",
	};
	char name[LEASE_NAME_MAX + 1];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct lease_err err = { 0 };

		if (lease_name_validate(ok[i], &err) != 0)
			fail_msg("'%s' rejected: %s", ok[i], err.msg);
	}
	memset(name, 'z', LEASE_NAME_MAX);
	name[LEASE_NAME_MAX] = '\0';
	name[100] = '/';
	assert_int_equal(lease_name_validate(name, NULL), 0);
}

/* ---- canonical roots ------------------------------------------------------ */

struct tree {
	char *tmp;          /* temp dir as created (may itself be a symlink path) */
	char root[PATH_MAX];
	char link[PATH_MAX];
	char canon[PATH_MAX];
};

static int tree_setup(void **state)
{
	struct tree *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->tmp = tu_mkdtemp("names");
	snprintf(t->root, sizeof(t->root), "%s/root", t->tmp);
	snprintf(t->link, sizeof(t->link), "%s/link", t->tmp);
	assert_int_equal(mkdir(t->root, 0700), 0);
	assert_int_equal(symlink(t->root, t->link), 0);
	assert_int_equal(ws_canonical_root(t->root, t->canon,
					      sizeof(t->canon)), 0);
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;

	tu_rmrf(t->tmp);
	free(t->tmp);
	free(t);
	return 0;
}

static void assert_same_root(const char *spelling, const char *want)
{
	char got[PATH_MAX], n1[100], n2[100];

	assert_int_equal(ws_canonical_root(spelling, got, sizeof(got)), 0);
	if (strcmp(got, want) != 0)
		fail_msg("'%s' -> '%s', want '%s'", spelling, got, want);
	assert_int_equal(ws_root_name(got, n1, sizeof(n1)), 0);
	assert_int_equal(ws_root_name(want, n2, sizeof(n2)), 0);
	assert_string_equal(n1, n2);
}

static void test_canon_is_absolute_and_real(void **state)
{
	struct tree *t = *state;
	char real[PATH_MAX];

	assert_non_null(realpath(t->root, real));
	assert_string_equal(t->canon, real);
	assert_int_equal(t->canon[0], '/');
}

static void test_canon_spellings(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX + 64];

	assert_same_root(t->root, t->canon);
	assert_same_root(t->link, t->canon);
	snprintf(p, sizeof(p), "%s/./", t->root);
	assert_same_root(p, t->canon);
	snprintf(p, sizeof(p), "%s/../root", t->root);
	assert_same_root(p, t->canon);
	snprintf(p, sizeof(p), "%s/", t->root);
	assert_same_root(p, t->canon);
	snprintf(p, sizeof(p), "%s//", t->link);
	assert_same_root(p, t->canon);
	snprintf(p, sizeof(p), "%s/.//../link/.", t->root);
	assert_same_root(p, t->canon);
}

static void test_canon_relative(void **state)
{
	struct tree *t = *state;
	char old[PATH_MAX];

	assert_non_null(getcwd(old, sizeof(old)));
	assert_int_equal(chdir(t->tmp), 0);
	assert_same_root("root", t->canon);
	assert_same_root("./root/", t->canon);
	assert_same_root("link", t->canon);
	assert_int_equal(chdir(t->root), 0);
	assert_same_root(".", t->canon);
	assert_same_root("../root", t->canon);
	assert_int_equal(chdir(old), 0);
}

static void test_canon_nonexistent_tail(void **state)
{
	struct tree *t = *state;
	char p[PATH_MAX + 64], want[PATH_MAX + 64];
	struct stat st;

	snprintf(want, sizeof(want), "%s/new/deeper", t->canon);
	snprintf(p, sizeof(p), "%s/new/deeper", t->root);
	assert_same_root(p, want);
	snprintf(p, sizeof(p), "%s/new/deeper/", t->link);
	assert_same_root(p, want);
	snprintf(p, sizeof(p), "%s/new/./x/../deeper", t->link);
	assert_same_root(p, want);
	snprintf(p, sizeof(p), "%s/../link/new//deeper", t->root);
	assert_same_root(p, want);
	/* nothing was created along the way */
	snprintf(p, sizeof(p), "%s/new", t->root);
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(errno, ENOENT);
}

static void test_canon_dir_symlink_parent(void **state)
{
	struct tree *t = *state;
	char sub[PATH_MAX + 16], lnk[PATH_MAX + 16], p[PATH_MAX + 64],
	     want[PATH_MAX + 64];

	snprintf(sub, sizeof(sub), "%s/sub", t->root);
	snprintf(lnk, sizeof(lnk), "%s/sublink", t->tmp);
	assert_int_equal(mkdir(sub, 0700), 0);
	assert_int_equal(symlink(sub, lnk), 0);
	snprintf(want, sizeof(want), "%s/sub/missing", t->canon);
	snprintf(p, sizeof(p), "%s/missing", lnk);
	assert_same_root(p, want);
}

static void test_canon_edges(void **state)
{
	char out[PATH_MAX];

	(void)state;
	assert_int_equal(ws_canonical_root("", out, sizeof(out)), -EINVAL);
	assert_int_equal(ws_canonical_root(NULL, out, sizeof(out)), -EINVAL);
	assert_int_equal(ws_canonical_root("/", out, sizeof(out)), 0);
	assert_string_equal(out, "/");
	assert_int_equal(ws_canonical_root("/../..", out, sizeof(out)), 0);
	assert_string_equal(out, "/");
	assert_int_equal(ws_canonical_root("/", out, 1), -ENAMETOOLONG);
}

/* ---- root and session names ---------------------------------------------- */

static void test_root_name_known_answer(void **state)
{
	char name[81];

	(void)state;
	/* printf %s /some/path | sha256sum */
	assert_int_equal(ws_root_name("/some/path", name, sizeof(name)), 0);
	assert_string_equal(name, "workspace-roots/"
			    "eda6cf0b63f1a1d2eaf7792a2a98c832"
			    "c21a18e6992bcebffe6381781cc85cbc");
	assert_int_equal(lease_name_validate(name, NULL), 0);
	assert_int_equal(ws_root_name("/some/path", name, 80), -ERANGE);
}

static void test_root_names_differ(void **state)
{
	char a[81], b[81];

	(void)state;
	assert_int_equal(ws_root_name("/a", a, sizeof(a)), 0);
	assert_int_equal(ws_root_name("/b", b, sizeof(b)), 0);
	assert_string_not_equal(a, b);
}

static void test_uuid_random(void **state)
{
	char a[37], b[37];

	(void)state;
	assert_int_equal(lease_uuid_random(a, sizeof(a)), 0);
	assert_int_equal(lease_uuid_random(b, sizeof(b)), 0);
	assert_true(lease_uuid_valid(a));
	assert_true(lease_uuid_valid(b));
	assert_string_not_equal(a, b);
	assert_int_equal(a[14], '4');
	assert_non_null(strchr("89ab", a[19]));
	assert_int_equal(lease_uuid_random(a, 36), -ERANGE);
}

static void test_uuid_valid(void **state)
{
	(void)state;
	assert_true(lease_uuid_valid("0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b"));
	assert_false(lease_uuid_valid("0B5C7F2E-1D3A-4E5F-8A9B-0C1D2E3F4A5B"));
	assert_false(lease_uuid_valid("0b5c7f2e1d3a4e5f8a9b0c1d2e3f4a5b"));
	assert_false(lease_uuid_valid("0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5"));
	assert_false(lease_uuid_valid("0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5bb"));
	assert_false(lease_uuid_valid("0b5c7f2g-1d3a-4e5f-8a9b-0c1d2e3f4a5b"));
	assert_false(lease_uuid_valid("0b5c7f2e-1d3a-4e5f-8a9b_0c1d2e3f4a5b"));
	assert_false(lease_uuid_valid(""));
	assert_false(lease_uuid_valid(NULL));
}

static void test_session_name(void **state)
{
	char name[46];
	const char *u = "0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b";

	(void)state;
	assert_int_equal(ws_session_name(u, name, sizeof(name)), 0);
	assert_string_equal(name, "sessions/0b5c7f2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b");
	assert_int_equal(lease_name_validate(name, NULL), 0);
	assert_int_equal(ws_session_name("not-a-uuid", name, sizeof(name)),
			 -EINVAL);
	assert_int_equal(ws_session_name("0B5C7F2E-1D3A-4E5F-8A9B-0C1D2E3F4A5B",
					    name, sizeof(name)), -EINVAL);
	assert_int_equal(ws_session_name(u, name, 45), -ERANGE);
}

/* ---- SHA-256 -------------------------------------------------------- */

static void hex32(const uint8_t md[32], char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* FIPS 180-4 examples (one block, two blocks). */
static void test_sha256_known_answers(void **state)
{
	uint8_t md[32];
	char hex[65];

	(void)state;
	lease_sha256("abc", 3, md);
	hex32(md, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223"
				 "b00361a396177a9cb410ff61f20015ad");
	lease_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		     56, md);
	hex32(md, hex);
	assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039"
				 "a33ce45964ff2167f6ecedd419db06c1");
	lease_sha256("", 0, md);
	hex32(md, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb924"
				 "27ae41e4649b934ca495991b7852b855");
}

/* Every length across the padding boundaries, against OpenSSL. */
static void test_sha256_matches_openssl(void **state)
{
	static uint8_t buf[1100];
	uint8_t ours[32], ref[32];
	unsigned int n = 0;

	(void)state;
	srand(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t len = 0; len <= sizeof(buf); len++) {
		lease_sha256(buf, len, ours);
		assert_true(EVP_Digest(buf, len, ref, &n, EVP_sha256(), NULL));
		assert_int_equal(n, 32);
		if (memcmp(ours, ref, 32) != 0)
			fail_msg("sha256 differs from OpenSSL at length %zu", len);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_known_answers),
		cmocka_unit_test(test_sha256_matches_openssl),
		cmocka_unit_test(test_bad_empty),
		cmocka_unit_test(test_bad_too_long),
		cmocka_unit_test(test_bad_slashes),
		cmocka_unit_test(test_bad_uppercase),
		cmocka_unit_test(test_bad_segment_start),
		cmocka_unit_test(test_bad_chars),
		cmocka_unit_test(test_bad_position_named),
		cmocka_unit_test(test_valid_names),
		cmocka_unit_test_setup_teardown(test_canon_is_absolute_and_real,
						tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_canon_spellings,
						tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_canon_relative,
						tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_canon_nonexistent_tail,
						tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_canon_dir_symlink_parent,
						tree_setup, tree_teardown),
		cmocka_unit_test(test_canon_edges),
		cmocka_unit_test(test_root_name_known_answer),
		cmocka_unit_test(test_root_names_differ),
		cmocka_unit_test(test_uuid_random),
		cmocka_unit_test(test_uuid_valid),
		cmocka_unit_test(test_session_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

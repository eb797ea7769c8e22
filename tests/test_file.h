/* SPDX-License-Identifier: MIT */
/* The file backend's suite: test_file.c (processes, the fixture, main)
 * and test_file_store.c (records on disk) share this. */
#ifndef LEASEFS_TEST_FILE_H
#define LEASEFS_TEST_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "testutil.h"

#define WAIT_MS 5000 /* bound for every awaited event */

#define NPROC 12

/* Children still to be reaped; teardown kills them if a test failed. */
struct ctx {
	struct lease_store *store;
	char *dir;
	char uri[1100];
	pid_t kids[NPROC];
};


/* A fresh file store per test; teardown kills the children left. */
int setup(void **state);
int teardown(void **state);

struct lease *fx_must_acquire(struct lease_store *st, const char *name,
			      int64_t deadline);
/* Acquire and release at once: the epoch it had. */
uint64_t fx_acquire_release(struct lease_store *st, const char *name);
/* Wait up to timeout_ms for pid to exit; true with *status if it did. */
bool fx_wait_child(pid_t pid, int timeout_ms, int *status);

/* test_file_store.c */
void test_forget_keeps_epochs(void **state);
void test_epoch_exhausted(void **state);
void test_corrupt_truncated_empty(void **state);
void test_corrupt_truncated_half(void **state);
void test_corrupt_garbage(void **state);
void test_corrupt_bad_checksum(void **state);
void test_corrupt_wrong_name(void **state);
void test_leftover_tmp_ignored(void **state);
void test_hand_edits_noticed(void **state);
void test_without_inotify(void **state);
void test_nested_names_and_files(void **state);
void test_bad_directory(void **state);

#endif

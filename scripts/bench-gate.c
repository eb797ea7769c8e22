/* bench-gate: what the lease gate adds to one mutation, for scripts/bench.
 *
 * Usage: bench-gate LEASE_DIR ROOT_DIR N
 *
 * Opens an exclusive coordinator on ROOT_DIR with file leases in LEASE_DIR
 * (as `leasefs mount` does), then times N coord_enter()/coord_exit() pairs,
 * the admission every gated FUSE operation makes, on 1 thread and on 2
 * threads at once.  Prints "threads<TAB>ns_per_pair" rows.  Compare with one
 * FUSE round trip (bench-rtt): the gate's share of a mutation is the ratio.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "lease.h"
#include "roots.h"

struct run {
	struct coord *coord;
	long n;
	int failed;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *pairs(void *arg)
{
	struct run *r = arg;

	for (long i = 0; i < r->n; i++) {
		if (coord_enter(r->coord) != 0) {
			r->failed = 1;
			break;
		}
		coord_exit(r->coord);
	}
	return NULL;
}

/* ns per pair with `threads` threads running r->n pairs each at once. */
static int time_pairs(struct coord *c, long n, int threads, double *ns)
{
	pthread_t t[2];
	struct run runs[2] = { { c, n, 0 }, { c, n, 0 } };
	double t0 = now_s();

	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, pairs, &runs[i]) != 0)
			return -1;
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	*ns = (now_s() - t0) / (double)n * 1e9;
	return runs[0].failed || runs[1].failed ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct lease_store *store = NULL;
	struct lease_err err = { 0 };
	struct coord *c = NULL;
	struct coord_config cfg = { .placement = PLACEMENT_EXCLUSIVE };
	char uri[4096], root[PATH_MAX];
	char *end;
	long n;
	int rc = 1;

	if (argc != 4) {
		fprintf(stderr, "usage: bench-gate LEASE_DIR ROOT_DIR N\n");
		return 2;
	}
	n = strtol(argv[3], &end, 10);
	if (*end || n <= 0) {
		fprintf(stderr, "bench-gate: bad N: %s\n", argv[3]);
		return 2;
	}
	snprintf(uri, sizeof(uri), "file:%s", argv[1]);
	if (lease_store_open(uri, NULL, &store, &err) != 0) {
		fprintf(stderr, "bench-gate: %s\n", err.msg);
		return 1;
	}
	if (ws_canonical_root(argv[2], root, sizeof(root)) != 0) {
		fprintf(stderr, "bench-gate: bad root: %s\n", argv[2]);
		goto out;
	}
	cfg.root = root;
	cfg.store = store;
	if (coord_open(&cfg, &c, &err) != 0) {
		fprintf(stderr, "bench-gate: %s\n", err.msg);
		goto out;
	}
	for (int threads = 1; threads <= 2; threads++) {
		double ns;

		if (time_pairs(c, n, threads, &ns) != 0) {
			fprintf(stderr, "bench-gate: admission refused\n");
			goto out;
		}
		printf("%d\t%.1f\n", threads, ns);
	}
	rc = 0;
out:
	if (c) {
		coord_shutdown(c, 1000);
		coord_free(c);
	}
	lease_store_close(store);
	return rc;
}

/* bench-rtt: the cost of one FUSE round trip, for scripts/bench.
 *
 * Usage: bench-rtt FILE N
 *
 * Calls fgetxattr(FILE, "user.leasefs-bench-rtt") N times.  The name does
 * not exist, and no filesystem caches a getxattr reply, so each call is one
 * request to the daemon and back (ENODATA).  Prints the mean microseconds
 * per call.  Exits 1 if a call fails otherwise (e.g. ENOTSUP: the target
 * answers without a round trip, so the number would not mean a round trip).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char buf[64];
	char *end;
	long n;
	int fd;
	double t0;

	if (argc != 3) {
		fprintf(stderr, "usage: bench-rtt FILE N\n");
		return 2;
	}
	n = strtol(argv[2], &end, 10);
	if (*end || n <= 0) {
		fprintf(stderr, "bench-rtt: bad N: %s\n", argv[2]);
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "bench-rtt: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	t0 = now_s();
	for (long i = 0; i < n; i++) {
		if (fgetxattr(fd, "user.leasefs-bench-rtt", buf, sizeof(buf)) >= 0 ||
		    errno != ENODATA) {
			fprintf(stderr, "bench-rtt: getxattr on %s: %s\n", argv[1],
				strerror(errno));
			return 1;
		}
	}
	printf("%.3f\n", (now_s() - t0) / (double)n * 1e6);
	close(fd);
	return 0;
}

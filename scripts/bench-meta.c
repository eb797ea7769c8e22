/* bench-meta: small-file metadata benchmark for scripts/bench.
 *
 * Usage: bench-meta DIR NFILES [STAT_PASSES [STAT_GAP_MS]]
 *
 * Over NFILES files in DIR (which must exist and be empty), runs five phases
 * and prints one TSV row per phase: phase, ops, seconds, ops_per_s.
 *   create   open(O_CREAT|O_EXCL) + write 4 KiB + close, per file
 *   stathot  stat() of every file, STAT_PASSES passes back to back
 *   stat     stat() of every file, STAT_PASSES passes, each after a pause of
 *            STAT_GAP_MS (default 1100, past a 1 s attribute timeout); the
 *            pauses are not timed
 *   rename   rename f<i> to r<i> in the same directory
 *   unlink   unlink r<i>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE 4096
#define NAME_MAX_LEN 64

struct bench {
	int dirfd;
	long nfiles;
	long stat_passes;
	long stat_gap_ms;
	double paused;
	char buf[FILE_SIZE];
};

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void file_name(char *out, size_t len, char prefix, long i)
{
	snprintf(out, len, "%c%07ld", prefix, i);
}

static int fail(const char *what, const char *name)
{
	fprintf(stderr, "bench-meta: %s %s: %s\n", what, name, strerror(errno));
	return -1;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int create_one(struct bench *b, long i)
{
	char name[NAME_MAX_LEN];
	int fd;

	file_name(name, sizeof(name), 'f', i);
	fd = openat(b->dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("create", name);
	if (write_all(fd, b->buf, sizeof(b->buf)) < 0) {
		fail("write", name);
		close(fd);
		return -1;
	}
	if (close(fd) < 0)
		return fail("close", name);
	return 0;
}

static int stat_one(struct bench *b, long i)
{
	char name[NAME_MAX_LEN];
	struct stat st;

	file_name(name, sizeof(name), 'f', i % b->nfiles);
	if (fstatat(b->dirfd, name, &st, 0) < 0)
		return fail("stat", name);
	if (st.st_size != FILE_SIZE) {
		fprintf(stderr, "bench-meta: stat %s: size %lld, expected %d\n",
			name, (long long)st.st_size, FILE_SIZE);
		return -1;
	}
	return 0;
}

static void pause_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int stat_gap_one(struct bench *b, long i)
{
	if (i % b->nfiles == 0) {
		double start = now_seconds();

		pause_ms(b->stat_gap_ms);
		b->paused += now_seconds() - start;
	}
	return stat_one(b, i);
}

static int rename_one(struct bench *b, long i)
{
	char from[NAME_MAX_LEN];
	char to[NAME_MAX_LEN];

	file_name(from, sizeof(from), 'f', i);
	file_name(to, sizeof(to), 'r', i);
	if (renameat(b->dirfd, from, b->dirfd, to) < 0)
		return fail("rename", from);
	return 0;
}

static int unlink_one(struct bench *b, long i)
{
	char name[NAME_MAX_LEN];

	file_name(name, sizeof(name), 'r', i);
	if (unlinkat(b->dirfd, name, 0) < 0)
		return fail("unlink", name);
	return 0;
}

typedef int (*op_fn)(struct bench *b, long i);

static int run_phase(struct bench *b, const char *phase, op_fn op, long ops)
{
	double start = now_seconds();
	double secs;

	b->paused = 0;
	for (long i = 0; i < ops; i++) {
		if (op(b, i) < 0)
			return -1;
	}
	secs = now_seconds() - start - b->paused;
	if (secs <= 0)
		secs = 1e-9;
	printf("%s\t%ld\t%.6f\t%.1f\n", phase, ops, secs, (double)ops / secs);
	fflush(stdout);
	return 0;
}

static int parse_long(const char *s, const char *what, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || *out <= 0) {
		fprintf(stderr, "bench-meta: bad %s: %s\n", what, s);
		return -1;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct bench *b)
{
	if (argc < 3 || argc > 5) {
		fprintf(stderr, "usage: bench-meta DIR NFILES [STAT_PASSES [STAT_GAP_MS]]\n");
		return -1;
	}
	if (parse_long(argv[2], "NFILES", &b->nfiles) < 0)
		return -1;
	b->stat_passes = 5;
	if (argc >= 4 && parse_long(argv[3], "STAT_PASSES", &b->stat_passes) < 0)
		return -1;
	b->stat_gap_ms = 1100;
	if (argc == 5 && parse_long(argv[4], "STAT_GAP_MS", &b->stat_gap_ms) < 0)
		return -1;
	b->dirfd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b->dirfd < 0)
		return fail("open", argv[1]);
	return 0;
}

int main(int argc, char **argv)
{
	static struct bench b;

	if (parse_args(argc, argv, &b) < 0)
		return 2;
	memset(b.buf, 'x', sizeof(b.buf));
	if (run_phase(&b, "create", create_one, b.nfiles) < 0 ||
	    run_phase(&b, "stathot", stat_one, b.nfiles * b.stat_passes) < 0 ||
	    run_phase(&b, "stat", stat_gap_one, b.nfiles * b.stat_passes) < 0 ||
	    run_phase(&b, "rename", rename_one, b.nfiles) < 0 ||
	    run_phase(&b, "unlink", unlink_one, b.nfiles) < 0)
		return 1;
	if (close(b.dirfd) < 0) {
		fprintf(stderr, "bench-meta: close dir: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

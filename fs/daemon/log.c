/* SPDX-License-Identifier: MIT */
/* The daemon's log (contract: log.h; design: README.md). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <fuse_log.h>

#include "lease.h"
#include "log.h"

#define JOURNAL_SOCKET "/run/systemd/journal/socket"
#define SYSLOG_SOCKET "/dev/log"
#define MESSAGE_MAX 2048

enum log_dest {
	DEST_STDERR,  /* the terminal, or whatever stderr is */
	DEST_JOURNAL_STREAM, /* foreground under systemd: stderr is the journal */
	DEST_SYSTEM,  /* background: the journal, else syslog */
};

/*
 * log_lock protects everything in `lg`: the main thread sets the context
 * while backend threads, the event thread and FUSE workers may already
 * log.  It is also held while a message is written, so that lines never
 * interleave; nothing written under it blocks (MSG_DONTWAIT).
 */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int level;             /* the most verbose level written */
	enum log_dest dest;
	bool stderr_attached;  /* DEST_SYSTEM: stderr is still the caller's */
	int fd;                /* datagram socket for the journal and syslog */
	char mountpoint[PATH_MAX];
	char root[PATH_MAX];
	char lease[LEASE_NAME_MAX + 1];
	uint64_t epoch;
} lg = { .level = LOG_INFO, .dest = DEST_STDERR, .fd = -1 };

static const char *const level_names[] = {
	[LOG_ERR] = "error", [LOG_WARNING] = "warning",
	[LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

int log_parse_level(const char *s)
{
	for (int l = LOG_ERR; l <= LOG_DEBUG; l++)
		if (strcmp(s, level_names[l]) == 0)
			return l;
	return -EINVAL;
}

/* Whether stderr is the journal stream systemd gave us ($JOURNAL_STREAM
 * is "DEVICE:INODE" of it). */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	return e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 &&
	       fstat(STDERR_FILENO, &st) == 0 &&
	       (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

/* libfuse's own messages (a failing device, a bad option), in our log. */
static void fuse_log_fn(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char msg[MESSAGE_MAX];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_full((int)level, 0, NULL, 0, NULL, "%s", msg);
}

void log_open(int level, bool foreground)
{
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	pthread_mutex_lock(&log_lock);
	lg.level = level;
	if (!foreground)
		lg.dest = DEST_SYSTEM;
	else if (stderr_is_journal())
		lg.dest = DEST_JOURNAL_STREAM;
	else
		lg.dest = DEST_STDERR;
	lg.stderr_attached = true;
	if (lg.fd >= 0)
		close(lg.fd);
	lg.fd = fd;
	pthread_mutex_unlock(&log_lock);
}

void log_take_libfuse(void)
{
	fuse_set_log_func(fuse_log_fn);
}

void log_set_mount(const char *mountpoint, const char *root)
{
	pthread_mutex_lock(&log_lock);
	snprintf(lg.mountpoint, sizeof(lg.mountpoint), "%s", mountpoint ? mountpoint : "");
	snprintf(lg.root, sizeof(lg.root), "%s", root ? root : "");
	pthread_mutex_unlock(&log_lock);
}

void log_set_lease(const char *lease, uint64_t epoch)
{
	pthread_mutex_lock(&log_lock);
	snprintf(lg.lease, sizeof(lg.lease), "%s", lease ? lease : "");
	lg.epoch = epoch;
	pthread_mutex_unlock(&log_lock);
}

void log_detach_stderr(void)
{
	pthread_mutex_lock(&log_lock);
	lg.stderr_attached = false;
	pthread_mutex_unlock(&log_lock);
}

/* ---- the journal's native protocol ------------------------------------ */

/* KEY=VALUE, or, where VALUE has a newline, the binary form: KEY, a
 * newline, VALUE's length as 64-bit little endian, VALUE, a newline. */
static void journal_field(FILE *f, const char *key, const char *value)
{
	uint64_t n = strlen(value);
	unsigned char le[8];

	if (!strchr(value, '\n')) {
		fprintf(f, "%s=%s\n", key, value);
		return;
	}
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(n >> (8 * i));
	fprintf(f, "%s\n", key);
	fwrite(le, 1, sizeof(le), f);
	fprintf(f, "%s\n", value);
}

static int send_to(const char *path, const char *buf, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (lg.fd < 0)
		return -EBADF;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	return sendto(lg.fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT,
		      (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
}

static int journal_send(int level, int error, const char *file, int line,
			const char *func, const char *msg)
{
	char *buf = NULL, num[32];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int r;

	if (!f)
		return -ENOMEM;
	journal_field(f, "MESSAGE", msg);
	fprintf(f, "PRIORITY=%d\nSYSLOG_FACILITY=%d\nSYSLOG_IDENTIFIER=leasefs\n",
		level, LOG_DAEMON >> 3);
	if (line > 0) /* libfuse's messages have no place of ours */
		fprintf(f, "CODE_FILE=%s\nCODE_LINE=%d\nCODE_FUNC=%s\n", file, line,
			func);
	if (error)
		fprintf(f, "ERRNO=%d\n", error);
	if (lg.mountpoint[0])
		journal_field(f, "LEASEFS_MOUNTPOINT", lg.mountpoint);
	if (lg.root[0])
		journal_field(f, "LEASEFS_ROOT", lg.root);
	if (lg.lease[0]) {
		journal_field(f, "LEASEFS_LEASE", lg.lease);
		snprintf(num, sizeof(num), "%" PRIu64, lg.epoch);
		journal_field(f, "LEASEFS_EPOCH", num);
	}
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	r = send_to(JOURNAL_SOCKET, buf, len);
	free(buf);
	return r;
}

/* ---- syslog ------------------------------------------------------------ */

/* What syslog(3) would send, "<PRI>Mmm dd hh:mm:ss leasefs[PID]: MSG",
 * without its blocking send. */
static int syslog_send(int level, const char *msg)
{
	char stamp[32], *buf = NULL;
	time_t now = time(NULL);
	struct tm tm;
	int n, r;

	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%b %e %H:%M:%S", &tm);
	n = asprintf(&buf, "<%d>%s leasefs[%d]: %s", LOG_DAEMON | level, stamp,
		     (int)getpid(), msg);
	if (n < 0)
		return -ENOMEM;
	r = send_to(SYSLOG_SOCKET, buf, (size_t)n);
	free(buf);
	return r;
}

/* The journal where it listens, else syslog.  A journal that is there but
 * full drops the message (no fallback: the next one may fit). */
static void system_send(int level, int error, const char *file, int line,
			const char *func, const char *msg)
{
	int r = journal_send(level, error, file, line, func, msg);

	if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTSOCK ||
	    r == -EPROTOTYPE)
		(void)syslog_send(level, msg);
}

/* ---- the one entry ----------------------------------------------------- */

/* Control characters as '?': nothing a path holds can start a new line. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

static void emit(int level, int error, const char *file, int line,
		 const char *func, const char *text)
{
	char msg[MESSAGE_MAX + PATH_MAX + 2];
	bool to_stderr = lg.dest == DEST_STDERR ||
			 (lg.dest == DEST_SYSTEM && lg.stderr_attached &&
			  level <= LOG_NOTICE);

	/* What goes to a log shared by every mount names its mount. */
	if (lg.mountpoint[0])
		snprintf(msg, sizeof(msg), "%s: %s", lg.mountpoint, text);
	else
		snprintf(msg, sizeof(msg), "%s", text);
	sanitize(msg);
	if (lg.dest == DEST_SYSTEM)
		system_send(level, error, file, line, func, msg);
	else if (lg.dest == DEST_JOURNAL_STREAM &&
		 journal_send(level, error, file, line, func, msg) < 0)
		to_stderr = true;
	if (to_stderr)
		fprintf(stderr, "leasefs: %s\n", text);
}

int log_full(int level, int error, const char *file, int line,
	     const char *func, const char *fmt, ...)
{
	int saved = errno, e = error < 0 ? -error : error;
	char text[MESSAGE_MAX];
	va_list ap;

	pthread_mutex_lock(&log_lock);
	if (level <= lg.level) {
		errno = e; /* for %m */
		va_start(ap, fmt);
		vsnprintf(text, sizeof(text), fmt, ap);
		va_end(ap);
		sanitize(text);
		emit(level, e, file, line, func, text);
	}
	pthread_mutex_unlock(&log_lock);
	errno = saved;
	return -e;
}

/* SPDX-License-Identifier: MIT */
/*
 * The file backend: the doorbell.
 * The layout and what the units share: file_int.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "file_int.h"

/* ---- doorbell ------------------------------------------------------- */

/*
 * While it holds a grant, the holder has a datagram socket bound at
 * NAME.bell; whoever rewrites a live holder's record (revoke) rings it.
 * A bell is one descriptor, bounded by the holder's RLIMIT_NOFILE alone,
 * where an inotify instance counts against a small per-user limit
 * (fs.inotify.max_user_instances, 128), and it works across pid and
 * mount namespaces: all it needs is the store directory.  A ring that
 * cannot be delivered (no bell, no /proc, a full queue) costs only time:
 * every holder also rechecks its record every second (watch.c), which is how a
 * record edited, replaced or removed by hand is noticed.
 */

/* sun_path holds 108 bytes: a socket is named through a descriptor, as
 * "/proc/self/fd/N" (the socket itself) or "/proc/self/fd/N/REL". */
static int fd_sockaddr(struct sockaddr_un *sa, int fd, const char *rel)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (rel)
		n = snprintf(sa->sun_path, sizeof(sa->sun_path),
			     "/proc/self/fd/%d/%s", fd, rel);
	else
		n = snprintf(sa->sun_path, sizeof(sa->sun_path),
			     "/proc/self/fd/%d", fd);
	return n < 0 || (size_t)n >= sizeof(sa->sun_path) ? -ENAMETOOLONG : 0;
}

/* A bell bound in directory pfd as `bell`, replacing a dead holder's: bound
 * under a unique short name, then renamed.  Returns the socket or -errno. */
int fb_bell_bind(int pfd, const char *bell)
{
	struct sockaddr_un sa;
	uint64_t nonce = 0;
	char tmp[64];
	int s, r;

	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		nonce = (uint64_t)lease_now_ns() ^ (uint64_t)getpid();
	snprintf(tmp, sizeof(tmp), ".bell-%016" PRIx64, nonce);
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	r = fd_sockaddr(&sa, pfd, tmp);
	if (r == 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		r = -errno;
	if (r == 0 && renameat(pfd, tmp, pfd, bell) < 0) {
		r = -errno;
		unlinkat(pfd, tmp, 0);
	}
	if (r < 0) {
		close(s);
		return r;
	}
	return s;
}

/* Ring NAME's bell if it has one.  Best effort: see above. */
void fb_bell_ring(struct file_store *fs, const char *name)
{
	char rel[LEASE_NAME_MAX + 16];
	struct sockaddr_un sa;
	struct stat st;
	int p, s = -1;

	if (fb_rel_path(rel, sizeof(rel), name, ".bell") < 0)
		return;
	p = lease_open_beneath(fs->dirfd, rel, O_PATH, 0);
	if (p < 0)
		return;
	if (fstat(p, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    fd_sockaddr(&sa, p, NULL) == 0)
		s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    send(s, "r", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* full queue: the holder has a ring pending anyway */
	}
	if (s >= 0)
		close(s);
	close(p);
}

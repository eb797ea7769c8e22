/* SPDX-License-Identifier: MIT */
/*
 * The daemon: its process. Descriptor limits, umask, groups, stdio.
 * (The whole: daemon.c; shared internals: daemon_int.h.)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <grp.h>

#include "daemon_int.h"
#include "rundir.h"

void detach_stdio(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return;
	dup2(fd, STDIN_FILENO);
	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
}

/* Highest fd limit the kernel allows a process (fs.nr_open). */
static rlim_t nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	unsigned long long v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return (rlim_t)v;
}

/* One fd per inode the kernel holds: raise the hard limit to nr_open when
 * privileged (the shell's hard limit is often only a few thousand), else
 * the soft limit to the hard one. */
static void raise_nofile(void)
{
	struct rlimit rl;
	rlim_t max = nr_open();

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (max > rl.rlim_max) {
		struct rlimit up = { .rlim_cur = max, .rlim_max = max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/*
 * The daemon process as the passthrough needs it: fds for every inode,
 * modes taken as sent (each worker applies the caller's umask itself),
 * and, when privileged, no supplementary groups a caller could borrow.
 */
int process_setup(struct lfs_err *err)
{
	struct rlimit rl;

	raise_nofile();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur < (rlim_t)(fd_reserve() + FD_SPARE))
		return lfs_fail(err, EXIT_FAIL, -EMFILE, "the open files limit "
				"is %llu; a mount needs at least %ld",
				(unsigned long long)rl.rlim_cur,
				fd_reserve() + FD_SPARE);
	umask(0);
	/* Root in a user namespace that denies setgroups keeps the groups of
	 * the user it is: its own, nothing to borrow. */
	if (geteuid() == 0 && setgroups(0, NULL) < 0 &&
	    (rundir_real_root() || errno != EPERM))
		return lfs_fail(err, EXIT_FAIL, -errno, "cannot drop "
				"supplementary groups: %s", strerror(errno));
	return 0;
}

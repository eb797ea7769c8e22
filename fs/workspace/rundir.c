/* SPDX-License-Identifier: MIT */
/* The host's run directory (contract in rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "rundir.h"

/* The pidfd ioctl (Linux 6.11) and the initial user namespace's fixed
 * inode (include/linux/proc_ns.h), which older headers lack. */
#ifndef PIDFD_GET_USER_NAMESPACE
#define PIDFD_GET_USER_NAMESPACE _IO(0xFF, 9)
#endif
#define INIT_USER_NS_INO 0xEFFFFFFDU
#define NSFS_MAGIC_ 0x6e736673

/* ---- who we are ---------------------------------------------------------- */

/* fd is a user namespace's nsfs inode: whether it is the initial one. */
static int ns_is_initial(int fd)
{
	struct statfs sf;
	struct stat st;

	if (fstatfs(fd, &sf) < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (sf.f_type != NSFS_MAGIC_)
		return -EINVAL;
	return st.st_ino == INIT_USER_NS_INO;
}

/* Our user namespace, from the kernel (a pidfd of ours), else from
 * /proc. */
static int own_user_ns(void)
{
	int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	int fd = -1;

	if (pfd >= 0) {
		fd = ioctl(pfd, PIDFD_GET_USER_NAMESPACE, 0);
		close(pfd);
	}
	if (fd < 0 && (pfd < 0 || errno == ENOTTY || errno == EINVAL))
		fd = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

bool rundir_real_root(void)
{
	static int cached = -1;
	int fd, r;

	if (cached >= 0)
		return cached;
	if (geteuid() != 0)
		return (cached = 0);
	fd = own_user_ns();
	r = fd < 0 ? 0 : ns_is_initial(fd);
	if (fd >= 0)
		close(fd);
	return (cached = r == 1);
}

static uid_t host_uid = (uid_t)-1;

uid_t rundir_host_uid(void)
{
	if (rundir_real_root())
		return 0;
	return host_uid != (uid_t)-1 ? host_uid : geteuid();
}

void rundir_set_host_uid(uid_t uid)
{
	host_uid = uid;
}

int rundir_uid_map(uid_t uid, bool outward, uid_t *out)
{
	FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long inside, outside, count;
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (r < 0 && fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3) {
		unsigned long from = outward ? inside : outside;
		unsigned long to = outward ? outside : inside;

		if (uid >= from && uid - from < count) {
			*out = (uid_t)(to + (uid - from));
			r = 0;
		}
	}
	fclose(f);
	return r;
}

/* ---- the layout ---------------------------------------------------------- */

static const struct part {
	const char *path;
	mode_t mode;
} parts[] = {
	{ LEASEFS_RUN_DIR, 0755 },
	{ RUNDIR_ROOTS, 0700 },
	{ RUNDIR_HOLDERS, 0700 },
	{ RUNDIR_CTL, 0711 },
};

/* `path` is a directory (not a symlink) of `uid`'s with exactly `mode`:
 * after creating it if absent and, with `repair`, repairing it.  1 if it
 * was repaired, else 0 or -errno. */
static int ensure_dir(const char *path, mode_t mode, uid_t uid, bool repair)
{
	struct stat st;

	if (repair && mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	/* Anyone else only needs it there: what is in it is the arbiter's
	 * business (root's uid may not even be mapped in its namespace). */
	if (!repair || ((st.st_mode & 07777) == mode && st.st_uid == uid))
		return 0;
	if (st.st_uid != uid && lchown(path, uid, (gid_t)-1) < 0)
		return -errno;
	return chmod(path, mode) < 0 ? -errno : 1;
}

/* Whether a name in ctl/ is a user's own directory (ctl/<its uid>). */
static bool own_uid_dir(const char *name, const struct stat *st)
{
	char want[16];

	snprintf(want, sizeof(want), "%u", (unsigned)st->st_uid);
	return S_ISDIR(st->st_mode) && strcmp(name, want) == 0;
}

/*
 * A part repaired from an older layout (writable by everyone): what users
 * put there goes, so that no name of theirs lives on in a directory that
 * is root's from now on.  In ctl/, a user's own ctl/<uid> stays.
 */
static void purge_foreign(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    st.st_uid == 0 || own_uid_dir(de->d_name, &st))
			continue;
		(void)unlinkat(dirfd(d), de->d_name,
			       S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
	}
	if (d)
		closedir(d);
}

int rundir_prepare(char *msg, size_t msgsz)
{
	bool root = rundir_real_root();
	const char *at = LEASEFS_RUN_DIR;
	int r = 0;

	for (size_t i = 0; r >= 0 && i < sizeof(parts) / sizeof(parts[0]); i++) {
		at = parts[i].path;
		r = ensure_dir(at, parts[i].mode, 0, root);
		if (r == 1 && i > 0)
			purge_foreign(at);
	}
	if (r >= 0)
		return 0;
	if (root)
		snprintf(msg, msgsz, "cannot set up %s: %s", at,
			 r == -ENOTDIR ? "not a directory" : strerror(-r));
	else
		snprintf(msg, msgsz, "the host's run directory %s is %s; root "
			 "sets it up (systemd-tmpfiles --create leasefs.conf, as "
			 "at boot, or any mount by root)", at,
			 r == -ENOENT ? "missing" : "not a directory");
	return r;
}

int rundir_ctl_dir(uid_t uid)
{
	char path[sizeof(RUNDIR_CTL) + 16];
	int r;

	snprintf(path, sizeof(path), RUNDIR_CTL "/%u", (unsigned)uid);
	r = ensure_dir(path, 0700, uid, true);
	return r < 0 ? r : 0;
}

/* The key at `path`: a regular file of `uid`'s (or ours, as our user
 * namespace sees it), exactly 32 bytes. */
static int key_read(const char *path, uid_t uid, unsigned char key[32])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), r = 0;
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode) || (st.st_uid != uid && st.st_uid != geteuid()) ||
		 st.st_size != 32 ||
		 read(fd, key, 32) != 32)
		r = -EINVAL;
	close(fd);
	return r;
}

/* A new key, written whole under a name of our own, then linked into
 * place: a reader never sees half a key, and a key there stays. */
static int key_make(const char *path, uid_t uid, unsigned char key[32])
{
	char tmp[PATH_MAX];
	int fd, r;

	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	r = getrandom(key, 32, 0) == 32 && write(fd, key, 32) == 32 ? 0 : -EIO;
	close(fd);
	if (r == 0 && link(tmp, path) < 0)
		r = -errno;
	(void)unlink(tmp);
	return r == -EEXIST ? key_read(path, uid, key) : r;
}

int rundir_ctl_key(uid_t uid, bool create, unsigned char key[32])
{
	char path[sizeof(RUNDIR_CTL) + 32];
	int r;

	snprintf(path, sizeof(path), RUNDIR_CTL "/%u/key", (unsigned)uid);
	r = key_read(path, uid, key);
	return r == -ENOENT && create ? key_make(path, uid, key) : r;
}

/* ---- locked files ---------------------------------------------------------- */

static int whole_lock(int fd, int cmd, short type, struct flock *out)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET };

	if (fcntl(fd, cmd, &fl) < 0)
		return -errno;
	if (out)
		*out = fl;
	return 0;
}

/* One attempt: the fd, -EAGAIN to try again (a sweep removed or is
 * removing the name), or -errno. */
static int lock_once(const char *path, bool create)
{
	int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	struct stat st;
	int fd = open(path, flags | (create ? O_CREAT : 0), 0600), r;

	if (fd < 0)
		return -errno;
	r = whole_lock(fd, F_OFD_SETLK, F_RDLCK, NULL);
	if (r == -EACCES)
		r = -EAGAIN;
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	if (r == 0 && !S_ISREG(st.st_mode))
		r = -EINVAL;
	if (r == 0 && st.st_nlink == 0)
		r = -EAGAIN;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int rundir_lock_file(const char *path, bool create)
{
	int r = -EAGAIN;

	for (int tries = 0; r == -EAGAIN && tries < 100; tries++)
		r = lock_once(path, create);
	return r;
}

int rundir_file_held(int fd)
{
	struct flock fl = { 0 };
	int r = whole_lock(fd, F_OFD_GETLK, F_WRLCK, &fl);

	return r < 0 ? r : fl.l_type == F_RDLCK;
}

/* ---- collection ---------------------------------------------------------- */

/* Remove `name` in dirfd if nobody holds it: 1 removed, else 0. */
static int collect_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	int removed = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    whole_lock(fd, F_OFD_SETLK, F_WRLCK, NULL) == 0)
		removed = unlinkat(dirfd, name, 0) == 0;
	close(fd); /* drops the write lock: an opener of the gone name retries */
	return removed;
}

void rundir_collect(const char *path)
{
	if (rundir_real_root())
		(void)collect_at(AT_FDCWD, path);
}

/* A control socket nobody listens on (its daemon was killed).  Sockets
 * are bound under a temporary name and renamed into place once listening
 * (control.c), so a refused connection is never a daemon starting. */
static int collect_socket_at(int dirfd, const char *dir, const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, r;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name) >=
	    sizeof(sa.sun_path))
		return 0;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return 0;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? errno : 0;
	close(fd);
	return r == ECONNREFUSED && unlinkat(dirfd, name, 0) == 0;
}

static int sweep_dir(const char *dir, bool sockets, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)) != NULL) {
		char sub[PATH_MAX];

		if (de->d_name[0] == '.')
			continue;
		if (sockets && de->d_type == DT_DIR && depth == 0) {
			snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
			n += sweep_dir(sub, true, 1);
		} else if (sockets) {
			n += collect_socket_at(dirfd(d), dir, de->d_name);
		} else {
			n += collect_at(dirfd(d), de->d_name);
		}
	}
	if (d)
		closedir(d);
	return n;
}

int rundir_sweep(void)
{
	if (!rundir_real_root())
		return 0;
	return sweep_dir(RUNDIR_ROOTS, false, 0) +
	       sweep_dir(RUNDIR_HOLDERS, false, 0) +
	       sweep_dir(RUNDIR_CTL, true, 0);
}

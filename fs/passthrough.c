/* SPDX-License-Identifier: MIT */
/*
 * Low-level FUSE passthrough of one root directory.
 *
 * Inodes: every inode the kernel knows is a record keyed by (dev, ino) in
 * a hash table and refcounted by the kernel's nlookup.  The FUSE node id is
 * the address of the record (FUSE_ROOT_ID stands for the root record).  A
 * record holds either an O_PATH fd, open until the kernel forgets the
 * inode, or - once the fd budget is spent - a file handle from which an
 * O_PATH fd is reopened per use (open_by_handle_at).  So the number of
 * inodes the kernel may keep is bounded by memory, not by RLIMIT_NOFILE.
 *
 * Credentials: when the daemon runs as root, every backing operation made
 * on behalf of a caller (lookup, readdirplus, open, opendir, create,
 * remove, rename, setattr, xattrs) runs with the caller's fsuid/fsgid on
 * the worker thread, so the backing filesystem checks it again with the
 * caller's rights and never the daemon's: a stale kernel cache or a
 * host-side chmod cannot be turned into root's access.  A worker keeps the
 * identity of the caller it served last and switches only when the next
 * caller differs (a switch costs two credential syscalls, ~4 us here);
 * the only backing call that needs the daemon's own identity, opening an
 * inode by handle, switches to it explicitly (inode_fd()).  Calls on an
 * open fd (read, write, fsync, ...) need no identity.  The daemon itself holds no
 * supplementary groups (main drops them); the caller's are installed, per
 * thread, only when a call failed with EACCES or EPERM without them, and
 * are always dropped again.  A caller with uid 0 keeps the daemon's
 * capabilities: FUSE does not tell which capabilities it has, so the
 * kernel's own check on the mount is the one that counts for it.
 *
 * Modes: FUSE_CAP_DONT_MASK is on and each worker thread has its own
 * umask (unshare(CLONE_FS)), set to the caller's around a creating call,
 * so the backing filesystem applies either the umask or the parent's
 * default ACL, exactly as it does natively.  POSIX ACLs are enforced by
 * the kernel (FUSE_CAP_POSIX_ACL, with default_permissions).
 *
 * Names: every backing call resolves one name relative to an O_PATH fd of
 * its parent and never follows a symlink at that name (AT_SYMLINK_NOFOLLOW,
 * O_NOFOLLOW, or calls that never follow); /proc/self/fd/N is used only to
 * reach the inode an O_PATH fd already names.  So no operation can leave
 * ROOT through a symlink, whatever the backing directory holds.
 *
 * This file knows nothing of leases: gate.c wraps the mutating entries of
 * the table built here.
 *
 * Error convention: helpers return 0 or -errno; reply_err() is the one
 * place that turns an error into a FUSE reply.
 */
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs.h"

#define LFS_MAX_WRITE (1u << 20)
#define LFS_TABLE_MIN_BUCKETS 1024u
/* Cache timeouts (s) once the lease is lost: the root has a new owner. */
#define LFS_LOST_TIMEOUT 1.0
#define PROC_FD_PATH_MAX 32

struct lfs_inode {
	struct lfs_inode *next; /* hash chain; fs->lock */
	uint64_t nlookup;       /* kernel references; fs->lock */
	dev_t dev;              /* immutable */
	ino_t ino;              /* immutable */
	int fd;                 /* O_PATH, or -1 when `handle` is used;
				 * immutable while the record lives */
	struct file_handle *handle; /* when fd < 0; immutable */
	bool pinned;            /* root: never freed by forget; immutable */
};

struct lfs_dir {
	DIR *dp;
	off_t offset;            /* the kernel's view of dp's position */
	struct dirent *pending;  /* read from dp but not yet returned */
};

struct lfs {
	struct lfs_config cfg;
	char *root_path;
	char *mountpoint;
	struct fuse_session *se;
	struct lfs_inode root;
	uid_t own_uid;          /* daemon credentials restored after switches */
	gid_t own_gid;
	bool switch_creds;      /* privileged daemon: act as each caller */
	/* Cache policy; lfs_after_loss() turns the exclusive one off. */
	_Atomic double entry_timeout;
	_Atomic double attr_timeout;
	atomic_bool keep_cache;
	int root_mnt_id;        /* handles are only used on the root's mount */
	int mount_fd;           /* root, O_RDONLY: open_by_handle_at refuses
				 * O_PATH fds as its mount fd */
	atomic_long kept_fds;   /* inode records holding an fd */
	atomic_bool handles_used; /* some record has been handle-only */
	long keep_files;        /* keep a non-directory's fd below this many */
	long keep_dirs;         /* keep a directory's fd below this many */

	/* lock protects the hash table: buckets, nbuckets, count, and every
	 * inode's next and nlookup.  Held only for table operations; never
	 * across a reply or a syscall. */
	pthread_mutex_t lock;
	struct lfs_inode **buckets;
	size_t nbuckets;          /* power of two */
	size_t count;
};

/* ---- small helpers ------------------------------------------------------ */

static struct lfs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct lfs_inode *inode_of(struct lfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &fs->root;
	return (struct lfs_inode *)(uintptr_t)ino;
}

static fuse_ino_t node_id(struct lfs *fs, struct lfs_inode *inode)
{
	if (inode == &fs->root)
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)inode;
}

/* The one mapping of an internal error to a FUSE reply. */
static void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}

static bool is_dot(const char *name)
{
	return name[0] == '.' &&
	       (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

static int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

/* "/proc/self/fd/N" for fd into buf. */
static const char *proc_path(char buf[PROC_FD_PATH_MAX], int fd)
{
	snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
	return buf;
}

static int stat_fd(int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

static void act_as(uid_t uid, gid_t gid);

/* An O_PATH fd for inode: its own, or a fresh one from its handle; give
 * it back with inode_fd_put().  A handle needs CAP_DAC_READ_SEARCH: that
 * path acts as the daemon itself. */
static int inode_fd(struct lfs *fs, struct lfs_inode *inode)
{
	int fd;

	if (inode->fd >= 0)
		return inode->fd;
	if (fs->switch_creds)
		act_as(fs->own_uid, fs->own_gid);
	fd = open_by_handle_at(fs->mount_fd, inode->handle, O_PATH | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	/* A handle goes stale when its object is deleted: answer as a path
	 * lookup of a deleted object would. */
	return errno == ESTALE ? -ENOENT : neg_errno();
}

static void inode_fd_put(struct lfs_inode *inode, int fd)
{
	if (fd >= 0 && fd != inode->fd)
		close(fd);
}


/* ---- caller credentials ------------------------------------------------- */

/*
 * This worker thread's own fs context (umask), so that the caller's umask
 * can be set per call.  False if the kernel refused: the caller's umask is
 * then applied to the mode by hand (a default ACL then sees a masked mode).
 */
static bool thread_fs_private(void)
{
	static __thread int state; /* 0 unknown, 1 private, -1 refused */

	if (state == 0)
		state = unshare(CLONE_FS) == 0 ? 1 : -1;
	return state > 0;
}

/* The caller's supplementary groups, however many (NULL, 0 if none). */
static int caller_groups(fuse_req_t req, gid_t **out)
{
	int size = 32, n;

	for (;;) {
		gid_t *g = malloc(sizeof(*g) * (size_t)size);

		if (!g)
			return -ENOMEM;
		n = fuse_req_getgroups(req, size, g);
		if (n <= 0) {
			free(g);
			*out = NULL;
			return n < 0 ? n : 0;
		}
		if (n <= size) {
			*out = g;
			return n;
		}
		free(g);
		size = n;
	}
}

/* Per-thread setgroups (the raw syscall; glibc's wrapper would change
 * every thread).  A worker that cannot drop a caller's groups again must
 * not serve another request: that is a broken invariant, not an error. */
static int thread_setgroups(size_t n, const gid_t *groups)
{
	return syscall(SYS_setgroups, n, groups) < 0 ? neg_errno() : 0;
}

static void thread_dropgroups(void)
{
	if (thread_setgroups(0, NULL) < 0)
		abort();
}

/* After fn failed with `rc` (EACCES or EPERM) under fsuid/fsgid alone:
 * once more with the caller's supplementary groups, if it has any. */
static int retry_with_groups(fuse_req_t req, int (*fn)(void *), void *arg,
			     int rc)
{
	gid_t *groups = NULL;
	int n = caller_groups(req, &groups), r;

	if (n <= 0)
		return rc;
	r = thread_setgroups((size_t)n, groups);
	free(groups);
	if (r < 0)
		return rc;
	r = fn(arg);
	thread_dropgroups();
	return r;
}

/* The fsuid/fsgid this worker thread acts as; unknown (-1) until set,
 * since a thread libfuse starts inherits its creator's. */
static __thread uid_t thread_uid = (uid_t)-1;
static __thread gid_t thread_gid = (gid_t)-1;

/* Make this thread act as uid/gid.  The gid first: while fsuid is not 0
 * the filesystem capabilities are gone, CAP_SETGID is not. */
static void act_as(uid_t uid, gid_t gid)
{
	if (thread_gid != gid) {
		setfsgid(gid);
		thread_gid = gid;
	}
	if (thread_uid != uid) {
		setfsuid(uid);
		thread_uid = uid;
	}
}

/* Act as the caller of req (a privileged daemon only). */
static void act_as_caller(fuse_req_t req)
{
	struct lfs *fs = req_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	if (fs->switch_creds)
		act_as(ctx->uid, ctx->gid);
}

/*
 * Runs fn(arg) as the caller (fsuid/fsgid), and with the caller's umask
 * when `mode` is non-NULL (the mode fn will use; masked by hand if the
 * thread cannot have its own umask).  An EACCES or EPERM without
 * supplementary groups is retried once with the caller's.
 */
static int as_caller_masked(fuse_req_t req, int (*fn)(void *), void *arg,
			    mode_t *mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int rc;

	if (mode) {
		if (thread_fs_private())
			umask(ctx->umask);
		else
			*mode &= ~ctx->umask;
	}
	act_as_caller(req);
	rc = fn(arg);
	if ((rc == -EACCES || rc == -EPERM) && req_fs(req)->switch_creds)
		rc = retry_with_groups(req, fn, arg, rc);
	return rc;
}

static int as_caller(fuse_req_t req, int (*fn)(void *), void *arg)
{
	return as_caller_masked(req, fn, arg, NULL);
}

/* ---- inode table -------------------------------------------------------- */

static size_t hash_key(dev_t dev, ino_t ino)
{
	uint64_t h = (uint64_t)ino ^ ((uint64_t)dev * 0x9e3779b97f4a7c15ull);

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	return (size_t)h;
}

/* Caller holds fs->lock. */
static struct lfs_inode *table_find_locked(struct lfs *fs, dev_t dev,
					   ino_t ino)
{
	struct lfs_inode *p = fs->buckets[hash_key(dev, ino) & (fs->nbuckets - 1)];

	while (p && !(p->ino == ino && p->dev == dev))
		p = p->next;
	return p;
}

/* Caller holds fs->lock.  Doubling keeps chains O(1) on average; a failed
 * allocation leaves the table usable at a higher load. */
static void table_grow_locked(struct lfs *fs)
{
	size_t n = fs->nbuckets * 2, i;
	struct lfs_inode **nb = calloc(n, sizeof(*nb));

	if (!nb)
		return;
	for (i = 0; i < fs->nbuckets; i++) {
		struct lfs_inode *p = fs->buckets[i], *next;

		for (; p; p = next) {
			size_t b = hash_key(p->dev, p->ino) & (n - 1);

			next = p->next;
			p->next = nb[b];
			nb[b] = p;
		}
	}
	free(fs->buckets);
	fs->buckets = nb;
	fs->nbuckets = n;
}

/* Caller holds fs->lock. */
static void table_insert_locked(struct lfs *fs, struct lfs_inode *inode)
{
	size_t b;

	if (fs->count >= fs->nbuckets)
		table_grow_locked(fs);
	b = hash_key(inode->dev, inode->ino) & (fs->nbuckets - 1);
	inode->next = fs->buckets[b];
	fs->buckets[b] = inode;
	fs->count++;
}

/* Caller holds fs->lock. */
static void table_remove_locked(struct lfs *fs, struct lfs_inode *inode)
{
	struct lfs_inode **pp =
		&fs->buckets[hash_key(inode->dev, inode->ino) & (fs->nbuckets - 1)];

	while (*pp && *pp != inode)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = inode->next;
		fs->count--;
	}
}

/* A new kernel reference to the inode (dev, ino), or NULL if unknown. */
static struct lfs_inode *table_ref(struct lfs *fs, dev_t dev, ino_t ino)
{
	struct lfs_inode *p;

	pthread_mutex_lock(&fs->lock);
	p = table_find_locked(fs, dev, ino);
	if (p)
		p->nlookup++;
	pthread_mutex_unlock(&fs->lock);
	return p;
}

static void inode_destroy(struct lfs *fs, struct lfs_inode *inode)
{
	if (inode->fd >= 0) {
		close(inode->fd);
		atomic_fetch_sub(&fs->kept_fds, 1);
	}
	free(inode->handle);
	free(inode);
}

/* A file handle big enough for any filesystem. */
struct handle_buf {
	struct file_handle fh;
	unsigned char bytes[MAX_HANDLE_SZ];
};

/* The handle of `name` in dirfd (not following symlinks), if it can be
 * opened through the root's mount; -errno otherwise. */
static int get_handle(struct lfs *fs, int dirfd, const char *name, int flags,
		      struct handle_buf *hb)
{
	int mnt_id;

	if (fs->root_mnt_id < 0)
		return -EOPNOTSUPP;
	hb->fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(dirfd, name, &hb->fh, &mnt_id, flags) < 0)
		return neg_errno();
	return mnt_id == fs->root_mnt_id ? 0 : -EXDEV;
}

static bool handle_eq(const struct file_handle *a, const struct file_handle *b)
{
	return a->handle_bytes == b->handle_bytes &&
	       a->handle_type == b->handle_type &&
	       memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

/*
 * A handle-only record does not pin its inode, so after the file is
 * deleted its (dev, ino) may be reused while the kernel still holds the
 * record.  Such a record is stale for lookups: `current` is the handle
 * now at that (dev, ino).
 */
static bool record_stale(const struct lfs_inode *p, const struct handle_buf *current)
{
	return p->fd < 0 && !handle_eq(p->handle, &current->fh);
}

/* Trades the fd of a new record for its handle (hb, or NULL if it has
 * none) once the budget is spent. */
static void inode_settle(struct lfs *fs, struct lfs_inode *inode,
			 const struct stat *st, const struct handle_buf *hb)
{
	long limit = S_ISDIR(st->st_mode) ? fs->keep_dirs : fs->keep_files;
	size_t sz;

	if (atomic_fetch_add(&fs->kept_fds, 1) < limit || !hb)
		return;
	sz = sizeof(hb->fh) + hb->fh.handle_bytes;
	inode->handle = malloc(sz);
	if (!inode->handle)
		return;
	memcpy(inode->handle, &hb->fh, sz);
	atomic_store(&fs->handles_used, true);
	close(inode->fd);
	inode->fd = -1;
	atomic_fetch_sub(&fs->kept_fds, 1);
}

/* Takes ownership of fd (an O_PATH fd whose stat is st) and returns a
 * referenced inode for it: an existing live record if another thread won
 * the race (the new one is then dropped), else a new one, which replaces a
 * stale record in the table.  NULL on allocation failure (fd closed). */
static struct lfs_inode *table_ref_or_add(struct lfs *fs, int fd,
					  const struct stat *st)
{
	struct lfs_inode *fresh = calloc(1, sizeof(*fresh)), *p;
	struct handle_buf hb;
	bool have = false;

	if (!fresh) {
		close(fd);
		return NULL;
	}
	fresh->dev = st->st_dev;
	fresh->ino = st->st_ino;
	fresh->fd = fd;
	fresh->nlookup = 1;
	/* Needed only once records may be handle-only (to settle this one
	 * or to detect a stale one); below the budget it is skipped. */
	if (atomic_load(&fs->handles_used) ||
	    atomic_load(&fs->kept_fds) >= fs->keep_files)
		have = get_handle(fs, fd, "", AT_EMPTY_PATH, &hb) == 0;
	inode_settle(fs, fresh, st, have ? &hb : NULL);

	pthread_mutex_lock(&fs->lock);
	p = table_find_locked(fs, st->st_dev, st->st_ino);
	if (p && have && record_stale(p, &hb)) {
		table_remove_locked(fs, p);
		p = NULL;
	}
	if (p)
		p->nlookup++;
	else
		table_insert_locked(fs, fresh);
	pthread_mutex_unlock(&fs->lock);

	if (!p)
		return fresh;
	inode_destroy(fs, fresh);
	return p;
}

/* Takes a stale record out of the table; the kernel's references to it
 * stay valid until forgotten. */
static void table_detach(struct lfs *fs, struct lfs_inode *inode)
{
	pthread_mutex_lock(&fs->lock);
	table_remove_locked(fs, inode);
	pthread_mutex_unlock(&fs->lock);
}

/* Drops n kernel references; frees the record when none remain. */
static void table_unref(struct lfs *fs, struct lfs_inode *inode, uint64_t n)
{
	bool dead = false;

	pthread_mutex_lock(&fs->lock);
	inode->nlookup = inode->nlookup > n ? inode->nlookup - n : 0;
	if (inode->nlookup == 0 && !inode->pinned) {
		table_remove_locked(fs, inode);
		dead = true;
	}
	pthread_mutex_unlock(&fs->lock);

	if (dead)
		inode_destroy(fs, inode);
}

/* ---- lookup ------------------------------------------------------------- */

static void entry_fill(struct lfs *fs, struct lfs_inode *inode,
		       const struct stat *st, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_id(fs, inode);
	e->attr = *st;
	e->attr_timeout = atomic_load(&fs->attr_timeout);
	e->entry_timeout = atomic_load(&fs->entry_timeout);
}

/*
 * Resolve `name` in the directory `dirfd` to a referenced inode and fill
 * `e`.  Known inodes cost one fstatat; unknown ones an O_PATH open as well.
 */
static int lookup_at(struct lfs *fs, int dirfd, const char *name,
		     struct fuse_entry_param *e)
{
	struct lfs_inode *inode;
	struct stat st;
	int fd, rc;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	inode = table_ref(fs, st.st_dev, st.st_ino);
	if (inode && inode->fd < 0) {
		struct handle_buf hb;

		if (get_handle(fs, dirfd, name, 0, &hb) == 0 &&
		    record_stale(inode, &hb)) {
			table_detach(fs, inode);
			table_unref(fs, inode, 1);
			inode = NULL;
		}
	}
	if (inode)
		goto found;

	fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return neg_errno();
	rc = stat_fd(fd, &st);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	inode = table_ref_or_add(fs, fd, &st);
	if (!inode)
		return -ENOMEM;
found:
	entry_fill(fs, inode, &st, e);
	return 0;
}

/* What a name operation on one parent directory needs. */
struct name_args {
	struct lfs *fs;
	int dirfd;
	const char *name;
	struct fuse_entry_param *e;  /* lookup */
	int flags;                   /* unlink */
	int tfd;                     /* rename: target directory */
	const char *tname;
};

static int lookup_fn(void *a_)
{
	struct name_args *a = a_;

	return lookup_at(a->fs, a->dirfd, a->name, a->e);
}

static void lfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct fuse_entry_param e;
	struct name_args a = { .fs = fs, .dirfd = inode_fd(fs, dir),
			       .name = name, .e = &e };
	double neg_timeout = atomic_load(&fs->entry_timeout);
	int rc = a.dirfd;

	/* The kernel never asks for these; they would leave the parent. */
	if (rc >= 0 && is_dot(name))
		rc = -EINVAL;
	else if (rc >= 0)
		rc = as_caller(req, lookup_fn, &a);
	inode_fd_put(dir, a.dirfd);
	if (rc == -ENOENT && neg_timeout > 0) {
		/* Negative entry: cached by the kernel for entry_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = neg_timeout;
		rc = 0;
	}
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_entry(req, &e);
}

static void lfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct lfs *fs = req_fs(req);

	table_unref(fs, inode_of(fs, ino), nlookup);
	fuse_reply_none(req);
}

static void lfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	struct lfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		table_unref(fs, inode_of(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* ---- attributes --------------------------------------------------------- */

static void reply_attr(fuse_req_t req, int rc, const struct stat *st)
{
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_attr(req, st, atomic_load(&req_fs(req)->attr_timeout));
}

static void lfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct stat st;
	int fd, rc;

	if (fi) {
		rc = fstat((int)fi->fh, &st) < 0 ? neg_errno() : 0;
	} else {
		fd = inode_fd(fs, inode);
		rc = fd < 0 ? fd : stat_fd(fd, &st);
		inode_fd_put(inode, fd);
	}
	reply_attr(req, rc, &st);
}

static int set_mode(int ifd, struct fuse_file_info *fi, mode_t mode)
{
	char p[PROC_FD_PATH_MAX];
	int res;

	if (fi)
		res = fchmod((int)fi->fh, mode);
	else
		res = chmod(proc_path(p, ifd), mode);
	return res < 0 ? neg_errno() : 0;
}

static int set_owner(int ifd, const struct stat *attr, int valid)
{
	uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
	gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;

	if (fchownat(ifd, "", uid, gid,
		     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

static int set_size(int ifd, struct fuse_file_info *fi, off_t size)
{
	char p[PROC_FD_PATH_MAX];
	int res;

	if (fi)
		res = ftruncate((int)fi->fh, size);
	else
		res = truncate(proc_path(p, ifd), size);
	return res < 0 ? neg_errno() : 0;
}

static void time_spec(struct timespec *ts, int valid, int set_bit,
		      int now_bit, const struct timespec *given)
{
	if (valid & now_bit)
		ts->tv_nsec = UTIME_NOW;
	else if (valid & set_bit)
		*ts = *given;
	else
		ts->tv_nsec = UTIME_OMIT;
}

static int set_times(int ifd, struct fuse_file_info *fi,
		     const struct stat *attr, int valid)
{
	struct timespec tv[2];
	int res;

	time_spec(&tv[0], valid, FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW,
		  &attr->st_atim);
	time_spec(&tv[1], valid, FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW,
		  &attr->st_mtim);
	if (fi)
		res = futimens((int)fi->fh, tv);
	else
		res = utimensat(ifd, "", tv,
				AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	return res < 0 ? neg_errno() : 0;
}

/* ifd: the inode's O_PATH fd; fi: the open file, if the kernel sent one. */
static int do_setattr(int ifd, struct stat *attr, int valid,
		      struct fuse_file_info *fi)
{
	int rc = 0;

	if (valid & FUSE_SET_ATTR_MODE)
		rc = set_mode(ifd, fi, attr->st_mode);
	if (!rc && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)))
		rc = set_owner(ifd, attr, valid);
	if (!rc && (valid & FUSE_SET_ATTR_SIZE))
		rc = set_size(ifd, fi, attr->st_size);
	if (!rc && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
			     FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)))
		rc = set_times(ifd, fi, attr, valid);
	return rc;
}

struct setattr_args {
	int ifd;
	struct stat *attr;
	int valid;
	struct fuse_file_info *fi;
};

static int setattr_fn(void *a_)
{
	struct setattr_args *a = a_;

	return do_setattr(a->ifd, a->attr, a->valid, a->fi);
}

static void lfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int valid, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct stat st;
	int fd = inode_fd(fs, inode);
	struct setattr_args a = { .ifd = fd, .attr = attr, .valid = valid,
				  .fi = fi };
	int rc = fd < 0 ? fd : as_caller(req, setattr_fn, &a);

	if (!rc)
		rc = stat_fd(fd, &st);
	inode_fd_put(inode, fd);
	reply_attr(req, rc, &st);
}

static void lfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	char buf[PATH_MAX + 1];
	int fd = inode_fd(fs, inode);
	ssize_t n = fd < 0 ? -1 : readlinkat(fd, "", buf, sizeof(buf));

	if (fd < 0)
		errno = -fd;
	inode_fd_put(inode, fd);
	if (n < 0)
		reply_err(req, neg_errno());
	else if ((size_t)n >= sizeof(buf))
		reply_err(req, -ENAMETOOLONG);
	else {
		buf[n] = '\0';
		fuse_reply_readlink(req, buf);
	}
}

/* ---- creating entries --------------------------------------------------- */

struct make_args {
	int dirfd;
	const char *name;
	mode_t mode;
	dev_t rdev;
	const char *target;   /* symlink */
	int oldfd;            /* link: O_PATH fd of the existing inode */
	int open_flags;       /* create */
	bool excl;            /* create: the caller asked for O_EXCL */
	int fd_out;           /* create: the opened file */
};

static int make_node(void *a_)
{
	struct make_args *a = a_;
	int res;

	if (S_ISDIR(a->mode))
		res = mkdirat(a->dirfd, a->name, a->mode & ~S_IFMT);
	else if (S_ISLNK(a->mode))
		res = symlinkat(a->target, a->dirfd, a->name);
	else
		res = mknodat(a->dirfd, a->name, a->mode, a->rdev);
	return res < 0 ? neg_errno() : 0;
}

/* Through /proc: linkat(AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH,
 * which the caller's fsuid drops. */
static int make_link(void *a_)
{
	struct make_args *a = a_;
	char p[PROC_FD_PATH_MAX];

	if (linkat(AT_FDCWD, proc_path(p, a->oldfd), a->dirfd, a->name,
		   AT_SYMLINK_FOLLOW) < 0)
		return neg_errno();
	return 0;
}

static void reply_made(fuse_req_t req, int dirfd, const char *name, int rc)
{
	struct fuse_entry_param e;

	if (!rc)
		rc = lookup_at(req_fs(req), dirfd, name, &e);
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_entry(req, &e);
}

static void make_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, dev_t rdev, const char *target)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = name, .mode = mode,
		.rdev = rdev, .target = target,
	};

	if (a.dirfd < 0)
		reply_err(req, a.dirfd);
	else
		reply_made(req, a.dirfd, name,
			   as_caller_masked(req, make_node, &a, &a.mode));
	inode_fd_put(dir, a.dirfd);
}

static void lfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	make_entry(req, parent, name, mode, rdev, NULL);
}

static void lfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	make_entry(req, parent, name, S_IFDIR | mode, 0, NULL);
}

static void lfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	make_entry(req, parent, name, S_IFLNK, 0, link);
}

static void lfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, newparent);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = newname,
		.oldfd = inode_fd(fs, inode),
	};

	if (a.dirfd < 0 || a.oldfd < 0)
		reply_err(req, a.dirfd < 0 ? a.dirfd : a.oldfd);
	else
		reply_made(req, a.dirfd, newname, as_caller(req, make_link, &a));
	inode_fd_put(dir, a.dirfd);
	inode_fd_put(inode, a.oldfd);
}

/* ---- removing and renaming ---------------------------------------------- */

static int unlink_fn(void *a_)
{
	struct name_args *a = a_;

	return unlinkat(a->dirfd, a->name, a->flags) < 0 ? neg_errno() : 0;
}

static void unlink_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
			 int flags)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct name_args a = { .dirfd = inode_fd(fs, dir), .name = name,
			       .flags = flags };
	int rc = a.dirfd < 0 ? a.dirfd : as_caller(req, unlink_fn, &a);

	inode_fd_put(dir, a.dirfd);
	reply_err(req, rc);
}

static void lfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	unlink_entry(req, parent, name, 0);
}

static void lfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	unlink_entry(req, parent, name, AT_REMOVEDIR);
}

static int rename_fn(void *a_)
{
	struct name_args *a = a_;

	if (renameat2(a->dirfd, a->name, a->tfd, a->tname,
		      (unsigned)a->flags) < 0)
		return neg_errno();
	return 0;
}

static void lfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *from = inode_of(fs, parent);
	struct lfs_inode *to = inode_of(fs, newparent);
	int ffd = -1, tfd = -1, rc;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
		rc = -EINVAL;
		goto out;
	}
	rc = ffd = inode_fd(fs, from);
	if (rc < 0)
		goto out;
	rc = tfd = inode_fd(fs, to);
	if (rc < 0)
		goto out;
	struct name_args a = { .dirfd = ffd, .name = name, .tfd = tfd,
			       .tname = newname, .flags = (int)flags };

	rc = as_caller(req, rename_fn, &a);
out:
	inode_fd_put(from, ffd);
	inode_fd_put(to, tfd);
	reply_err(req, rc);
}

/* ---- files -------------------------------------------------------------- */

static void open_reply_flags(struct lfs *fs, struct fuse_file_info *fi)
{
	/* Exclusive and held: this mount is the only legitimate writer, so
	 * cached pages stay valid across opens. */
	fi->keep_cache = atomic_load(&fs->keep_cache);
	/* O_DIRECT: the backing file is opened without it (its alignment
	 * rules would apply to the daemon's buffers), and the kernel's page
	 * cache is bypassed for this open instead. */
	fi->direct_io = (fi->flags & O_DIRECT) != 0;
	/* Locks are the kernel's and the backing fs reports errors at write
	 * time, so close needs no FLUSH round trip. */
	fi->noflush = 1;
}

/* Flags for opening the backing file on behalf of an open or create.
 * O_NOFOLLOW is the kernel's business (it resolved the name); an open
 * through /proc/self/fd must not carry it, and create adds its own. */
static int backing_flags(int flags)
{
	return (flags | O_CLOEXEC) &
	       ~(O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT | O_NOFOLLOW);
}

/* A referenced entry for the object open at fd (whose stat is st). */
static int entry_from_fd(struct lfs *fs, int fd, const struct stat *st,
			 struct fuse_entry_param *e)
{
	char p[PROC_FD_PATH_MAX];
	int pfd = open(proc_path(p, fd), O_PATH | O_CLOEXEC);
	struct lfs_inode *inode;

	if (pfd < 0)
		return neg_errno();
	inode = table_ref_or_add(fs, pfd, st);
	if (!inode)
		return -ENOMEM;
	entry_fill(fs, inode, st, e);
	return 0;
}

/*
 * Always O_EXCL and O_NOFOLLOW: the kernel sends CREATE only for a name it
 * believes absent, so an existing name (a symlink among them) means its
 * cache is stale.  ESTALE makes it look the name up again and open what is
 * there through the mount, where a symlink resolves in the caller's view.
 */
static int make_file(void *a_)
{
	struct make_args *a = a_;

	a->fd_out = openat(a->dirfd, a->name,
			   a->open_flags | O_CREAT | O_EXCL | O_NOFOLLOW,
			   a->mode);
	if (a->fd_out >= 0)
		return 0;
	return errno == EEXIST && !a->excl ? -ESTALE : neg_errno();
}

static void lfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *dir = inode_of(fs, parent);
	struct make_args a = {
		.dirfd = inode_fd(fs, dir), .name = name,
		.mode = mode & ~S_IFMT,
		.open_flags = backing_flags(fi->flags),
		.excl = (fi->flags & O_EXCL) != 0,
		.fd_out = -1,
	};
	struct fuse_entry_param e;
	struct stat st;
	int rc = a.dirfd;

	if (a.dirfd >= 0)
		rc = as_caller_masked(req, make_file, &a, &a.mode);
	inode_fd_put(dir, a.dirfd);
	if (!rc)
		rc = fstat(a.fd_out, &st) < 0 ? neg_errno() : 0;
	if (!rc)
		rc = entry_from_fd(fs, a.fd_out, &st, &e);
	if (rc < 0)
		goto fail;
	fi->fh = (uint64_t)a.fd_out;
	open_reply_flags(fs, fi);
	if (fuse_reply_create(req, &e, fi) != 0) {
		/* The kernel will not release a handle it never received. */
		close(a.fd_out);
		table_unref(fs, inode_of(fs, e.ino), 1);
	}
	return;
fail:
	if (a.fd_out >= 0)
		close(a.fd_out);
	reply_err(req, rc);
}

struct reopen_args {
	int ifd;
	int flags;
	int fd_out;
};

/* The inode itself, through its O_PATH fd (a magic link, never a name). */
static int reopen_fn(void *a_)
{
	struct reopen_args *a = a_;
	char p[PROC_FD_PATH_MAX];

	a->fd_out = open(proc_path(p, a->ifd), a->flags);
	return a->fd_out < 0 ? neg_errno() : 0;
}

static void lfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct reopen_args a = { .ifd = inode_fd(fs, inode),
				 .flags = backing_flags(fi->flags),
				 .fd_out = -1 };
	int rc = a.ifd < 0 ? a.ifd : as_caller(req, reopen_fn, &a);

	inode_fd_put(inode, a.ifd);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fi->fh = (uint64_t)a.fd_out;
	open_reply_flags(fs, fi);
	if (fuse_reply_open(req, fi) != 0)
		close(a.fd_out);
}

static void lfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void lfs_write_buf(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_bufvec *in, off_t off,
			  struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	ssize_t n;

	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = (int)fi->fh;
	out.buf[0].pos = off;
	n = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

/* Close-time errors of the backing fs (e.g. NFS) surface here. */
static void lfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd = dup((int)fi->fh);

	if (fd < 0 || close(fd) < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_err(req, 0);
}

static void lfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void lfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		      struct fuse_file_info *fi)
{
	int res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);

	reply_err(req, res < 0 ? neg_errno() : 0);
}

static void lfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			  off_t offset, off_t length,
			  struct fuse_file_info *fi)
{
	int res = fallocate((int)fi->fh, mode, offset, length);

	reply_err(req, res < 0 ? neg_errno() : 0);
}

static void lfs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in,
				off_t off_in, struct fuse_file_info *fi_in,
				fuse_ino_t ino_out, off_t off_out,
				struct fuse_file_info *fi_out, size_t len,
				int flags)
{
	ssize_t n = copy_file_range((int)fi_in->fh, &off_in, (int)fi_out->fh,
				    &off_out, len, (unsigned)flags);

	if (n < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_write(req, (size_t)n);
}

static void lfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	off_t res = lseek((int)fi->fh, off, whence);

	if (res < 0)
		reply_err(req, neg_errno());
	else
		fuse_reply_lseek(req, res);
}

/* ---- directories -------------------------------------------------------- */

static struct lfs_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct lfs_dir *)(uintptr_t)fi->fh;
}

static void lfs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct lfs_dir *d = calloc(1, sizeof(*d));
	int ifd, fd = -1, rc;

	if (!d) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = ifd = inode_fd(fs, inode);
	if (rc < 0)
		goto fail;
	struct reopen_args a = { .ifd = ifd, .fd_out = -1,
				 .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC };

	rc = as_caller(req, reopen_fn, &a);
	fd = a.fd_out;
	inode_fd_put(inode, ifd);
	if (rc < 0)
		goto fail;
	d->dp = fdopendir(fd);
	if (!d->dp) {
		rc = neg_errno();
		goto fail;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	/* Exclusive: the kernel's cached listing stays valid; it is
	 * invalidated by changes made through this mount. */
	fi->cache_readdir = atomic_load(&fs->keep_cache);
	fi->keep_cache = atomic_load(&fs->keep_cache);
	if (fuse_reply_open(req, fi) != 0) {
		closedir(d->dp);
		free(d);
	}
	return;
fail:
	if (fd >= 0)
		close(fd);
	free(d);
	reply_err(req, rc);
}

/* Adds one entry at buf; returns its size (> rem means it did not fit
 * and no reference was taken) or -errno. */
static ssize_t dir_add(fuse_req_t req, int dirfd, char *buf,
		       size_t rem, const struct dirent *de, bool plus)
{
	struct lfs *fs = req_fs(req);
	struct fuse_entry_param e;
	size_t n;
	int rc;

	if (!plus) {
		struct stat st = { .st_ino = de->d_ino,
				   .st_mode = (mode_t)de->d_type << 12 };

		return (ssize_t)fuse_add_direntry(req, buf, rem, de->d_name,
						  &st, de->d_off);
	}
	/* Dots, and names the caller may list but not look up (a directory
	 * with read but no search permission), go without attributes
	 * (node id 0): the kernel then looks them up itself if asked. */
	rc = is_dot(de->d_name) ? -EACCES : lookup_at(fs, dirfd, de->d_name, &e);
	if (rc == -EACCES) {
		memset(&e, 0, sizeof(e));
		e.attr.st_ino = de->d_ino;
		e.attr.st_mode = (mode_t)de->d_type << 12;
		return (ssize_t)fuse_add_direntry_plus(req, buf, rem,
						       de->d_name, &e,
						       de->d_off);
	}
	if (rc < 0)
		return rc;
	n = fuse_add_direntry_plus(req, buf, rem, de->d_name, &e, de->d_off);
	if (n > rem)
		table_unref(fs, inode_of(fs, e.ino), 1);
	return (ssize_t)n;
}

/* The kernel serializes readdir on one open directory, so a handle is
 * never used by two threads at once. */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi, bool plus)
{
	struct lfs_dir *d = dir_of(fi);
	char *buf = malloc(size);
	size_t pos = 0;
	int rc = 0;

	if (!buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	if (plus)
		act_as_caller(req); /* the entries' lookups are the caller's */
	if (off != d->offset) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->offset = off;
	}
	for (;;) {
		ssize_t n;

		if (!d->pending) {
			errno = 0;
			d->pending = readdir(d->dp);
			if (!d->pending) {
				rc = errno ? -errno : 0;
				break;
			}
		}
		n = dir_add(req, dirfd(d->dp), buf + pos, size - pos,
			    d->pending, plus);
		if (n < 0) {
			rc = (int)n;
			break;
		}
		if ((size_t)n > size - pos)
			break;
		pos += (size_t)n;
		d->offset = d->pending->d_off;
		d->pending = NULL;
	}
	/* A partial listing is still progress; the error recurs next call. */
	if (pos == 0 && rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}

static void lfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void lfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void lfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	struct lfs_dir *d = dir_of(fi);

	closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void lfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			 struct fuse_file_info *fi)
{
	int fd = dirfd(dir_of(fi)->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);

	reply_err(req, res < 0 ? neg_errno() : 0);
}

static void lfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	struct statvfs sv;
	int fd = inode_fd(fs, inode);
	int rc = fd;

	/* The FUSE statfs reply carries no flags: ST_RDONLY after loss comes
	 * from lfs_remount_readonly(). */
	if (fd >= 0)
		rc = fstatvfs(fd, &sv) < 0 ? neg_errno() : 0;
	inode_fd_put(inode, fd);
	if (rc < 0)
		reply_err(req, rc);
	else
		fuse_reply_statfs(req, &sv);
}

/* ---- xattrs --------------------------------------------------------------
 * Through /proc/self/fd/N, which reaches the inode itself (symlinks
 * included, where the kernel refuses user.* with EPERM as natively). */

/* What one xattr call needs; `name` NULL means list. */
struct xattr_args {
	const char *name;
	const char *value;   /* set; NULL for get/list/remove */
	char *buf;           /* get/list result */
	size_t size;
	int flags;
	bool remove;
};

static ssize_t xattr_call(const char *path, const struct xattr_args *a)
{
	if (a->remove)
		return removexattr(path, a->name);
	if (a->value)
		return setxattr(path, a->name, a->value, a->size, a->flags);
	if (a->name)
		return getxattr(path, a->name, a->buf, a->size);
	return listxattr(path, a->buf, a->size);
}

struct xattr_call_args {
	const char *path;
	const struct xattr_args *a;
	ssize_t n;
};

static int xattr_fn(void *a_)
{
	struct xattr_call_args *c = a_;

	c->n = xattr_call(c->path, c->a);
	return c->n < 0 ? neg_errno() : 0;
}

/* The call on inode `ino`, as the caller: result size or -errno. */
static ssize_t xattr_on(fuse_req_t req, fuse_ino_t ino,
			const struct xattr_args *a)
{
	struct lfs *fs = req_fs(req);
	struct lfs_inode *inode = inode_of(fs, ino);
	char p[PROC_FD_PATH_MAX];
	int fd = inode_fd(fs, inode);
	struct xattr_call_args c = { .path = proc_path(p, fd), .a = a };
	int rc;

	if (fd < 0)
		return fd;
	rc = as_caller(req, xattr_fn, &c);
	inode_fd_put(inode, fd);
	return rc < 0 ? rc : c.n;
}

static void lfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	struct xattr_args a = { .name = name, .value = value, .size = size,
				.flags = flags };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

static void lfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct xattr_args a = { .name = name, .remove = true };
	ssize_t n = xattr_on(req, ino, &a);

	reply_err(req, n < 0 ? (int)n : 0);
}

/* Size query (size == 0) or value; shared by getxattr and listxattr. */
static void reply_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct xattr_args a = { .name = name, .size = size };
	ssize_t n;

	if (size) {
		a.buf = malloc(size);
		if (!a.buf) {
			reply_err(req, -ENOMEM);
			return;
		}
	}
	n = xattr_on(req, ino, &a);
	/* The kernel asks for ACLs on every permission check: a backing fs
	 * without xattrs has none, which is ENODATA, not an error. */
	if (n == -EOPNOTSUPP && name && strncmp(name, "system.posix_acl_", 17) == 0)
		n = -ENODATA;
	if (n < 0)
		reply_err(req, (int)n);
	else if (size)
		fuse_reply_buf(req, a.buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(a.buf);
}

static void lfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 size_t size)
{
	reply_xattr(req, ino, name, size);
}

static void lfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	reply_xattr(req, ino, NULL, size);
}

/* ---- session ------------------------------------------------------------ */

/* Each bit of `caps` the kernel offers; libfuse fails INIT on a wanted
 * bit the kernel lacks. */
static void want(struct fuse_conn_info *conn, unsigned caps)
{
	conn->want |= caps & conn->capable;
}

static void lfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct lfs *fs = userdata;
	bool excl = atomic_load(&fs->keep_cache);

	/* Splice both ways.  Measured on 2 cores, interleaved: 512 MiB
	 * dd+fsync 760-816 MB/s with splice-in vs 320-620 without; untar and
	 * small-file metadata within noise of each other. */
	want(conn, FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
		   FUSE_CAP_SPLICE_MOVE);
	want(conn, FUSE_CAP_READDIRPLUS | FUSE_CAP_PARALLEL_DIROPS |
		   FUSE_CAP_ASYNC_READ | FUSE_CAP_ATOMIC_O_TRUNC);
	want(conn, FUSE_CAP_CACHE_SYMLINKS);
	/* ACLs enforced by the kernel as ext4 does (it also implies
	 * default_permissions); modes arrive unmasked with the caller's
	 * umask beside them, which the backing fs applies or replaces by a
	 * default ACL (see as_caller_masked). */
	want(conn, FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK);
	/* An acknowledged write must have passed the gate. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* The kernel clears suid/sgid itself (via setattr) on write,
	 * truncate and chown by a caller lacking CAP_FSETID. */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
	/* flock and POSIX locks are kept by the kernel (no lock ops): one
	 * mount is one lock domain. */
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	if (excl) {
		conn->want &= ~(FUSE_CAP_READDIRPLUS_AUTO |
				FUSE_CAP_AUTO_INVAL_DATA);
	} else {
		want(conn, FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_AUTO_INVAL_DATA);
	}
	conn->max_write = LFS_MAX_WRITE;
}

static const struct fuse_lowlevel_ops lfs_ops = {
	.init = lfs_init,
	.lookup = lfs_lookup,
	.forget = lfs_forget,
	.forget_multi = lfs_forget_multi,
	.getattr = lfs_getattr,
	.setattr = lfs_setattr,
	.readlink = lfs_readlink,
	.mknod = lfs_mknod,
	.mkdir = lfs_mkdir,
	.symlink = lfs_symlink,
	.link = lfs_link,
	.unlink = lfs_unlink,
	.rmdir = lfs_rmdir,
	.rename = lfs_rename,
	.create = lfs_create,
	.open = lfs_open,
	.read = lfs_read,
	.write_buf = lfs_write_buf,
	.flush = lfs_flush,
	.release = lfs_release,
	.fsync = lfs_fsync,
	.fallocate = lfs_fallocate,
	.copy_file_range = lfs_copy_file_range,
	.lseek = lfs_lseek,
	.opendir = lfs_opendir,
	.readdir = lfs_readdir,
	.readdirplus = lfs_readdirplus,
	.releasedir = lfs_releasedir,
	.fsyncdir = lfs_fsyncdir,
	.statfs = lfs_statfs,
	.setxattr = lfs_setxattr,
	.getxattr = lfs_getxattr,
	.listxattr = lfs_listxattr,
	.removexattr = lfs_removexattr,
};

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

/* The mount id handles must carry to be opened through the root; -1 (no
 * handles, every inode keeps its fd) if the backing fs has none. */
static int root_mount_id(int fd)
{
	char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	struct file_handle *fh = (struct file_handle *)buf;
	int mnt_id;

	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", fh, &mnt_id, AT_EMPTY_PATH) < 0)
		return -1;
	return mnt_id;
}

/* Inodes keep their fds while at most half the fd limit is spent on
 * files and three quarters on inodes overall (directories are the *at()
 * bases), leaving the rest for open files and directory streams. */
static void set_fd_budget(struct lfs *fs)
{
	struct rlimit rl;
	long cur = 1024;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		cur = (long)rl.rlim_cur;
	fs->keep_files = cur / 2;
	fs->keep_dirs = cur / 4 * 3;
}

/*
 * The root the lease names is a canonical path (no symlinks in it).  Open
 * exactly that, refusing any symlink that appeared in the path since it
 * was resolved: the daemon must serve the directory it holds the lease on.
 */
static int open_canonical_dir(const char *path)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return (int)fd;
}

static int open_root(struct lfs *fs)
{
	struct stat st;
	int rc;

	fs->root.fd = open_canonical_dir(fs->root_path);
	if (fs->root.fd < 0)
		return neg_errno();
	rc = stat_fd(fs->root.fd, &st);
	if (rc < 0)
		return rc;
	fs->root.dev = st.st_dev;
	fs->root.ino = st.st_ino;
	fs->root_mnt_id = root_mount_id(fs->root.fd);
	fs->mount_fd = openat(fs->root.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fs->mount_fd < 0)
		fs->root_mnt_id = -1;
	fs->root.nlookup = 1;
	fs->root.pinned = true;
	table_insert_locked(fs, &fs->root); /* not yet shared */
	return 0;
}

/* A privileged daemon acts as each caller, and holds no supplementary
 * groups of its own that a caller's request could borrow. */
static int save_creds(struct lfs *fs)
{
	fs->own_uid = geteuid();
	fs->own_gid = getegid();
	fs->switch_creds = fs->own_uid == 0;
	if (fs->switch_creds && setgroups(0, NULL) < 0)
		return neg_errno();
	return 0;
}

int lfs_new(const struct lfs_config *cfg, struct fuse_args *args,
	    struct lfs **out)
{
	struct fuse_lowlevel_ops ops = lfs_ops;
	struct lfs *fs = calloc(1, sizeof(*fs));
	int rc;

	if (!fs)
		return -ENOMEM;
	fs->cfg = *cfg;
	fs->root.fd = -1;
	fs->mount_fd = -1;
	pthread_mutex_init(&fs->lock, NULL);
	fs->nbuckets = LFS_TABLE_MIN_BUCKETS;
	fs->buckets = calloc(fs->nbuckets, sizeof(*fs->buckets));
	fs->root_path = strdup(cfg->root);
	if (!fs->buckets || !fs->root_path) {
		rc = -ENOMEM;
		goto fail;
	}
	fs->cfg.root = fs->root_path;
	atomic_init(&fs->entry_timeout, cfg->entry_timeout);
	atomic_init(&fs->attr_timeout, cfg->attr_timeout);
	atomic_init(&fs->keep_cache, cfg->keep_cache);
	rc = save_creds(fs);
	if (rc < 0)
		goto fail;
	raise_nofile();
	set_fd_budget(fs);
	/* Modes arrive unmasked; each worker sets the caller's umask on
	 * its own fs context, or masks by hand (as_caller_masked). */
	umask(0);
	rc = open_root(fs);
	if (rc < 0)
		goto fail;

	lfs_gate_init(cfg->coord);
	lfs_gate_ops(&ops);
	fs->se = fuse_session_new(args, &ops, sizeof(ops), fs);
	if (!fs->se) {
		rc = -EINVAL;
		goto fail;
	}
	*out = fs;
	return 0;
fail:
	lfs_free(fs);
	return rc;
}

struct fuse_session *lfs_session(struct lfs *fs)
{
	return fs->se;
}

int lfs_mount(struct lfs *fs, const char *mountpoint)
{
	free(fs->mountpoint);
	fs->mountpoint = strdup(mountpoint);
	if (!fs->mountpoint)
		return -ENOMEM;
	if (fuse_session_mount(fs->se, mountpoint) != 0)
		return -EIO;
	return 0;
}

/*
 * fs.h pins FUSE_USE_VERSION 34, whose fuse_session_loop_mt() takes the old
 * two-field config and cannot bound the worker count.  The 3.12 loop is
 * exported by every libfuse >= 3.12 (versioned symbol) and takes the
 * opaque config that fuse_loop_cfg_create() returns.
 */
int fuse_session_loop_mt_312(struct fuse_session *se,
			     struct fuse_loop_config *config);

/* One worker per CPU, at least two so that one blocking call (fsync, a
 * cold read) does not stall the mount.  Measured on 2 cores: 2 workers beat
 * 4 on serial metadata (rename 10-11k/s vs 6.5-8k/s) and tie on untar;
 * 1 worker is slowest everywhere; clone_fd made no measurable difference. */
static unsigned default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 2)
		return 2;
	return n > 16 ? 16 : (unsigned)n;
}

int lfs_run(struct lfs *fs)
{
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	unsigned threads = fs->cfg.max_threads ? fs->cfg.max_threads
					       : default_threads();
	int res;

	if (!lc)
		return -ENOMEM;
	fuse_loop_cfg_set_max_threads(lc, threads);
	/* Idle limit = worker limit: a worker is never retired, since thread
	 * churn costs more than idle threads do. */
	fuse_loop_cfg_set_idle_threads(lc, threads);
	fuse_loop_cfg_set_clone_fd(lc, 0);
	res = fuse_session_loop_mt_312(fs->se, lc);
	fuse_loop_cfg_destroy(lc);
	return res < 0 ? res : 0;
}

/*
 * Reconfigure the superblock read-only through fspick()/fsconfig(): that
 * changes SB_RDONLY and nothing else.  A legacy MS_REMOUNT would also
 * replace the mount's own flags (nosuid, nodev, noexec, atime) with the
 * ones passed, and this call has no business weakening them.
 */
int lfs_remount_readonly(struct lfs *fs)
{
	int fd, rc = 0;

	if (!fs->mountpoint)
		return -EINVAL;
	fd = fspick(AT_FDCWD, fs->mountpoint, FSPICK_CLOEXEC | FSPICK_NO_AUTOMOUNT);
	if (fd < 0)
		return neg_errno();
	if (fsconfig(fd, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
	    fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
		rc = neg_errno();
	close(fd);
	return rc;
}

/* Node ids of every inode the kernel holds; *n of them, malloc'ed. */
static fuse_ino_t *known_nodes(struct lfs *fs, size_t *n)
{
	fuse_ino_t *ids;
	size_t i, k = 0;

	pthread_mutex_lock(&fs->lock);
	ids = malloc(sizeof(*ids) * (fs->count ? fs->count : 1));
	for (i = 0; ids && i < fs->nbuckets; i++)
		for (struct lfs_inode *p = fs->buckets[i]; p; p = p->next)
			ids[k++] = node_id(fs, p);
	pthread_mutex_unlock(&fs->lock);
	*n = k;
	return ids;
}

void lfs_after_loss(struct lfs *fs)
{
	size_t n, i;
	fuse_ino_t *ids;

	atomic_store(&fs->keep_cache, false);
	atomic_store(&fs->entry_timeout, LFS_LOST_TIMEOUT);
	atomic_store(&fs->attr_timeout, LFS_LOST_TIMEOUT);
	ids = known_nodes(fs, &n);
	/* A node forgotten meanwhile answers ENOENT: nothing to drop. */
	for (i = 0; ids && i < n; i++)
		fuse_lowlevel_notify_inval_inode(fs->se, ids[i], 0, 0);
	free(ids);
}

void lfs_unmount(struct lfs *fs)
{
	fuse_session_unmount(fs->se);
}

static void table_free(struct lfs *fs)
{
	size_t i;

	for (i = 0; fs->buckets && i < fs->nbuckets; i++) {
		struct lfs_inode *p = fs->buckets[i], *next;

		for (; p; p = next) {
			next = p->next;
			if (p != &fs->root)
				inode_destroy(fs, p);
		}
	}
	free(fs->buckets);
}

void lfs_free(struct lfs *fs)
{
	if (!fs)
		return;
	if (fs->se)
		fuse_session_destroy(fs->se);
	table_free(fs);
	if (fs->root.fd >= 0)
		close(fs->root.fd);
	if (fs->mount_fd >= 0)
		close(fs->mount_fd);
	pthread_mutex_destroy(&fs->lock);
	free(fs->root_path);
	free(fs->mountpoint);
	free(fs);
}

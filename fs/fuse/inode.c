/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's inode table.  Every inode the kernel knows is a record
 * keyed by (dev, ino) in a hash table and refcounted by the kernel's
 * nlookup; the FUSE node id is the record's address (FUSE_ROOT_ID stands
 * for the root record).  A record holds either an O_PATH fd, open until
 * the kernel forgets the inode, or - once the fd budget is spent - a file
 * handle from which an O_PATH fd is reopened per use (open_by_handle_at).
 * So the number of inodes the kernel may keep is bounded by memory, not by
 * RLIMIT_NOFILE.
 */
#include <errno.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lfs_int.h"

/* An O_PATH fd for inode: its own, or a fresh one from its handle; give
 * it back with inode_fd_put().  A handle needs CAP_DAC_READ_SEARCH: that
 * path acts as the daemon itself. */
int inode_fd(struct lfs *fs, struct lfs_inode *inode)
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

void inode_fd_put(struct lfs_inode *inode, int fd)
{
	if (fd >= 0 && fd != inode->fd)
		close(fd);
}

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
struct lfs_inode *table_ref(struct lfs *fs, dev_t dev, ino_t ino)
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


/* The handle of `name` in dirfd (not following symlinks), if it can be
 * opened through the root's mount; -errno otherwise. */
int get_handle(struct lfs *fs, int dirfd, const char *name, int flags,
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
bool record_stale(const struct lfs_inode *p, const struct handle_buf *current)
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
struct lfs_inode *table_ref_or_add(struct lfs *fs, int fd,
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
void table_detach(struct lfs *fs, struct lfs_inode *inode)
{
	pthread_mutex_lock(&fs->lock);
	table_remove_locked(fs, inode);
	pthread_mutex_unlock(&fs->lock);
}

/* Drops n kernel references; frees the record when none remain.  The
 * kernel forgetting more than it was given is an accounting bug on one
 * side: said on stderr, then clamped (the record goes). */
void table_unref(struct lfs *fs, struct lfs_inode *inode, uint64_t n)
{
	uint64_t had;
	ino_t ino = inode->ino; /* immutable; the record may go after unlock */
	bool dead = false;

	pthread_mutex_lock(&fs->lock);
	had = inode->nlookup;
	inode->nlookup = had > n ? had - n : 0;
	if (inode->nlookup == 0 && !inode->pinned) {
		table_remove_locked(fs, inode);
		dead = true;
	}
	pthread_mutex_unlock(&fs->lock);

	/* Through libfuse's log, which the daemon takes into its own (the
	 * journal or syslog; stderr under -d): no dependency on fs/daemon. */
	if (n > had)
		fuse_log(FUSE_LOG_ERR, "BUG: the kernel forgot %llu references "
			 "of inode %llu, which it held %llu times\n",
			 (unsigned long long)n, (unsigned long long)ino,
			 (unsigned long long)had);
	if (dead)
		inode_destroy(fs, inode);
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

/*
 * Inodes keep their fds while at most half of their budget is spent on
 * files and three quarters on inodes overall (directories are the *at()
 * bases).  What the inodes can never take of fd_limit is the budget of
 * callers' open files and directories; one uid may hold a quarter of it
 * (cfg.files_per_user overrides), so a caller that opens without end gets
 * EMFILE while others still open, and the daemon's own descriptors
 * (outside fd_limit) are never touched.
 */
void set_fd_budget(struct lfs *fs)
{
	struct rlimit rl;
	long limit = fs->cfg.fd_limit, inodes;

	if (limit <= 0)
		limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
			rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur / 2 : 512;
	inodes = fs->cfg.inode_fds > 0 ? fs->cfg.inode_fds : limit;
	fs->keep_files = inodes / 2;
	fs->keep_dirs = inodes / 4 * 3;
	if (fs->keep_dirs > limit / 4 * 3)
		fs->keep_dirs = limit / 4 * 3;
	if (fs->keep_files > fs->keep_dirs)
		fs->keep_files = fs->keep_dirs;
	fs->open_budget = limit - fs->keep_dirs;
	if (fs->open_budget < 1)
		fs->open_budget = 1;
	fs->per_user = fs->cfg.files_per_user > 0 ? fs->cfg.files_per_user
						  : fs->open_budget / 4;
	if (fs->per_user < 1)
		fs->per_user = 1;
}

/* Caller holds open_lock.  uid's count, or NULL if it has none yet. */
static struct uid_count *user_find_locked(struct lfs *fs, uid_t uid)
{
	size_t mask = fs->nusers_cap - 1;

	if (!fs->nusers_cap)
		return NULL;
	for (size_t i = uid & mask; fs->users[i].used; i = (i + 1) & mask)
		if (fs->users[i].uid == uid)
			return &fs->users[i];
	return NULL;
}

/* Caller holds open_lock.  Doubles the table (at most half full). */
static int users_grow_locked(struct lfs *fs)
{
	size_t cap = fs->nusers_cap ? fs->nusers_cap * 2 : 16;
	struct uid_count *nu = calloc(cap, sizeof(*nu));

	if (!nu)
		return -ENOMEM;
	for (size_t i = 0; i < fs->nusers_cap; i++) {
		size_t j = fs->users[i].uid & (cap - 1);

		if (!fs->users[i].used)
			continue;
		while (nu[j].used)
			j = (j + 1) & (cap - 1);
		nu[j] = fs->users[i];
	}
	free(fs->users);
	fs->users = nu;
	fs->nusers_cap = cap;
	return 0;
}

/* Caller holds open_lock.  uid's count, added if new; NULL out of memory. */
static struct uid_count *user_slot_locked(struct lfs *fs, uid_t uid)
{
	struct uid_count *u = user_find_locked(fs, uid);
	size_t i;

	if (u)
		return u;
	if (fs->nusers + 1 > fs->nusers_cap / 2 && users_grow_locked(fs) < 0)
		return NULL;
	for (i = uid & (fs->nusers_cap - 1); fs->users[i].used;
	     i = (i + 1) & (fs->nusers_cap - 1))
		;
	fs->users[i] = (struct uid_count){ .uid = uid, .used = true };
	fs->nusers++;
	return &fs->users[i];
}

int open_get(struct lfs *fs, uid_t uid)
{
	struct uid_count *u;
	int r = 0;

	pthread_mutex_lock(&fs->open_lock);
	u = user_slot_locked(fs, uid);
	if (!u)
		r = -ENOMEM;
	else if (u->n >= fs->per_user)
		r = -EMFILE;
	else if (fs->open_total >= fs->open_budget)
		r = -ENFILE;
	else {
		u->n++;
		fs->open_total++;
	}
	pthread_mutex_unlock(&fs->open_lock);
	return r;
}

void open_put(struct lfs *fs, uid_t uid)
{
	struct uid_count *u;

	pthread_mutex_lock(&fs->open_lock);
	u = user_find_locked(fs, uid);
	if (u && u->n > 0) {
		u->n--;
		fs->open_total--;
	}
	pthread_mutex_unlock(&fs->open_lock);
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

int open_root(struct lfs *fs)
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

/* Node ids of every inode the kernel holds; *n of them, malloc'ed. */
fuse_ino_t *known_nodes(struct lfs *fs, size_t *n)
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

void table_free(struct lfs *fs)
{
	free(fs->users);
	fs->users = NULL;
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

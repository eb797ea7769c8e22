/* SPDX-License-Identifier: MIT */
/*
 * The passthrough's inode table.  Every inode the kernel knows is a record
 * keyed by (dev, ino) in a hash table and refcounted by the kernel's
 * nlookup; the FUSE node id is the record's address (FUSE_ROOT_ID stands
 * for the root record).  A record holds either an O_PATH fd, open until
 * the kernel forgets the inode, or - once the fd budget is spent - a file
 * handle from which an O_PATH fd is reopened per use (open_by_handle_at).
 * So the number of inodes the kernel may keep is bounded by memory, not by
 * RLIMIT_NOFILE.  (The front end maps records to node ids: lfs_int.h.)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "beneath.h"
#include "core.h"

/* An O_PATH fd for inode: its own, or a fresh one from its handle; give
 * it back with inode_fd_put().  A handle needs CAP_DAC_READ_SEARCH: never
 * called while acting as a caller. */
int inode_fd(struct lfs *fs, struct lfs_inode *inode)
{
	int fd;

	if (inode->fd >= 0)
		return inode->fd;
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
 * side: clamped (the record goes), and how many too many returned for
 * the front end to say. */
uint64_t table_unref(struct lfs *fs, struct lfs_inode *inode, uint64_t n)
{
	uint64_t had;
	bool dead = false;

	pthread_mutex_lock(&fs->lock);
	had = inode->nlookup;
	inode->nlookup = had > n ? had - n : 0;
	if (inode->nlookup == 0 && !inode->pinned) {
		table_remove_locked(fs, inode);
		dead = true;
	}
	pthread_mutex_unlock(&fs->lock);

	if (dead)
		inode_destroy(fs, inode);
	return n > had ? n - had : 0;
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
 * files and five eighths of fd_limit on inodes overall (directories are
 * the *at() bases).  What the inodes can never take of fd_limit is the
 * budget of callers' open files and directories.  An eighth of fd_limit
 * of it is the reserve, which only uid 0 may take: every other caller
 * together stops short of it (ENFILE), so root's requests keep working
 * while every user is at budget.  One person may hold a quarter of the
 * rest (cfg.files_per_user overrides), so a caller that opens without end
 * gets EMFILE while others still open.  The daemon's own descriptors
 * (its lease store, control socket, FUSE device) are outside fd_limit
 * (fd_reserve()) and never touched.  fs/fuse/README.md, "Budgets".
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
	if (fs->keep_dirs > limit / 8 * 5)
		fs->keep_dirs = limit / 8 * 5;
	if (fs->keep_files > fs->keep_dirs)
		fs->keep_files = fs->keep_dirs;
	fs->open_budget = limit - fs->keep_dirs;
	if (fs->open_budget < 2)
		fs->open_budget = 2;
	fs->open_reserve = limit / 8;
	if (fs->open_reserve >= fs->open_budget)
		fs->open_reserve = fs->open_budget / 2;
	fs->per_user = fs->cfg.files_per_user > 0
		? fs->cfg.files_per_user
		: (fs->open_budget - fs->open_reserve) / 4;
	if (fs->per_user < 1)
		fs->per_user = 1;
}

static size_t person_hash(uint64_t person)
{
	return (size_t)((person ^ person >> 32) * UINT64_C(0x9e3779b97f4a7c15) >> 16);
}

/* Caller holds open_lock.  The person's count, or NULL if it has none. */
static struct uid_count *user_find_locked(struct lfs *fs, uint64_t person)
{
	size_t mask = fs->nusers_cap - 1;

	if (!fs->nusers_cap)
		return NULL;
	for (size_t i = person_hash(person) & mask; fs->users[i].used;
	     i = (i + 1) & mask)
		if (fs->users[i].person == person)
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
		size_t j;

		if (!fs->users[i].used)
			continue;
		j = person_hash(fs->users[i].person) & (cap - 1);
		while (nu[j].used)
			j = (j + 1) & (cap - 1);
		nu[j] = fs->users[i];
	}
	free(fs->users);
	fs->users = nu;
	fs->nusers_cap = cap;
	return 0;
}

/* Caller holds open_lock.  The person's count, added if new; NULL out of
 * memory. */
static struct uid_count *user_slot_locked(struct lfs *fs, uint64_t person)
{
	struct uid_count *u = user_find_locked(fs, person);
	size_t i;

	if (u)
		return u;
	if (fs->nusers + 1 > fs->nusers_cap / 2 && users_grow_locked(fs) < 0)
		return NULL;
	for (i = person_hash(person) & (fs->nusers_cap - 1); fs->users[i].used;
	     i = (i + 1) & (fs->nusers_cap - 1))
		;
	fs->users[i] = (struct uid_count){ .person = person, .used = true };
	fs->nusers++;
	return &fs->users[i];
}

/* Caller holds open_lock.  Whether all callers but uid 0 may open one
 * more: their total stays short of the reserve. */
static bool others_below_reserve_locked(const struct lfs *fs)
{
	return fs->open_total - fs->open_root <
	       fs->open_budget - fs->open_reserve;
}

int open_get(struct lfs *fs, uid_t uid)
{
	uint64_t person = ws_person_of(&fs->persons, uid);
	struct uid_count *u;
	int r = 0;

	pthread_mutex_lock(&fs->open_lock);
	u = user_slot_locked(fs, person);
	if (!u)
		r = -ENOMEM;
	else if (u->n >= fs->per_user)
		r = -EMFILE;
	else if (fs->open_total >= fs->open_budget ||
		 (uid != 0 && !others_below_reserve_locked(fs)))
		r = -ENFILE;
	else {
		u->n++;
		fs->open_total++;
		fs->open_root += uid == 0;
	}
	pthread_mutex_unlock(&fs->open_lock);
	return r;
}

void open_put(struct lfs *fs, uid_t uid)
{
	struct uid_count *u;

	pthread_mutex_lock(&fs->open_lock);
	u = user_find_locked(fs, ws_person_of(&fs->persons, uid));
	if (u && u->n > 0) {
		u->n--;
		fs->open_total--;
		fs->open_root -= uid == 0 && fs->open_root > 0;
	}
	pthread_mutex_unlock(&fs->open_lock);
}

/* On FUSE or overlayfs, whose writers behind the layer leasefs cannot
 * see (fs/cli/stacked.c says which and why). */
static bool root_is_stacked(int fd)
{
	struct statfs sf;

	return fstatfs(fd, &sf) == 0 &&
	       ((unsigned long)sf.f_type == 0x65735546 /* FUSE_SUPER_MAGIC */ ||
		(unsigned long)sf.f_type == 0x794c7630 /* OVERLAYFS_SUPER_MAGIC */);
}

int open_root(struct lfs *fs)
{
	struct stat st;
	int rc;

	/* The root the lease names is a canonical path: exactly that,
	 * refusing any symlink that appeared in it since it was resolved. */
	fs->root.fd = lease_open_canonical_dir(fs->root_path, O_PATH);
	if (fs->root.fd < 0) {
		rc = fs->root.fd;
		fs->root.fd = -1;
		return rc;
	}
	rc = stat_fd(fs->root.fd, &st);
	if (rc < 0)
		return rc;
	if (!fs->cfg.allow_stacked_root && root_is_stacked(fs->root.fd))
		return -EXDEV;
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

struct lfs_inode **known_inodes(struct lfs *fs, size_t *n)
{
	struct lfs_inode **all;
	size_t i, k = 0;

	pthread_mutex_lock(&fs->lock);
	all = malloc(sizeof(*all) * (fs->count ? fs->count : 1));
	for (i = 0; all && i < fs->nbuckets; i++)
		for (struct lfs_inode *p = fs->buckets[i]; p; p = p->next)
			all[k++] = p;
	pthread_mutex_unlock(&fs->lock);
	*n = k;
	return all;
}

void table_free(struct lfs *fs)
{
	free(fs->users);
	fs->users = NULL;
	ws_persons_free(&fs->persons);
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

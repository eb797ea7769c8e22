/* SPDX-License-Identifier: MIT */
/*
 * Internals of the passthrough, shared by its units and nothing else:
 *   lfs.c     the object, INIT, the ops table, what a loss changes
 *   entry.c   names: lookup, forget, create/link/remove/rename entries
 *   attr.c    attributes, suid/sgid rules, readlink, O_NOATIME after loss
 *   file.c    open files: create, open, read, write, sync, ranges
 *   dir.c     directories and statfs
 *   xattr.c   extended attributes
 *   inode.c   inode table, file handles, fd budget, the root record
 *   creds.c   acting as the caller (fsuid/fsgid, groups, umask)
 *   iomode.c  how the kernel serves each open: cached, direct, passthrough
 * The daemon and the gate see only fs.h.
 */
#ifndef LEASEFS_LFS_INT_H
#define LEASEFS_LFS_INT_H

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fs.h"
#include "ops.h"

#define LFS_TABLE_MIN_BUCKETS 1024u
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
	/* Opens the daemon answered and the kernel has not released, and
	 * how they are served (iomode.c); all under fs->io_lock. */
	unsigned opens;
	int backing_id;         /* > 0: every open is passthrough of it */
	bool direct;            /* every open is direct (FOPEN_DIRECT_IO) */
	bool bypassed;          /* this period wrote past the page cache */
	bool cache_stale;       /* ... so the next one must not keep it */
	bool read_write;        /* an O_RDWR open was seen: no passthrough */
};

/* Subordinate uids [start, end) and the person they count as. */
struct subrange {
	uint32_t start, end;
	uint64_t person;
};
struct persons {
	struct subrange *r;     /* sorted by start */
	size_t n;
	size_t skipped;         /* lines that did not parse */
};

struct lfs {
	struct lfs_config cfg;
	char *root_path;
	struct lfs_inode root;
	uid_t own_uid;          /* daemon credentials restored after switches */
	gid_t own_gid;
	bool switch_creds;      /* privileged daemon: act as each caller */
	/* Cache policy; lfs_after_loss() turns the exclusive one off. */
	_Atomic double entry_timeout;
	_Atomic double attr_timeout;
	atomic_bool keep_cache;
	/* Set once the lease is lost: reads must not change ROOT, so every
	 * file description the daemon holds, or opens from then on, gets
	 * O_NOATIME (lfs_after_loss()). */
	atomic_bool noatime;
	int proc_fd;            /* /proc/self/fd (O_PATH): an inode is reopened
				 * by its O_PATH fd's name there, one name
				 * to resolve (fd_name()), not four */
	int root_mnt_id;        /* handles are only used on the root's mount */
	int mount_fd;           /* root, O_RDONLY: open_by_handle_at refuses
				 * O_PATH fds as its mount fd */
	atomic_long kept_fds;   /* inode records holding an fd */
	atomic_bool handles_used; /* some record has been handle-only */
	long keep_files;        /* keep a non-directory's fd below this many */
	long keep_dirs;         /* keep a directory's fd below this many */
	long open_budget;       /* open files and directories, all callers */
	long open_reserve;      /* ... of which only uid 0 may take the last */
	long per_user;          /* ... and per person (persons.c) */
	struct persons persons; /* subordinate uid ranges; immutable after
				 * lfs_new() */

	/* FUSE passthrough (backing.c).  Backing files are opened on a
	 * detached clone of the root's mount, whose atime flags change
	 * alone after loss; -1 when passthrough is off.  Immutable after
	 * lfs_new(). */
	int pt_tree_fd;         /* the clone (open_tree) */
	int pt_setup_err;       /* -errno: why there is no clone */
	int pt_mount_fd;        /* its root, O_RDONLY: open_by_handle_at's */
	/* io_lock protects each inode's opens, backing_id, direct, bypassed,
	 * cache_stale and read_write, and io_waiting; held across a backing
	 * file's registration (an ioctl), never across a reply. */
	pthread_mutex_t io_lock;
	/* Broadcast (io_lock) when a period ends while io_waiting: one
	 * read-write open waits for a passthrough period to end (iomode.c). */
	pthread_cond_t io_idle;
	bool io_waiting;

	/* open_lock protects open_total, open_root and the per-person counts
	 * in users (open addressing by person key; entries are never
	 * removed, only go to 0). */
	pthread_mutex_t open_lock;
	long open_total;
	long open_root;         /* ... of open_total, uid 0's */
	struct uid_count { uint64_t person; long n; bool used; } *users;
	size_t nusers_cap;      /* power of two, or 0 */
	size_t nusers;

	/* lock protects the hash table: buckets, nbuckets, count, and every
	 * inode's next and nlookup.  Held only for table operations; never
	 * across a reply or a syscall. */
	pthread_mutex_t lock;
	struct lfs_inode **buckets;
	size_t nbuckets;          /* power of two */
	size_t count;
};

/* A file handle big enough for any filesystem. */
struct handle_buf {
	struct file_handle fh;
	unsigned char bytes[MAX_HANDLE_SZ];
};

/* ---- small helpers ------------------------------------------------------ */

/* An open file's fh: its fd, and the uid whose budget it counts against. */
static inline uint64_t fh_make(int fd, uid_t uid)
{
	return (uint64_t)uid << 32 | (uint32_t)fd;
}

static inline int fh_fd(const struct fuse_file_info *fi)
{
	return (int)(uint32_t)fi->fh;
}

static inline uid_t fh_uid(const struct fuse_file_info *fi)
{
	return (uid_t)(fi->fh >> 32);
}

/* The passthrough of the session req came in on. */
static inline struct lfs *req_fs(fuse_req_t req)
{
	return ((struct lfs_session *)fuse_req_userdata(req))->fs;
}

/* Whether req carries the kernel's kill-suid/sgid flag. */
static inline bool kill_flagged(fuse_req_t req)
{
	const struct lfs_session *s = fuse_req_userdata(req);

	return s->kill_suidgid && s->kill_suidgid();
}

/* 0 if a backing call that changes ROOT may start now for req. */
static inline int may_mutate(fuse_req_t req)
{
	const struct lfs_session *s = fuse_req_userdata(req);

	return s->recheck ? s->recheck() : 0;
}

static inline struct lfs_inode *inode_of(struct lfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &fs->root;
	return (struct lfs_inode *)(uintptr_t)ino;
}

static inline fuse_ino_t node_id(struct lfs *fs, struct lfs_inode *inode)
{
	if (inode == &fs->root)
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)inode;
}

static inline bool is_dot(const char *name)
{
	return name[0] == '.' &&
	       (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

static inline int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

/* "/proc/self/fd/N" for fd into buf: for truncate, which has no *at()
 * form, and the fallbacks where the kernel predates fchmodat2(),
 * RWF_NOAPPEND or the *xattrat() calls. */
static inline const char *proc_path(char buf[PROC_FD_PATH_MAX], int fd)
{
	snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
	return buf;
}

/* "N" for fd into buf, the name to resolve relative to fs->proc_fd. */
static inline const char *fd_name(char buf[PROC_FD_PATH_MAX], int fd)
{
	snprintf(buf, PROC_FD_PATH_MAX, "%d", fd);
	return buf;
}

static inline int stat_fd(int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	return 0;
}

/* ---- inode.c ------------------------------------------------------------ */

/* An O_PATH fd for inode: its own, or a fresh one from its handle (which
 * acts as the daemon); give it back with inode_fd_put(). */
int inode_fd(struct lfs *fs, struct lfs_inode *inode);
void inode_fd_put(struct lfs_inode *inode, int fd);
/* A new kernel reference to the inode (dev, ino), or NULL if unknown. */
struct lfs_inode *table_ref(struct lfs *fs, dev_t dev, ino_t ino);
/* The handle of `name` in dirfd if it opens through the root's mount. */
int get_handle(struct lfs *fs, int dirfd, const char *name, int flags,
	       struct handle_buf *hb);
/* A handle-only record whose (dev, ino) now names another object. */
bool record_stale(const struct lfs_inode *p, const struct handle_buf *current);
/* Takes ownership of the O_PATH fd (whose stat is st): a referenced
 * record for it, existing or new; NULL on allocation failure. */
struct lfs_inode *table_ref_or_add(struct lfs *fs, int fd,
				   const struct stat *st);
/* Out of the table (stale); the kernel's references stay valid. */
void table_detach(struct lfs *fs, struct lfs_inode *inode);
/* Drops n kernel references; frees the record when none remain. */
void table_unref(struct lfs *fs, struct lfs_inode *inode, uint64_t n);
/* Node ids of every inode the kernel holds; *n of them, malloc'ed. */
fuse_ino_t *known_nodes(struct lfs *fs, size_t *n);
/* The descriptor budgets: how many inodes keep an fd (cfg.inode_fds, else
 * from cfg.fd_limit), and how many files and directories callers may have
 * open, in all and per uid. */
void set_fd_budget(struct lfs *fs);
/* One more open file or directory for uid: 0, -EMFILE (its person at
 * its limit) or -ENFILE (all callers together at theirs; for callers
 * other than uid 0, the reserve left). */
int open_get(struct lfs *fs, uid_t uid);
/* persons.c: the subordinate ranges in `path` (NULL or missing: none):
 * 0 or -errno.  A uid's person: its range's owner, else itself. */
int persons_load(struct persons *p, const char *path);
uint64_t persons_of(const struct persons *p, uid_t uid);
void persons_free(struct persons *p);
void open_put(struct lfs *fs, uid_t uid);
/* Open the canonical root and make it the pinned root record. */
int open_root(struct lfs *fs);
void table_free(struct lfs *fs);

/* ---- the operations ----------------------------------------------------- */

/* lfs_<op> for every op of the table (ops.h); lfs.c builds lfs_ops() of
 * exactly these. */
#define LFS_DECLARE_OP(op, kind, doc, params, args) void lfs_##op params;
LFS_OPS(LFS_DECLARE_OP)
#undef LFS_DECLARE_OP

/* The one mapping of an internal error (0 or -errno) to a FUSE reply. */
static inline void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}

/* ---- entry.c ------------------------------------------------------------ */

/* One entry made as the caller: mknod, mkdir, symlink, link (entry.c) or
 * create (file.c). */
struct make_args {
	int dirfd;
	const char *name;
	mode_t mode;
	dev_t rdev;
	const char *target;   /* symlink */
	int oldfd;            /* link: O_PATH fd of the existing inode */
	int proc_fd;          /* link: fs->proc_fd */
	int open_flags;       /* create */
	bool excl;            /* create: the caller asked for O_EXCL */
	int fd_out;           /* create: the opened file */
};


void entry_fill(struct lfs *fs, struct lfs_inode *inode,
		const struct stat *st, struct fuse_entry_param *e);
/* Resolve `name` in the directory `dirfd` to a referenced inode and fill
 * `e`. */
int lookup_at(struct lfs *fs, int dirfd, const char *name,
	      struct fuse_entry_param *e);

/* ---- attr.c ------------------------------------------------------------- */

/* O_NOATIME on an open file description, as the daemon; regular files and
 * directories only. */
void fd_noatime(struct lfs *fs, int fd);
/* A file description just opened for a caller: after loss, no atime. */
void opened(struct lfs *fs, int fd);
/* After a change by the caller to what `fd` holds: the suid/sgid bits as
 * the kernel's rules leave them, and the cached attributes dropped if the
 * mode changed (`before`: the attributes before the change). */
int settle_sxid(fuse_req_t req, fuse_ino_t ino, int fd,
		const struct stat *before);
/* Whether the file has a suid or sgid bit; its mode, uid and gid in *st
 * (nothing else: no timestamp is read). */
bool has_sxid(int fd, struct stat *st);

/* ---- file.c ------------------------------------------------------------- */

/* The inode itself opened with `flags`, as the caller, through its O_PATH
 * fd (a magic link, never a name): the new fd, or -errno. */
int reopen_inode(fuse_req_t req, struct lfs_inode *inode, int flags);

/* ---- iomode.c ---------------------------------------------------------- */

/* How the kernel is to serve one open (iomode_opened()). */
struct io_mode {
	int backing_id;         /* > 0: FUSE passthrough of this backing */
	bool direct_io;         /* reads and writes through the daemon, not
				 * the page cache (with a backing: all but
				 * mmaps) */
	bool drop_cache;        /* the page cache from before is not kept */
};

/* fs->io_idle, on the monotonic clock. */
void iomode_init(struct lfs *fs);
/* The clone of the root's mount for backing files (cfg.passthrough and a
 * privileged daemon; else passthrough stays off).  0 or -errno. */
int backing_setup(struct lfs *fs);
void backing_teardown(struct lfs *fs);
/* After loss: backing files read without atime updates. */
void backing_noatime(struct lfs *fs);
/* An open of inode by req's caller, open at fd with open(2) `flags`,
 * about to be answered: decide and count it (until iomode_released()).
 * `may_pass` false: never passthrough (creates).  0, or -ETXTBSY: the
 * open may not be served while the inode's passthrough period lasts
 * (nothing counted; the caller replies the error). */
int iomode_opened(fuse_req_t req, struct lfs_inode *inode, int fd,
		  int flags, bool may_pass, struct io_mode *m);
/* The reply flags of an open or create decided so (not passthrough). */
void iomode_apply(const struct io_mode *m, struct fuse_file_info *fi);
/* fuse_reply_open() of an open decided so. */
int iomode_reply_open(fuse_req_t req, struct fuse_file_info *fi,
		      const struct io_mode *m);
/* An open counted by iomode_opened() was released (or never answered). */
void iomode_released(struct lfs *fs, const struct lfs_session *s,
		     struct lfs_inode *inode);

/* ---- creds.c ------------------------------------------------------------ */

/* Record the daemon's identity; a privileged daemon must hold no
 * supplementary groups (process setup drops them). */
int save_creds(struct lfs *fs);
/* This worker thread acts as uid/gid from now on. */
void act_as(uid_t uid, gid_t gid);
/* This worker thread acts as req's caller (a privileged daemon only). */
void act_as_caller(fuse_req_t req);
/* Whether the caller of req is in group gid (its gid or a supplementary
 * one; fetched from /proc, so only on rare paths). */
bool caller_in_group(fuse_req_t req, gid_t gid);
/* Whether the caller of req lacks CAP_FSETID (read from /proc: rare paths
 * only; true when it cannot be told, so that bits are cleared, not kept). */
bool caller_lacks_fsetid(fuse_req_t req);
/* fn(arg) as the caller; with `mode`, under the caller's umask. */
int as_caller_masked(fuse_req_t req, int (*fn)(void *), void *arg,
		     mode_t *mode);
int as_caller(fuse_req_t req, int (*fn)(void *), void *arg);

#endif

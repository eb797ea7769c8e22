/* SPDX-License-Identifier: MIT */
/*
 * The backing core: every backing call the passthrough makes on ROOT, with
 * no FUSE in it.  Each operation takes the objects it works on (the
 * passthrough, inode records, open fds), the caller it acts for and, when
 * it changes ROOT, the admission it was let in under; it returns 0 (or a
 * size) or -errno, and never replies.  The FUSE front end (the lfs_<op> handlers,
 * lfs_int.h) turns a request into these arguments and the result into one
 * reply.
 *
 * Acting as the caller is scoped: an operation sets the caller's fsuid,
 * fsgid, groups and umask on its thread right before its backing calls
 * and restores the daemon's right after (identity.c), so between two
 * operations every thread is the daemon.  The last lease re-check before a
 * backing call that changes ROOT is still_admitted() on the operation's
 * `adm`.
 *
 * Units:
 *   object.c    the object
 *   identity.c  acting as the caller (fsuid/fsgid, groups, umask)
 *   inode.c     inode table, file handles, fd budget, the root record
 *   entry.c     names: lookup, make, link, remove, rename
 *   attr.c      attributes, suid/sgid rules, readlink, O_NOATIME after loss
 *   file.c      open files: create, open, write, sync, ranges
 *   dir.c       directory streams, statfs
 *   xattr.c     extended attributes
 */
#ifndef LEASEFS_CORE_H
#define LEASEFS_CORE_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "lfs_config.h"
#include "persons.h" /* fs/workspace: a uid's person */

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
	long per_user;          /* ... and per person (ws_person_of) */
	struct ws_persons persons; /* subordinate uid ranges; immutable after
				 * lfs_new() */

	/* FUSE passthrough (iomode.c).  Backing files are opened on a
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

/* Open ROOT (cfg->root) and build the inode table: 0 or -errno (-EPERM:
 * a privileged daemon that still holds supplementary groups; -EXDEV: ROOT
 * on FUSE or overlayfs without cfg->allow_stacked_root).  The FUSE
 * passthrough's clone is the front end's (lfs_new()). */
int core_new(const struct lfs_config *cfg, struct lfs **out);
void core_free(struct lfs *fs);

/* ---- who an operation acts for, and under what (identity.c) ------------- */

/* The process a request came from, as the front end reports it. */
struct caller {
	uid_t uid;
	gid_t gid;
	pid_t pid;      /* its supplementary groups are read by it from
			 * /proc; 0 (not visible to the daemon): none */
	mode_t umask;
};

struct gate;

/* What a mutation was admitted under: recheck(gate) says 0 while the
 * lease that admitted it is still healthy, -EROFS once it is not (gate.h,
 * gate_recheck()).  NULL, or no recheck: nothing to re-check (no gate in
 * front, as in the unit tests). */
struct admission {
	int (*recheck)(const struct gate *g);
	const struct gate *gate;
};

/* Right before each backing call that changes ROOT: 0, or -EROFS. */
static inline int still_admitted(const struct admission *adm)
{
	return adm && adm->recheck ? adm->recheck(adm->gate) : 0;
}

/* What caller_enter() changed on this thread, for caller_leave(). */
struct acting {
	bool uid, gid, groups;  /* switched: restore each to the daemon's */
	bool umask;             /* set: restore `old_umask` */
	mode_t old_umask;
};

/* Record the daemon's identity; a privileged daemon must hold no
 * supplementary groups (process setup drops them). */
int save_creds(struct lfs *fs);
/*
 * This thread acts as `c` (a privileged daemon only) until
 * caller_leave(a): its fsuid, fsgid and groups; with `mode` (the mode a
 * creating call will use), under its umask too.  Between the two, only
 * backing calls made for `c`: nothing that needs the daemon's rights.
 */
void caller_enter(struct lfs *fs, const struct caller *c, mode_t *mode,
		  struct acting *a);
/* Back to the daemon's identity: only what caller_enter() changed. */
void caller_leave(struct lfs *fs, const struct acting *a);
/* The scope of a backing call that changes ROOT: caller_enter(), then
 * still_admitted() as the last check before that call.  0 or -EROFS;
 * caller_leave(a) follows either way. */
static inline int caller_enter_admitted(struct lfs *fs, const struct caller *c,
					mode_t *mode,
					const struct admission *adm,
					struct acting *a)
{
	caller_enter(fs, c, mode, a);
	return still_admitted(adm);
}
/* Whether `c` is in group gid (its gid or a supplementary one; read from
 * /proc, so only on rare paths). */
bool caller_in_group(const struct caller *c, gid_t gid);
/* Whether `c` lacks CAP_FSETID (read from /proc: rare paths only; true
 * when it cannot be told, so that bits are cleared, not kept). */
bool caller_lacks_fsetid(const struct caller *c);

/* ---- small helpers ------------------------------------------------------ */

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

/* ---- the inode table (inode.c) ------------------------------------------ */

/* An O_PATH fd for inode: its own, or a fresh one from its handle (as the
 * daemon: never inside caller_enter()); give it back with
 * inode_fd_put(). */
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
/* Drops n kernel references; frees the record when none remain.  How
 * many of the n were more than the record held (0: none; an accounting
 * bug on the kernel's side or ours, clamped). */
uint64_t table_unref(struct lfs *fs, struct lfs_inode *inode, uint64_t n);
/* Every inode the table holds; *n of them, malloc'ed. */
struct lfs_inode **known_inodes(struct lfs *fs, size_t *n);
/* The descriptor budgets: how many inodes keep an fd (cfg.inode_fds, else
 * from cfg.fd_limit), and how many files and directories callers may have
 * open, in all and per uid. */
void set_fd_budget(struct lfs *fs);
/* One more open file or directory for uid: 0, -EMFILE (its person at
 * its limit) or -ENFILE (all callers together at theirs; for callers
 * other than uid 0, the reserve left). */
int open_get(struct lfs *fs, uid_t uid);
void open_put(struct lfs *fs, uid_t uid);
/* Open the canonical root and make it the pinned root record. */
int open_root(struct lfs *fs);
void table_free(struct lfs *fs);

/* ---- names (entry.c) ---------------------------------------------------- */

/* What a name resolved to: a referenced record and its attributes. */
struct lfs_entry {
	struct lfs_inode *inode;
	struct stat st;
};

/* Resolve `name` in the directory `dirfd` (as whoever this thread acts
 * as) to a referenced inode. */
int lookup_at(struct lfs *fs, int dirfd, const char *name,
	      struct lfs_entry *e);
/* `name` in dir as `c`; the dots are -EINVAL (they would leave dir). */
int core_lookup(struct lfs *fs, struct lfs_inode *dir, const char *name,
		const struct caller *c, struct lfs_entry *e);
/* A new node in dir (S_IFDIR, S_IFLNK with `target`, else mknod's
 * kinds), made as `c` under its umask, and its entry. */
int core_make(struct lfs *fs, struct lfs_inode *dir, const char *name,
	      mode_t mode, dev_t rdev, const char *target,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_entry *e);
/* A new name in dir for inode, and its entry. */
int core_link(struct lfs *fs, struct lfs_inode *inode,
	      struct lfs_inode *dir, const char *name,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_entry *e);
int core_unlink(struct lfs *fs, struct lfs_inode *dir, const char *name,
		const struct caller *c, const struct admission *adm);
int core_rmdir(struct lfs *fs, struct lfs_inode *dir, const char *name,
	       const struct caller *c, const struct admission *adm);
/* renameat2 with RENAME_NOREPLACE or RENAME_EXCHANGE; others -EINVAL. */
int core_rename(struct lfs *fs, struct lfs_inode *from, const char *name,
		struct lfs_inode *to, const char *newname, unsigned flags,
		const struct caller *c, const struct admission *adm);

/* ---- attributes (attr.c) ------------------------------------------------ */

/* Which attributes core_setattr() sets: the values of FUSE's
 * FUSE_SET_ATTR_* (the front end checks they agree). */
enum {
	SET_MODE = 1 << 0,
	SET_UID = 1 << 1,
	SET_GID = 1 << 2,
	SET_SIZE = 1 << 3,
	SET_ATIME = 1 << 4,
	SET_MTIME = 1 << 5,
	SET_ATIME_NOW = 1 << 7,
	SET_MTIME_NOW = 1 << 8,
};

/* The attributes of inode, or of the file open at `fd` (>= 0). */
int core_getattr(struct lfs *fs, struct lfs_inode *inode, int fd,
		 struct stat *st);
/*
 * Set the `valid` attributes of inode (through `fd` when >= 0, the open
 * file the kernel named) as `c`; `kill`: the request carries the kernel's
 * kill-suid/sgid flag.  The attributes after, in *st.
 */
int core_setattr(struct lfs *fs, struct lfs_inode *inode, int fd,
		 const struct stat *attr, int valid, bool kill,
		 const struct caller *c, const struct admission *adm,
		 struct stat *st);
/* The symlink's target, NUL-terminated, in buf (size > 1): its length. */
ssize_t core_readlink(struct lfs *fs, struct lfs_inode *inode, char *buf,
		      size_t size);
/* O_NOATIME on an open file description, as the daemon; regular files and
 * directories only. */
void fd_noatime(struct lfs *fs, int fd);
/* A file description just opened for a caller: after loss, no atime. */
void opened(struct lfs *fs, int fd);
/* Whether the file has a suid or sgid bit; its mode, uid and gid in *st
 * (nothing else: no timestamp is read). */
bool has_sxid(int fd, struct stat *st);
/* After a change by `c` to what fd holds, whose mode was `before->st_mode`
 * (`kill`: the kernel flagged the request): the suid/sgid bits as the
 * kernel's rules leave them.  *changed: the mode is not what it was. */
int settle_sxid(struct lfs *fs, int fd, const struct stat *before,
		bool kill, const struct caller *c, bool *changed);

/* ---- open files (file.c) ------------------------------------------------ */

/* An open file: its backing fd and whose budget it counts against. */
struct lfs_open {
	int fd;
	uid_t uid;
};

/* The inode itself opened with `flags` as `c`, through its O_PATH fd (a
 * magic link, never a name): the new fd, or -errno. */
int reopen_inode(struct lfs *fs, struct lfs_inode *inode, int flags,
		 const struct caller *c, const struct admission *adm);
/*
 * A new file `name` in dir, made as `c` under its umask and opened with
 * open(2) `flags` (O_TMPFILE: unnamed, in dir), counted in c's budget
 * until core_release(): its entry and open file.  An existing name is
 * -ESTALE (the kernel's cache is stale) unless `flags` has O_EXCL.
 */
int core_create(struct lfs *fs, struct lfs_inode *dir, const char *name,
		mode_t mode, int flags, const struct caller *c,
		const struct admission *adm, struct lfs_entry *e,
		struct lfs_open *o);
/* inode opened with open(2) `flags` as `c`, counted in its budget until
 * core_release(); `kill` as for settle_sxid(), whose *changed it sets. */
int core_open(struct lfs *fs, struct lfs_inode *inode, int flags, bool kill,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_open *o, bool *changed);
void core_release(struct lfs *fs, const struct lfs_open *o);

/* Where a write's bytes are: memory, or a pipe to splice `len` from. */
struct write_src {
	const struct iovec *iov;
	int iovcnt;
	int pipe_fd;            /* >= 0: the bytes are in this pipe */
	size_t len;
};
/*
 * Write `src` at `off` to the file open at fd, as `c` (so the backing
 * filesystem drops set-user-ID and capabilities as it would natively).
 * `writepage`: the kernel writing back a shared mapping's pages, meant for
 * `off` even on an O_APPEND fd.  `kill`, *changed: as for settle_sxid().
 * The bytes written, or -errno.
 */
ssize_t core_write(struct lfs *fs, int fd, const struct write_src *src,
		   off_t off, bool writepage, bool kill,
		   const struct caller *c, const struct admission *adm,
		   bool *changed);
/* Up to `size` bytes at `off` into buf (fewer only at end of file). */
ssize_t core_read(int fd, char *buf, size_t size, off_t off);
/* Close-time errors of the backing fs (e.g. NFS). */
int core_flush(int fd);
int core_fsync(int fd, bool datasync);
int core_fallocate(struct lfs *fs, int fd, int mode, off_t off, off_t len,
		   const struct caller *c, const struct admission *adm);
ssize_t core_copy_file_range(struct lfs *fs, int fd_in, off_t off_in,
			     int fd_out, off_t off_out, size_t len,
			     unsigned flags, const struct caller *c,
			     const struct admission *adm);
off_t core_lseek(int fd, off_t off, int whence);

/* ---- directories (dir.c) ------------------------------------------------ */

/* An open directory stream.  The kernel serializes readdir on one open
 * directory, so it is never used by two threads at once. */
struct lfs_dir {
	DIR *dp;
	uid_t uid;               /* whose budget the open counts against */
	off_t offset;            /* the kernel's view of dp's position */
	struct dirent *pending;  /* read from dp but not yet returned */
};

/* inode opened as a directory stream for `c`, counted in its budget. */
int core_opendir(struct lfs *fs, struct lfs_inode *inode,
		 const struct caller *c, struct lfs_dir **out);
void core_releasedir(struct lfs *fs, struct lfs_dir *d);
/* Where a listing's entries go: the front end's, opaque here. */
struct dir_sink;
/* One entry to `sink`, with its looked-up record and attributes in `e`
 * (readdirplus; NULL: none, for the dots and names the caller may list
 * but not look up).  0: taken, go on; > 0: did not fit, stop (e's
 * reference is the sink's to drop); < 0: -errno, stop. */
typedef int dir_emit_fn(struct dir_sink *sink, const struct dirent *de,
			const struct lfs_entry *e);
/*
 * d's entries from the kernel's offset `off` into `sink` until it is full
 * or the directory ends: 0, or the -errno that stopped it (reading, a
 * lookup, or emit).  An entry that did not fit is the first of the next
 * call from its offset.  With `plus`, each entry is looked up as `c`,
 * the whole listing in one caller_enter() scope.
 */
int core_readdir(struct lfs *fs, struct lfs_dir *d, off_t off, bool plus,
		 const struct caller *c, dir_emit_fn *emit,
		 struct dir_sink *sink);
int core_fsyncdir(struct lfs_dir *d, bool datasync);
int core_statfs(struct lfs *fs, struct lfs_inode *inode, struct statvfs *sv);

/* ---- extended attributes (xattr.c) -------------------------------------- */

int core_setxattr(struct lfs *fs, struct lfs_inode *inode, const char *name,
		  const char *value, size_t size, int flags,
		  const struct caller *c, const struct admission *adm);
int core_removexattr(struct lfs *fs, struct lfs_inode *inode,
		     const char *name, const struct caller *c,
		     const struct admission *adm);
/* The value of `name` (or, name NULL, the list of names) into buf; with
 * size 0, how big it is.  A backing fs without xattrs has no ACLs:
 * -ENODATA for those, not -EOPNOTSUPP. */
ssize_t core_getxattr(struct lfs *fs, struct lfs_inode *inode,
		      const char *name, char *buf, size_t size,
		      const struct caller *c);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The backing core: names.  Looking up, making, linking, removing and
 * renaming entries, each as the caller (core.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

/*
 * Resolve `name` in the directory `dirfd` to a referenced inode.  Known
 * inodes cost one fstatat; unknown ones an O_PATH open as well.
 */
int lookup_at(struct lfs *fs, int dirfd, const char *name,
	      struct lfs_entry *e)
{
	struct lfs_inode *inode;
	int fd, rc;

	if (fstatat(dirfd, name, &e->st, AT_SYMLINK_NOFOLLOW) < 0)
		return neg_errno();
	inode = table_ref(fs, e->st.st_dev, e->st.st_ino);
	if (inode && inode->fd < 0) {
		struct handle_buf hb;

		if (get_handle(fs, dirfd, name, 0, &hb) == 0 &&
		    record_stale(inode, &hb)) {
			table_detach(fs, inode);
			table_unref(fs, inode, 1);
			inode = NULL;
		}
	}
	if (!inode) {
		fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return neg_errno();
		rc = stat_fd(fd, &e->st);
		if (rc < 0) {
			close(fd);
			return rc;
		}
		inode = table_ref_or_add(fs, fd, &e->st);
		if (!inode)
			return -ENOMEM;
	}
	e->inode = inode;
	return 0;
}

int core_lookup(struct lfs *fs, struct lfs_inode *dir, const char *name,
		const struct caller *c, struct lfs_entry *e)
{
	struct acting a;
	int dirfd, rc;

	/* The kernel never asks for these; they would leave the parent. */
	if (is_dot(name))
		return -EINVAL;
	dirfd = inode_fd(fs, dir);
	if (dirfd < 0)
		return dirfd;
	caller_enter(fs, c, NULL, &a);
	rc = lookup_at(fs, dirfd, name, e);
	caller_leave(fs, &a);
	inode_fd_put(dir, dirfd);
	return rc;
}

/* ---- making entries ----------------------------------------------------- */

static int make_node(int dirfd, const char *name, mode_t mode, dev_t rdev,
		     const char *target)
{
	int res;

	if (S_ISDIR(mode))
		res = mkdirat(dirfd, name, mode & ~(mode_t)S_IFMT);
	else if (S_ISLNK(mode))
		res = symlinkat(target, dirfd, name);
	else
		res = mknodat(dirfd, name, mode, rdev);
	return res < 0 ? neg_errno() : 0;
}

int core_make(struct lfs *fs, struct lfs_inode *dir, const char *name,
	      mode_t mode, dev_t rdev, const char *target,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_entry *e)
{
	int dirfd = inode_fd(fs, dir), rc;
	struct acting a;

	if (dirfd < 0)
		return dirfd;
	rc = caller_enter_admitted(fs, c, &mode, adm, &a);
	if (!rc)
		rc = make_node(dirfd, name, mode, rdev, target);
	if (!rc)
		rc = lookup_at(fs, dirfd, name, e);
	caller_leave(fs, &a);
	inode_fd_put(dir, dirfd);
	return rc;
}

/* Through /proc: linkat(AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH,
 * which the caller's fsuid drops. */
static int link_at(struct lfs *fs, int oldfd, int dirfd, const char *name)
{
	char p[PROC_FD_PATH_MAX];

	if (linkat(fs->proc_fd, fd_name(p, oldfd), dirfd, name,
		   AT_SYMLINK_FOLLOW) < 0)
		return neg_errno();
	return 0;
}

int core_link(struct lfs *fs, struct lfs_inode *inode,
	      struct lfs_inode *dir, const char *name,
	      const struct caller *c, const struct admission *adm,
	      struct lfs_entry *e)
{
	int dirfd = inode_fd(fs, dir), oldfd = inode_fd(fs, inode), rc;
	struct acting a;

	rc = dirfd < 0 ? dirfd : oldfd;
	if (rc >= 0) {
		rc = caller_enter_admitted(fs, c, NULL, adm, &a);
		if (!rc)
			rc = link_at(fs, oldfd, dirfd, name);
		if (!rc)
			rc = lookup_at(fs, dirfd, name, e);
		caller_leave(fs, &a);
	}
	inode_fd_put(dir, dirfd);
	inode_fd_put(inode, oldfd);
	return rc < 0 ? rc : 0;
}

/* ---- removing and renaming ---------------------------------------------- */

static int remove_entry(struct lfs *fs, struct lfs_inode *dir,
			const char *name, int flags, const struct caller *c,
			const struct admission *adm)
{
	int dirfd = inode_fd(fs, dir), rc;
	struct acting a;

	if (dirfd < 0)
		return dirfd;
	rc = caller_enter_admitted(fs, c, NULL, adm, &a);
	if (!rc && unlinkat(dirfd, name, flags) < 0)
		rc = neg_errno();
	caller_leave(fs, &a);
	inode_fd_put(dir, dirfd);
	return rc;
}

int core_unlink(struct lfs *fs, struct lfs_inode *dir, const char *name,
		const struct caller *c, const struct admission *adm)
{
	return remove_entry(fs, dir, name, 0, c, adm);
}

int core_rmdir(struct lfs *fs, struct lfs_inode *dir, const char *name,
	       const struct caller *c, const struct admission *adm)
{
	return remove_entry(fs, dir, name, AT_REMOVEDIR, c, adm);
}

int core_rename(struct lfs *fs, struct lfs_inode *from, const char *name,
		struct lfs_inode *to, const char *newname, unsigned flags,
		const struct caller *c, const struct admission *adm)
{
	int ffd = -1, tfd = -1, rc;
	struct acting a;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	rc = ffd = inode_fd(fs, from);
	if (rc >= 0)
		rc = tfd = inode_fd(fs, to);
	if (rc >= 0) {
		rc = caller_enter_admitted(fs, c, NULL, adm, &a);
		if (!rc && renameat2(ffd, name, tfd, newname, flags) < 0)
			rc = neg_errno();
		caller_leave(fs, &a);
	}
	inode_fd_put(from, ffd);
	inode_fd_put(to, tfd);
	return rc < 0 ? rc : 0;
}

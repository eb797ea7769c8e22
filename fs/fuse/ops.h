/* SPDX-License-Identifier: MIT */
/*
 * The one table of FUSE operations leasefs serves.  Everything that lists
 * operations is generated from it: the passthrough's ops table, the gate's
 * wrappers, counters, names and mutating predicate, and the list of
 * mutating operations README and leasefs(8) print (a unit test holds them
 * to it).  An operation not in this table is never served: the gate
 * refuses to be built over an inner table that has one.
 *
 * X(op, kind, doc, params, args):
 *   op      the fuse_lowlevel_ops member (and lfs_<op> in the passthrough)
 *   kind    READS     only counted;
 *           MUTATES   admitted through the coordinator, EROFS when refused;
 *           MAY_WRITE admitted only when gate_writes_<op>(args) says the
 *                     request can change ROOT (open: write access, O_TRUNC)
 *   doc     how the docs name it among the mutating operations
 *   params  its parameter list; args the same names as a call
 */
#ifndef LEASEFS_OPS_H
#define LEASEFS_OPS_H

#include <fcntl.h>
#include <stdbool.h>

#define LFS_FI struct fuse_file_info *fi

/* MAY_WRITE's predicate for open: write access or O_TRUNC can change
 * ROOT (the gate admits such an open; the passthrough re-checks it). */
static inline bool lfs_open_writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

#define LFS_OPS(X)                                                            \
	X(lookup, READS, "", (fuse_req_t req, fuse_ino_t parent, const char *name), \
	  (req, parent, name))                                                \
	X(forget, READS, "", (fuse_req_t req, fuse_ino_t ino, uint64_t nlookup), \
	  (req, ino, nlookup))                                                \
	X(forget_multi, READS, "", (fuse_req_t req, size_t count,             \
	  struct fuse_forget_data *forgets), (req, count, forgets))           \
	X(getattr, READS, "", (fuse_req_t req, fuse_ino_t ino, LFS_FI),        \
	  (req, ino, fi))                                                     \
	X(setattr, MUTATES, "setattr", (fuse_req_t req, fuse_ino_t ino,        \
	  struct stat *attr, int to_set, LFS_FI), (req, ino, attr, to_set, fi)) \
	X(readlink, READS, "", (fuse_req_t req, fuse_ino_t ino), (req, ino))   \
	X(mknod, MUTATES, "mknod", (fuse_req_t req, fuse_ino_t parent,         \
	  const char *name, mode_t mode, dev_t rdev), (req, parent, name, mode, rdev)) \
	X(mkdir, MUTATES, "mkdir", (fuse_req_t req, fuse_ino_t parent,         \
	  const char *name, mode_t mode), (req, parent, name, mode))          \
	X(symlink, MUTATES, "symlink", (fuse_req_t req, const char *link,      \
	  fuse_ino_t parent, const char *name), (req, link, parent, name))    \
	X(link, MUTATES, "link", (fuse_req_t req, fuse_ino_t ino,              \
	  fuse_ino_t newparent, const char *newname), (req, ino, newparent, newname)) \
	X(unlink, MUTATES, "unlink", (fuse_req_t req, fuse_ino_t parent,       \
	  const char *name), (req, parent, name))                             \
	X(rmdir, MUTATES, "rmdir", (fuse_req_t req, fuse_ino_t parent,         \
	  const char *name), (req, parent, name))                             \
	X(rename, MUTATES, "rename", (fuse_req_t req, fuse_ino_t parent,       \
	  const char *name, fuse_ino_t newparent, const char *newname,        \
	  unsigned int flags), (req, parent, name, newparent, newname, flags)) \
	X(create, MUTATES, "create", (fuse_req_t req, fuse_ino_t parent,       \
	  const char *name, mode_t mode, LFS_FI), (req, parent, name, mode, fi)) \
	X(open, MAY_WRITE, "open for writing or with O_TRUNC", (fuse_req_t req, \
	  fuse_ino_t ino, LFS_FI), (req, ino, fi))                            \
	X(read, READS, "", (fuse_req_t req, fuse_ino_t ino, size_t size,       \
	  off_t off, LFS_FI), (req, ino, size, off, fi))                      \
	X(write_buf, MUTATES, "write", (fuse_req_t req, fuse_ino_t ino,        \
	  struct fuse_bufvec *bufv, off_t off, LFS_FI), (req, ino, bufv, off, fi)) \
	X(flush, READS, "", (fuse_req_t req, fuse_ino_t ino, LFS_FI),          \
	  (req, ino, fi))                                                     \
	X(release, READS, "", (fuse_req_t req, fuse_ino_t ino, LFS_FI),        \
	  (req, ino, fi))                                                     \
	X(fsync, READS, "", (fuse_req_t req, fuse_ino_t ino, int datasync,     \
	  LFS_FI), (req, ino, datasync, fi))                                  \
	X(fallocate, MUTATES, "fallocate", (fuse_req_t req, fuse_ino_t ino,    \
	  int mode, off_t offset, off_t length, LFS_FI),                      \
	  (req, ino, mode, offset, length, fi))                               \
	X(copy_file_range, MUTATES, "the destination of copy_file_range",      \
	  (fuse_req_t req, fuse_ino_t ino_in, off_t off_in,                   \
	   struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,   \
	   struct fuse_file_info *fi_out, size_t len, int flags),             \
	  (req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags)) \
	X(lseek, READS, "", (fuse_req_t req, fuse_ino_t ino, off_t off,        \
	  int whence, LFS_FI), (req, ino, off, whence, fi))                   \
	X(opendir, READS, "", (fuse_req_t req, fuse_ino_t ino, LFS_FI),        \
	  (req, ino, fi))                                                     \
	X(readdir, READS, "", (fuse_req_t req, fuse_ino_t ino, size_t size,    \
	  off_t off, LFS_FI), (req, ino, size, off, fi))                      \
	X(readdirplus, READS, "", (fuse_req_t req, fuse_ino_t ino, size_t size, \
	  off_t off, LFS_FI), (req, ino, size, off, fi))                      \
	X(releasedir, READS, "", (fuse_req_t req, fuse_ino_t ino, LFS_FI),     \
	  (req, ino, fi))                                                     \
	X(fsyncdir, READS, "", (fuse_req_t req, fuse_ino_t ino, int datasync,  \
	  LFS_FI), (req, ino, datasync, fi))                                  \
	X(statfs, READS, "", (fuse_req_t req, fuse_ino_t ino), (req, ino))     \
	X(setxattr, MUTATES, "setxattr", (fuse_req_t req, fuse_ino_t ino,      \
	  const char *name, const char *value, size_t size, int flags),       \
	  (req, ino, name, value, size, flags))                               \
	X(getxattr, READS, "", (fuse_req_t req, fuse_ino_t ino,                \
	  const char *name, size_t size), (req, ino, name, size))             \
	X(listxattr, READS, "", (fuse_req_t req, fuse_ino_t ino, size_t size), \
	  (req, ino, size))                                                   \
	X(removexattr, MUTATES, "removexattr", (fuse_req_t req, fuse_ino_t ino, \
	  const char *name), (req, ino, name))

/* Every member of libfuse 3.14's struct fuse_lowlevel_ops, for naming an
 * operation the table does not know; its size is checked against the
 * struct at build time (gate.c), so a libfuse that adds one fails there. */
/* How many operations the table has. */
#define LFS_OPS_COUNT_ONE(op, kind, doc, params, args) +1
enum { LFS_NOPS = 0 LFS_OPS(LFS_OPS_COUNT_ONE) };

#define LFS_FUSE_MEMBERS(X)                                                   \
	X(init) X(destroy) X(lookup) X(forget) X(getattr) X(setattr)          \
	X(readlink) X(mknod) X(mkdir) X(unlink) X(rmdir) X(symlink) X(rename) \
	X(link) X(open) X(read) X(write) X(flush) X(release) X(fsync)         \
	X(opendir) X(readdir) X(releasedir) X(fsyncdir) X(statfs) X(setxattr) \
	X(getxattr) X(listxattr) X(removexattr) X(access) X(create) X(getlk)  \
	X(setlk) X(bmap) X(ioctl) X(poll) X(write_buf) X(retrieve_reply)      \
	X(forget_multi) X(flock) X(fallocate) X(readdirplus)                  \
	X(copy_file_range) X(lseek)

#endif

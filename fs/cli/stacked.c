/* SPDX-License-Identifier: MIT */
/*
 * A ROOT on a layer leasefs cannot see through (issue 33, finding 5).  On
 * another leasefs mount, ROOT is a workspace some daemon holds: a second
 * lease on it would be a second exclusive session, so the mount is busy
 * (75), naming the holder beneath.  On any other FUSE filesystem (bindfs,
 * sshfs, ...) or overlayfs, writers behind the layer (the directory bindfs
 * shows, overlay's lower and upper directories, the sshfs server) never
 * meet leasefs's host lock or lease: refused (64) unless
 * --allow-stacked-root says the operator knows.  Network filesystems (NFS,
 * CephFS) are what the server stores are for: allowed.  Checked on ROOT
 * as opened, not as spelled.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <json-c/json.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include "cli.h"
#include "control.h"

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif
#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif

/* One line of /proc/self/mountinfo, the fields we need. */
struct mnt_line {
	int id;
	char devno[32];          /* major:minor */
	char point[PATH_MAX];    /* unescaped */
	char fstype[64];
	char source[PATH_MAX];   /* unescaped; a leasefs mount's is its ROOT */
	char super[PATH_MAX];    /* superblock options (truncated if longer) */
};

/* mountinfo's octal escapes (\040 ...) undone in place. */
static void unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

/* "ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPER". */
static int parse_mnt_line(char *line, struct mnt_line *m)
{
	char point[PATH_MAX], *dash = strstr(line, " - ");

	m->source[0] = m->super[0] = '\0';
	if (!dash || sscanf(line, "%d %*d %31s %*s %4095s", &m->id, m->devno,
			    point) != 3 ||
	    sscanf(dash + 3, "%63s %4095s %4095s", m->fstype, m->source,
		   m->super) < 1)
		return -EINVAL;
	unescape(point);
	unescape(m->source);
	snprintf(m->point, sizeof(m->point), "%s", point);
	return 0;
}

/* Calls `fn` on each mount line until it returns non-zero (which is
 * returned); 0 at the end, -errno if mountinfo cannot be read. */
static int each_mount(int (*fn)(const struct mnt_line *, void *), void *ud)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int r = 0;

	if (!f)
		return -errno;
	while (!r && getline(&line, &cap, f) > 0) {
		struct mnt_line m;

		if (parse_mnt_line(line, &m) == 0)
			r = fn(&m, ud);
	}
	free(line);
	fclose(f);
	return r;
}

struct holder_find {
	int id;                 /* ROOT's mount */
	struct mnt_line root;   /* its line, once found */
	bool found;
	char desc[PATH_MAX + 256]; /* the holder, once a daemon answered */
};

static int find_id(const struct mnt_line *m, void *ud)
{
	struct holder_find *h = ud;

	if (m->id != h->id)
		return 0;
	h->root = *m;
	h->found = true;
	return 1;
}

/* "mount point M (pid P, lease L at epoch E)" from M's daemon, or 0. */
static int ask_daemon(const char *point, char *desc, size_t sz)
{
	json_object *o, *pid = NULL, *lease = NULL, *epoch = NULL;
	char *reply = NULL;
	int r = control_request(point, "status", &reply);

	if (r < 0)
		return 0;
	o = json_tokener_parse(reply);
	free(reply);
	if (!o)
		return 0;
	json_object_object_get_ex(o, "pid", &pid);
	json_object_object_get_ex(o, "lease", &lease);
	json_object_object_get_ex(o, "epoch", &epoch);
	snprintf(desc, sz, "mount point %s (pid %d, lease %s at epoch %" PRIu64 ")",
		 point, pid ? json_object_get_int(pid) : 0,
		 lease ? json_object_get_string(lease) : "?",
		 epoch ? (uint64_t)json_object_get_uint64(epoch) : 0);
	json_object_put(o);
	return 1;
}

/* The daemon serving ROOT's superblock: ROOT's own mount point first,
 * then any other leasefs mount of the same device (ROOT may be reached
 * through a bind mount of the daemon's mount point). */
static int find_daemon(const struct mnt_line *m, void *ud)
{
	struct holder_find *h = ud;

	if (strcmp(m->devno, h->root.devno) != 0 ||
	    strcmp(m->fstype, "fuse.leasefs") != 0)
		return 0;
	return ask_daemon(m->point, h->desc, sizeof(h->desc));
}

static int mount_id_of(int fd)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0 ||
	    !(stx.stx_mask & STATX_MNT_ID))
		return -1;
	return (int)stx.stx_mnt_id;
}

/* ROOT (fd) is on a leasefs mount: busy, naming its holder. */
static int refuse_leasefs(const struct mount_opts *o, struct holder_find *h,
			  struct lfs_err *err)
{
	if (!ask_daemon(h->root.point, h->desc, sizeof(h->desc)))
		each_mount(find_daemon, h);
	if (!h->desc[0])
		snprintf(h->desc, sizeof(h->desc), "mount point %s (its daemon "
			 "does not answer)", h->root.point);
	return lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace root %s is inside "
			"a leasefs mount, %s: that workspace is held already; "
			"mount the directory beneath it instead", o->canon_root,
			h->desc);
}

/* A directory behind the layer (bindfs's source, overlay's lower and
 * upper directories), and what it meets. */
struct behind {
	char dir[PATH_MAX];       /* canonical */
	char root[PATH_MAX];      /* the served ROOT at, above or below it */
	char desc[PATH_MAX + 256]; /* the leasefs mount serving root */
};

/* A live leasefs mount whose ROOT is at, above or below b->dir. */
static int meets_leasefs(const struct mnt_line *m, void *ud)
{
	struct behind *b = ud;

	if (strcmp(m->fstype, "fuse.leasefs") != 0 || m->source[0] != '/' ||
	    !(ws_path_within(b->dir, m->source) || ws_path_within(m->source, b->dir)))
		return 0;
	if (!ask_daemon(m->point, b->desc, sizeof(b->desc)))
		snprintf(b->desc, sizeof(b->desc), "mount point %s", m->point);
	snprintf(b->root, sizeof(b->root), "%s", m->source);
	return 1;
}

/* Whether `dir` (as the layer names it) is a served workspace, at, above
 * or below: b filled in. */
static bool behind_is_served(const char *dir, struct behind *b)
{
	if (dir[0] != '/' || !realpath(dir, b->dir))
		return false;
	return each_mount(meets_leasefs, b) > 0;
}

/* The layer's directories, those it names: bindfs's source; overlay's
 * lowerdir (each of a:b:c), upperdir. */
static bool layer_meets_served(const struct mnt_line *m, bool overlay,
			       struct behind *b)
{
	char opts[PATH_MAX], *save = NULL;

	if (!overlay)
		return behind_is_served(m->source, b);
	snprintf(opts, sizeof(opts), "%s", m->super);
	for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		char *dirs = NULL, *s2 = NULL;

		if (strncmp(o, "lowerdir=", 9) == 0)
			dirs = o + 9;
		else if (strncmp(o, "upperdir=", 9) == 0)
			dirs = o + 9;
		for (char *d = dirs ? strtok_r(dirs, ":", &s2) : NULL; d;
		     d = strtok_r(NULL, ":", &s2))
			if (behind_is_served(d, b))
				return true;
	}
	return false;
}

int check_stacked_root(const struct mount_opts *o, struct lfs_err *err)
{
	struct holder_find h = { 0 };
	struct behind be = { 0 };
	struct statfs sf;
	int fd = lease_open_canonical_dir(o->canon_root, O_PATH), r = 0;
	bool fuse, overlay;

	if (fd < 0)
		return lfs_fail(err, EXIT_FAIL, fd, "workspace root %s: %s",
				o->canon_root, strerror(-fd));
	if (fstatfs(fd, &sf) < 0) {
		r = lfs_fail(err, EXIT_FAIL, -errno, "workspace root %s: statfs: "
			     "%s", o->canon_root, strerror(errno));
		goto out;
	}
	fuse = (unsigned long)sf.f_type == FUSE_SUPER_MAGIC;
	overlay = (unsigned long)sf.f_type == OVERLAYFS_SUPER_MAGIC;
	if (!fuse && !overlay)
		goto out;
	h.id = mount_id_of(fd);
	if (fuse && h.id >= 0 && each_mount(find_id, &h) > 0 &&
	    strcmp(h.root.fstype, "fuse.leasefs") == 0) {
		r = refuse_leasefs(o, &h, err);
		goto out;
	}
	if (h.id >= 0 && !h.found)
		each_mount(find_id, &h);
	if (h.found && layer_meets_served(&h.root, overlay, &be)) {
		r = lfs_fail(err, EXIT_BUSY, -EBUSY, "workspace root %s is a "
			     "view (%s) of %s, which meets workspace %s of %s: "
			     "held already", o->canon_root, h.root.fstype,
			     be.dir, be.root, be.desc);
		goto out;
	}
	if (!o->allow_stacked_root)
		r = lfs_fail(err, EXIT_USAGE, -EINVAL, "workspace root %s is on "
			     "%s (%s): leasefs cannot see a writer behind that "
			     "layer, so its lease would not make this session "
			     "the only one; --allow-stacked-root (-o "
			     "allow_stacked_root) serves it anyway",
			     o->canon_root, h.found ? h.root.fstype :
			     overlay ? "overlay" : "fuse",
			     fuse ? "a FUSE filesystem" : "overlayfs");
out:
	close(fd);
	return r;
}

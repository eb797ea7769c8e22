/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include "session.h"

/* One superblock flag through fspick()+fsconfig(): only that flag changes. */
static int reconfigure_flag(const char *mountpoint, const char *flag)
{
	int fd, rc = 0;

	fd = fspick(AT_FDCWD, mountpoint, FSPICK_CLOEXEC | FSPICK_NO_AUTOMOUNT);
	if (fd < 0)
		return -errno;
	if (fsconfig(fd, FSCONFIG_SET_FLAG, flag, NULL, 0) < 0 ||
	    fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int session_apply_attrs(const char *mountpoint, const struct mount_attrs *a)
{
	struct mount_attr attr = { 0 };
	int rc = 0;

	if (a->atime_set) {
		attr.attr_clr |= MOUNT_ATTR__ATIME;
		attr.attr_set |= a->atime;
	}
	if (a->nodiratime >= 0)
		*(a->nodiratime ? &attr.attr_set : &attr.attr_clr) |=
			MOUNT_ATTR_NODIRATIME;
	if ((attr.attr_set || attr.attr_clr) &&
	    mount_setattr(AT_FDCWD, mountpoint, 0, &attr, sizeof(attr)) < 0)
		rc = -errno;
	if (rc == 0 && a->lazytime >= 0)
		rc = reconfigure_flag(mountpoint, a->lazytime ? "lazytime"
							       : "nolazytime");
	return rc;
}

/* fspick()+fsconfig() reconfigure the superblock alone; a legacy
 * MS_REMOUNT would replace the mount's flags with the ones passed. */
int session_remount_readonly(const char *mountpoint)
{
	return reconfigure_flag(mountpoint, "ro");
}

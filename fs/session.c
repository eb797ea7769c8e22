/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include "session.h"

/* fspick()+fsconfig() reconfigure the superblock alone; a legacy
 * MS_REMOUNT would replace the mount's flags with the ones passed. */
int session_remount_readonly(const char *mountpoint)
{
	int fd, rc = 0;

	fd = fspick(AT_FDCWD, mountpoint, FSPICK_CLOEXEC | FSPICK_NO_AUTOMOUNT);
	if (fd < 0)
		return -errno;
	if (fsconfig(fd, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
	    fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

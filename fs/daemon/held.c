/* SPDX-License-Identifier: MIT */
/*
 * The daemon: what it holds once open, as the other units ask about it
 * or let it go: the lease that gates the mount, the host lock on its
 * root.  Below daemon.c, leases.c and events.c, calling none of them.
 * (The whole: daemon.c; shared internals: daemon_int.h.)
 */
#include "daemon_int.h"

void gating_lease(struct daemon *d, const char **name, uint64_t *epoch)
{
	bool root = coord_root_epoch(d->coord) != 0;

	*name = root ? coord_root_lease_name(d->coord)
		     : coord_session_lease_name(d->coord);
	*epoch = root ? coord_root_epoch(d->coord) : coord_session_epoch(d->coord);
}

void drop_hostlock(struct daemon *d)
{
	hostlock_free(d->root_lock);
	d->root_lock = NULL;
}

/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "placement.h"

static const struct placement table[PLACEMENT_COUNT] = {
	[PLACEMENT_EXCLUSIVE] = { .name = "exclusive", .root_lease = true,
				  .fenced = true, .sole_writer = true,
				  .writes = true, .host_lock = true,
				  .lock = HOSTLOCK_X },
	[PLACEMENT_SESSION] = { .name = "session", .own_dir = true,
				.fenced = true, .sole_writer = true,
				.writes = true, .host_lock = true,
				.lock = HOSTLOCK_S },
	[PLACEMENT_SHARED] = { .name = "shared", .writes = true,
			       .host_lock = true, .lock = HOSTLOCK_S },
	/* Only its session lease (sessions/UUID, a registration nobody else
	 * contends for); others write ROOT behind it (not sole_writer). */
	[PLACEMENT_OBSERVER] = { .name = "observer" },
};

const struct placement *placement_get(enum placement_id p)
{
	return p >= 0 && p < PLACEMENT_COUNT ? &table[p] : NULL;
}

int placement_parse(const char *s, enum placement_id *out)
{
	for (int i = 0; s && i < PLACEMENT_COUNT; i++) {
		if (strcmp(s, table[i].name) == 0) {
			*out = (enum placement_id)i;
			return 0;
		}
	}
	return -EINVAL;
}

int placement_make_dir(const char *served, bool *made, struct lease_err *err)
{
	struct stat st;

	*made = false;
	if (mkdir(served, 0700) == 0) {
		*made = true;
		if (chmod(served, 0700) < 0)
			goto fail;
		return 0;
	}
	if (errno != EEXIST)
		goto fail;
	if (stat(served, &st) < 0)
		goto fail;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		goto fail;
	}
	return 0;
fail:
	return lease_err_set(err, LEASE_E_IO, -errno, served,
			     "session directory %s: %s", served,
			     strerror(errno));
}

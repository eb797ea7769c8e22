/* SPDX-License-Identifier: MIT */
/*
 * The backing core: the object, a passthrough's state over its root.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

int core_new(const struct lfs_config *cfg, struct lfs **out)
{
	struct lfs *fs = calloc(1, sizeof(*fs));
	int rc;

	if (!fs)
		return -ENOMEM;
	fs->cfg = *cfg;
	fs->root.fd = -1;
	fs->mount_fd = fs->proc_fd = -1;
	fs->pt_tree_fd = fs->pt_mount_fd = -1;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_mutex_init(&fs->open_lock, NULL);
	pthread_mutex_init(&fs->io_lock, NULL);
	fs->nbuckets = LFS_TABLE_MIN_BUCKETS;
	fs->buckets = calloc(fs->nbuckets, sizeof(*fs->buckets));
	fs->root_path = strdup(cfg->root);
	if (!fs->buckets || !fs->root_path) {
		rc = -ENOMEM;
		goto fail;
	}
	fs->proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fs->proc_fd < 0) {
		rc = neg_errno();
		goto fail;
	}
	fs->cfg.root = fs->root_path;
	atomic_init(&fs->entry_timeout, cfg->entry_timeout);
	atomic_init(&fs->attr_timeout, cfg->attr_timeout);
	atomic_init(&fs->keep_cache, cfg->keep_cache);
	rc = save_creds(fs);
	if (rc < 0)
		goto fail;
	set_fd_budget(fs);
	/* Unreadable ranges (not a regular file, too big) count as none:
	 * each uid is then a person of its own, as before ranges existed. */
	rc = ws_persons_load(&fs->persons, cfg->subuid_path);
	if (rc == -ENOMEM)
		goto fail;
	rc = open_root(fs);
	if (rc < 0)
		goto fail;
	*out = fs;
	return 0;
fail:
	core_free(fs);
	return rc;
}

void core_free(struct lfs *fs)
{
	if (!fs)
		return;
	table_free(fs);
	if (fs->root.fd >= 0)
		close(fs->root.fd);
	if (fs->mount_fd >= 0)
		close(fs->mount_fd);
	if (fs->proc_fd >= 0)
		close(fs->proc_fd);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->open_lock);
	pthread_mutex_destroy(&fs->io_lock);
	free(fs->root_path);
	free(fs);
}

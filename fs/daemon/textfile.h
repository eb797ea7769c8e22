/* SPDX-License-Identifier: MIT */
/*
 * The node_exporter textfile of a mount: DIR/leasefs-<hash>.prom, written
 * whole (a fresh temp file, renamed over it) and only relative to DIR as
 * opened once without following a symlink; a DIR that has moved from the
 * path its host lock names is not written any more.
 */
#ifndef LEASEFS_TEXTFILE_H
#define LEASEFS_TEXTFILE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "status.h"

/* Rewritten on every state change and this often. */
#define TEXTFILE_PERIOD_MS 15000

struct textfile {
	int dirfd;               /* -1: no textfile */
	const char *dir;         /* canonical, as the host lock names it */
	char name[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
	int64_t next;            /* the next periodic write */
};

/* `dir` NULL: none (every call a no-op).  `hash` names the file.  0 or
 * -errno (the directory cannot be opened as its canonical path). */
int textfile_open(struct textfile *t, const char *dir, const char *hash);
void textfile_write(struct textfile *t, const struct status_source *src);
/* Whether the periodic write is due. */
bool textfile_due(const struct textfile *t);
/* Milliseconds to the next periodic write; -1: never. */
int textfile_timeout_ms(const struct textfile *t);
/* The file goes (a mount that is gone reports nothing), then the dirfd. */
void textfile_close(struct textfile *t);

#endif

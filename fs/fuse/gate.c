/* SPDX-License-Identifier: MIT */
/*
 * The lease gate (contract in gate.h), generated from the op table
 * (ops.h): one wrapper per operation, by its kind.
 *
 * State: a gate's coord, inner and ops are written by gate_new() before
 * any session uses the gate and only read afterwards, so the hot path
 * takes no lock and allocates nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "ops.h"

#define ENUM(op, kind, doc, params, args) GOP_##op,
enum gate_op { LFS_OPS(ENUM) GOP_COUNT };
_Static_assert((int)GOP_COUNT == (int)LFS_NOPS, "ops.h counts its table");

#define NAME(op, kind, doc, params, args) [GOP_##op] = #op,
static const char *const op_names[GOP_COUNT] = { LFS_OPS(NAME) };

#define KIND_READS 0
#define KIND_MUTATES 1
#define KIND_MAY_WRITE 2
#define KIND(op, kind, doc, params, args) [GOP_##op] = KIND_##kind,
static const unsigned char op_kinds[GOP_COUNT] = { LFS_OPS(KIND) };

#define DOC(op, kind, doc, params, args) [GOP_##op] = doc,
static const char *const op_docs[GOP_COUNT] = { LFS_OPS(DOC) };

/* libfuse's table is all function pointers, each named in ops.h. */
#define ONE(m) +1
_Static_assert(sizeof(struct fuse_lowlevel_ops) ==
	       (0 LFS_FUSE_MEMBERS(ONE)) * sizeof(void (*)(void)),
	       "libfuse's fuse_lowlevel_ops has members ops.h does not name");

struct gate {
	struct coord *coord;
	struct fuse_lowlevel_ops inner;
	struct fuse_lowlevel_ops ops;
	/* Counters, relaxed atomics: exact totals, no ordering needed. */
	_Atomic uint64_t requests[GOP_COUNT];
	_Atomic uint64_t refused[GOP_COUNT];
};

static struct gate *gate_of(fuse_req_t req)
{
	return ((struct lfs_session *)fuse_req_userdata(req))->gate;
}

static void bump(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Admission for `req` (operation `op`); NULL means EROFS was already
 * replied.  Lost (-ENOLINK), shutting down (-ESHUTDOWN) or any other
 * refusal: the mount is read-only from here on. */
static struct gate *admit(fuse_req_t req, enum gate_op op)
{
	struct gate *g = gate_of(req);

	bump(&g->requests[op]);
	if (coord_enter(g->coord) == 0)
		return g;
	bump(&g->refused[op]);
	fuse_reply_err(req, EROFS);
	return NULL;
}

static void leave(struct gate *g)
{
	coord_exit(g->coord);
}

int gate_recheck(const struct gate *g)
{
	return coord_healthy(g->coord) < 0 ? -EROFS : 0;
}

/* MAY_WRITE: an open can change ROOT with write access or O_TRUNC. */
static bool gate_writes_open(fuse_req_t req, fuse_ino_t ino,
			     struct fuse_file_info *fi)
{
	(void)req;
	(void)ino;
	return lfs_open_writes(fi->flags);
}

/* The three kinds of wrapper.  Each counts the request; a mutation runs
 * the inner op (which replies) inside admission, or is answered EROFS. */
#define WRAP_READS(op, params, args)                    \
	static void g_##op params                       \
	{                                               \
		struct gate *g = gate_of(req);          \
                                                        \
		bump(&g->requests[GOP_##op]);           \
		g->inner.op args;                       \
	}
#define WRAP_MUTATES(op, params, args)                  \
	static void g_##op params                       \
	{                                               \
		struct gate *g = admit(req, GOP_##op);  \
                                                        \
		if (!g)                                 \
			return;                         \
		g->inner.op args;                       \
		leave(g);                               \
	}
#define WRAP_MAY_WRITE(op, params, args)                \
	static void g_##op params                       \
	{                                               \
		struct gate *g;                         \
                                                        \
		if (!gate_writes_##op args) {           \
			g = gate_of(req);               \
			bump(&g->requests[GOP_##op]);   \
			g->inner.op args;               \
			return;                         \
		}                                       \
		g = admit(req, GOP_##op);               \
		if (!g)                                 \
			return;                         \
		g->inner.op args;                       \
		leave(g);                               \
	}
#define WRAP(op, kind, doc, params, args) WRAP_##kind(op, params, args)
LFS_OPS(WRAP)

/* Copy of inner holding only what the gate knows (ops.h, and the session
 * callbacks init and destroy). */
static void known_part(const struct fuse_lowlevel_ops *inner,
		       struct fuse_lowlevel_ops *known)
{
	memset(known, 0, sizeof(*known));
	known->init = inner->init;
	known->destroy = inner->destroy;
#define KNOWN(op, kind, doc, params, args) known->op = inner->op;
	LFS_OPS(KNOWN)
}

/* The name of libfuse's member at byte `off` of its table. */
static const char *member_at(size_t off)
{
#define MEMBER(m) if (off == offsetof(struct fuse_lowlevel_ops, m)) return #m;
	LFS_FUSE_MEMBERS(MEMBER)
	return "?";
}

/* Default-deny: an inner op the table does not know is refused, named. */
static int check_known(const struct fuse_lowlevel_ops *inner,
		       const char **unknown)
{
	struct fuse_lowlevel_ops known;
	void (*const *a)(void) = (void (*const *)(void))(const void *)inner;
	void (*const *b)(void) = (void (*const *)(void))(const void *)&known;

	known_part(inner, &known);
	for (size_t i = 0; i < sizeof(known) / sizeof(*a); i++) {
		if (a[i] && !b[i]) {
			*unknown = member_at(i * sizeof(*a));
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

int gate_new(struct coord *coord, const struct fuse_lowlevel_ops *inner,
	     struct gate **out, const char **unknown)
{
	struct gate *g;
	int r = check_known(inner, unknown);

	if (r < 0)
		return r;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->coord = coord;
	g->inner = *inner;
	g->ops.init = inner->init;
	g->ops.destroy = inner->destroy;
#define INSTALL(op, kind, doc, params, args)    \
	if (inner->op)                          \
		g->ops.op = g_##op;
	LFS_OPS(INSTALL)
	*out = g;
	return 0;
}

const struct fuse_lowlevel_ops *gate_ops(const struct gate *g)
{
	return &g->ops;
}

size_t gate_nops(void)
{
	return GOP_COUNT;
}

const char *gate_op_name(size_t op)
{
	return op < GOP_COUNT ? op_names[op] : NULL;
}

bool gate_op_mutating(size_t op)
{
	return op < GOP_COUNT && op_kinds[op] != KIND_READS;
}

const char *gate_op_doc(size_t op)
{
	return gate_op_mutating(op) ? op_docs[op] : NULL;
}

uint64_t gate_requests(const struct gate *g, size_t op)
{
	return op < GOP_COUNT ? atomic_load_explicit(&g->requests[op],
						      memory_order_relaxed) : 0;
}

uint64_t gate_refused(const struct gate *g, size_t op)
{
	return op < GOP_COUNT ? atomic_load_explicit(&g->refused[op],
						      memory_order_relaxed) : 0;
}

void gate_free(struct gate *g)
{
	free(g);
}

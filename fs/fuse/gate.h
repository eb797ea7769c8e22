/* SPDX-License-Identifier: MIT */
/*
 * The lease gate: one layer in front of an ops table.
 *
 * gate_ops() serves exactly the operations of the op table (ops.h):
 * each mutating one through a wrapper that enters the coordinator's
 * admission, answers EROFS if the lease is not healthy, and otherwise runs
 * the inner operation (which replies) inside admission; every other one
 * only counted.  A mutation already inside its backing syscall when loss
 * fires completes; none starts after loss (and gate_recheck() lets the
 * layer behind refuse one that was admitted before it).  Which operations
 * mutate is the table's word alone.
 *
 * The wrappers find their gate through the session's userdata, a
 * struct lfs_session (fs.h).  A process may have any number of gates.
 */
#ifndef LEASEFS_GATE_H
#define LEASEFS_GATE_H

#include "coord.h"
#include "fs.h"

struct gate;

/* A gate over `inner` (copied), admitting through `coord` (borrowed; it
 * must outlive the gate).  Default-deny: an inner table with an operation
 * the op table does not know is refused, -EOPNOTSUPP with *unknown naming
 * it.  0, -EOPNOTSUPP or -ENOMEM. */
int gate_new(struct coord *coord, const struct fuse_lowlevel_ops *inner,
	     struct gate **out, const char **unknown);
/* The gated table; valid for the gate's life. */
const struct fuse_lowlevel_ops *gate_ops(const struct gate *g);

/*
 * Counters, by operation 0 .. gate_nops()-1: every request that came
 * through the gate (each entry of the inner table is wrapped and counted,
 * one relaxed atomic add), and the mutations it refused with EROFS.
 */
size_t gate_nops(void);
const char *gate_op_name(size_t op);
bool gate_op_mutating(size_t op);   /* may be refused */
/* How README and leasefs(8) name a mutating op; NULL for the others. */
const char *gate_op_doc(size_t op);
uint64_t gate_requests(const struct gate *g, size_t op);
uint64_t gate_refused(const struct gate *g, size_t op);
void gate_free(struct gate *g);

/*
 * For the layer behind the gate, right before each backing call that
 * changes ROOT on behalf of a request `g` admitted as a mutation (the
 * passthrough's core takes it as its admission, core.h): -EROFS if the
 * lease is no longer healthy now (lost, or past its safe-until: a thread
 * paused between admission and the call), else 0.
 */
int gate_recheck(const struct gate *g);

#endif

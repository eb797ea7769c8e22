/* SPDX-License-Identifier: MIT */
/* A mount's status: the snapshot and its renderers (contract: status.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "coord.h"
#include "gate.h"
#include "status.h"

_Static_assert(LFS_NOPS > 0, "the op table is empty");

const char *status_state_name(struct coord *c)
{
	switch (coord_state(c)) {
	case COORD_HELD: return "held";
	case COORD_LOST: return "lost";
	case COORD_SHUTTING_DOWN:
	case COORD_CLOSED: return "shutting-down";
	}
	return "unknown";
}

void status_time_now(char *buf, size_t sz)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, sz, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* The safe-until (monotonic ns) as Unix time; 0 stays 0. */
static double unix_time_of(int64_t until)
{
	struct timespec rt;

	if (!until)
		return 0;
	clock_gettime(CLOCK_REALTIME, &rt);
	return (double)rt.tv_sec + (double)rt.tv_nsec / 1e9 +
	       (double)(until - lease_now_ns()) / 1e9;
}

void status_take(const struct status_source *src, struct status *st)
{
	struct coord *c = src->coord;
	bool has_root = coord_root_epoch(c) != 0;
	enum lease_loss why = coord_loss_reason(c);

	memset(st, 0, sizeof(*st));
	st->root = coord_root(c);
	st->placement = coord_placement(c)->name;
	st->session = coord_session_id(c);
	st->lease = has_root ? coord_root_lease_name(c)
			     : coord_session_lease_name(c);
	st->epoch = has_root ? coord_root_epoch(c) : coord_session_epoch(c);
	st->state = status_state_name(c);
	st->reason = why != LEASE_LOSS_NONE ? lease_loss_str(why) : NULL;
	st->held = why == LEASE_LOSS_NONE && coord_state(c) == COORD_HELD;
	st->valid_until = unix_time_of(coord_safe_until(c));
	st->inflight = coord_inflight(c);
	st->backend = src->backend;
	st->mountpoint = src->mountpoint;
	st->pid = getpid();
	status_time_now(st->time, sizeof(st->time));
	if (src->transport) {
		st->has_fuse = true;
		transport_state(src->transport, &st->fuse);
	}
	for (size_t i = 0; src->gate && i < LFS_NOPS; i++) {
		st->requests[i] = gate_requests(src->gate, i);
		st->refused[i] = gate_refused(src->gate, i);
	}
}

/* ---- JSON ----------------------------------------------------------- */

static void add_str(json_object *o, const char *key, const char *val)
{
	json_object_object_add(o, key, json_object_new_string(val));
}

static void add_bool(json_object *o, const char *key, bool val)
{
	json_object_object_add(o, key, json_object_new_boolean(val));
}

const char *status_transport_reason(const struct transport_state *t)
{
	switch (t->why) {
	case TRANSPORT_IO_URING: return NULL;
	case TRANSPORT_NOT_WANTED: return "turned off by LEASEFS_IO_URING=0";
	case TRANSPORT_NOT_IN_KERNEL: return "not offered by this kernel";
	case TRANSPORT_TURNED_OFF: return "turned off (enable_uring=N)";
	case TRANSPORT_REFUSED: return "refused by the kernel at INIT";
	case TRANSPORT_SETTING_UP: return "the io_uring queues are being set up";
	}
	return "unknown";
}

/* What INIT settled with the kernel: which features are active. */
static json_object *fuse_features(const struct transport_state *t)
{
	json_object *o = json_object_new_object();

	add_str(o, "transport", t->io_uring ? "io-uring" : "dev-fuse");
	if (status_transport_reason(t))
		add_str(o, "transport_reason", status_transport_reason(t));
	json_object_object_add(o, "kernel_minor",
			       json_object_new_int((int)t->kernel_minor));
	add_bool(o, "io_uring", t->io_uring);
	add_bool(o, "io_uring_offered", t->io_uring_offered);
	if (t->io_uring_queues) {
		json_object_object_add(o, "io_uring_queues",
				       json_object_new_int((int)t->io_uring_queues));
		json_object_object_add(o, "io_uring_requests",
				       json_object_new_int64((int64_t)t->io_uring_requests));
	}
	if (t->io_uring_error)
		add_str(o, "io_uring_error", strerror(-t->io_uring_error));
	add_bool(o, "killpriv_v2", t->killpriv_v2);
	add_bool(o, "tmpfile", t->tmpfile);
	add_bool(o, "direct_writes", t->direct_io_mmap);
	add_bool(o, "passthrough", t->passthrough);
	json_object_object_add(o, "backing_files",
			       json_object_new_int64((int64_t)t->backing_files));
	json_object_object_add(o, "backing_opens",
			       json_object_new_int64((int64_t)t->backing_opens));
	if (t->passthrough_error)
		add_str(o, "passthrough_error", strerror(-t->passthrough_error));
	return o;
}

char *status_json(const struct status *st, bool watch_line)
{
	json_object *o = json_object_new_object();
	char *line = NULL;

	add_str(o, "root", st->root);
	add_str(o, "placement", st->placement);
	add_str(o, "session", st->session);
	add_str(o, "lease", st->lease);
	json_object_object_add(o, "epoch", json_object_new_uint64(st->epoch));
	add_str(o, "state", st->state);
	add_str(o, "backend", st->backend);
	json_object_object_add(o, "pid", json_object_new_int(st->pid));
	if (!watch_line && st->has_fuse)
		json_object_object_add(o, "fuse", fuse_features(&st->fuse));
	if (watch_line) {
		add_str(o, "time", st->time);
		if (st->reason)
			add_str(o, "reason", st->reason);
	}
	if (asprintf(&line, "%s\n", json_object_to_json_string_ext(o,
		     JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)) < 0)
		line = NULL;
	json_object_put(o);
	return line;
}

/* ---- Prometheus ----------------------------------------------------- */

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void metric_head(FILE *f, const char *name, const char *type,
			const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{mountpoint="...",extra} */
static void metric_labels(FILE *f, const char *name, const struct status *st,
			  const char *extra)
{
	fprintf(f, "%s{mountpoint=\"", name);
	label_value(f, st->mountpoint);
	fprintf(f, "\"%s%s}", extra ? "," : "", extra ? extra : "");
}

static void metric_lease(const struct status *st, FILE *f)
{
	metric_head(f, "leasefs_lease_held", "gauge",
		    "1 while the mount holds its lease, 0 once it is lost.");
	metric_labels(f, "leasefs_lease_held", st, NULL);
	fprintf(f, " %d\n", st->held);
	metric_head(f, "leasefs_lease_epoch", "gauge",
		    "Epoch of the mount's gating lease (root, else session).");
	metric_labels(f, "leasefs_lease_epoch", st, NULL);
	fprintf(f, " %" PRIu64 "\n", st->epoch);
	metric_head(f, "leasefs_lease_losses_total", "counter",
		    "Leases this mount lost (revoked, expired, taken over).");
	metric_labels(f, "leasefs_lease_losses_total", st, NULL);
	fprintf(f, " %d\n", st->reason != NULL);
	if (st->valid_until) {
		metric_head(f, "leasefs_lease_valid_until_seconds", "gauge",
			    "Unix time until which a TTL lease is known valid "
			    "(its safe-until).");
		metric_labels(f, "leasefs_lease_valid_until_seconds", st, NULL);
		fprintf(f, " %.3f\n", st->valid_until);
	}
}

static void metric_ops(const struct status *st, FILE *f)
{
	char lbl[64];

	metric_head(f, "leasefs_requests_total", "counter",
		    "FUSE requests, by operation.");
	for (size_t i = 0; i < LFS_NOPS; i++) {
		snprintf(lbl, sizeof(lbl), "op=\"%s\"", gate_op_name(i));
		metric_labels(f, "leasefs_requests_total", st, lbl);
		fprintf(f, " %" PRIu64 "\n", st->requests[i]);
	}
	metric_head(f, "leasefs_mutations_refused_total", "counter",
		    "Mutations answered EROFS after loss, by operation.");
	for (size_t i = 0; i < LFS_NOPS; i++) {
		if (!gate_op_mutating(i))
			continue;
		snprintf(lbl, sizeof(lbl), "op=\"%s\"", gate_op_name(i));
		metric_labels(f, "leasefs_mutations_refused_total", st, lbl);
		fprintf(f, " %" PRIu64 "\n", st->refused[i]);
	}
	metric_head(f, "leasefs_mutations_in_flight", "gauge",
		    "Mutations admitted and not yet finished.");
	metric_labels(f, "leasefs_mutations_in_flight", st, NULL);
	fprintf(f, " %ld\n", st->inflight);
}

char *status_prometheus(const struct status *st)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	metric_lease(st, f);
	metric_ops(st, f);
	/* Labelled by mount point like every sample: mounts that share a
	 * textfile directory never write the same series twice.  (HELP and
	 * TYPE stay as they were: node_exporter refuses a family whose files
	 * disagree on them, as old and new daemons' would.) */
	metric_head(f, "leasefs_build_info", "gauge", "The leasefs build.");
	metric_labels(f, "leasefs_build_info", st,
		      "version=\"" LEASEFS_VERSION "\"");
	fputs(" 1\n", f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

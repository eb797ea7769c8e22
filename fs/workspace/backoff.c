/* SPDX-License-Identifier: MIT */
/* The pause between tries (contract in backoff.h). */
#include <errno.h>
#include <time.h>

#include "backoff.h"
#include "lease.h"

void ws_backoff(int *pause_ms, int max_ms, int64_t deadline)
{
	int64_t until = lease_deadline_ms(*pause_ms);
	struct timespec ts;

	if (until > deadline)
		until = deadline;
	ts.tv_sec = until / 1000000000LL;
	ts.tv_nsec = until % 1000000000LL;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	*pause_ms = *pause_ms * 2 > max_ms ? max_ms : *pause_ms * 2;
}

/* rebalance.h - the driver of a [rebalance] run: while the producers and
 * workers run, the last shard (weight 0 at the start) is rebalanced in,
 * then drained out again, with steady running before (after [run]
 * warmup), between and after.
 * It records each window's completions and pickup, and each moved set's
 * write stall. */
#ifndef BENCH_REBALANCE_H
#define BENCH_REBALANCE_H

#include "result.h"
#include "scenario.h"
#include "tally.h"

#include <pthread.h>

typedef struct rb_driver {
	const scenario *sc;
	const char *cfg_in, *cfg_out; /* the configs: last shard at weight 1, at 0 */
	tally *t;
	int64_t t0;
	rb_result *res;
	hist *mark; /* the pickup histogram at the last window's start */
	uint64_t done_mark;
	pthread_t th;
	_Atomic int finished, stop;
} rb_driver;

/* Starts the driver thread (t0: the phase's start, mono_us); cfg_in and
 * cfg_out: the shardq configs with the last shard at weight 1 and at 0
 * (kept by the caller until rb_join); res is filled as it goes. 0, or -1
 * with a message. */
int rb_start(rb_driver *d, const scenario *sc, const char *cfg_in, const char *cfg_out, tally *t,
	     int64_t t0, rb_result *res, char *err, size_t errlen);
/* Whether it has finished (the last window over, or failed). */
int rb_finished(rb_driver *d);
/* Asks it to stop early (the phase failed), waits for it. */
void rb_join(rb_driver *d, int stop);

#endif

/* wrap.h - timing of the worker runtime's ticks. The runtime calls
 * wrap_on_tick (sq_worker_opts.on_tick) after each tick of database work:
 * one pipeline per shard carrying the tick's completions, starts and claim.
 * The counts and round trips go to the tally. */
#ifndef BENCH_WRAP_H
#define BENCH_WRAP_H

#include "tally.h"

#include <shardq.h>

/* on_tick hook; arg is the tally to record in. */
void wrap_on_tick(const sq_worker_tick *tk, void *arg);

#endif

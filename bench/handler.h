/* handler.h - what a benchmark job does, for shardq's worker runtime and
 * the baselines alike: note its start (the enqueue-to-start latency from
 * the producer's clock in its params), then run for its type's execution
 * time. */
#ifndef BENCH_HANDLER_H
#define BENCH_HANDLER_H

#include "scenario.h"
#include "tally.h"

#include <shardq.h>

typedef struct handler_arg {
	tally *t;
	const sc_type *type;
	int type_idx;
} handler_arg;

/* The producer's wall clock ({"t":MICROS}) in a job's params; 0 for a job
 * without it (a preloaded backlog job). */
int64_t job_enqueued_at(const char *params);
/* Records a job's start: the latency, its shard and its type. */
void job_started(tally *t, const char *params, int shard, int type_idx);
/* Runs a job for its type's execution time (deterministic per job id). */
void job_execute(const sc_type *type, int64_t id);
/* The sq_handler given to the worker runtime; arg is a handler_arg. */
sq_job_result bench_handler(const sq_job *job, void *arg, char *errbuf, size_t errlen);

#endif

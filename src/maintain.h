/* maintain.h - the periodic history maintenance of long-running programs
 * (the worker runtime, shardqd); sq_maintain itself is public (shardq.h). */
#ifndef SQ_MAINTAIN_H
#define SQ_MAINTAIN_H

#include "config.h"

/* The first pass runs this long after the start (or after one interval,
 * when that is shorter). */
#define SQ_MAINTAIN_FIRST_MS 5000

/* sq_maintain on a config alone: it opens a connection of its own per
 * shard, one after another, and needs no client. */
SQ_MUST_CHECK sq_status sq_maintain_cfg(const sq_config *cfg, const sq_maintain_opts *o,
					sq_maintain_report *out, sq_error *err);

typedef struct sq_maintainer sq_maintainer;
typedef void (*sq_maintainer_log)(const char *line, void *arg);

/*
 * Starts a thread that runs sq_maintain every [cluster] maintain_interval
 * (a connection per shard for the pass only: nothing is held between
 * passes). Returns NULL when the interval is 0 (or on no memory: then
 * nothing runs, which is what a missed pass means anyway). log (may be
 * NULL) gets one line per shard that did something, was skipped or failed;
 * it is called on the thread. cfg must outlive it.
 */
sq_maintainer *sq_maintainer_start(const sq_config *cfg, sq_maintainer_log log, void *log_arg);
/* Stops the thread (a pass under way finishes first: bounded by the
 * connection's lock and statement timeouts) and frees it; NULL is fine. */
void sq_maintainer_stop(sq_maintainer *m);

#endif

/* maintain.h - the periodic history maintenance of long-running programs
 * (the worker runtime, shardqd); sq_maintain itself is public (shardq.h). */
#ifndef SQ_MAINTAIN_H
#define SQ_MAINTAIN_H

#include "config.h"

/* The first pass runs at a random point from SQ_MAINTAIN_FIRST_MS after the
 * start to one interval after it, and at most SQ_MAINTAIN_SPREAD_MS (an
 * interval shorter than SQ_MAINTAIN_FIRST_MS: after one interval). Every
 * process of a fleet started together so makes its passes at its own time,
 * not all at once on every shard (each pass opens a connection per shard).
 * `shardq init` makes the days ahead, so nothing waits for that pass. */
#define SQ_MAINTAIN_FIRST_MS  5000
#define SQ_MAINTAIN_SPREAD_MS 3600000

/* When the first pass of a runner with this interval comes, for a random
 * 64-bit draw r: see SQ_MAINTAIN_FIRST_MS. */
int64_t sq_maintain_first_ms(int64_t interval_ms, uint64_t r);

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
/* Stops the thread and frees it; NULL is fine. A pass under way ends at
 * once where it connects (a shard that does not answer does not hold the
 * stop up for connect_timeout) and before the next shard; a statement
 * under way finishes first (bounded by the connection's lock and statement
 * timeouts). */
void sq_maintainer_stop(sq_maintainer *m);

#endif

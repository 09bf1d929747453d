/* preload.h - the backlog: ready jobs written straight into every shard's
 * job table with COPY, one thread per shard, all shards at once. */
#ifndef BENCH_PRELOAD_H
#define BENCH_PRELOAD_H

#include "scenario.h"

#include <shardq.h>
#include <stdint.h>

/*
 * Adds n ready jobs to an initialised cluster, placed as sq_enqueue places
 * keyless jobs (ids from the cluster's id blocks, partition from the id,
 * shard from the map), then VACUUM ANALYZE on every shard, as an operator
 * would after a bulk load. Times the two parts. 0, or -1 with a message.
 */
int preload_jobs(const scenario *sc, sq_client *c, int64_t n, double *copy_s, double *vacuum_s,
		 char *err, size_t errlen);
/* The same for n live jobs that wait: ready, keyed ("live-N", partition
 * from the key as sq_enqueue places it), of type PRELOAD_PARKED, which no
 * worker of the bench runs: they stay while they move with their
 * partitions. (Not scheduled ahead: a claim that finds fewer ready jobs
 * than it asks for reads past every job of its type scheduled later,
 * which would be measured instead; see docs/benchmarks.md.) */
#define PRELOAD_PARKED "parked"
int preload_live(const scenario *sc, sq_client *c, int64_t n, double *copy_s, double *vacuum_s,
		 char *err, size_t errlen);

#endif

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

#endif

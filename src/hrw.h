/* hrw.h - weighted rendezvous hashing of partitions onto shards. */
#ifndef SQ_HRW_H
#define SQ_HRW_H

#include <stdint.h>

/*
 * For each partition p < partitions, out[p] = the index of the shard with the
 * highest weighted score -w/ln(u(p, id)). Scores depend only on (p, shard id,
 * weight), so adding or removing a shard moves only the partitions that
 * gain or lose that shard. Shards with weight <= 0 get nothing.
 * Returns 0, or -1 when no shard has a positive weight.
 */
int sq_hrw_plan(uint32_t partitions, int nshards, const char *const *ids, const double *weights,
		int *out);

#endif

/* claim.h - the claim in two halves, push and collect (src/claim.c), so
 * that the worker sends it with its fenced transitions (fenced.h) in one
 * pipeline per shard and pays one round trip per tick. The claim is its own
 * transaction, unless the client's merge_txn leaves out its Sync (the
 * worker's tick: one transaction per shard). */
#ifndef SQ_CLAIM_H
#define SQ_CLAIM_H

#include "client.h"

typedef struct sq_claim_pending sq_claim_pending;

/* Queues one claim round (limits shared by yield, no further rounds) on the
 * shards' pipelines; NULL and err on bad input or no memory. only: NULL, or
 * [shard] nonzero for the shards it may ask (a worker woken by those
 * shards' NOTIFY); none marked is every shard. */
sq_claim_pending *sq_claim_push(sq_client *c, const char *worker, const sq_claim_req *reqs,
				size_t nreqs, const unsigned char *only, sq_error *err);
/* Shard s's part of each request when the shards marked in `among` (and s)
 * share it in proportion to their recent yield, rounded up (a shard is
 * never left out by rounding): out[k] is reqs[k] with the limit and start
 * that fall to s. For a loop that claims on each shard on its own (a
 * worker's), s's claim then being pushed with only s marked. */
void sq_claim_share(sq_client *c, const sq_claim_req *reqs, size_t nreqs,
		    const unsigned char *among, int s, sq_claim_req *out);
/* Before collect: shard s's claim is not read, as if it had not been
 * asked (a statement before it in the same transaction failed, and that
 * error is the one to report). */
void sq_claim_skip_shard(sq_claim_pending *p, int s);
/* After sq_client_send: the jobs claimed (free with sq_jobs_free), in the
 * documented order; frees p. */
sq_status sq_claim_collect(sq_client *c, sq_claim_pending *p, sq_job **jobs, size_t *n,
			   sq_error *err);

#endif

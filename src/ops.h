/* ops.h - a claim and the fenced transitions in two halves, push and
 * collect, so that the worker sends several of them in one pipeline per
 * shard and pays one round trip per tick. Each is its own transaction,
 * unless the client's merge_txn leaves out their Syncs (the worker's tick:
 * one transaction per shard). */
#ifndef SQ_OPS_H
#define SQ_OPS_H

#include "client.h"

typedef struct sq_claim_pending sq_claim_pending;

/* Queues one claim round (limits shared by yield, no further rounds) on the
 * shards' pipelines; NULL and err on bad input or no memory. only: NULL, or
 * [shard] nonzero for the shards it may ask (a worker woken by those
 * shards' NOTIFY); none marked is every shard. */
sq_claim_pending *sq_claim_push(sq_client *c, const char *worker, const sq_claim_req *reqs,
				size_t nreqs, const unsigned char *only, sq_error *err);
/* Before collect: shard s's claim is not read, as if it had not been
 * asked (a statement before it in the same transaction failed, and that
 * error is the one to report). */
void sq_claim_skip_shard(sq_claim_pending *p, int s);
/* After sq_client_send: the jobs claimed (free with sq_jobs_free), in the
 * documented order; frees p. */
sq_status sq_claim_collect(sq_client *c, sq_claim_pending *p, sq_job **jobs, size_t *n,
			   sq_error *err);

typedef enum {
	SQ_FENCED_START,
	SQ_FENCED_HEARTBEAT,
	SQ_FENCED_COMPLETE, /* with history or without, as the client's types say */
	SQ_FENCED_FAIL,
	SQ_FENCED_RELEASE,
	/* the completion without history, for sq_fenced_sql (tests); pushed, it
	 * is SQ_FENCED_COMPLETE, which picks it by the client's types */
	SQ_FENCED_COMPLETE_PLAIN,
} sq_fenced_kind;

typedef struct sq_fenced_pending sq_fenced_pending;

/* The statement text of a fenced transition (for tests that EXPLAIN it). */
const char *sq_fenced_sql(sq_fenced_kind kind);

/* Queues a fenced transition of n refs (fails: the reqs of SQ_FENCED_FAIL,
 * whose refs are used; refs otherwise). The arrays must outlive collect. */
sq_fenced_pending *sq_fenced_push(sq_client *c, sq_fenced_kind kind, const char *worker,
				  const sq_job_ref *refs, const sq_fail_req *fails, size_t n);
/* After sq_client_send: out[i] is SQ_OK, SQ_ELOST (SQ_ENOTFOUND for a
 * completion: look again with sq_complete), SQ_EMOVED/SQ_EMOVING (send again
 * with the plain call), or the shard's error. Frees p. */
void sq_fenced_collect(sq_client *c, sq_fenced_pending *p, sq_status *out);

#endif

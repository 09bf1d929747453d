/* fenced.h - the fenced transitions of claimed jobs (start, heartbeat,
 * complete, fail, release; src/lifecycle.c) in two halves, push and
 * collect, so that the worker sends several of them, and its claim
 * (claim.h), in one pipeline per shard and pays one round trip per tick.
 * Each is its own transaction, unless the client's merge_txn leaves out
 * their Syncs (the worker's tick: one transaction per shard). */
#ifndef SQ_FENCED_H
#define SQ_FENCED_H

#include "client.h"

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

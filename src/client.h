/* client.h - the sq_client internals shared by the modules that use it. */
#ifndef SQ_CLIENT_H
#define SQ_CLIENT_H

#include "config.h"
#include "pgconn.h"
/* sq_listener: shardqd's claimer finds it through this header */
#include "listener.h"

#include <stdatomic.h>

/* The gate every partition-naming write takes shared, in its own statement,
 * before checking the partition markers; the mover takes it exclusive. */
extern const sq_stmt sq_stmt_gate_shared;
extern const sq_stmt sq_stmt_check_owned;

/* Plans for small batches: a fenced write of a few rows costs PostgreSQL
 * more to plan (a custom plan per call) than to run, so up to this many
 * rows it uses the plan made once per session (index-driven however small
 * the table was when it was made: the client's connections have sequential
 * scans off, conn_options in client.c); bigger batches get plans made for
 * their values (a generic completion of 1,000 rows cost three times the
 * custom one). The claim always uses the generic plan. */
#define SQ_GENERIC_PLAN_ROWS 64
/* Queues, when the transaction being built on shard s is not in that mode
 * yet, SET LOCAL plan_cache_mode: force_generic_plan (generic) or auto. One
 * statement per change of mode, none when the mode holds already (merged
 * writes of a worker tick share one). */
void sq_client_push_plans(sq_client *c, int s, int generic);

/* Per-type settings as array literals, in config order, for statements
 * that join on task type (leases, backoff, history). hist_names and
 * hist_days list only the types that keep history, with their
 * history_retention in whole days. */
typedef struct sq_type_arrays {
	char *names, *start_ms, *exec_ms, *backoff, *base_ms, *cap_ms, *jitter, *history;
	char *hist_names, *hist_days;
	int any_history; /* a type keeps history */
} sq_type_arrays;

/* Where a client's claims of a type on a shard go on (sql/queries/claim.sql,
 * claim_cursor_key): the last job its due arm took, and when its last full
 * claim (from the front) was pushed. */
typedef struct sq_claim_cursor {
	int has;
	int32_t prio;
	int64_t key_us; /* the order key, µs since 2000-01-01 */
	int64_t id;
	double full_at;
	double full_cost; /* seconds from the push of the last full claim to its answer */
	int rewound;      /* jobs were put back behind it: a full claim is due */
} sq_claim_cursor;

struct sq_client {
	const sq_config *cfg;
	struct event_base *base;
	sq_pgconn meta;
	sq_pgconn *shards;
	int nshards;
	uint32_t partitions;
	int64_t map_version;
	int *map;       /* partition -> shard index in cfg */
	int *map_parts; /* shard index -> partitions it holds, by the map */
	char *cluster_id;
	int64_t id_next, id_end; /* the current block of id numbers */
	double *yield;           /* [shard * ntypes + type]: recent claim yield */
	sq_claim_cursor *cursor; /* [shard * ntypes + type]: where claims go on */
	uint64_t *rewind_seen;   /* [shard]: sq_client_claim_rewound's */
	unsigned char *paused;   /* [type]: paused fleet-wide, as of the last map poll */
	double paused_at;        /* when that poll was answered */
	unsigned rotate;         /* spreads small limits over shards in turn */
	sq_type_arrays ta;
	int merge_txn;         /* push halves leave out their Sync: one transaction */
	PGconn *map_listen;    /* LISTEN shardq_map on the meta database */
	double map_checked_at; /* monotonic seconds of the last version check */
	double map_asked_at;   /* when the version poll now on map_listen was
				* sent; 0: none in flight */
	double map_listen_at;  /* no new map_listen before this (one failed) */
	uint64_t map_refreshes;
	uint64_t map_rows_read; /* rows of the map read from the meta database */
	/* partitions a shard answered "moving" for (enqueue.c): their jobs
	 * wait without being sent, a batch's others go at once. Believed while
	 * the map keeps held_version, for SQ_HELD_S after held_at. */
	unsigned char *held; /* bitmap over the partitions; NULL until needed */
	size_t nheld;
	int64_t held_version;
	double held_at;
};

/* How long a client believes a shard's "moving" before it asks again: a
 * move's freeze ends with the map's switch (which a client hears at once
 * on LISTEN shardq_map), or, when the move is aborted, without one. */
#define SQ_HELD_S 0.25

/*
 * A plain connection (blocking, outside the pipelines): the mover's, the
 * vacuum after a move, the LISTEN ones. Like every shard connection it
 * takes the [connection] settings: connect_timeout,
 * idle_in_transaction_session_timeout, statement_timeout (the config's, or
 * statement_timeout_ms when >= 0: an explicit, documented override), and
 * application_name with "-role" added (shardq-mover, shardq-listen, ...).
 * NULL and a message in errbuf on failure.
 */
PGconn *sq_connect_plain(const sq_config *cfg, const char *dsn, const char *role,
			 int64_t statement_timeout_ms, char *errbuf, size_t errlen);
/* Sets up pc (not connected yet) for shard `shard` of cfg, with the
 * settings of a plain connection (above; application_name with "-role"
 * added) and its connect wait at SQ_LOOP_CONNECT_WAIT_S: what a loop's
 * LISTEN connection (listener.c) connects with. */
SQ_MUST_CHECK sq_status sq_shard_conn_init(sq_pgconn *pc, const sq_config *cfg, int shard,
					   const char *role, sq_error *err);

/* sq_connect_plain for a thread that a stop waits for (the maintainer's):
 * connected the way the loops' connections are (a host name looked up on
 * a thread, each address given connect_timeout, then the next), and given
 * up as soon as *stop is set (looked at every 20 ms), so a stop does not
 * wait for a shard that does not answer. shard_id names the shard in the
 * message. */
PGconn *sq_connect_plain_stop(const sq_config *cfg, const char *dsn, const char *shard_id,
			      const char *role, const atomic_int *stop, char *errbuf,
			      size_t errlen);

/* Shard s's schema version (shardq.schema_version) into *have. */
SQ_MUST_CHECK sq_status sq_client_shard_schema(sq_client *c, int s, int *have, sq_error *err);

/* Takes `n` fresh id numbers (not yet shifted/combined with a partition);
 * the first is *first. Fetches blocks from the meta database as needed. */
SQ_MUST_CHECK sq_status sq_client_take_ids(sq_client *c, size_t n, int64_t *first, sq_error *err);

/* Composes a job id from a unique number and a partition. */
static inline int64_t sq_make_id(int64_t unique, uint32_t partition)
{
	return (int64_t)(((uint64_t)unique << 16) | partition);
}

/* Shard index of a job id, by the cached map. */
static inline int sq_shard_of_id(const sq_client *c, int64_t id)
{
	return c->map[sq_partition_of_id(id) & (c->partitions - 1)];
}

/* Reloads the map if a NOTIFY said it changed, or if map_poll has passed
 * and the version moved. Cheap when nothing changed. */
void sq_client_check_map(sq_client *c);
/* A loop that serves every shard (a worker's, shardqd's claimer): a shard
 * or meta database that must be connected again holds the calls up for at
 * most SQ_LOOP_CONNECT_WAIT_S per connect, not connect_timeout
 * (sq_pgconn_set_connect_wait). */
#define SQ_LOOP_CONNECT_WAIT_S 0.05
/* The claims of shard s (all shards: s < 0), by every client of this
 * process, read from the front again as soon as they may: jobs were put
 * back behind their cursors (a release, a fail for a retry, partitions
 * moved in). sq_client_claim_rewound says, once, whether that happened
 * since c last asked. */
void sq_client_claim_rewind(sq_client *c, int s);
/* The paused types from the meta database's answer (a JSON array of names,
 * or "" for none). */
void sq_client_set_paused(sq_client *c, const char *json);
int sq_client_claim_rewound(sq_client *c, int s);
void sq_client_connect_wait(sq_client *c, double wait_s);
/* How long each of c's connections waits for an answer before it is taken
 * as lost (sq_pgconn_set_answer_wait). sq_client_open sets [connection]
 * answer_timeout, or statement_timeout + connect_timeout (none without a
 * statement_timeout). */
void sq_client_answer_wait(sq_client *c, double wait_s);
double sq_client_answer_wait_of(const sq_client *c);
/* Lowers c's answer wait to an eighth of the shorter lease of type t (at
 * least SQ_ANSWER_WAIT_MIN_S), for a caller that heartbeats t's jobs on
 * every shard through c: a shard that answers nothing holds the others'
 * heartbeats (due at half a lease, a quarter left for them to get
 * through) up for that long at most. */
#define SQ_ANSWER_WAIT_MIN_S 1.0
void sq_client_answer_wait_for_lease(sq_client *c, const sq_type_conf *t);
/* The same rule as a value: wait_s (0: none) lowered for type t. */
double sq_lease_answer_wait(double wait_s, const sq_type_conf *t);
/* sq_pgconn_advance on every shard's and the meta connection; returns how
 * many connects are still under way (the loop should come back within
 * SQ_LOOP_CONNECT_WAIT_S while any is). */
int sq_client_advance_connects(sq_client *c);
/* The shards a client opened with SQ_OPEN_ALLOW_DOWN could not reach, one
 * line each ("shard ID (ADDR): why"), into out; returns how many. */
int sq_client_down_shards(const sq_client *c, char *out, size_t len);

/*
 * After a shard answered "moving" (moved = 0) or "moved" (moved = 1): waits
 * a little for a moving partition, refreshes the map, and tells whether to
 * try again (SQ_OK) or give up (SQ_EMOVING once the deadline has passed).
 * `tries` counts the calls for one operation; `deadline` is monotonic
 * seconds, set on the first call when 0.
 */
sq_status sq_client_wait_moved(sq_client *c, int moved, int *tries, double *deadline,
			       sq_error *err);

/* How long to wait after a "moving" answer before trying again, counting
 * the try as sq_client_wait_moved does (SQ_EMOVING once the deadline has
 * passed), for a caller that waits and reads the map on its own. */
sq_status sq_client_moving_delay(sq_client *c, int *tries, double *deadline, double *delay,
				 sq_error *err);

/* Sends every shard's queued pipeline and waits; only connection failures
 * are returned: each shard's results are for the caller to check. */
SQ_MUST_CHECK sq_status sq_client_send(sq_client *c, sq_error *err);

/* Runs the queued pipelines of every shard, then checks each shard's
 * results; returns the first error. */
SQ_MUST_CHECK sq_status sq_client_run(sq_client *c, sq_error *err);
/* Ends, on every shard with queued statements, the transaction so far. */
void sq_client_sync_all(sq_client *c);
/* Clears every shard's queue and results. */
void sq_client_reset(sq_client *c);

/* Queues gate + check_owned on shard s for the partitions in parts (an int
 * array literal); vals must outlive the run. */
void sq_client_push_guard(sq_client *c, int s, const char *const *parts_val);
/* Queues the gate, taken shared (sq_stmt_gate_shared), on shard s; _once:
 * only if the pipeline's open transaction does not take it already (a
 * worker's tick sends its writes and its claim in one transaction, and one
 * gate covers both: the claim's snapshot still comes after the lock, and a
 * move's drain still waits for the transaction). Returns 1 if queued. */
void sq_client_push_gate(sq_client *c, int s);
int sq_client_push_gate_once(sq_client *c, int s);

#define SQ_US_EXPR(col) "(extract(epoch from " col ") * 1000000)::bigint"

#endif

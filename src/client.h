/* client.h - the sq_client internals shared by the modules that use it. */
#ifndef SQ_CLIENT_H
#define SQ_CLIENT_H

#include "config.h"
#include "pgconn.h"

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
	unsigned rotate;         /* spreads small limits over shards in turn */
	sq_type_arrays ta;
	int merge_txn;         /* push halves leave out their Sync: one transaction */
	PGconn *map_listen;    /* LISTEN shardq_map on the meta database */
	double map_checked_at; /* monotonic seconds of the last version check */
	double map_asked_at;   /* when the version poll now on map_listen was
				* sent; 0: none in flight */
	double map_listen_at;  /* no new map_listen before this (one failed) */
	uint64_t map_refreshes;
};

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

/* A LISTEN connection of a loop (a worker's, shardqd's claimer) to one
 * shard. Nothing about it holds the loop up: it is connected as the
 * loop's own shard connections are (SQ_LOOP_CONNECT_WAIT_S at most per
 * call, the rest between calls, a host name looked up on a thread), and
 * its LISTEN is sent without waiting for the answer. A shard whose host
 * vanished cuts a LISTEN connection (seen on its socket) before the loop
 * finds its own connection gone, so a blocking connect here held the loop
 * up for connect_timeout. */
typedef struct sq_listener {
	sq_pgconn pc;    /* the connect under way, its backoff and last error */
	PGconn *conn;    /* NULL: none; else the LISTEN is sent */
	double heard_at; /* when conn last had something to read, or was made */
	double asked_at; /* when the LISTEN or a probe was sent that has had no
			  * answer yet; 0: none */
	/* A worker's listener (self[0] set, by its owner: "HASH:ROOM ..." per
	 * task type, see sq_wake_type_hash) registers in shardq.listeners
	 * with every probe and reads the others' rows back (members); a
	 * NOTIFY then counts as a wake-up only when its payload ranks this
	 * listener among the few its batch needs (sq_listener_read). Without
	 * self (shardqd's claimer), without the table (a shard at schema 7:
	 * unregistered = 1) or before the first list, every NOTIFY counts. */
	char self[256];
	int listen_ok;    /* the LISTEN was answered on this connection */
	int unregistered; /* the registration failed on this connection */
	/* members[i]: a registered listener's backend pid, and its first
	 * entry; members[nmembers].first ends the last one's entries */
	struct sq_listener_member {
		int pid, first;
	} * members;
	/* entries: per member and task type, the type's hash and its room */
	struct sq_listener_entry {
		uint32_t hash;
		int room;
	} * entries;
	int nmembers, capmembers, capentries;
	double probed_at; /* when the last probe was sent; 0: never */
} sq_listener;
/* A LISTEN connection gets a probe this long after it was last heard from
 * (a worker's: after its last probe, heard from or not). The probe is an
 * empty query, or a worker's registration (see self), and shows the
 * connection still answers. */
#define SQ_LISTEN_PROBE_S 5.0
/* A registration nobody renewed for this long is a worker that has gone. */
#define SQ_LISTENER_STALE_S 15
/* A NOTIFY wakes, per task type in its batch, the first listeners by rank
 * until their rooms add up to SQ_WAKE_ROOMS times the type's jobs, and at
 * least SQ_WAKE_MIN of them. */
#define SQ_WAKE_ROOMS 2
#define SQ_WAKE_MIN   1
/* The 32-bit hash of a task type's name, in NOTIFY payloads and
 * registrations. */
uint32_t sq_wake_type_hash(const char *type);
SQ_MUST_CHECK sq_status sq_listener_init(sq_listener *l, const sq_config *cfg, int shard,
					 sq_error *err);
/* Connects, or goes on connecting, and sends LISTEN `channel`: SQ_OK once
 * sent (l->conn set: poll its socket for reading), SQ_ECONN while the
 * connect is under way (sq_pgconn_connecting(&l->pc)) or after it failed
 * (then tried again after a backoff, as shard connections are). */
sq_status sq_listener_connect(sq_listener *l, const char *channel, sq_error *err);
/* Reads what l->conn has, after its socket was readable: the number of
 * NOTIFYs, with *listening set when the LISTEN's answer was among it (the
 * wake-ups before it were missed); -1 when the connection broke, -2 when
 * the server refused the LISTEN (a standby: why says so; try again after a
 * while, not at once). On -1 and -2 the caller drops the connection
 * (sq_listener_drop, after taking its socket out of any event loop);
 * sq_listener_connect makes a new one. */
int sq_listener_read(sq_listener *l, int *listening, char *why, size_t whylen);
/* For a loop's every pass: a LISTEN connection that died without a word
 * (its host cut off by the network, a firewall or NAT that dropped it
 * while idle) never says so, and its wake-ups are lost for good. So one
 * silent for SQ_LISTEN_PROBE_S is sent an empty query (which also keeps
 * a NAT's state alive), and one whose LISTEN or probe has had no answer
 * for answer_wait_s (at least SQ_LISTEN_PROBE_S) returns -1, why saying so: the caller drops it, as
 * after a read's -1. Else 0, and *next_at (monotonic) is when this should
 * be called again, at the latest. */
int sq_listener_check(sq_listener *l, double now, double answer_wait_s, double *next_at, char *why,
		      size_t whylen);
/* Closes l->conn (not the connect state). */
void sq_listener_drop(sq_listener *l);
void sq_listener_free(sq_listener *l);

/* sq_connect_plain for a thread that a stop waits for (the maintainer's):
 * connected the way the loops' connections are (a host name looked up on
 * a thread, each address given connect_timeout, then the next), and given
 * up as soon as *stop is set (looked at every 20 ms), so a stop does not
 * wait for a shard that does not answer. shard_id names the shard in the
 * message. */
PGconn *sq_connect_plain_stop(const sq_config *cfg, const char *dsn, const char *shard_id,
			      const char *role, const atomic_int *stop, char *errbuf,
			      size_t errlen);

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

/*
 * shardq.h - public API of libshardq: one logical job queue spread over many
 * PostgreSQL shards.
 *
 * Conventions, for every function below:
 *  - A function that can fail returns an sq_status; SQ_OK means success.
 *    On any other value the sq_error passed in (err may be NULL: then only
 *    the status tells) holds the same code and a message that names what
 *    was wrong and what to do. The library never prints and never calls
 *    exit(); it abort()s only on a broken internal invariant (a bug). A
 *    test build with SHARDQ_FAILPOINTS (never a release) _exit()s at a
 *    failpoint named in $SHARDQ_FAILPOINT.
 *  - Strings passed in are copied when the library keeps them; the caller
 *    may free them after the call returns. The exceptions are objects a
 *    call says it keeps a pointer to: the sq_config of sq_client_open and
 *    sq_worker_create, which must outlive the client or worker.
 *  - Memory returned through an out-parameter belongs to the caller and is
 *    freed as the function's comment says: with its *_free function, or
 *    with free() for a plain array (sq_moves_list, sq_failed_recent,
 *    sq_schedules_list). A const char * returned (a name, an id) belongs to
 *    the library: a static string, or one that lives as long as the object
 *    it was read from; never free it.
 *  - The *_free functions, sq_client_close and sq_worker_destroy accept
 *    NULL and do nothing with it. Other pointer arguments must not be NULL
 *    unless their comment says so.
 *  - Threads: an sq_config is never changed after it is loaded, so one may
 *    be shared by any number of threads, clients and workers at once (as
 *    shardqd does); free it once they are all closed. An sq_client is not
 *    thread-safe: use one per thread (or one at a time). An sq_worker is
 *    driven by the thread that runs it; the calls that say so
 *    (sq_worker_stop, sq_worker_get_stats) may come from any thread.
 *    Functions without an object (the *_name functions, the hashes, the
 *    option initialisers) are thread-safe. One process-wide effect: a
 *    schedule's time zone (see "periodic jobs" below).
 */
#ifndef SHARDQ_H
#define SHARDQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libshardq is built with hidden visibility: what this header declares is
 * exactly what the shared library exports (tests/check_exports.sh). */
#pragma GCC visibility push(default)

#define SQ_MUST_CHECK __attribute__((warn_unused_result))

/* Largest partition count: the low 16 bits of a job id hold its partition. */
#define SQ_MAX_PARTITIONS 65536
/* Bounds on what a job may carry; larger input is refused with SQ_EINVAL. */
#define SQ_MAX_KEY_LEN    512
#define SQ_MAX_TYPE_LEN   64
#define SQ_MAX_PARAMS_LEN (1024 * 1024)
#define SQ_MAX_ERROR_LEN  2000
/* Bounds on a job's numbers (sq_job_spec, and the [type] keys). */
#define SQ_MIN_PRIORITY           (-1000000)
#define SQ_MAX_PRIORITY           1000000
#define SQ_MAX_ATTEMPTS           1000000
#define SQ_MAX_DELAY_MS           INT64_C(3155760000000)      /* 100 years of 365.25 days */
#define SQ_MAX_DELAY_TOLERANCE_MS INT64_C(31536000000)        /* 365 days */
#define SQ_MAX_RUN_AT_US          INT64_C(253402300799999999) /* 9999-12-31 23:59:59.999999 UTC */
/* Most [type] sections a config holds, and most requests one sq_claim takes
 * (more is SQ_EINVAL). */
#define SQ_MAX_TYPES 256
/* The longest duration any setting or option takes: it fits an int64 count
 * of microseconds, PostgreSQL's interval, and now() plus it a timestamp. */
#define SQ_MAX_DURATION_MS SQ_MAX_DELAY_MS

typedef enum sq_status {
	SQ_OK = 0,
	SQ_EINVAL,  /* bad argument or bad input (JSON, type, sizes) */
	SQ_ECONFIG, /* the configuration is invalid */
	SQ_ECONN,   /* a shard or the meta database cannot be reached */
	SQ_EDB,     /* the database answered with an error */
	SQ_ESTATE,  /* the cluster is not in the state needed (not initialised,
	                 other partition count, ...) */
	SQ_ELOST,   /* a fenced transition matched no row: the lease was lost */
	SQ_EMOVED,  /* the partition is no longer owned by the shard asked */
	SQ_EMOVING, /* the partition is being moved; retry shortly */
	SQ_ENOMEM,
	SQ_ENOTFOUND, /* no such job */
} sq_status;

/* Returns a constant lowercase name for a status ("ok", "lost", ...). */
const char *sq_status_name(sq_status st);

typedef struct sq_error {
	sq_status code;
	char msg[1024];
} sq_error;

/* ---- configuration ---------------------------------------------------- */

typedef struct sq_config sq_config;

/*
 * Reads and validates an INI file. On SQ_ECONFIG, err->msg lists every bad
 * key, one line each, as "FILE:LINE: [section] key: what is wrong".
 * The config is freed with sq_config_free().
 */
SQ_MUST_CHECK sq_status sq_config_load(const char *path, sq_config **out, sq_error *err);
/* Same, from a string; `name` is used in messages in place of a file name. */
SQ_MUST_CHECK sq_status sq_config_parse(const char *text, const char *name, sq_config **out,
					sq_error *err);
void sq_config_free(sq_config *cfg);

/* Number of shards and the id of shard i (0-based, config order). */
int sq_config_shard_count(const sq_config *cfg);
const char *sq_config_shard_id(const sq_config *cfg, int i);
uint32_t sq_config_partitions(const sq_config *cfg);
/*
 * Looking a config up. Each call only reads cfg, so any number of threads
 * may make them at once on a config that none is freeing; strings returned
 * belong to cfg and live as long as it does.
 *
 * sq_config_shard_index: the index of the shard named `id` (as
 * sq_config_shard_id gives it), or -1 when no shard has that id or id is
 * NULL.
 * sq_config_type_count, sq_config_type_name: the number of [type]
 * sections, and the name of type i (0-based, config order; NULL when i is
 * out of range).
 * sq_config_type_limits: type i's fleet-wide `max_running` and `rate` (jobs
 * started per second; 0: no limit, also when i is out of range).
 */
int sq_config_shard_index(const sq_config *cfg, const char *id);
int sq_config_type_count(const sq_config *cfg);
const char *sq_config_type_name(const sq_config *cfg, int i);
void sq_config_type_limits(const sq_config *cfg, int i, int32_t *max_running, double *rate);
/*
 * Parses a duration as the config file writes one, for programs that take
 * the same durations on their command line: "500ms", "1.5s", "5m" (or
 * "5min"), "1h", "2d" or "0"; no sign, exponent or leading space. Returns
 * the milliseconds (fractions of a millisecond dropped); -1 when s is not a
 * duration; -2 when it is longer than SQ_MAX_DURATION_MS. It sets no
 * sq_error, keeps no state and is safe from any thread.
 */
int64_t sq_parse_duration_ms(const char *s);

/* ---- routing ---------------------------------------------------------- */

/* XXH3_64bits of the key; frozen since xxHash 0.8.0. */
uint64_t sq_hash_key(const char *key, size_t len);
/* The partition of a key, for a cluster of `partitions` (a power of two). */
uint32_t sq_partition_of_key(const char *key, size_t len, uint32_t partitions);
/* The partition a job id encodes. */
static inline uint32_t sq_partition_of_id(int64_t id)
{
	return (uint32_t)((uint64_t)id & 0xFFFFu);
}

/* ---- client ----------------------------------------------------------- */

typedef struct sq_client sq_client;

/* The flags of sq_client_open, OR'ed together; 0: none. */
/* The cluster need not be initialised: the client neither checks the
 * schema nor loads the partition map, for sq_init (`shardq init`). Its
 * value is 1, so a caller that passes a boolean "for init" keeps its
 * meaning. */
#define SQ_OPEN_FOR_INIT 1u
/* A shard that cannot be reached is not an error (the meta database and at
 * least one shard must be); the first call that needs it connects again,
 * and fails with SQ_ECONN while it is down. For services that must start
 * during a shard's outage (shardqd). */
#define SQ_OPEN_ALLOW_DOWN 2u

/*
 * Connects to the meta database and every shard, and loads the partition
 * map. The client keeps a pointer to cfg: cfg must outlive it.
 * Fails with SQ_EINVAL on a flag not defined above; SQ_ECONN when a shard
 * (without SQ_OPEN_ALLOW_DOWN) or the meta database cannot be reached;
 * SQ_ESTATE when the cluster was never initialised (without
 * SQ_OPEN_FOR_INIT) or a shard's schema is older or newer than this
 * library handles; SQ_EDB when reading the map fails; SQ_ENOMEM. *out is
 * NULL on any error. Free with sq_client_close().
 */
SQ_MUST_CHECK sq_status sq_client_open(const sq_config *cfg, unsigned flags, sq_client **out,
				       sq_error *err);
/*
 * Ends the client's sessions (every shard's and the meta database's) and
 * frees it; c is invalid afterwards. NULL does nothing. No call on c may be
 * under way in another thread. What the client returned to the caller
 * (jobs, stats, reports) is the caller's and stays valid; the config is
 * left alone.
 */
void sq_client_close(sq_client *c);

/*
 * Creates or upgrades the schema on every shard and in the meta database,
 * and on first run plans the partition map (weighted rendezvous hashing).
 * Safe to run again; refused (SQ_ESTATE) if the cluster was made with another
 * partition count or a database belongs to another shard id.
 * `created` is set to 1 when this call created the cluster.
 */
SQ_MUST_CHECK sq_status sq_init(sq_client *c, int *created, sq_error *err);

/* Partition map: shard index (config order) per partition, and version. */
int sq_client_shard_of_partition(const sq_client *c, uint32_t partition);
int64_t sq_client_map_version(const sq_client *c);
/* Reloads the map from the meta database: the partitions moved since the
 * version c has, or all of it when the version has not moved (the caller
 * takes its map to be wrong) or on the first load. */
SQ_MUST_CHECK sq_status sq_client_refresh_map(sq_client *c, sq_error *err);

/* ---- enqueue ---------------------------------------------------------- */

/* sq_job_spec.delay_tolerance_ms for "no tolerance", whatever the type's
 * default (0 means the type's default, as every zero field of a spec does). */
#define SQ_NO_DELAY_TOLERANCE INT64_MIN

/*
 * One job to enqueue. A zero-initialised spec (plus a type) is a job with
 * every setting at its type's default: zero means "the default" in every
 * field below.
 */
typedef struct sq_job_spec {
	const char *type;   /* task type, must be in the config */
	const char *key;    /* dedup key (active_uid); NULL: none */
	const char *params; /* JSON text; NULL: {} */
	int has_priority;   /* 0: the type's default priority */
	int32_t priority;
	int64_t run_at_us;          /* absolute unix time in microseconds; 0: not set */
	int64_t delay_ms;           /* when run_at_us is 0: now() + delay_ms */
	int64_t delay_tolerance_ms; /* 0: the type's default; > 0: this tolerance;
	                               SQ_NO_DELAY_TOLERANCE: none. Other negative
	                               values are refused (SQ_EINVAL). */
	int32_t max_attempts;       /* 0: the type's default */
} sq_job_spec;

typedef enum sq_enqueue_outcome {
	SQ_ENQ_INSERTED = 0, /* a new job */
	SQ_ENQ_DUPLICATE,    /* a live job with the key exists and was kept */
	SQ_ENQ_REPLACED,     /* policy replace: the ready job was updated */
	SQ_ENQ_MERGED,       /* policy merge: params merged into the ready job */
	SQ_ENQ_RERUN,        /* policy rerun: the running job will run again */
	SQ_ENQ_NOT_WRITTEN,  /* the call failed and this job was not written
	                        (id -1): enqueue it again */
	SQ_ENQ_UNKNOWN,      /* the call failed and whether (or as which job) this
	                        job was written is not known (id -1): its shard's
	                        connection broke after the batch was sent and the
	                        shard could not tell afterwards. While the shard
	                        can be reached, only a job with a key ends up
	                        here, and it may be enqueued again safely (dedup) */
} sq_enqueue_outcome;

/* "inserted", "duplicate", "replaced", "merged", "rerun", "not_written",
 * "unknown". */
const char *sq_enqueue_outcome_name(sq_enqueue_outcome o);

typedef struct sq_enqueue_result {
	int64_t id; /* the job's id (existing job's id on a duplicate); -1: not
	               written, or not known to be (see the outcome) */
	sq_enqueue_outcome outcome;
	int shard; /* shard index the job lives on (or was sent to) */
} sq_enqueue_result;

/*
 * Checks one job as sq_enqueue does before sending anything, against cfg:
 * a configured type; a key of 1..SQ_MAX_KEY_LEN bytes of valid UTF-8;
 * params of at most SQ_MAX_PARAMS_LEN bytes holding one JSON object that
 * PostgreSQL's jsonb accepts (valid UTF-8, no \u0000, paired surrogates,
 * numbers within numeric's range, nesting up to 512); every number within
 * the bounds above. Returns SQ_OK, or SQ_EINVAL with err naming the
 * problem. Lets a producer check a whole input before enqueueing any of it.
 */
SQ_MUST_CHECK sq_status sq_job_spec_check(const sq_config *cfg, const sq_job_spec *job,
					  sq_error *err);

/*
 * Enqueues n jobs: one statement per shard, all shards concurrently, each
 * shard's part in one transaction. A job with a key goes to its key's
 * partition; jobs without one go in runs of up to 256 that share a
 * partition, so a small keyless batch touches one shard (except jobs of a
 * type with max_running or rate, spread one by one, since those limits are
 * split over the shards). Every job is checked first (as by
 * sq_job_spec_check): on SQ_EINVAL nothing is sent and err names the job
 * ("job 7: ..."). results[] has n entries, filled in input order.
 * On a database or connection error (err says which shard failed) the
 * shards that answered keep their jobs, and every result tells its job's
 * fate: id > 0, written (outcome inserted, duplicate, ...); otherwise the
 * outcome is SQ_ENQ_NOT_WRITTEN (enqueue it again) or SQ_ENQ_UNKNOWN. When
 * a shard's connection breaks after its part was sent, the shard is asked
 * on a new connection (after ending the old session) which rows are there,
 * so a producer without keys can send again exactly what was not written.
 */
SQ_MUST_CHECK sq_status sq_enqueue(sq_client *c, const sq_job_spec *jobs, size_t n,
				   sq_enqueue_result *results, sq_error *err);

/* ---- pipelined enqueue ------------------------------------------------- */

/*
 * A producer that must not wait a round trip per batch hands its batches
 * to an enqueuer and goes on: up to `in_flight` batches are under way at
 * once, each on a lane of its own (a thread with its own sessions on every
 * shard and the meta database). Each batch runs exactly as sq_enqueue runs
 * it, and its callback then gets what sq_enqueue would have returned: the
 * status, the error, and one result per job in input order, with the same
 * meanings (nothing is reported written before its shard committed it).
 *
 * Callbacks run on the enqueuer's threads, one batch at a time per lane,
 * and batches may finish in any order: two batches in flight at once that
 * hold the same key may be applied in either order (under policy replace
 * or merge, wait for the first, or put both in one batch, which applies
 * them in order). The results array is valid during the callback only.
 * One enqueuer may be used by several threads; its config must outlive it.
 */
typedef struct sq_enqueuer sq_enqueuer;

/* The largest in_flight sq_enqueuer_open takes. */
#define SQ_ENQUEUER_MAX_IN_FLIGHT 64

/* A batch's outcome: arg as given to sq_enqueue_send; st and err as
 * sq_enqueue returns them (err is meaningful when st is not SQ_OK);
 * results[0..n-1] in the batch's order. */
typedef void (*sq_enqueue_cb)(void *arg, sq_status st, const sq_enqueue_result *results, size_t n,
			      const sq_error *err);

/*
 * Opens an enqueuer of in_flight lanes (1..SQ_ENQUEUER_MAX_IN_FLIGHT) on
 * cfg: connects each lane as sq_client_open(cfg, flags) does, all at once.
 * Errors: SQ_EINVAL (a bad in_flight), SQ_ENOMEM, and sq_client_open's
 * (SQ_ECONN when a shard or the meta database cannot be reached without
 * SQ_OPEN_ALLOW_DOWN, ...); nothing is left open then.
 */
SQ_MUST_CHECK sq_status sq_enqueuer_open(const sq_config *cfg, int in_flight, unsigned flags,
					 sq_enqueuer **out, sq_error *err);

/*
 * Hands n jobs over as one batch and returns once a lane has room for it:
 * at once while fewer than in_flight batches are under way, else when one
 * finishes. The jobs are checked first (as by sq_job_spec_check; SQ_EINVAL
 * with "job K: ..." and nothing sent, no callback) and copied: the caller
 * may reuse jobs and the strings they point to at once. done (may be NULL)
 * is called exactly once for every batch this accepted (SQ_OK).
 * Errors: SQ_EINVAL, SQ_ENOMEM.
 */
SQ_MUST_CHECK sq_status sq_enqueue_send(sq_enqueuer *q, const sq_job_spec *jobs, size_t n,
					sq_enqueue_cb done, void *arg, sq_error *err);

/* Waits until every batch handed over so far has had its callback. */
void sq_enqueuer_flush(sq_enqueuer *q);

/* Flushes, ends the lanes' sessions and frees q. NULL does nothing. No
 * sq_enqueue_send may be under way in another thread. */
void sq_enqueuer_close(sq_enqueuer *q);

/* ---- claim ------------------------------------------------------------ */

typedef enum sq_job_status {
	SQ_READY = 0,
	SQ_STARTING,
	SQ_RUNNING,
	SQ_COMPLETED,
	SQ_FAILED,
	SQ_CANCELLED,
} sq_job_status;

/* The number of statuses: sq_job_status runs from 0 to this - 1 (the size
 * of a per-status array, as sq_stats_row.count). */
#define SQ_JOB_STATUS_COUNT (SQ_CANCELLED + 1)

/* The status's name as the job rows and the CLI write it ("ready",
 * "starting", "running", "completed", "failed", "cancelled"), or "unknown"
 * for a value outside the enum. A static string: never NULL, never to be
 * freed. Thread-safe. */
const char *sq_job_status_name(sq_job_status s);

typedef struct sq_job {
	int64_t id;
	int32_t attempt; /* the run's fence: grows with every claim, never falls;
	                         name the job as (id, attempt) in life-cycle calls */
	int32_t tries;   /* tries used toward max_attempts, this one included
	                         (a release does not count; a rerun starts afresh) */
	int32_t max_attempts;
	int32_t priority;
	int shard;
	sq_job_status status;
	char *type;
	char *key; /* NULL when the job has none */
	char *params;
	char *worker;
	int64_t schedule_time_us;
	int64_t delay_tolerance_time_us; /* 0: none */
	int64_t lease_until_us;          /* expected_status_change_time */
	int64_t created_us;
} sq_job;

/* Frees the strings of one job (as filled by sq_get_job) and zeroes it;
 * NULL does nothing. */
void sq_job_clear(sq_job *job);
/* Frees an array of n jobs returned by sq_claim(). */
void sq_jobs_free(sq_job *jobs, size_t n);

typedef struct sq_claim_req {
	const char *type;
	int32_t limit;
	/* Of the limit, how many to start at once: they come back `running`
	 * (for slots that are free now), the rest `starting`; all with the
	 * starting lease, so that jobs whose claim answer is lost come back
	 * soon (the first heartbeat sets the execution lease). 0 (the
	 * default): all starting. */
	int32_t start;
} sq_claim_req;

/*
 * Claims up to reqs[i].limit jobs of each type for `worker`, from all shards
 * concurrently, one statement per shard. Due ready jobs and jobs whose lease
 * expired are taken; they become `starting` with the type's starting lease.
 * Each type's limit is shared among shards by their recent yield; when that
 * round comes back short, further rounds ask for exactly what is missing
 * from the shards not yet asked (or that gave all they were asked), so the
 * limit is never exceeded, even for a moment.
 * The result is ordered by priority DESC, COALESCE(delay_tolerance_time,
 * schedule_time) ASC, id ASC. *jobs is freed with sq_jobs_free(); it is NULL
 * when *njobs is 0. If a shard fails, the jobs claimed on the others are
 * still returned in *jobs (free them) along with the error.
 */
SQ_MUST_CHECK sq_status sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs,
				 size_t nreqs, sq_job **jobs, size_t *njobs, sq_error *err);

/* ---- life cycle (all fenced by id, attempt and worker) ------------------ */

typedef struct sq_job_ref {
	int64_t id;
	int32_t attempt;
} sq_job_ref;

/*
 * Each takes n refs and writes one status per ref into out[] (n entries):
 * SQ_OK, SQ_ELOST (the row no longer matches: another worker may own the
 * job; nothing was changed), or SQ_EMOVED/SQ_EMOVING. The return value is
 * SQ_OK when every shard answered (even if some refs are LOST), or the
 * error that stopped a shard.
 */
/* starting -> running; lease = now + the type's execution timeout. */
SQ_MUST_CHECK sq_status sq_start(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
				 sq_status *out, sq_error *err);
/* running -> running; extends the lease by the type's execution timeout. */
SQ_MUST_CHECK sq_status sq_heartbeat(sq_client *c, const char *worker, const sq_job_ref *refs,
				     size_t n, sq_status *out, sq_error *err);
/* As sq_start and sq_heartbeat, and lease_until_us[i] (n entries, or NULL)
 * is the lease each ref answered SQ_OK now holds, in microseconds since the
 * epoch by the shard's clock (its row's expected_status_change_time); 0 for
 * the others. */
SQ_MUST_CHECK sq_status sq_start_lease(sq_client *c, const char *worker, const sq_job_ref *refs,
				       size_t n, sq_status *out, int64_t *lease_until_us,
				       sq_error *err);
SQ_MUST_CHECK sq_status sq_heartbeat_lease(sq_client *c, const char *worker, const sq_job_ref *refs,
					   size_t n, sq_status *out, int64_t *lease_until_us,
					   sq_error *err);
/* running (or still starting) -> completed (the row leaves the hot table;
 * a pending rerun makes it ready again with the rerun's params). A job may
 * be completed straight from `starting` by the worker that claimed it: the
 * worker runtime starts a buffered job on a free slot at once, under its
 * starting lease, and writes its start only if the job runs for more than a
 * second (docs/worker.md). */
SQ_MUST_CHECK sq_status sq_complete(sq_client *c, const char *worker, const sq_job_ref *refs,
				    size_t n, sq_status *out, sq_error *err);
/* starting -> ready, no attempt counted (for a worker shutting down). */
SQ_MUST_CHECK sq_status sq_release(sq_client *c, const char *worker, const sq_job_ref *refs,
				   size_t n, sq_status *out, sq_error *err);
/* starting or running -> ready, no attempt counted: for jobs whose claim
 * answer never reached a handler, also those claimed straight to running
 * (sq_claim_req.start). shardqd hands back this way what it claimed for a
 * client that went away. Never for a job whose handler has begun. */
SQ_MUST_CHECK sq_status sq_unclaim(sq_client *c, const char *worker, const sq_job_ref *refs,
				   size_t n, sq_status *out, sq_error *err);

typedef struct sq_fail_req {
	sq_job_ref ref;
	const char *error; /* kept, cut to SQ_MAX_ERROR_LEN bytes; may be NULL */
	int permanent;     /* non-zero: straight to failed */
} sq_fail_req;

/* running (or still starting, as for sq_complete) -> ready with backoff
 * (attempt < max), or -> failed. */
SQ_MUST_CHECK sq_status sq_fail(sq_client *c, const char *worker, const sq_fail_req *reqs, size_t n,
				sq_status *out, sq_error *err);

/* ready/starting/running -> cancelled, by id. out[i]: SQ_OK, SQ_ENOTFOUND
 * (no live job with that id), or, for an id whose shard did not answer,
 * the call's error (the return value: SQ_ECONN, SQ_EDB, SQ_EMOVING when its
 * partition stayed frozen past moving_wait, ...): cancel those again. */
SQ_MUST_CHECK sq_status sq_cancel(sq_client *c, const int64_t *ids, size_t n, sq_status *out,
				  sq_error *err);
/* failed -> ready, by id: due now, with a fresh budget of tries (the
 * fence, attempt, keeps growing) and its last error kept. out[i]: SQ_OK,
 * SQ_ENOTFOUND (no such job in the hot table: finished, or never),
 * SQ_ESTATE (not failed: ready, starting, running or cancelled, or a live
 * job of its type holds its key now), or the call's error for an id whose
 * shard did not answer (as sq_cancel). A job under a worker's lease is
 * never touched. */
SQ_MUST_CHECK sq_status sq_retry(sq_client *c, const int64_t *ids, size_t n, sq_status *out,
				 sq_error *err);
/* Retries the failed jobs of `type` that failed at or before until_us (µs
 * since the epoch; 0: now), on every shard, in batches of `batch` (1 to
 * 10,000; 0: 1,000), in the order they failed. progress (NULL: none) is
 * called after each batch with the totals so far. *retried and
 * *not_allowed (may be NULL) count the jobs made ready and those left
 * (a live job holds the key). Jobs that fail again meanwhile are after
 * until_us and left. */
typedef void (*sq_retry_progress)(int64_t retried, int64_t not_allowed, void *arg);
SQ_MUST_CHECK sq_status sq_retry_type(sq_client *c, const char *type, int64_t until_us, int batch,
				      sq_retry_progress progress, void *arg, int64_t *retried,
				      int64_t *not_allowed, sq_error *err);
/* Cancels the live job of (type, key); *id is set to its id, or 0 and
 * SQ_ENOTFOUND when there is none. */
SQ_MUST_CHECK sq_status sq_cancel_key(sq_client *c, const char *type, const char *key, int64_t *id,
				      sq_error *err);

/* Reads one job by id (any status, including failed/cancelled; a finished
 * one from its history row, on the shard it ran on also after its
 * partition moved: the other shards are asked when the map's has no row);
 * free its strings with sq_job_clear(). */
SQ_MUST_CHECK sq_status sq_get_job(sq_client *c, int64_t id, sq_job *job, sq_error *err);
/* The job's last error (a failure's text, or why its lease ran out):
 * *last_error is malloc'd (free() it), or NULL when it has none.
 * SQ_ENOTFOUND as sq_get_job. */
SQ_MUST_CHECK sq_status sq_get_job_error(sq_client *c, int64_t id, char **last_error,
					 sq_error *err);
/* The last errors of n jobs at once (a page that sq_jobs_list gave), one
 * statement per shard, each read on the shard the job was listed from
 * (jobs[i].shard; the map's for a job whose shard is -1): errors[i] gets
 * jobs[i]'s, malloc'd, or NULL when it has none or no such job exists.
 * Free each, also after an error. */
SQ_MUST_CHECK sq_status sq_jobs_errors(sq_client *c, const sq_job *jobs, size_t n, char **errors,
				       sq_error *err);

/* ---- stats ------------------------------------------------------------ */

typedef struct sq_stats_row {
	int shard;
	char *type;
	int64_t count[SQ_JOB_STATUS_COUNT]; /* indexed by sq_job_status; completed counts
	                                       rows kept in history */
	int64_t oldest_ready_age_ms;        /* -1: no ready job */
	int64_t expired_leases;
	int ready_estimated; /* sq_stats_fast: count[SQ_READY] is PostgreSQL's
	                        estimate (above the cap), not a count */
} sq_stats_row;

/* What holds vacuum back on a shard, and how vacuum keeps up with its jobs
 * table (sq_stats_fast; -1 where unknown). A transaction left open, on any
 * database of the shard's server, keeps every dead row of the queue's
 * table from being vacuumed: the table and its indexes grow while it
 * stays (docs/operations.md, "A transaction left open"). The sessions of
 * other users are seen only with the pg_read_all_stats role (pg_monitor). */
typedef struct sq_shard_health {
	double oldest_xact_s;     /* the oldest open transaction of a client session, s */
	int64_t xmin_age;         /* the xmin horizon's age, in transactions: the oldest xmin
	                             of a session, a prepared transaction or a slot */
	int64_t jobs_dead_rows;   /* shardq.jobs: dead rows (pg_stat_user_tables) */
	int64_t jobs_live_rows;   /* shardq.jobs: live rows, as vacuum counted them */
	int64_t jobs_autovacuums; /* autovacuum runs on shardq.jobs since the stats reset */
	double jobs_vacuum_age_s; /* since shardq.jobs was last vacuumed, auto or not */
	double history_ahead_s;   /* from now to the end of the newest day partition of
	                             shardq.jobs_history, which maintenance makes ahead
	                             (negative: past; NaN: none, or not read) */
} sq_shard_health;

typedef struct sq_stats {
	size_t nrows;
	sq_stats_row *rows;
	int nshards;
	int64_t *partitions_owned;  /* per shard */
	int64_t *partitions_moving; /* per shard: not owned and not gone */
	int64_t map_version;
	char **shard_error;      /* sq_stats_fast: per shard, NULL or why it could not
	                       be read (its rows are missing) */
	sq_shard_health *health; /* sq_stats_fast: per shard (NULL for sq_stats_get) */
} sq_stats;

/* Counts every job (a scan of each shard's tables): exact, for tools. */
SQ_MUST_CHECK sq_status sq_stats_get(sq_client *c, sq_stats **out, sq_error *err);
/*
 * The same figures without reading every job, for dashboards and metrics
 * at any queue size: per shard and configured type, one statement per
 * shard, index-driven. count[SQ_READY] is exact up to ready_cap (0: 10000)
 * and PostgreSQL's planner estimate above it (ready_estimated set);
 * starting, running and expired leases are exact (the lease index, bounded
 * by what workers hold); oldest_ready_age_ms is the age of the next due job
 * in claim order (priority first: with one priority, the oldest).
 * count[] of completed, failed and cancelled is -1 (not counted). A shard
 * that cannot be read is named in shard_error[] and the call still returns
 * SQ_OK with the others, unless none could be read.
 */
SQ_MUST_CHECK sq_status sq_stats_fast(sq_client *c, int64_t ready_cap, sq_stats **out,
				      sq_error *err);
void sq_stats_free(sq_stats *s);

/* A failed job, as dashboards show it. */
typedef struct sq_failed_job {
	int64_t id;
	int shard;
	int32_t tries;
	char type[SQ_MAX_TYPE_LEN + 1];
	char last_error[512]; /* cut */
	int64_t failed_us;    /* when (updated_at) */
} sq_failed_job;

/* The `limit` most recently failed jobs of all shards, newest first (an
 * index of failed jobs only: no scan). *out is freed with free(). */
SQ_MUST_CHECK sq_status sq_failed_recent(sq_client *c, int limit, sq_failed_job **out, size_t *n,
					 sq_error *err);

/* ---- worker runtime ----------------------------------------------------- */

/* What a handler reports for its job. */
typedef enum sq_job_result {
	SQ_RESULT_DONE = 0, /* complete the job */
	SQ_RESULT_RETRY,    /* fail it under the type's retry policy */
	SQ_RESULT_FAIL,     /* fail it for good (no retry) */
} sq_job_result;

/*
 * Runs one job on a pool thread. `job` and its strings are valid until the
 * handler returns. On RETRY or FAIL, the handler may write a message into
 * errbuf (errlen bytes): it becomes the job's last_error. A handler must not
 * call into its sq_worker.
 */
typedef sq_job_result (*sq_handler)(const sq_job *job, void *arg, char *errbuf, size_t errlen);

/*
 * For a handler, about the job it was given: nonzero once this worker no
 * longer holds the job's lease, so the run should stop and return soon.
 * That is when a heartbeat or start was answered lost (another worker took
 * the job after its lease ran out, or it was cancelled), or when the lease
 * is about to run out with no heartbeat through (its shard unreachable, the
 * worker's loop held up): a quarter of the lease before its end, at most
 * 15 s. Another worker may run the job from the lease's
 * end, so a handler that runs long and ignores this may run beside it. The
 * result of such a run is discarded, whatever it is. Once nonzero, it stays
 * so. Cheap (an atomic load and a clock read); only for the job passed to
 * a handler, while the handler runs. Returns -1 (nonzero: the run stops)
 * when given NULL or any other job (one of sq_claim or sq_get_job, a copy
 * of one): a program error, with no lease to answer for; nothing is
 * printed.
 */
int sq_job_lease_lost(const sq_job *job);

#define SQ_WORKER_MAX_TYPES 32

typedef struct sq_worker_type_stats {
	char type[SQ_MAX_TYPE_LEN + 1];
	int concurrency;
	int running;       /* jobs in `running` now */
	int buffered;      /* jobs held in `starting`, waiting for a slot */
	int prefetch;      /* predicted: jobs to hold beyond free slots */
	double exec_ms;    /* observed execution time (moving average) */
	uint64_t done;     /* completed */
	uint64_t retried;  /* failed, to be retried */
	uint64_t failed;   /* failed for good */
	uint64_t lost;     /* a fenced write found the job no longer ours */
	uint64_t released; /* handed back unstarted (shutdown) */
} sq_worker_type_stats;

typedef struct sq_worker_stats {
	int ntypes;
	sq_worker_type_stats types[SQ_WORKER_MAX_TYPES];
	int capacity;           /* most jobs held at once: slots + buffer */
	int running, buffered;  /* totals */
	uint64_t claims;        /* claim calls made */
	double claim_rtt_ms;    /* claim round trip (moving average) */
	double slot_idle_ratio; /* share of slot time idle while work was
	                           available (the last claim or buffer had jobs) */
	double busy_seconds;    /* the slot time that ratio is measured over */
	uint64_t db_errors;     /* ticks whose database work failed (retried) */
	char last_error[256];   /* the last such error, or "" */
} sq_worker_stats;

typedef struct sq_worker sq_worker;

/* What one round of the worker's loop did: one pipeline to one shard (each
 * shard's rounds go on on their own; see docs/worker.md). For
 * instrumentation. */
typedef struct sq_worker_tick {
	int64_t send_us, recv_us; /* the round trip, on CLOCK_MONOTONIC */
	int claimed;              /* jobs the claim took; -1: no claim this tick */
	int started;              /* jobs that turned running (claimed straight to
	                             running included) */
	int completed;            /* completions the shards took */
	int failed;               /* failures the shards took */
	int lost;                 /* writes that found the job no longer ours */
	int shard;                /* the shard's index in the config */
} sq_worker_tick;

typedef struct sq_worker_opts {
	const char *worker_id; /* NULL: "<hostname>-<pid>" */
	int buffer;            /* most jobs held in starting; -1: the total
	                          concurrency, at least 1024 */
	int min_prefetch;      /* jobs to hold per type beyond free slots at least (0) */
	int64_t poll_min_ms;   /* first poll interval of an empty queue (default 20) */
	int64_t poll_max_ms;   /* the backoff stops here (default 1000) */
	int listen;            /* wake on LISTEN/NOTIFY from enqueues */
	int64_t grace_ms;      /* shutdown: how long running jobs may finish (30000) */
	int handle_signals;    /* SIGTERM/SIGINT stop gracefully; a second, at once */
	int64_t report_ms;     /* > 0: call report() this often */
	void (*report)(const sq_worker_stats *st, void *arg);
	void *report_arg;
	/* Called on the loop thread after every round that did database work. */
	void (*on_tick)(const sq_worker_tick *t, void *arg);
	void *tick_arg;
	/* Not NULL: a watch on the meta database (a thread and a connection of
	 * its own, asking it every [connection] map_poll) calls this with a line
	 * when it stops answering, with why, and when it answers again, with how
	 * long it was away; the same lines as shardqd logs. Claims, starts and
	 * completions go on meanwhile from the cached map. */
	void (*meta_log)(const char *line, void *arg);
	void *meta_log_arg;
} sq_worker_opts;

/* Fills opts with the defaults above. */
void sq_worker_opts_init(sq_worker_opts *opts);

/*
 * Creates a worker: it connects to every shard (and, with opts->listen, one
 * LISTEN connection per shard), and starts the thread that runs
 * sq_maintain every [cluster] maintain_interval (0: none). cfg must outlive
 * it. Free with
 * sq_worker_destroy().
 */
SQ_MUST_CHECK sq_status sq_worker_create(const sq_config *cfg, const sq_worker_opts *opts,
					 sq_worker **out, sq_error *err);
/*
 * Registers the handler of a type with its concurrency (1..1024): fn runs
 * each job of the type with arg. Call it before sq_worker_run, on the
 * thread that runs the worker. Fails, with nothing registered, with:
 *  - SQ_EINVAL: type NULL or not a [type] of the worker's config, fn NULL,
 *    concurrency outside 1..1024, the type already has a handler, or the
 *    worker has SQ_WORKER_MAX_TYPES types already;
 *  - SQ_ESTATE: the worker has run already (its pool is sized);
 *  - SQ_ENOMEM.
 */
SQ_MUST_CHECK sq_status sq_worker_add(sq_worker *w, const char *type, int concurrency,
				      sq_handler fn, void *arg, sq_error *err);
/*
 * Runs until stopped: one thread (the caller's) does all database work,
 * handlers run on a pool of threads. That thread also runs the config's
 * [schedule NAME] sections (sq_schedules_run every [scheduler] interval,
 * unless [scheduler] enabled = false). Returns SQ_OK after a graceful stop
 * (buffered jobs released, running jobs finished). Returns SQ_ESTATE when
 * stopped at once (a second signal, or sq_worker_stop(w, 1)) or when the
 * grace period ran out with jobs still running: their leases bring them
 * back; the process should exit rather than destroy the worker.
 */
SQ_MUST_CHECK sq_status sq_worker_run(sq_worker *w, sq_error *err);
/* Asks a running worker to stop: gracefully, or at once. Async-signal-safe
 * and thread-safe. */
void sq_worker_stop(sq_worker *w, int at_once);
/* A snapshot of the worker's figures; thread-safe. */
void sq_worker_get_stats(sq_worker *w, sq_worker_stats *out);
/* The worker id used in the job rows. */
const char *sq_worker_id(const sq_worker *w);
/* Waits for the pool threads and frees everything. */
void sq_worker_destroy(sq_worker *w);

/* ---- partition moves ---------------------------------------------------- */

/*
 * A move carries a set of partitions from one shard to another, online:
 * prepare (destination marks them importing, then takes a copy of their
 * rows while nothing is frozen), freeze (source marks them moving_out
 * under the exclusive gate), drain, copy and take ownership (one
 * destination transaction that catches up with what was written since the
 * pre-copy: the point of no return), switch (the meta map,
 * new version, NOTIFY), clean up (source marks them gone, deletes, vacuums).
 * Every step is recorded in shardq_meta.moves and is idempotent: running a
 * move again resumes it where it stopped.
 */
typedef struct sq_move_info {
	int64_t move_id;
	char from[64], to[64];
	int32_t npartitions;
	char step[16];     /* planned, prepared, frozen, drained, copied,
	                       switched, done, aborted */
	int64_t rows;      /* rows copied (-1: not yet) */
	double stall_ms;   /* how long the freeze held writes on the source */
	double elapsed_ms; /* from start to finish (or to now) */
	char error[256];   /* the last error recorded, or "" */
} sq_move_info;

typedef void (*sq_move_progress)(const sq_move_info *m, int set, int nsets, void *arg);

typedef struct sq_move_opts {
	int64_t lock_timeout_ms; /* the freeze waits at most this for the gate (2000) */
	int freeze_tries;        /* and tries this many times (5) */
	int delete_batch;        /* cleanup deletes this many rows per batch (10000) */
	int set_size;            /* rebalance: partitions per move (256) */
	int64_t pause_ms;        /* rebalance: pause between sets (0) */
	sq_move_progress progress;
	void *progress_arg;
	/* A step whose round trip to the meta database fails because it
	 * cannot be reached (connection refused or lost, no answer) keeps the
	 * move where it is and tries again every second for this long, then
	 * goes on by itself (300000, 5 min; 0: stops at once, as before).
	 * Past it, the move stops at its step, to be resumed. */
	int64_t meta_wait_ms;
	/* Called with a line when such a wait begins and when it ends (the
	 * meta database answering again, or the wait given up); arg is
	 * progress_arg. NULL: none. */
	void (*meta_note)(const char *line, void *arg);
	/* While waiting so, SIGTERM and SIGINT stop the mover with the move at
	 * its step (its handlers are put back after the wait; elsewhere the
	 * signals act as before). */
	int handle_signals;
} sq_move_opts;

/* Fills *o with the defaults in the comments above (no progress
 * callback). o must not be NULL. sq_move, sq_move_resume and sq_rebalance
 * take a NULL options pointer for these same defaults. Thread-safe: it
 * writes *o only. */
void sq_move_opts_init(sq_move_opts *o);

/* Moves the partitions to shard `to` (all must be on one source shard now);
 * returns the move's id and its figures in *info (may be NULL). */
SQ_MUST_CHECK sq_status sq_move(sq_client *c, const uint32_t *parts, size_t n, const char *to,
				const sq_move_opts *o, sq_move_info *info, sq_error *err);
/* Checks, and changes nothing, what sq_move checks before it starts: the
 * shard and the partitions, that they are on one shard and not on `to`,
 * that no unfinished move holds any of them, that the meta database and
 * both shards answer, and that the destination owns none of them. */
SQ_MUST_CHECK sq_status sq_move_check(sq_client *c, const uint32_t *parts, size_t n, const char *to,
				      sq_error *err);
/* Runs an unfinished move from where it stopped. */
SQ_MUST_CHECK sq_status sq_move_resume(sq_client *c, int64_t move_id, const sq_move_opts *o,
				       sq_move_info *info, sq_error *err);
/* Undoes a move that has not passed the copy commit; SQ_ESTATE after it. */
SQ_MUST_CHECK sq_status sq_move_abort(sq_client *c, int64_t move_id, sq_error *err);
/* Lists moves (unfinished only, unless all); free *out with free(). */
SQ_MUST_CHECK sq_status sq_moves_list(sq_client *c, int all, sq_move_info **out, size_t *n,
				      sq_error *err);

/* The plan of a rebalance: per partition, the shard it is on and the one
 * weighted rendezvous hashing over the configured shards (and weights) puts
 * it on. Free with sq_plan_free(). */
typedef struct sq_plan {
	uint32_t partitions;
	int nshards;
	int *from;       /* per partition: shard index now */
	int *to;         /* per partition: shard index planned */
	int64_t *before; /* per shard: partitions now */
	int64_t *after;  /* per shard: partitions planned */
	int64_t moving;  /* partitions whose shard changes */
} sq_plan;

SQ_MUST_CHECK sq_status sq_rebalance_plan(sq_client *c, sq_plan **out, sq_error *err);
void sq_plan_free(sq_plan *p);
/* Resumes unfinished moves, then carries out the plan in sets of
 * o->set_size partitions per (source, destination) pair, calling
 * o->progress after each step. */
SQ_MUST_CHECK sq_status sq_rebalance(sq_client *c, const sq_move_opts *o, sq_error *err);

/* ---- consistency check (`shardq check`) ---------------------------------- */

/*
 * sq_check reads the meta database and every shard and checks the
 * cluster's own invariants (docs/operations.md, "Checking the cluster"):
 *   "reach"      every shard answers;
 *   "identity"   each shard is the one the config names, of this cluster,
 *                with the cluster's partition count;
 *   "schema"     the meta database and every shard are at this build's
 *                schema version;
 *   "ownership"  every partition is owned by exactly one shard, unless an
 *                unfinished move explains it;
 *   "map"        the map names that shard;
 *   "markers"    no partition is importing, moving out or gone but for an
 *                unfinished move, and no move lock outlives its move;
 *   "stray"      no job sits in a partition its shard does not own;
 *   "keys"       no two live jobs share a (type, key) across shards;
 *   "ids"        the meta id sequence is past every job id on the shards.
 * With o->repair it also makes the repairs that are provably safe, and
 * only those: the map made to name the sole owner; a freeze that no open
 * move explains undone where no other shard owns the partition; a marker
 * (and its rows) that a finished move left on its source, or an aborted
 * one on its destination, forgotten; stale move locks dropped; stray jobs
 * deleted where their owner holds the same id; the id sequence raised.
 * Each finding is passed to o->report as it is made; findings about many
 * partitions come one per partition. Jobs tables are read by index only.
 * Returns SQ_OK when the check ran (findings or not; *out counts them),
 * an error when it could not (the meta database does not answer).
 */
typedef struct sq_check_finding {
	const char *check; /* "reach", "identity", ..., as above */
	const char *shard; /* the shard concerned, or "" */
	int64_t partition; /* the partition concerned, or -1 */
	char what[512];    /* what is wrong */
	char todo[512];    /* what to do about it */
	int repaired;      /* o->repair made it good */
} sq_check_finding;

typedef void (*sq_check_report)(const sq_check_finding *f, void *arg);
/* Called as each step goes: its name, and done of total units. */
typedef void (*sq_check_progress)(const char *step, int64_t done, int64_t total, void *arg);

typedef struct sq_check_opts {
	int repair;          /* make the provably safe repairs (0) */
	int64_t stray_limit; /* stray jobs read per shard, at most (100000) */
	sq_check_report report;
	sq_check_progress progress;
	void *arg; /* passed to both callbacks */
} sq_check_opts;

typedef struct sq_check_summary {
	int64_t findings; /* every finding reported */
	int64_t repaired; /* of which repaired */
	int64_t partitions_checked;
	int64_t stray_jobs; /* jobs found in partitions their shard does not own */
} sq_check_summary;

/* Fills *o with the defaults above. Thread-safe: it writes *o only. */
void sq_check_opts_init(sq_check_opts *o);
/* c: a client opened with SQ_OPEN_FOR_INIT | SQ_OPEN_ALLOW_DOWN, so that
 * a shard at another schema version, or down, is a finding and not a
 * failure to open. o may be NULL (the defaults: no report, no repair). */
SQ_MUST_CHECK sq_status sq_check(sq_client *c, const sq_check_opts *o, sq_check_summary *out,
				 sq_error *err);

/* ---- history retention -------------------------------------------------- */

/*
 * shardq.jobs_history is partitioned by expires_at (finished_at + the
 * type's history_retention, rounded up to whole days), one partition per
 * UTC day, plus a DEFAULT partition for rows whose day has no partition.
 * sq_maintain does, on each shard in turn, on a connection of its own:
 *
 *   1. pg_try_advisory_lock (session level): when another runner holds it,
 *      the shard is reported `skipped` and left alone (not an error);
 *   2. with lock_timeout = o->lock_timeout_ms (never queued behind a long
 *      transaction: on a timeout the shard's pass stops with the error, and
 *      the next pass tries again), drops every partition whose upper bound
 *      is at or before now (a row is therefore kept at least its retention
 *      and less than its retention plus one day, plus the time until the
 *      next pass);
 *   3. creates the partitions of the days from today through today + the
 *      longest history_retention of the types with history + o->ahead_days
 *      that no partition covers, moving into each the DEFAULT partition's
 *      rows of its day;
 *   4. deletes the DEFAULT partition's rows that expired (batches of
 *      o->default_delete_batch) and counts what is left there (exact up to
 *      o->default_count_cap; a non-zero count means passes were missed).
 *
 * Each DDL statement is its own transaction: what a pass did stays done.
 * Returns SQ_OK when every shard was done or skipped; else the status of
 * the first shard that failed with err naming it, after trying every shard.
 * *out is filled in both cases; free it with sq_maintain_report_free().
 * Thread-safe as far as `c` is (one call per client at a time).
 */
typedef struct sq_maintain_opts {
	int64_t now_us;               /* the time to act at, µs since the epoch; 0: now (tests
	                            and catching up use other values) */
	int64_t lock_timeout_ms;      /* the DDL waits at most this for its locks (1000) */
	int ahead_days;               /* days created past the longest retention (2) */
	int64_t default_delete_batch; /* rows per DELETE in the default partition (10000) */
	int64_t default_count_cap;    /* the default partition is counted up to this (100000) */
} sq_maintain_opts;

typedef struct sq_maintain_part {
	char name[64]; /* jobs_history_pYYYYMMDD */
	int64_t rows;  /* created: rows moved in from the default partition;
	                  dropped: PostgreSQL's estimate (pg_class.reltuples, -1: never
	                  analysed) */
} sq_maintain_part;

typedef struct sq_maintain_shard {
	char shard[64];
	int ran;          /* the whole pass was done */
	int skipped;      /* another runner held this shard's maintenance lock */
	sq_status status; /* SQ_OK, or why the pass stopped (error holds the text) */
	char error[512];
	sq_maintain_part *created;
	size_t ncreated;
	sq_maintain_part *dropped;
	size_t ndropped;
	int64_t default_moved;   /* rows moved out of the default partition */
	int64_t default_deleted; /* expired rows deleted from the default partition */
	int64_t default_rows;    /* rows left in the default partition */
	int default_rows_capped; /* ... at least that many */
	int64_t partitions;      /* day partitions after the pass */
} sq_maintain_shard;

typedef struct sq_maintain_report {
	int64_t now_us;         /* the time the pass acted at */
	int max_retention_days; /* the longest history_retention (days) */
	int nshards;
	sq_maintain_shard *shards; /* in config order */
} sq_maintain_report;

/* Fills *o with the defaults in the comments above (now_us 0: the clock).
 * o must not be NULL. Thread-safe: it writes *o only. */
void sq_maintain_opts_init(sq_maintain_opts *o);
/* o may be NULL (the defaults of sq_maintain_opts_init). */
SQ_MUST_CHECK sq_status sq_maintain(sq_client *c, const sq_maintain_opts *o,
				    sq_maintain_report *out, sq_error *err);
/* The same on a config alone: it needs no client and no meta database,
 * so a shard that is down is reported in its entry (status, error) while
 * every other shard is done; the status is the first shard's failure. */
SQ_MUST_CHECK sq_status sq_maintain_cfg(const sq_config *cfg, const sq_maintain_opts *o,
					sq_maintain_report *out, sq_error *err);
void sq_maintain_report_free(sq_maintain_report *r);
/* ---- periodic jobs ([schedule NAME], docs/operations.md) ---------------- */

/* A schedule with a timezone has its slots read off the system's tz
 * database through the C library: while the library computes them (in
 * sq_schedules_run, sq_schedules_list, and the scheduler of the worker
 * runtime and of shardqd) it sets TZ, under a lock of its own, and puts it
 * back. Another thread of the program that reads TZ or the local time at
 * that moment (getenv, localtime, mktime) may see the schedule's zone.
 * Schedules in UTC, and every = schedules, never touch TZ. */

typedef struct sq_schedule_pass {
	int enqueued; /* slots enqueued by this pass (retries included) */
	int retried;  /* claims of other schedulers taken over (their lease passed) */
	int skipped;  /* slots passed over (missed = skip, later than max_lateness) */
	int busy;     /* schedules whose slot another scheduler is enqueueing now */
	int errors;   /* schedules whose pass failed (the first error is returned) */
} sq_schedule_pass;

/*
 * One scheduler pass over the config's schedules: each schedule whose
 * latest slot (at or before now_us; 0: the clock) was not yet claimed is
 * claimed in the meta database (one scheduler wins a slot, however many
 * run) and enqueued with the slot's key. `who` names this scheduler in the
 * meta rows (NULL: "<hostname>-<pid>"). A schedule seen for the first time
 * starts with its next slot. Every schedule is tried even when one fails;
 * the first error is returned. *out (may be NULL) counts what was done.
 * The worker runtime and shardqd run this every [scheduler] interval.
 */
SQ_MUST_CHECK sq_status sq_schedules_run(sq_client *c, const char *who, int64_t now_us,
					 sq_schedule_pass *out, sq_error *err);

typedef struct sq_schedule_info {
	char name[65];
	char spec[256];    /* the cron expression, or "every Ns" */
	char timezone[64]; /* "UTC" for every = */
	char type[SQ_MAX_TYPE_LEN + 1];
	int missed_skip;          /* missed = skip */
	int known;                /* a scheduler has seen it (the fields below are set) */
	int64_t last_slot_us;     /* the latest slot claimed, skipped or the baseline */
	int pending;              /* that slot is claimed, its enqueue not yet confirmed */
	char claimed_by[128];     /* the scheduler of the latest claim */
	int64_t enqueued_slot_us; /* the latest slot enqueued (0: none) */
	int64_t job_id;           /* its job (0: none) */
	int64_t enqueues, retries, skipped;
	int64_t next_slot_us; /* the first slot after now_us (0: none within 10 years) */
} sq_schedule_info;

/* The config's schedules with their state in the meta database, in config
 * order; now_us (0: the clock) sets next_slot_us. Free *out with free(). */
SQ_MUST_CHECK sq_status sq_schedules_list(sq_client *c, int64_t now_us, sq_schedule_info **out,
					  size_t *n, sq_error *err);

/* ---- finding jobs -------------------------------------------------------- */

/* Which jobs sq_jobs_list finds: one type's, in one live status. */
typedef struct sq_job_filter {
	const char *type;   /* a [type] of the config (required) */
	const char *status; /* "ready" (NULL), "starting", "running", "failed",
	                       "cancelled" (shard schema 13) or "completed" (12) */
	const char *key;    /* NULL; else the live job of the type with this key */
	int shard;          /* a shard's index in the config; -1: every shard */
	/* status "completed" (the history, shard schema 12): finished after and
	 * at or before these (µs since the epoch; 0: no bound); status
	 * "failed": failed at or before finished_before_us */
	int64_t finished_after_us, finished_before_us;
	/* any status: created after and at or before these (µs since the
	 * epoch; 0: no bound) */
	int64_t created_after_us, created_before_us;
} sq_job_filter;

/*
 * A page of at most `limit` (1..10,000) jobs matching f, on every shard at
 * once, each status in its own order: ready jobs in claim order (priority,
 * then schedule plus tolerance, then id), starting and running ones by the
 * end of their lease, failed ones in the order they failed, completed ones
 * (the history of a type that keeps it) in the order they finished. after: NULL or
 * "" for the first page, else the `next` of the page before (a keyset
 * cursor: a page never skips or repeats a job that stays where it is,
 * whatever was claimed meanwhile). next (nextlen >= 64) gets the cursor of
 * the next page, or "" when this page is the last. Each shard reads its
 * status's index from the cursor on: no OFFSET, no scan. A creation window
 * is a filter on that order: each shard then reads at most 100,000 of the
 * type's jobs in the status a call (ready ones: in each of two priority
 * ranges), so a page may hold fewer than `limit` jobs, or none,
 * with a `next` to go on from (failed, cancelled and completed jobs start
 * at created_after_us, as none got there before it was created). Free
 * *out with sq_jobs_free. SQ_EINVAL for an unknown type or status, a bad
 * limit, window or cursor.
 */
SQ_MUST_CHECK sq_status sq_jobs_list(sq_client *c, const sq_job_filter *f, const char *after,
				     int limit, sq_job **out, size_t *n, char *next, size_t nextlen,
				     sq_error *err);

/* Cancels the jobs f finds (status ready, the default, starting or
 * running; not the ones enqueued after the call began), a page of `batch`
 * (1..1,000; 0: 1,000) at a time as sq_jobs_list reads them, each as
 * sq_cancel does (a running job's worker then gets lost); progress (NULL:
 * none) gets the total after each page, *cancelled (may be NULL) the
 * end's. */
SQ_MUST_CHECK sq_status sq_cancel_matching(sq_client *c, const sq_job_filter *f, int batch,
					   void (*progress)(int64_t cancelled, void *arg),
					   void *arg, int64_t *cancelled, sq_error *err);
/* Deletes the history rows of `type` that finished at or before before_us
 * (µs since the epoch), oldest first, on every shard, `batch` (1..100,000;
 * 0: 10,000) at a time; progress (NULL: none) gets the total after each
 * batch, *purged (may be NULL) the end's. By the history's type index
 * (shard schema 12). Retention drops whole days on its own
 * (sq_maintain); this is for a type's rows before that. */
SQ_MUST_CHECK sq_status sq_history_purge(sq_client *c, const char *type, int64_t before_us,
					 int batch, void (*progress)(int64_t purged, void *arg),
					 void *arg, int64_t *purged, sq_error *err);

/* ---- pausing a type ----------------------------------------------------- */

/*
 * Pauses (paused nonzero) or resumes a task type fleet-wide: the list is
 * in the meta database (meta schema 5), and every client's claims leave a
 * paused type out from its next map poll on, within [connection] map_poll
 * (1 s). Jobs of a paused type are still enqueued; the ones already
 * claimed run to their end. type must be a [type] of the config
 * (SQ_EINVAL); SQ_ESTATE when the meta schema is older than 5.
 * sq_type_paused says whether type is paused, as of c's last map poll,
 * or of the meta database now when that is map_poll old (the last answer
 * when it does not answer).
 */
SQ_MUST_CHECK sq_status sq_type_pause(sq_client *c, const char *type, int paused, sq_error *err);
int sq_type_paused(sq_client *c, const char *type);
/* For a loop that may sit idle between claims (shardqd's claimer): reads
 * what the meta database answered since (map changes, paused types), asks
 * again when map_poll has passed, and returns the seconds until it wants
 * to be called again. The worker runtime and the calls do this
 * themselves. */
double sq_client_tend(sq_client *c);

/* ---- introspection ------------------------------------------------------ */

/*
 * How many statements this client has sent to shard `shard` (config order)
 * since it opened, through the pipelines of the calls that batch per shard
 * (sq_enqueue, sq_claim, the life-cycle calls, sq_cancel, sq_get_job, and
 * the worker's ticks): one per statement, however many jobs it carries, and
 * whether or not it succeeded. The client's own upkeep (the schema check,
 * map reloads, a connection's setup) is not counted. A tool reads it before
 * and after a call to see which shards the call reached and how well it
 * batched (a keyless batch: one shard, one statement); 0 for a shard index
 * out of range. Reads the client: the same thread rules as its calls.
 */
uint64_t sq_client_statements_sent(const sq_client *c, int shard);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

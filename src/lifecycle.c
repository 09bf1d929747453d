/* lifecycle.c - fenced transitions after a claim (start, heartbeat,
 * complete, fail, release) and cancel. Each call is batched: one pipeline
 * per shard, all shards at once; a ref whose row no longer matches (id,
 * attempt, worker, status) is reported LOST and never written blindly. */
#include "buf.h"
#include "client.h"
#include "error.h"
#include "jobrow.h"
#include "failpoint.h"
#include "fenced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
/* A fenced write touches a row only while this shard owns its partition.
 * The check is in the writing statement, which runs after the gate
 * statement, so its snapshot is taken once the gate is held: a partition
 * owned then stays owned until the commit (a freeze needs the gate
 * exclusive). A ref of a partition that is moving or gone is left alone,
 * and the other refs of the batch are written; sq_not_owned says which.
 * It is a scalar subquery, not EXISTS: the planner may turn an EXISTS into
 * a join and start from partition_state. Without statistics on that table
 * (a fresh cluster, until autovacuum first analyzes it) it took "owned" for
 * 0.5% of the partitions, read every job of each through jobs_partition and
 * matched them against the refs: 3.2 s for a completion of 250 jobs on
 * 100,000, where probing jobs_pkey per ref takes milliseconds (bench/run
 * fleet, docs/benchmarks.md "The plan of a fresh cluster"). A subquery in
 * the comparison is evaluated per row found, one probe of the key of
 * partition_state. */
#define OWNED                                                               \
	"(SELECT ps.state FROM shardq.partition_state ps"                   \
	"  WHERE ps.partition = j.partition) = 'owned'"
/* The plan must look each id up in jobs_pkey, one probe per ref, whatever
 * the statistics say and whether it is planned for these values or once for
 * all (a generic plan, docs/benchmarks.md "Tried and not kept"). So every
 * fenced write first finds and locks its rows in `f`: per ref (x), a
 * LATERAL subquery with FOR UPDATE, which PostgreSQL neither flattens nor
 * reorders, so x drives and each ref is one probe of jobs_pkey by its id.
 * The write then takes the rows it found by `j.id = ANY (ARRAY(...))`,
 * which only jobs_pkey serves, and joins nothing (as the claim's update
 * does). Before, the write joined x itself, and with the statistics a
 * vacuum leaves on a churned table (many pages, a few live rows) the
 * planner read the whole of jobs_pkey and compared every row with every
 * ref: 1.9 million comparisons and 291 ms for a completion of 600 refs
 * with 3,200 jobs running (docs/benchmarks.md, "A completion planned after
 * a vacuum of a churned table").
 *
 * The lock is what a write would take anyway, and what makes the second
 * step safe: a row locked in `f` cannot change before the write, so the
 * write needs no fence of its own, and what `f` found is what is written
 * (its ords are the answer). A row changed by a transaction that committed
 * after this statement's snapshot is locked in its newest version, and the
 * fence is checked again on that version (as an UPDATE would).
 *
 * The status is compared as text: written as the enum, it matches the
 * predicate of the partial index jobs_lease, which the planner then may
 * scan whole (EXPLAIN of a 90-job completion with 2,090 running: 2.4 ms
 * against 1.8 ms). */
#define FENCE(st)                                                                    \
	"j.id = x.id AND j.attempt = x.att AND j.worker = $3 AND j.status::text " st \
	" AND " OWNED
#define REFS "x AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS x(id, att, ord))"
/* `f`: (ord, xcols..., id, cols...) of the refs whose row matches the
 * fence, locked */
#define FOUND_X(xcols, st, cols)                                                         \
	" f AS (SELECT x.ord" xcols ", m.* FROM x CROSS JOIN LATERAL (SELECT j.id" cols     \
	"          FROM shardq.jobs j WHERE " FENCE(st) " FOR UPDATE) m)"
#define FOUND(st, cols) FOUND_X("", st, cols)
#define FOUND_IDS(cond) "j.id = ANY (ARRAY(SELECT f.id FROM f" cond "))"
#define TYPE_IDX        "array_position($4::text[], j.task)"
/* the lease a start or heartbeat set, for sq_start_lease and
 * sq_heartbeat_lease (microseconds since the epoch) */
#define EXEC_LEASE                                                              \
	"now() + COALESCE(($5::bigint[])[" TYPE_IDX "], 300000) * interval '1 millisecond'"
#define LEASE_US "(extract(epoch FROM " EXEC_LEASE ") * 1000000)::bigint"

/* starting -> running. Running already (a start resent after its commit
 * went unanswered) is fine: same run, the lease is renewed. now() is the
 * transaction's, so the lease `f` answers is the one the update writes. */
#define START_SQL                                                                       \
	"WITH " REFS "," FOUND("IN ('starting', 'running')", ", " LEASE_US " AS lease") ","    \
	" u AS (UPDATE shardq.jobs j SET status = 'running', updated_at = now(),"          \
	"         expected_status_change_time = " EXEC_LEASE " WHERE " FOUND_IDS("") ")" \
	" SELECT f.ord, f.lease FROM f"
static const sq_stmt stmt_start = {"sq_start", START_SQL};

/* running -> running, the lease extended. A job still `starting` (a
 * worker that runs it without having sent its start) is started by it, as
 * a start would: the worker that holds it is running it, and answering
 * `lost` would make it drop a job that is still its own. */
static const sq_stmt stmt_heartbeat = {"sq_heartbeat", START_SQL};

/* A completion or failure takes a job that is running, or still starting:
 * a worker starts a buffered job on a free slot at once, under its starting
 * lease, and writes `running` in its next round; a job that finished before
 * that write is completed (or failed) straight from `starting`. The fence
 * (id, attempt, worker) is what makes the run this worker's. */

/* A completed job leaves the hot table (into history if its type keeps
 * it), unless a rerun is pending: then it is ready again with the rerun's
 * params and a fresh budget of attempts (the base moves up; the attempt,
 * which fences every write of a run, never goes down). $4: the types that
 * keep history, $5: their history_retention in whole days (expires_at picks
 * the history partition, docs/operations.md), $6: seconds added to now() for
 * finished_at and expires_at (0; a test clock only in failpoint builds). */
/* The refs, the rerun arm and the delete (returning `ret`, or nothing),
 * shared by the completion with history and the one without. */
#define COMPLETE_HEAD(ret)                                                                  \
	"WITH " REFS "," FOUND("IN ('starting', 'running')",                                  \
			       ", j.rerun_params IS NOT NULL AS rerun") ","                     \
	" rr AS (UPDATE shardq.jobs j SET status = 'ready', params = j.rerun_params,"           \
	"          rerun_params = NULL, attempt_base = j.attempt, worker = NULL,"               \
	"          expected_status_change_time = NULL, schedule_time = now(),"                  \
	"          delay_tolerance_time = now() + (j.delay_tolerance_time - j.schedule_time),"     \
	"          updated_at = now()"                                                          \
	"          WHERE " FOUND_IDS(" WHERE f.rerun") "),"                                     \
	" del AS (DELETE FROM shardq.jobs j WHERE " FOUND_IDS(" WHERE NOT f.rerun") ret ")"
static const sq_stmt stmt_complete = {
	"sq_complete",
	COMPLETE_HEAD(" RETURNING j.*")
	", hist AS (INSERT INTO shardq.jobs_history (id, partition, task, status, attempt, worker,"
	"            active_uid, params, last_error, created_at, finished_at, expires_at)"
	"          SELECT id, partition, task, 'completed', attempt - attempt_base, worker,"
	"                 active_uid, params, last_error, created_at,"
	"                 now() + $6::float8 * interval '1 second',"
	"                 now() + $6::float8 * interval '1 second' + interval '1 day' *"
	"                   COALESCE(($5::int[])[array_position($4::text[], task)], 7)"
	"            FROM del WHERE task = ANY($4::text[]))"
	" SELECT f.ord FROM f"};

/* The same without history, for a client none of whose types keeps it:
 * the deleted rows need not come back for an insert that takes none of
 * them (returning them cost a session about 1 us a row, a third of the
 * statement; docs/benchmarks.md, "A completion that does not return its
 * rows"). */
static const sq_stmt stmt_complete_plain = {"sq_complete_plain",
					    COMPLETE_HEAD("") " SELECT f.ord FROM f"};

/* Retry with the type's backoff while tries remain, else failed. A pending
 * rerun outlives a final failure: the job is ready again with it and a
 * fresh budget. $4..$8: per-type backoff kind, base, cap and jitter. The
 * update joins `f` for each row's error and permanence: a join of the
 * found rows only, at worst quadratic in the refs of one call (failures
 * come in small batches), never in the table. */
#define TRIES "(j.attempt - j.attempt_base)"
#define FINAL "(f.perm OR " TRIES " >= j.max_attempts)"
#define TI    "array_position($4::text[], j.task)"
static const sq_stmt stmt_fail = {
	"sq_fail",
	"WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[], $9::text[], $10::bool[])"
	"           WITH ORDINALITY AS x(id, att, err, perm, ord)),"
	FOUND_X(", x.err, x.perm", "IN ('starting', 'running')", "") ","
	" u AS (UPDATE shardq.jobs j SET"
	"  status = (CASE WHEN " FINAL " AND j.rerun_params IS NULL THEN 'failed'"
	"                 ELSE 'ready' END)::shardq.job_status,"
	"  params = CASE WHEN " FINAL " AND j.rerun_params IS NOT NULL THEN j.rerun_params"
	"                ELSE j.params END,"
	"  rerun_params = CASE WHEN " FINAL " THEN NULL ELSE j.rerun_params END,"
	"  attempt_base = CASE WHEN " FINAL " AND j.rerun_params IS NOT NULL THEN j.attempt"
	"                      ELSE j.attempt_base END,"
	"  schedule_time = CASE WHEN " FINAL " THEN now() ELSE now() + interval '1 millisecond' *"
	"    (LEAST(COALESCE(($7::bigint[])[" TI "], 3600000),"
	"      CASE COALESCE(($5::int[])[" TI "], 2)"
	"        WHEN 0 THEN COALESCE(($6::bigint[])[" TI "], 1000)::float8"
	"        WHEN 1 THEN COALESCE(($6::bigint[])[" TI "], 1000)::float8 * " TRIES
	"        ELSE COALESCE(($6::bigint[])[" TI "], 1000)::float8"
	"             * power(2, LEAST(GREATEST(" TRIES " - 1, 0), 60)) END)"
	"     * (1 + COALESCE(($8::float8[])[" TI "], 0) * (2 * random() - 1))) END,"
	"  delay_tolerance_time = NULL,"
	"  worker = CASE WHEN " FINAL " AND j.rerun_params IS NULL THEN j.worker END,"
	"  expected_status_change_time = NULL,"
	"  last_error = f.err, updated_at = now()"
	"  FROM f WHERE " FOUND_IDS("") " AND j.id = f.id)"
	" SELECT f.ord FROM f"};

/* starting -> ready, and the try does not count: the base moves up. */
#define RELEASE_SQL(st)                                                                 \
	"WITH " REFS "," FOUND(st, "") ","                                                 \
	" u AS (UPDATE shardq.jobs j SET status = 'ready', attempt_base = j.attempt_base + 1," \
	"         worker = NULL, expected_status_change_time = NULL, updated_at = now()"       \
	"         WHERE " FOUND_IDS("") ")"                                                 \
	" SELECT f.ord FROM f"
static const sq_stmt stmt_release = {"sq_release", RELEASE_SQL("= 'starting'")};

/* The same for a claim whose answer never reached a handler, also when it
 * was claimed straight to `running` (sq_unclaim). */
static const sq_stmt stmt_unclaim = {"sq_unclaim", RELEASE_SQL("IN ('starting', 'running')")};
/* clang-format on */

/* The partitions of a batch that this shard does not own (moving, gone, or
 * unknown here), in the same transaction as the write, after the gate. */
static const sq_stmt stmt_not_owned = {
	"sq_not_owned", "SELECT p, coalesce(ps.state::text, 'missing') FROM unnest($1::int[]) AS p"
			"  LEFT JOIN shardq.partition_state ps ON ps.partition = p"
			" WHERE ps.state IS DISTINCT FROM 'owned'"};

static const sq_stmt stmt_cancel = {
	"sq_cancel",
	"UPDATE shardq.jobs j SET status = 'cancelled', expected_status_change_time = NULL,"
	"       rerun_params = NULL, updated_at = now()"
	" WHERE j.id = ANY($1::bigint[]) AND j.status IN ('ready', 'starting', 'running')"
	" RETURNING j.id"};

static const sq_stmt stmt_cancel_key = {
	"sq_cancel_key",
	"UPDATE shardq.jobs j SET status = 'cancelled', expected_status_change_time = NULL,"
	"       rerun_params = NULL, updated_at = now()"
	" WHERE j.task = $1 AND j.active_uid = $2 AND j.status IN ('ready', 'starting', 'running')"
	" RETURNING j.id"};

static const sq_stmt stmt_get = {"sq_get",
				 "SELECT " SQ_JOB_COLUMNS " FROM shardq.jobs j WHERE j.id = $1"};

static const sq_stmt stmt_get_history = {
	"sq_get_history",
	"SELECT j.id, j.attempt, j.attempt, j.attempt, 0, j.status::text, j.task, j.active_uid, "
	"j.params::text,"
	"       j.worker, NULL, NULL, NULL, (extract(epoch from j.created_at) * 1000000)::bigint"
	"  FROM shardq.jobs_history j WHERE j.id = $1 ORDER BY j.finished_at DESC LIMIT 1"};

/* What a fenced call sends to each shard. */
typedef struct op {
	const sq_stmt *stmt;
	int nparams;          /* total parameters of stmt */
	const char *fixed[8]; /* $3.. that are the same for every shard */
	int nfixed;
	const sq_fail_req *fail; /* sq_fail only: per-row error and permanence */
} op;

typedef struct shard_rows {
	sq_buf ids, atts, errs, perms, parts;
	unsigned char *seen_part;
	const char *vals[12];
	const char *parts_val[1];
	size_t *idx;
	uint32_t *part; /* partition of each row */
	size_t n;
	int base;  /* index of this op's first statement in the shard's pipeline */
	int write; /* and of its write */
} shard_rows;

static void add_row(sq_client *c, shard_rows *r, const op *o, const sq_job_ref *ref, size_t i)
{
	uint32_t part = sq_partition_of_id(ref->id) & (c->partitions - 1);
	if (!r->n) {
		sq_arr_open(&r->ids);
		sq_arr_open(&r->atts);
		sq_arr_open(&r->errs);
		sq_arr_open(&r->perms);
		sq_arr_open(&r->parts);
		r->seen_part = calloc(c->partitions / 8 + 1, 1);
	}
	r->part[r->n] = part;
	r->idx[r->n++] = i;
	sq_arr_i64(&r->ids, ref->id);
	sq_arr_i64(&r->atts, ref->attempt);
	/* without the bitmap (no memory) a partition may repeat: harmless */
	if (!r->seen_part || !(r->seen_part[part / 8] & (1u << (part % 8)))) {
		if (r->seen_part)
			r->seen_part[part / 8] |= (unsigned char)(1u << (part % 8));
		sq_arr_i64(&r->parts, part);
	}
	if (o->fail) {
		const sq_fail_req *f = &o->fail[i];
		char clean[SQ_MAX_ERROR_LEN + 1];
		const char *e = f->error;
		if (e) {
			/* valid UTF-8 without NUL, cut on a character boundary: the
			 * shard would refuse the whole statement otherwise */
			sq_utf8_clean(clean, sizeof(clean), e, strlen(e));
			e = clean;
		}
		sq_arr_str(&r->errs, e);
		sq_arr_str(&r->perms, f->permanent ? "t" : "f");
	}
}

static void rows_free(shard_rows *r)
{
	sq_buf_free(&r->ids);
	sq_buf_free(&r->atts);
	sq_buf_free(&r->errs);
	sq_buf_free(&r->perms);
	sq_buf_free(&r->parts);
	free(r->seen_part);
	free(r->idx);
	free(r->part);
}

/* The push half of a fenced call: queues, on each shard that has refs whose
 * out[] is `want`, the gate, the ownership check and the statement, as one
 * transaction of their own (a Sync after them). */
static shard_rows *fenced_push(sq_client *c, const op *o, const char *worker,
			       const sq_job_ref *refs, size_t n, const sq_status *out,
			       sq_status want)
{
	shard_rows *rows = calloc((size_t)c->nshards, sizeof(*rows));
	if (!rows)
		return NULL;
	for (int s = 0; s < c->nshards; s++) {
		rows[s].idx = malloc(sizeof(size_t) * (n ? n : 1));
		rows[s].part = malloc(sizeof(uint32_t) * (n ? n : 1));
		rows[s].base = -1;
		if (!rows[s].idx || !rows[s].part) {
			for (int k = 0; k <= s; k++)
				rows_free(&rows[k]);
			free(rows);
			return NULL;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (out[i] != want)
			continue;
		add_row(c, &rows[sq_shard_of_id(c, refs[i].id)], o, &refs[i], i);
	}
	for (int s = 0; s < c->nshards; s++) {
		shard_rows *r = &rows[s];
		if (!r->n)
			continue;
		sq_arr_close(&r->ids);
		sq_arr_close(&r->atts);
		sq_arr_close(&r->errs);
		sq_arr_close(&r->perms);
		sq_arr_close(&r->parts);
		r->parts_val[0] = r->parts.data;
		r->vals[0] = r->ids.data;
		r->vals[1] = r->atts.data;
		r->vals[2] = worker;
		for (int k = 0; k < o->nfixed; k++)
			r->vals[3 + k] = o->fixed[k];
		if (o->fail) {
			r->vals[8] = r->errs.data;
			r->vals[9] = r->perms.data;
		}
		/* the ownership report is a probe of partition_state's key per
		 * partition whatever the batch: planned once per session. Left
		 * to the write's mode, a batch of more than SQ_GENERIC_PLAN_ROWS
		 * planned it again on most calls, 0.1 ms a plan, four times what
		 * the report itself took (docs/benchmarks.md, "Issue 10's
		 * targets in a quick state of the machine") */
		sq_client_push_plans(c, s, 1);
		r->base = c->shards[s].qn;
		sq_client_push_gate(c, s);
		sq_pgconn_push(&c->shards[s], &stmt_not_owned, 1, r->parts_val);
		sq_client_push_plans(c, s, r->n <= SQ_GENERIC_PLAN_ROWS);
		r->write = c->shards[s].qn;
		sq_pgconn_push(&c->shards[s], o->stmt, o->nparams, r->vals);
		if (!c->merge_txn)
			sq_pgconn_push_sync(&c->shards[s]);
	}
	return rows;
}

/* The collect half: out[i] = SQ_OK for rows returned; SQ_EMOVING or
 * SQ_EMOVED for the others whose partition the shard does not own (moving
 * out or in; gone or unknown); `missing` for the rest; the shard's error for
 * a shard whose transaction failed. Returns the first database error, or
 * SQ_OK.
 *
 * Why a returned row wins over the report: the report's snapshot is older
 * than the write's. A partition owned at the report is still owned at the
 * write (only a freeze, which needs the gate exclusive, ends ownership), so
 * a ref not returned there is truly missing. A partition not owned at the
 * report may have become owned by the write (a move's copy committed): the
 * write then did what it did, and a ref it did not return is answered
 * "moving" and simply sent again. */
static sq_status fenced_collect(sq_client *c, shard_rows *rows, sq_status *out, sq_status missing,
				int64_t *lease, sq_error *err)
{
	sq_status worst = SQ_OK;
	for (int s = 0; s < c->nshards; s++) {
		shard_rows *r = &rows[s];
		sq_error e;
		if (!r->n)
			continue;
		sq_status se = sq_pgconn_range_error(&c->shards[s], r->base, r->write + 1, &e);
		if (se != SQ_OK) {
			for (size_t k = 0; k < r->n; k++)
				out[r->idx[k]] = se;
			if (se != SQ_EMOVED && se != SQ_EMOVING && worst == SQ_OK) {
				worst = se;
				if (err)
					*err = e;
			}
			continue;
		}
		PGresult *rep = c->shards[s].res[r->base + 1];
		PGresult *res = c->shards[s].res[r->write];
		for (size_t k = 0; k < r->n; k++)
			out[r->idx[k]] = missing;
		/* the report is short (the batch's partitions that are not owned,
		 * normally none) */
		for (int row = 0; row < PQntuples(rep); row++) {
			uint32_t p = (uint32_t)atol(PQgetvalue(rep, row, 0));
			const char *st = PQgetvalue(rep, row, 1);
			sq_status why = !strcmp(st, "moving_out") || !strcmp(st, "importing")
						? SQ_EMOVING
						: SQ_EMOVED;
			for (size_t k = 0; k < r->n; k++)
				if (r->part[k] == p)
					out[r->idx[k]] = why;
		}
		/* each returned row is the ordinal of a ref in this shard's arrays */
		for (int row = 0; row < PQntuples(res); row++) {
			long ord = atol(PQgetvalue(res, row, 0));
			if (ord < 1 || (size_t)ord > r->n)
				continue;
			out[r->idx[ord - 1]] = SQ_OK;
			/* a start or a heartbeat also returns the lease it set */
			if (lease && PQnfields(res) > 1)
				lease[r->idx[ord - 1]] = atoll(PQgetvalue(res, row, 1));
		}
	}
	return worst;
}

static void fenced_free(sq_client *c, shard_rows *rows)
{
	for (int s = 0; rows && s < c->nshards; s++)
		rows_free(&rows[s]);
	free(rows);
}

/* Runs `o` for the refs whose out[] is `want` (all, or the ones to retry).
 * Sets out[i] to SQ_OK for rows returned and `missing` for the others. */
static sq_status fenced_pass(sq_client *c, const op *o, const char *worker, const sq_job_ref *refs,
			     size_t n, sq_status *out, sq_status want, sq_status missing,
			     int64_t *lease, sq_error *err)
{
	sq_status st;
	sq_client_reset(c);
	shard_rows *rows = fenced_push(c, o, worker, refs, n, out, want);
	if (!rows)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	/* the shards that answered count even if one did not */
	st = sq_client_send(c, err);
	sq_status worst = fenced_collect(c, rows, out, missing, lease, st == SQ_OK ? err : NULL);
	if (st == SQ_OK)
		st = worst;
	fenced_free(c, rows);
	sq_client_reset(c);
	return st;
}

/* Refs answered "moving" or "moved" are sent again once the map says where
 * their partition is now; a job whose partition moved while it ran keeps
 * its attempt and worker on the new shard, so the write succeeds there. */
static sq_status redo_moved(sq_client *c, const op *o, const char *worker, const sq_job_ref *refs,
			    size_t n, sq_status *out, sq_status missing, int64_t *lease,
			    sq_error *err)
{
	int tries = 0;
	double deadline = 0;
	for (;;) {
		int moving = 0, moved = 0;
		for (size_t i = 0; i < n; i++) {
			moving |= out[i] == SQ_EMOVING;
			moved |= out[i] == SQ_EMOVED;
			if (out[i] == SQ_EMOVED)
				out[i] = SQ_EMOVING; /* one marker for "send again" */
		}
		if (!moving && !moved)
			return SQ_OK;
		sq_status st = sq_client_wait_moved(c, moved, &tries, &deadline, err);
		if (st != SQ_OK)
			return st;
		st = fenced_pass(c, o, worker, refs, n, out, SQ_EMOVING, missing, lease, err);
		if (st != SQ_OK)
			return st;
	}
}

static sq_status fenced(sq_client *c, const op *o, const char *worker, const sq_job_ref *refs,
			size_t n, sq_status *out, int second_look, int64_t *lease, sq_error *err)
{
	sq_status st;
	sq_status missing = second_look ? SQ_ENOTFOUND : SQ_ELOST;
	if (!worker || !*worker)
		return sq_err(err, SQ_EINVAL, "a worker id is required");
	if (!sq_utf8_valid(worker))
		return sq_err(err, SQ_EINVAL, "the worker id is not valid UTF-8");
	for (size_t i = 0; i < n; i++) {
		if (refs[i].id <= 0)
			return sq_err(err, SQ_EINVAL, "ref %zu: job id %lld is not valid", i + 1,
				      (long long)refs[i].id);
		out[i] = SQ_EINVAL; /* "to do" marker for the first pass */
		if (lease)
			lease[i] = 0;
	}
	if (n == 0)
		return SQ_OK;
	sq_client_check_map(c);
	st = fenced_pass(c, o, worker, refs, n, out, SQ_EINVAL, missing, lease, err);
	if (st == SQ_OK)
		st = redo_moved(c, o, worker, refs, n, out, missing, lease, err);
	if (st == SQ_OK && second_look) {
		int again = 0;
		for (size_t i = 0; i < n; i++)
			again |= out[i] == SQ_ENOTFOUND;
		/* a rerun committed after the first statement's snapshot: look again
		 * with a fresh one; what still does not match is lost */
		if (again)
			st = fenced_pass(c, o, worker, refs, n, out, SQ_ENOTFOUND, SQ_ELOST, lease,
					 err);
		if (st == SQ_OK)
			st = redo_moved(c, o, worker, refs, n, out, SQ_ELOST, lease, err);
	}
	return st;
}

sq_status sq_start_lease(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			 sq_status *out, int64_t *lease_until_us, sq_error *err)
{
	op o = {&stmt_start, 5, {c->ta.names, c->ta.exec_ms}, 2, NULL};
	return fenced(c, &o, worker, refs, n, out, 0, lease_until_us, err);
}

sq_status sq_start(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
		   sq_status *out, sq_error *err)
{
	return sq_start_lease(c, worker, refs, n, out, NULL, err);
}

sq_status sq_heartbeat_lease(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			     sq_status *out, int64_t *lease_until_us, sq_error *err)
{
	op o = {&stmt_heartbeat, 5, {c->ta.names, c->ta.exec_ms}, 2, NULL};
	return fenced(c, &o, worker, refs, n, out, 0, lease_until_us, err);
}

sq_status sq_heartbeat(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
		       sq_status *out, sq_error *err)
{
	return sq_heartbeat_lease(c, worker, refs, n, out, NULL, err);
}

/* The completion this client sends: with history when a type of its config
 * keeps it (off: $6's text, kept by the caller). */
static op complete_op(sq_client *c, char *off, size_t offlen)
{
	if (!c->ta.any_history)
		return (op){&stmt_complete_plain, 3, {0}, 0, NULL};
	snprintf(off, offlen, "%lld", (long long)sq_test_clock_offset_s());
	return (op){&stmt_complete, 6, {c->ta.hist_names, c->ta.hist_days, off}, 3, NULL};
}

sq_status sq_complete(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
		      sq_status *out, sq_error *err)
{
	char off[32];
	op o = complete_op(c, off, sizeof(off));
	return fenced(c, &o, worker, refs, n, out, 1, NULL, err);
}

sq_status sq_release(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
		     sq_status *out, sq_error *err)
{
	op o = {&stmt_release, 3, {0}, 0, NULL};
	return fenced(c, &o, worker, refs, n, out, 0, NULL, err);
}

sq_status sq_unclaim(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
		     sq_status *out, sq_error *err)
{
	op o = {&stmt_unclaim, 3, {0}, 0, NULL};
	return fenced(c, &o, worker, refs, n, out, 0, NULL, err);
}

sq_status sq_fail(sq_client *c, const char *worker, const sq_fail_req *reqs, size_t n,
		  sq_status *out, sq_error *err)
{
	sq_job_ref *refs = malloc(sizeof(*refs) * (n ? n : 1));
	sq_status st;
	if (!refs)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		refs[i] = reqs[i].ref;
	op o = {&stmt_fail,
		10,
		{c->ta.names, c->ta.backoff, c->ta.base_ms, c->ta.cap_ms, c->ta.jitter},
		5,
		reqs};
	st = fenced(c, &o, worker, refs, n, out, 0, NULL, err);
	free(refs);
	return st;
}

/* Cancel by id: same machinery without a fence on worker. */
static sq_status cancel_pass(sq_client *c, const int64_t *ids, size_t n, sq_status *out, int *moved,
			     sq_error *err);

sq_status sq_cancel(sq_client *c, const int64_t *ids, size_t n, sq_status *out, sq_error *err)
{
	int tries = 0, moved = 0;
	double deadline = 0;
	sq_status st;
	for (size_t i = 0; i < n; i++)
		out[i] = SQ_EINVAL; /* to do */
	sq_client_check_map(c);
	while ((st = cancel_pass(c, ids, n, out, &moved, err)) == SQ_OK && moved) {
		if ((st = sq_client_wait_moved(c, moved == 2, &tries, &deadline, err)))
			break;
	}
	for (size_t i = 0; i < n; i++)
		if (out[i] == SQ_EINVAL) /* not answered: the call's error */
			out[i] = st != SQ_OK ? st : SQ_EDB;
	return st;
}

/* Cancels the ids whose out[] is SQ_EINVAL ("to do"); a shard that answers
 * moving/moved leaves its ids to do, and *moved says so (1 moving, 2 moved). */
static sq_status cancel_pass(sq_client *c, const int64_t *ids, size_t n, sq_status *out, int *moved,
			     sq_error *err)
{
	sq_buf *idb = calloc((size_t)c->nshards, sizeof(sq_buf));
	sq_buf *pb = calloc((size_t)c->nshards, sizeof(sq_buf));
	const char **vals = calloc((size_t)c->nshards * 2, sizeof(char *));
	sq_status st = SQ_OK;
	if (!idb || !pb || !vals) {
		free(idb);
		free(pb);
		free(vals);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	*moved = 0;
	for (size_t i = 0; i < n; i++) {
		if (out[i] != SQ_EINVAL)
			continue;
		int s = sq_shard_of_id(c, ids[i]);
		if (!idb[s].len) {
			sq_arr_open(&idb[s]);
			sq_arr_open(&pb[s]);
		}
		sq_arr_i64(&idb[s], ids[i]);
		sq_arr_i64(&pb[s], sq_partition_of_id(ids[i]) & (c->partitions - 1));
	}
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		if (!idb[s].len)
			continue;
		sq_arr_close(&idb[s]);
		sq_arr_close(&pb[s]);
		vals[2 * s] = idb[s].data;
		vals[2 * s + 1] = pb[s].data;
		sq_client_push_guard(c, s, &vals[2 * s + 1]);
		sq_pgconn_push(&c->shards[s], &stmt_cancel, 1, &vals[2 * s]);
	}
	st = sq_client_send(c, err);
	for (int s = 0; st == SQ_OK && s < c->nshards; s++) {
		if (!idb[s].len)
			continue;
		sq_status se = sq_pgconn_result_error(&c->shards[s], err);
		if (se == SQ_EMOVED || se == SQ_EMOVING) {
			*moved = se == SQ_EMOVED ? 2 : (*moved ? *moved : 1);
			continue;
		}
		if (se != SQ_OK) {
			st = se;
			break;
		}
		PGresult *r = c->shards[s].res[2];
		for (size_t i = 0; i < n; i++)
			if (out[i] == SQ_EINVAL && sq_shard_of_id(c, ids[i]) == s)
				out[i] = SQ_ENOTFOUND;
		for (int row = 0; row < PQntuples(r); row++) {
			int64_t id = atoll(PQgetvalue(r, row, 0));
			for (size_t i = 0; i < n; i++)
				if (ids[i] == id)
					out[i] = SQ_OK;
		}
	}
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		sq_buf_free(&idb[s]);
		sq_buf_free(&pb[s]);
	}
	free(idb);
	free(pb);
	free(vals);
	return st;
}

sq_status sq_cancel_key(sq_client *c, const char *type, const char *key, int64_t *id, sq_error *err)
{
	uint32_t part;
	int s;
	char parts[32];
	const char *pv[1] = {parts};
	const char *v[2] = {type, key};
	sq_status st;
	*id = 0;
	if (!type || !key || !*key)
		return sq_err(err, SQ_EINVAL, "cancel by key needs a task type and a key");
	if (!sq_utf8_valid(key))
		return sq_err(err, SQ_EINVAL, "the key is not valid UTF-8");
	part = sq_partition_of_key(key, strlen(key), c->partitions);
	snprintf(parts, sizeof(parts), "{%u}", part);
	sq_client_check_map(c);
	int tries = 0;
	double deadline = 0;
	for (;;) {
		s = c->map[part];
		sq_client_reset(c);
		sq_client_push_guard(c, s, pv);
		sq_pgconn_push(&c->shards[s], &stmt_cancel_key, 2, v);
		st = sq_client_run(c, err);
		if (st != SQ_EMOVED && st != SQ_EMOVING)
			break;
		if ((st = sq_client_wait_moved(c, st == SQ_EMOVED, &tries, &deadline, err)))
			break;
	}
	if (st == SQ_OK) {
		PGresult *r = c->shards[s].res[2];
		if (PQntuples(r) == 0)
			st = sq_err(err, SQ_ENOTFOUND, "no live job of type '%s' with key '%s'",
				    type, key);
		else
			*id = atoll(PQgetvalue(r, 0, 0));
	}
	sq_client_reset(c);
	return st;
}

sq_status sq_get_job(sq_client *c, int64_t id, sq_job *job, sq_error *err)
{
	int s;
	char ids[24];
	const char *v[1] = {ids};
	sq_status st;
	memset(job, 0, sizeof(*job));
	if (id <= 0)
		return sq_err(err, SQ_EINVAL, "job id %lld is not valid", (long long)id);
	sq_client_check_map(c);
	s = sq_shard_of_id(c, id);
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	sq_client_reset(c);
	sq_pgconn_push(&c->shards[s], &stmt_get, 1, v);
	sq_pgconn_push(&c->shards[s], &stmt_get_history, 1, v);
	st = sq_client_run(c, err);
	if (st == SQ_OK) {
		PGresult *r = c->shards[s].res[0];
		if (PQntuples(r) == 0)
			r = c->shards[s].res[1];
		if (PQntuples(r) == 0)
			st = sq_err(err, SQ_ENOTFOUND, "no job with id %lld on shard %s",
				    (long long)id, c->cfg->shards[s].id);
		else if (sq_jobrow_parse(r, 0, s, job))
			st = sq_err(err, SQ_ENOMEM, "out of memory");
	}
	sq_client_reset(c);
	return st;
}

/* ---- the two halves, for the worker's one-pipeline tick ------------------ */

struct sq_fenced_pending {
	op o;
	char off[32]; /* sq_complete's $6 */
	shard_rows *rows;
	sq_status *todo;
	size_t n;
	sq_fenced_kind kind;
};

const char *sq_fenced_sql(sq_fenced_kind kind)
{
	switch (kind) {
	case SQ_FENCED_START: return stmt_start.sql;
	case SQ_FENCED_HEARTBEAT: return stmt_heartbeat.sql;
	case SQ_FENCED_COMPLETE: return stmt_complete.sql;
	case SQ_FENCED_COMPLETE_PLAIN: return stmt_complete_plain.sql;
	case SQ_FENCED_FAIL: return stmt_fail.sql;
	case SQ_FENCED_RELEASE: return stmt_release.sql;
	}
	return NULL;
}

sq_fenced_pending *sq_fenced_push(sq_client *c, sq_fenced_kind kind, const char *worker,
				  const sq_job_ref *refs, const sq_fail_req *fails, size_t n)
{
	sq_fenced_pending *p = calloc(1, sizeof(*p));
	sq_job_ref *fr = NULL;
	if (!p)
		return NULL;
	p->kind = kind;
	p->n = n;
	switch (kind) {
	case SQ_FENCED_START:
		p->o = (op){&stmt_start, 5, {c->ta.names, c->ta.exec_ms}, 2, NULL};
		break;
	case SQ_FENCED_HEARTBEAT:
		p->o = (op){&stmt_heartbeat, 5, {c->ta.names, c->ta.exec_ms}, 2, NULL};
		break;
	case SQ_FENCED_RELEASE: p->o = (op){&stmt_release, 3, {0}, 0, NULL}; break;
	case SQ_FENCED_COMPLETE:
	case SQ_FENCED_COMPLETE_PLAIN: p->o = complete_op(c, p->off, sizeof(p->off)); break;
	case SQ_FENCED_FAIL:
		p->o = (op){&stmt_fail,
			    10,
			    {c->ta.names, c->ta.backoff, c->ta.base_ms, c->ta.cap_ms, c->ta.jitter},
			    5,
			    fails};
		fr = malloc(sizeof(*fr) * (n ? n : 1));
		if (!fr)
			break;
		for (size_t i = 0; i < n; i++)
			fr[i] = fails[i].ref;
		refs = fr;
		break;
	}
	p->todo = malloc(sizeof(sq_status) * (n ? n : 1));
	if (p->todo && refs) {
		for (size_t i = 0; i < n; i++)
			p->todo[i] = SQ_EINVAL;
		p->rows = fenced_push(c, &p->o, worker, refs, n, p->todo, SQ_EINVAL);
	}
	free(fr);
	if (!p->rows) {
		free(p->todo);
		free(p);
		return NULL;
	}
	return p;
}

void sq_fenced_collect(sq_client *c, sq_fenced_pending *p, sq_status *out)
{
	for (size_t i = 0; i < p->n; i++)
		out[i] = SQ_EINVAL;
	(void)fenced_collect(c, p->rows, out,
			     p->kind == SQ_FENCED_COMPLETE || p->kind == SQ_FENCED_COMPLETE_PLAIN
				     ? SQ_ENOTFOUND
				     : SQ_ELOST,
			     NULL, NULL);
	fenced_free(c, p->rows);
	free(p->todo);
	free(p);
}

/* enqueue.c - batched enqueue: validate everything first, route by key,
 * then one INSERT .. ON CONFLICT per shard (all shards at once), under the
 * partition gate. Dedup policies are applied by the shard in that statement.
 * When a shard's connection breaks after its part was sent, the shard is
 * asked afterwards whether that part committed, so every job's result says
 * whether it was written. */
#include "buf.h"
#include "client.h"
#include "error.h"
#include "json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Columns: per input row, in the order the arrays are given. Policies:
 * i ignore, r replace, m merge, R rerun (see design section 5).
 *
 * A column whose value every row of the statement shares is sent once, as a
 * one-element array: unnest pads it with NULLs, which read as the first
 * row's value. Parsing the arrays was about a quarter of the insert's time
 * on the shard, and most batches share all but the ids and the params.
 * The id and the params are always sent whole, and the keys whole or as an empty array (no row has
 * one): a NULL key is a value, not "the same as the first". */
#define INPUT_UNNEST                                                                      \
	"unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::int[], " \
	"$7::bigint[], $8::bigint[], $9::bigint[], $10::int[], $11::text[])"
#define INPUT_NAMES "id, part, task, uid, params, prio, at_us, delay_ms, tol_ms, maxa, pol"
#define INPUT_COLS                                              \
	"u.id,"                                                 \
	" COALESCE(u.part, ($2::int[])[1]) AS part,"            \
	" COALESCE(u.task, ($3::text[])[1]) AS task,"           \
	" u.uid, u.params,"                                     \
	" COALESCE(u.prio, ($6::int[])[1]) AS prio,"            \
	" COALESCE(u.at_us, ($7::bigint[])[1]) AS at_us,"       \
	" COALESCE(u.delay_ms, ($8::bigint[])[1]) AS delay_ms," \
	" COALESCE(u.tol_ms, ($9::bigint[])[1]) AS tol_ms,"     \
	" COALESCE(u.maxa, ($10::int[])[1]) AS maxa,"           \
	" COALESCE(u.pol, ($11::text[])[1]) AS pol"
static const sq_stmt stmt_enqueue = {
	"sq_enqueue",
	"WITH rows AS ("
	"  SELECT " INPUT_COLS ", u.ord"
	"    FROM " INPUT_UNNEST " WITH ORDINALITY AS u(" INPUT_NAMES ", ord)"
	"), input AS ("
	"  SELECT r.*, CASE WHEN r.at_us <> 0 THEN to_timestamp(r.at_us / 1000000.0)"
	"              ELSE now() + r.delay_ms * interval '1 millisecond' END AS st"
	"    FROM rows r"
	"), ins AS ("
	"  INSERT INTO shardq.jobs AS j (id, partition, task, active_uid, params, priority,"
	"         schedule_time, delay_tolerance_time, max_attempts, dedup_policy)"
	"  SELECT id, part, task, uid, params::jsonb, prio, st,"
	"         CASE WHEN tol_ms > 0 THEN st + tol_ms * interval '1 millisecond' END, maxa,"
	"         pol::\"char\""
	"    FROM input"
	"  ON CONFLICT (task, active_uid)"
	"     WHERE status IN ('ready', 'starting', 'running') AND active_uid IS NOT NULL"
	"  DO UPDATE SET"
	"    params = CASE WHEN j.status <> 'ready' THEN j.params"
	"                  WHEN EXCLUDED.dedup_policy = 'm' THEN j.params || EXCLUDED.params"
	"                  ELSE EXCLUDED.params END,"
	"    priority = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'"
	"                    THEN EXCLUDED.priority ELSE j.priority END,"
	"    schedule_time = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'"
	"                    THEN EXCLUDED.schedule_time ELSE j.schedule_time END,"
	"    delay_tolerance_time = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'"
	"                    THEN EXCLUDED.delay_tolerance_time ELSE j.delay_tolerance_time END,"
	"    rerun_params = CASE WHEN j.status <> 'ready' THEN EXCLUDED.params"
	"                        ELSE j.rerun_params END,"
	"    updated_at = now()"
	"  WHERE (j.status = 'ready' AND EXCLUDED.dedup_policy IN ('r', 'm', 'R'))"
	"     OR (j.status IN ('starting', 'running') AND EXCLUDED.dedup_policy = 'R')"
	"  RETURNING j.id, j.task, j.active_uid, (j.xmax = 0) AS inserted, j.status"
	")"
	"SELECT i.ord, COALESCE(a.id, b.id, d.id),"
	"       CASE WHEN a.id IS NOT NULL THEN 'i'"
	"            WHEN b.id IS NOT NULL THEN CASE WHEN b.status = 'ready' THEN 'u' ELSE 'R' END"
	"            WHEN d.id IS NOT NULL THEN 'd' END"
	"  FROM input i"
	"  LEFT JOIN ins a ON a.inserted AND a.id = i.id"
	"  LEFT JOIN ins b ON NOT b.inserted AND b.task = i.task AND b.active_uid = i.uid"
	"  LEFT JOIN LATERAL (SELECT x.id FROM shardq.jobs x"
	"                      WHERE a.id IS NULL AND b.id IS NULL AND x.task = i.task"
	"                        AND x.active_uid = i.uid"
	"                        AND x.status IN ('ready', 'starting', 'running')) d ON true"};

/* A round of keyless rows only: nothing can conflict (every id is new), so a
 * plain insert; every row is written with the id it was sent with. Same
 * parameters as stmt_enqueue ($4, the keys, all NULL). */
static const sq_stmt stmt_enqueue_keyless = {
	"sq_enqueue_keyless",
	"INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time,"
	"       delay_tolerance_time, max_attempts, dedup_policy)"
	"SELECT u.id, u.part, u.task, u.params::jsonb, u.prio, s.st,"
	"       CASE WHEN u.tol_ms > 0 THEN s.st + u.tol_ms * interval '1 millisecond' END,"
	"       u.maxa, u.pol::\"char\""
	"  FROM (SELECT " INPUT_COLS " FROM " INPUT_UNNEST " AS u(" INPUT_NAMES ")) u"
	"  CROSS JOIN LATERAL (SELECT CASE WHEN u.at_us <> 0"
	"         THEN to_timestamp(u.at_us / 1000000.0)"
	"         ELSE now() + u.delay_ms * interval '1 millisecond' END AS st) s"};

/* Wakes idle workers that LISTEN; once per batch per shard. The payload
 * (wake_payload) says which of them claim (client.c, wake_is_ours). */
static const sq_stmt stmt_notify = {"sq_enqueue_notify", "SELECT pg_notify('shardq_jobs', $1)"};

/* A batch naming more task types than this on one shard wakes every
 * listening worker there. */
#define WAKE_TYPES 8

/* After a lost connection: ends the old session (if it still runs) and waits
 * for it, so its transaction can no longer commit; counts what did not end. */
static const char sql_end_session[] =
	"SELECT count(*) FILTER (WHERE NOT pg_terminate_backend(pid, $2::bigint))"
	"  FROM pg_stat_activity"
	" WHERE pid = $1::int AND pid <> pg_backend_pid() AND datname = current_database()";
/* ... then which of the rows it sent are there (ordinals into $1). */
static const char sql_rows_there[] =
	"SELECT u.ord FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)"
	" WHERE EXISTS (SELECT 1 FROM shardq.jobs j WHERE j.id = u.id)"
	"    OR EXISTS (SELECT 1 FROM shardq.jobs_history h WHERE h.id = u.id)";

enum { NCOLS = 11 };

/* One statement's worth of rows for one shard. */
typedef struct round {
	sq_buf col[NCOLS];
	const char *vals[NCOLS];
	size_t *idx;  /* input index of each row */
	int64_t *ids; /* the id each row was sent with */
	size_t n, cap;
	int keyed; /* a row has a key (else stmt_enqueue_keyless) */
	/* per column: the rows so far all had the first row's value (so far
	 * sent once), and that value */
	unsigned char varies[NCOLS];
	int64_t first_i[NCOLS];
	const char *first_s[NCOLS];
	const char *type_name; /* the last row's type, and its config */
	const sq_type_conf *type;
} round;

/* Which columns may be sent once (see INPUT_COLS): all but the id, the key
 * and the params. Text columns: the type and the policy. */
static const unsigned char send_once[NCOLS] = {0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1};
static const unsigned char text_col[NCOLS] = {0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1};

/* gate + check + rounds + notify must fit one pipeline */
#define MAX_ROUNDS (SQ_PIPE_MAX - 3)

/* Keyless jobs go in runs: the k-th keyless job of a batch belongs to run
 * k / KEYLESS_RUN, and a run's jobs share one partition, the one the id of
 * its first job hashes to. A batch of up to KEYLESS_RUN keyless jobs is
 * then one statement on one shard (one commit, one check of the gate, one
 * NOTIFY, one worker's claim) instead of one on every shard; over many
 * batches the runs spread over the partitions as evenly as single jobs
 * did, and so over the shards by their weight. Jobs of a type with
 * max_running or rate are not run together: those limits are split over
 * the shards by their partitions, so such jobs spread one by one (each
 * from its own id), or a shard's idle share would go unused. */
#define KEYLESS_RUN 256

typedef struct shard_batch {
	round r[MAX_ROUNDS];
	int nrounds;
	sq_buf parts;
	const char *parts_val[1];
	unsigned char *seen_part;        /* bitmap of partitions added to parts */
	char wake[24 + WAKE_TYPES * 20]; /* the NOTIFY's payload */
	const char *wake_val[1];
} shard_batch;

/* The NOTIFY's payload for one shard's part of a batch: a token new for
 * every batch (the id of its first job there: ids are unique in the
 * cluster), then "HASH:COUNT" for each task type in it; just the token
 * when there are more than WAKE_TYPES types (every listener claims). */
static void wake_payload(shard_batch *b, const sq_job_spec *jobs)
{
	uint32_t h[WAKE_TYPES];
	long count[WAKE_TYPES];
	int nt = 0, over = 0;
	for (int k = 0; k < b->nrounds && !over; k++)
		for (size_t i = 0; i < b->r[k].n && !over; i++) {
			uint32_t th = sq_wake_type_hash(jobs[b->r[k].idx[i]].type);
			int f = 0;
			while (f < nt && h[f] != th)
				f++;
			if (f == nt) {
				if (nt == WAKE_TYPES) {
					over = 1;
					break;
				}
				h[nt] = th;
				count[nt++] = 0;
			}
			count[f]++;
		}
	int len = snprintf(b->wake, sizeof(b->wake), "%016llx", (unsigned long long)b->r[0].ids[0]);
	for (int f = 0; f < nt && !over; f++)
		len += snprintf(b->wake + len, sizeof(b->wake) - (size_t)len, " %08x:%ld", h[f],
				count[f]);
	b->wake_val[0] = b->wake;
}

sq_status sq_job_spec_check(const sq_config *cfg, const sq_job_spec *j, sq_error *err)
{
	size_t where;
	const char *what;
	if (!j->type || !*j->type)
		return sq_err(err, SQ_EINVAL, "no task type given");
	if (!sq_config_type(cfg, j->type)) {
		sq_buf known;
		sq_buf_init(&known);
		for (int t = 0; t < cfg->ntypes; t++)
			sq_buf_printf(&known, "%s%s", t ? ", " : "", cfg->types[t].name);
		sq_err(err, SQ_EINVAL,
		       "unknown task type '%.64s'; configured types: %s (add a [type %.64s] "
		       "section to the config)",
		       j->type, known.data ? known.data : "none", j->type);
		sq_buf_free(&known);
		return SQ_EINVAL;
	}
	if (j->key) {
		size_t len = strlen(j->key);
		if (!len)
			return sq_err(err, SQ_EINVAL,
				      "key is empty; omit it for a job without key");
		if (len > SQ_MAX_KEY_LEN)
			return sq_err(err, SQ_EINVAL, "key is %zu bytes, more than the limit of %d",
				      len, SQ_MAX_KEY_LEN);
		if (!sq_json_utf8_valid(j->key, len, &where))
			return sq_err(err, SQ_EINVAL, "key is not valid UTF-8 (at byte %zu)",
				      where + 1);
	}
	if (j->params) {
		size_t len = strlen(j->params);
		if (len > SQ_MAX_PARAMS_LEN)
			return sq_err(err, SQ_EINVAL,
				      "params are %zu bytes, more than the limit of %d", len,
				      SQ_MAX_PARAMS_LEN);
		if (sq_json_validate_object(j->params, len, &where, &what)) {
			/* valid JSON, but not an object: say what it is */
			const char *p = j->params + strspn(j->params, " \t\r\n");
			if (*p && *p != '{' && sq_json_is_value(j->params, len))
				return sq_err(
					err, SQ_EINVAL,
					"params must be a JSON object ({...}), not %s; wrap "
					"the value in an object, for example {\"items\": ...}",
					*p == '['                                 ? "an array"
					: *p == '"'                               ? "a string"
					: (*p == '-' || (*p >= '0' && *p <= '9')) ? "a number"
										  : "a literal");
			return sq_err(err, SQ_EINVAL, "params are not valid JSON: %s at byte %zu",
				      what, where);
		}
	}
	if (j->has_priority && (j->priority < SQ_MIN_PRIORITY || j->priority > SQ_MAX_PRIORITY))
		return sq_err(err, SQ_EINVAL, "priority %d is outside %d..%d", (int)j->priority,
			      SQ_MIN_PRIORITY, SQ_MAX_PRIORITY);
	if (j->max_attempts < 0 || j->max_attempts > SQ_MAX_ATTEMPTS)
		return sq_err(err, SQ_EINVAL,
			      "max_attempts %d is outside 1..%d (0: the type's default)",
			      (int)j->max_attempts, SQ_MAX_ATTEMPTS);
	if (j->delay_ms < 0 || j->delay_ms > SQ_MAX_DELAY_MS)
		return sq_err(err, SQ_EINVAL,
			      "delay_ms %" PRId64 " is outside 0..%" PRId64 " (100 years)",
			      j->delay_ms, SQ_MAX_DELAY_MS);
	if (j->run_at_us && j->delay_ms)
		return sq_err(err, SQ_EINVAL, "give run_at_us or delay_ms, not both");
	if (j->run_at_us < 0 || j->run_at_us > SQ_MAX_RUN_AT_US)
		return sq_err(err, SQ_EINVAL,
			      "run_at_us %" PRId64 " is outside 0..%" PRId64
			      " (0: not set; at most the end of the year 9999)",
			      j->run_at_us, SQ_MAX_RUN_AT_US);
	if (j->delay_tolerance_ms != SQ_NO_DELAY_TOLERANCE &&
	    (j->delay_tolerance_ms < 0 || j->delay_tolerance_ms > SQ_MAX_DELAY_TOLERANCE_MS))
		return sq_err(err, SQ_EINVAL,
			      "delay_tolerance_ms %" PRId64 " is outside 0..%" PRId64
			      " (365 days; 0: the type's default, SQ_NO_DELAY_TOLERANCE: none)",
			      j->delay_tolerance_ms, SQ_MAX_DELAY_TOLERANCE_MS);
	return SQ_OK;
}

static sq_status validate(const sq_client *c, const sq_job_spec *jobs, size_t n, sq_error *err)
{
	for (size_t i = 0; i < n; i++) {
		sq_error e;
		if (sq_job_spec_check(c->cfg, &jobs[i], &e) != SQ_OK)
			return sq_err(err, e.code, "job %zu: %s", i + 1, e.msg);
	}
	return SQ_OK;
}

static void put(sq_buf *b, int text, int64_t i, const char *str)
{
	if (text)
		sq_arr_str(b, str);
	else
		sq_arr_i64(b, i);
}

/* Appends value (i or str) of column k for the round's row r->n. */
static void round_put(round *r, int k, int64_t i, const char *str)
{
	sq_buf *b = &r->col[k];
	if (!send_once[k]) {
		put(b, text_col[k], i, str);
		return;
	}
	if (r->n == 0) {
		r->varies[k] = 0;
		r->first_i[k] = i;
		r->first_s[k] = str;
		put(b, text_col[k], i, str);
		return;
	}
	if (!r->varies[k]) {
		/* the same pointer is the same text within one call */
		if (text_col[k] ? str == r->first_s[k] || !strcmp(str, r->first_s[k])
				: i == r->first_i[k])
			return;
		/* the first to differ: the rows before it get theirs written */
		r->varies[k] = 1;
		for (size_t n = 1; n < r->n; n++)
			put(b, text_col[k], r->first_i[k], r->first_s[k]);
	}
	put(b, text_col[k], i, str);
}

static const char *const policy_str[] = {"i", "r", "m", "R"};

static void round_add(round *r, const sq_client *c, const sq_job_spec *j, int64_t id, uint32_t part,
		      size_t input_idx)
{
	/* the same pointer is the same type within one call */
	if (j->type != r->type_name) {
		r->type_name = j->type;
		r->type = sq_config_type(c->cfg, j->type);
	}
	const sq_type_conf *t = r->type;
	if (r->n == 0)
		for (int k = 0; k < NCOLS; k++)
			sq_arr_open(&r->col[k]);
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 64;
		r->idx = realloc(r->idx, r->cap * sizeof(size_t));
		r->ids = realloc(r->ids, r->cap * sizeof(int64_t));
	}
	/* the keys: none sent until a row has one, then NULLs for the rows
	 * before it */
	if (j->key && !r->keyed)
		for (size_t n = 0; n < r->n; n++)
			sq_arr_str(&r->col[3], NULL);
	if (j->key || r->keyed)
		sq_arr_str(&r->col[3], j->key);
	r->keyed |= j->key != NULL;
	round_put(r, 0, id, NULL);
	round_put(r, 1, part, NULL);
	round_put(r, 2, 0, j->type);
	round_put(r, 4, 0, j->params ? j->params : "{}");
	round_put(r, 5, j->has_priority ? j->priority : t->priority, NULL);
	round_put(r, 6, j->run_at_us, NULL);
	round_put(r, 7, j->delay_ms, NULL);
	round_put(r, 8,
		  j->delay_tolerance_ms == SQ_NO_DELAY_TOLERANCE ? 0
		  : j->delay_tolerance_ms > 0                    ? j->delay_tolerance_ms
								 : t->delay_tolerance_ms,
		  NULL);
	round_put(r, 9, j->max_attempts ? j->max_attempts : t->max_attempts, NULL);
	round_put(r, 10, 0, policy_str[t->dedup]);
	r->ids[r->n] = id;
	r->idx[r->n++] = input_idx;
}

static void round_close(round *r)
{
	for (int k = 0; k < NCOLS; k++) {
		sq_arr_close(&r->col[k]);
		r->vals[k] = r->col[k].data;
	}
}

static void round_free(round *r)
{
	for (int k = 0; k < NCOLS; k++)
		sq_buf_free(&r->col[k]);
	free(r->idx);
	free(r->ids);
}

/* Which round a (type, key) goes to: the number of earlier rows of the same
 * shard with the same (type, key), so no statement names a key twice. */
typedef struct keyset {
	uint64_t *h;
	int *count;
	size_t *first; /* input index of the first row with the key */
	size_t cap;
} keyset;

static int keyset_bump(keyset *ks, const char *type, const char *key, size_t idx, size_t *first)
{
	uint64_t h = XXH3_64bits_withSeed(key, strlen(key), XXH3_64bits(type, strlen(type))) | 1;
	size_t i = (size_t)h & (ks->cap - 1);
	while (ks->h[i] && ks->h[i] != h)
		i = (i + 1) & (ks->cap - 1);
	if (!ks->h[i])
		ks->first[i] = idx;
	ks->h[i] = h;
	*first = ks->first[i];
	return ks->count[i]++;
}

/*
 * Shard s's connection broke after its part of the batch was sent: that
 * part is one transaction, which may or may not have committed. On a new
 * connection, the old session (backend `pid`) is ended and waited for, so
 * it can no longer commit; then the rows are looked up by the ids they were
 * sent with. One row found means the whole part committed; none found, with
 * a row without key among them, means it did not (only a worker finishing
 * and deleting every such row, or a move carrying it off, in between could
 * hide them all). Rows with a key that were not found (in a committed part
 * they joined a live job; in a part of keyed rows only, none found, they
 * may have), and every row when the shard cannot be asked, stay
 * SQ_ENQ_UNKNOWN.
 */
static void settle_lost_part(sq_client *c, int s, shard_batch *b, const sq_job_spec *jobs,
			     sq_enqueue_result *res, int pid)
{
	sq_pgconn *pc = &c->shards[s];
	sq_buf ids;
	char pid_s[16], wait_s[24];
	const char *v[2] = {pid_s, wait_s};
	sq_error e;
	PGresult *r;
	size_t nrows = 0;
	int committed = 0, keyless = 0;
	unsigned char *found;

	for (int k = 0; k < b->nrounds; k++)
		for (size_t i = 0; i < b->r[k].n; i++) {
			res[b->r[k].idx[i]].outcome = SQ_ENQ_UNKNOWN;
			keyless |= !jobs[b->r[k].idx[i]].key;
			nrows++;
		}
	if (pid > 0) {
		snprintf(pid_s, sizeof(pid_s), "%d", pid);
		/* within the connection's own wait for an answer (a worker's
		 * scheduler enqueues through a client that waits a short time) */
		int64_t wait_ms = c->cfg->connect_timeout_ms;
		if (pc->answer_wait_s > 0 && (double)wait_ms > pc->answer_wait_s * 500)
			wait_ms = (int64_t)(pc->answer_wait_s * 500);
		snprintf(wait_s, sizeof(wait_s), "%" PRId64, wait_ms);
		r = sq_pgconn_exec(pc, sql_end_session, 2, v, &e);
		int ended = r && PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), "0");
		PQclear(r);
		if (!ended)
			return;
	}
	found = calloc(nrows, 1);
	sq_buf_init(&ids);
	sq_arr_open(&ids);
	for (int k = 0; k < b->nrounds; k++)
		for (size_t i = 0; i < b->r[k].n; i++)
			sq_arr_i64(&ids, b->r[k].ids[i]);
	sq_arr_close(&ids);
	v[0] = ids.data;
	r = found && !ids.oom ? sq_pgconn_exec(pc, sql_rows_there, 1, v, &e) : NULL;
	sq_buf_free(&ids);
	if (!r) {
		free(found);
		return;
	}
	for (int row = 0; row < PQntuples(r); row++) {
		long long ord = atoll(PQgetvalue(r, row, 0));
		if (ord >= 1 && (size_t)ord <= nrows)
			found[ord - 1] = committed = 1;
	}
	PQclear(r);
	size_t at = 0;
	for (int k = 0; k < b->nrounds; k++)
		for (size_t i = 0; i < b->r[k].n; i++, at++) {
			size_t in = b->r[k].idx[i];
			sq_enqueue_result *o = &res[in];
			/* a row without key always inserts, with the id it was sent
			 * with: in a part that committed, it is written even if a
			 * worker has finished it since */
			if (found[at] || (committed && !jobs[in].key)) {
				o->id = b->r[k].ids[i];
				o->outcome = SQ_ENQ_INSERTED;
			} else if (!committed && keyless) {
				o->outcome = SQ_ENQ_NOT_WRITTEN;
			}
		}
	free(found);
}

/* Sends every shard's batch at once. A shard that answers "moving" or
 * "moved" wrote nothing (its pipeline is one transaction): its rows keep
 * id -1, to be routed again; *moved says which answer came (2: moved,
 * 1: moving, 0: none). Other errors are returned; a shard whose connection
 * broke after its part was sent is asked what committed (settle_lost_part). */
static sq_status send_all(sq_client *c, shard_batch *sb, const sq_job_spec *jobs,
			  sq_enqueue_result *res, int *moved, sq_error *err)
{
	sq_status st;
	uint64_t *sent = calloc((size_t)c->nshards, sizeof(uint64_t));
	int *pid = calloc((size_t)c->nshards, sizeof(int));
	*moved = 0;
	if (!sent || !pid) {
		free(sent);
		free(pid);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		shard_batch *b = &sb[s];
		if (!b->nrounds)
			continue;
		sent[s] = c->shards[s].statements_sent;
		sq_client_push_guard(c, s, b->parts_val);
		for (int k = 0; k < b->nrounds; k++)
			sq_pgconn_push(&c->shards[s],
				       b->r[k].keyed ? &stmt_enqueue : &stmt_enqueue_keyless, NCOLS,
				       b->r[k].vals);
		if (c->cfg->notify) {
			wake_payload(b, jobs);
			sq_pgconn_push(&c->shards[s], &stmt_notify, 1, b->wake_val);
		}
	}
	/* every shard that answered is read, even when another failed: its
	 * jobs are committed and the caller must learn their ids */
	sq_status first = sq_client_send(c, err);
	/* the backend each batch went to (0: not sent): a connection the
	 * server had closed is replaced at the send (pgconn.c, ensure_conn) */
	for (int s = 0; s < c->nshards; s++)
		pid[s] = c->shards[s].sent_pid;
	for (int s = 0; s < c->nshards; s++) {
		sq_pgconn *pc = &c->shards[s];
		sq_error e;
		if (!sb[s].nrounds)
			continue;
		st = sq_pgconn_result_error(pc, &e);
		if (st == SQ_EMOVED || st == SQ_EMOVING) {
			if (*moved < (st == SQ_EMOVED ? 2 : 1))
				*moved = st == SQ_EMOVED ? 2 : 1;
			continue;
		}
		if (st != SQ_OK) {
			if (first == SQ_OK) {
				first = st;
				if (err)
					*err = e;
			}
			/* an error answered by the shard rolled its part back; a
			 * connection lost after sending leaves it open to doubt */
			if (pc->failed && pc->statements_sent > sent[s])
				settle_lost_part(c, s, &sb[s], jobs, res, pid[s]);
			continue;
		}
		/* results: gate, check, then one per round */
		for (int q = 2; q < 2 + sb[s].nrounds && q < pc->nres; q++) {
			PGresult *r = pc->res[q];
			round *rd = &sb[s].r[q - 2];
			if (!rd->keyed) {
				for (size_t i = 0; i < rd->n; i++) {
					res[rd->idx[i]].shard = s;
					res[rd->idx[i]].id = rd->ids[i];
					res[rd->idx[i]].outcome = SQ_ENQ_INSERTED;
				}
				continue;
			}
			for (int row = 0; row < PQntuples(r); row++) {
				size_t ord = (size_t)atol(PQgetvalue(r, row, 0)) - 1;
				size_t in = rd->idx[ord];
				const char *oc = PQgetvalue(r, row, 2);
				const sq_type_conf *t = sq_config_type(c->cfg, jobs[in].type);
				res[in].shard = s;
				res[in].id =
					PQgetisnull(r, row, 1) ? 0 : atoll(PQgetvalue(r, row, 1));
				switch (oc[0]) {
				case 'i': res[in].outcome = SQ_ENQ_INSERTED; break;
				case 'R': res[in].outcome = SQ_ENQ_RERUN; break;
				case 'u':
					res[in].outcome = t->dedup == SQ_DEDUP_MERGE
								  ? SQ_ENQ_MERGED
								  : SQ_ENQ_REPLACED;
					break;
				default: res[in].outcome = SQ_ENQ_DUPLICATE; break;
				}
			}
		}
	}
	free(sent);
	free(pid);
	return first;
}

/* Copies of a key under policy ignore within the batch share their first's
 * result: a duplicate of it once it is written, else its fate. */
static void settle_aliases(sq_enqueue_result *res, const size_t *alias, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const sq_enqueue_result *f = &res[alias[i]];
		if (alias[i] == i)
			continue;
		res[i].shard = f->shard;
		res[i].id = f->id > 0 ? f->id : -1;
		res[i].outcome = f->id > 0 ? SQ_ENQ_DUPLICATE : f->outcome;
	}
}

/* The partition of a keyless job from its unique number. */
static uint32_t partition_of_unique(const sq_client *c, int64_t unique)
{
	return (uint32_t)(XXH3_64bits(&unique, sizeof(unique)) & (c->partitions - 1));
}

sq_status sq_enqueue(sq_client *c, const sq_job_spec *jobs, size_t n, sq_enqueue_result *res,
		     sq_error *err)
{
	sq_status st;
	int64_t first;
	shard_batch *sb;
	keyset *ks;
	size_t pending = 0, *alias;
	uint32_t *parts, lead = 0;
	int attempt;

	if (n == 0)
		return SQ_OK;
	if ((st = validate(c, jobs, n, err)))
		return st;
	if ((st = sq_client_take_ids(c, n, &first, err)))
		return st;
	alias = malloc(n * sizeof(size_t));
	parts = malloc(n * sizeof(uint32_t));
	if (!alias || !parts) {
		free(alias);
		free(parts);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	const char *type_name = NULL;
	int limited = 0;
	for (size_t i = 0, keyless = 0; i < n; i++) {
		if (!jobs[i].key && jobs[i].type != type_name) {
			type_name = jobs[i].type;
			limited = sq_type_limited(sq_config_type(c->cfg, type_name));
		}
		if (jobs[i].key) {
			parts[i] = sq_partition_of_key(jobs[i].key, strlen(jobs[i].key),
						       c->partitions);
		} else if (limited) {
			parts[i] = partition_of_unique(c, first + (int64_t)i);
		} else {
			if (keyless++ % KEYLESS_RUN == 0)
				lead = partition_of_unique(c, first + (int64_t)i);
			parts[i] = lead;
		}
	}
	for (size_t i = 0; i < n; i++) {
		res[i].id = -1, alias[i] = i;
		res[i].outcome = SQ_ENQ_NOT_WRITTEN;
		res[i].shard = -1;
	}

	/* Rows with id -1 are to send. A shard answering "moving" or "moved"
	 * leaves its rows at -1: they are routed again by the refreshed map.
	 * A duplicate that finished between our insert and its lookup leaves
	 * id 0: those are sent again too (rare, bounded). */
	int dup_tries = 0, move_tries = 0;
	double deadline = 0;
	sq_client_check_map(c);
	for (attempt = 0;; attempt++) {
		int moved = 0;
		sb = calloc((size_t)c->nshards, sizeof(*sb));
		ks = calloc((size_t)c->nshards, sizeof(*ks));
		if (!sb || !ks) {
			free(sb);
			free(ks);
			free(alias);
			free(parts);
			return sq_err(err, SQ_ENOMEM, "out of memory");
		}
		pending = 0;
		for (size_t i = 0; i < n; i++) {
			const sq_job_spec *j = &jobs[i];
			int64_t unique = first + (int64_t)i;
			uint32_t part = parts[i];
			int s, rnd = 0;
			if (res[i].id != -1 || alias[i] != i)
				continue;
			s = c->map[part];
			res[i].shard = s;
			shard_batch *b = &sb[s];
			if (!b->seen_part) {
				b->seen_part = calloc(c->partitions / 8 + 1, 1);
				sq_arr_open(&b->parts);
			}
			if (!(b->seen_part[part / 8] & (1u << (part % 8)))) {
				b->seen_part[part / 8] |= (unsigned char)(1u << (part % 8));
				sq_arr_i64(&b->parts, part);
			}
			if (j->key) {
				keyset *k = &ks[s];
				if (!k->h) {
					k->cap = 64;
					while (k->cap < 2 * n)
						k->cap *= 2;
					k->h = calloc(k->cap, sizeof(uint64_t));
					k->count = calloc(k->cap, sizeof(int));
					k->first = calloc(k->cap, sizeof(size_t));
				}
				size_t f;
				rnd = keyset_bump(k, j->type, j->key, i, &f);
				/* under ignore, later copies in the batch are the first's duplicates */
				if (rnd &&
				    sq_config_type(c->cfg, j->type)->dedup == SQ_DEDUP_IGNORE) {
					alias[i] = f;
					continue;
				}
			}
			if (rnd >= MAX_ROUNDS) {
				st = sq_err(err, SQ_EINVAL,
					    "job %zu: key '%s' of type '%s' appears more than %d "
					    "times in one "
					    "batch; its policy applies them in order, so split the "
					    "batch",
					    i + 1, j->key, j->type, MAX_ROUNDS);
				goto out;
			}
			while (b->nrounds <= rnd)
				b->nrounds++;
			round_add(&b->r[rnd], c, j, sq_make_id(unique, part), part, i);
			pending++;
		}
		for (int s = 0; s < c->nshards; s++) {
			shard_batch *b = &sb[s];
			for (int k = 0; k < b->nrounds; k++)
				round_close(&b->r[k]);
			if (b->nrounds) {
				sq_arr_close(&b->parts);
				b->parts_val[0] = b->parts.data;
			}
		}
		st = pending ? send_all(c, sb, jobs, res, &moved, err) : SQ_OK;
	out:
		for (int s = 0; s < c->nshards; s++) {
			for (int k = 0; k < MAX_ROUNDS; k++)
				round_free(&sb[s].r[k]);
			sq_buf_free(&sb[s].parts);
			free(sb[s].seen_part);
			free(ks[s].h);
			free(ks[s].count);
			free(ks[s].first);
		}
		free(sb);
		free(ks);
		sq_client_reset(c);
		if (st != SQ_OK)
			break;
		int again = 0;
		for (size_t i = 0; i < n; i++) {
			if (alias[i] == i && res[i].id == 0) {
				res[i].id = -1;
				dup_tries++;
			}
			again |= res[i].id == -1 && alias[i] == i;
		}
		if (!again)
			break;
		if (dup_tries > 3 * (int)n) {
			st = sq_err(err, SQ_EDB,
				    "some jobs could not be placed (a duplicate kept finishing "
				    "concurrently); enqueue them again");
			break;
		}
		if (moved &&
		    (st = sq_client_wait_moved(c, moved == 2, &move_tries, &deadline, err)))
			break;
	}
	settle_aliases(res, alias, n);
	free(alias);
	free(parts);
	return st;
}

const char *sq_enqueue_outcome_name(sq_enqueue_outcome o)
{
	switch (o) {
	case SQ_ENQ_INSERTED: return "inserted";
	case SQ_ENQ_DUPLICATE: return "duplicate";
	case SQ_ENQ_REPLACED: return "replaced";
	case SQ_ENQ_MERGED: return "merged";
	case SQ_ENQ_RERUN: return "rerun";
	case SQ_ENQ_NOT_WRITTEN: return "not_written";
	case SQ_ENQ_UNKNOWN: return "unknown";
	}
	return "unknown";
}

/* enqueue.c - batched enqueue: validate everything first, route by key,
 * then one INSERT .. ON CONFLICT per shard (all shards at once), under the
 * partition gate. Dedup policies are applied by the shard in that statement.
 * When a shard's connection breaks after its part was sent, the shard is
 * asked afterwards whether that part committed, so every job's result says
 * whether it was written. */
#include "buf.h"
#include "client.h"
#include "clock.h"
#include "enqueue.h"
#include "error.h"
#include "json.h"
#include "sql_queries.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* The statements' text, their parameters, and why each is shaped as it
 * is: sql/queries/enqueue.sql. */
static const sq_stmt stmt_enqueue = {"sq_enqueue", sq_sql_enqueue};
static const sq_stmt stmt_enqueue_keyless = {"sq_enqueue_keyless", sq_sql_enqueue_keyless};
static const sq_stmt stmt_notify = {"sq_enqueue_notify", sq_sql_enqueue_notify};

/* A batch naming more task types than this on one shard wakes every
 * listening worker there. */
#define WAKE_TYPES 8

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

/* Which columns may be sent once (sql/queries/enqueue.sql, enqueue_input):
 * all but the id, the key and the params. Text columns: the type and the policy. */
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

sq_status sq_enqueue_check(const sq_config *cfg, const sq_job_spec *jobs, size_t n, sq_error *err)
{
	for (size_t i = 0; i < n; i++) {
		sq_error e;
		if (sq_job_spec_check(cfg, &jobs[i], &e) != SQ_OK)
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

/* Adds job j to round r; -1 when out of memory (r keeps what it had). */
static int round_add(round *r, const sq_client *c, const sq_job_spec *j, int64_t id, uint32_t part,
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
		size_t cap = r->cap ? r->cap * 2 : 64;
		size_t *idx = realloc(r->idx, cap * sizeof(size_t));
		if (idx)
			r->idx = idx;
		int64_t *ids = idx ? realloc(r->ids, cap * sizeof(int64_t)) : NULL;
		if (!ids)
			return -1;
		r->ids = ids;
		r->cap = cap;
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
	return 0;
}

/* Ends the round's arrays; -1 when one of them ran out of memory. */
static int round_close(round *r)
{
	int oom = 0;
	for (int k = 0; k < NCOLS; k++) {
		sq_arr_close(&r->col[k]);
		r->vals[k] = r->col[k].data;
		oom |= r->col[k].oom;
	}
	return oom ? -1 : 0;
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
		r = sq_pgconn_exec(pc, sq_sql_end_session, 2, v, &e);
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
	r = found && !ids.oom ? sq_pgconn_exec(pc, sq_sql_rows_there, 1, v, &e) : NULL;
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

/* Whether partition p's jobs are held back: a shard said it is moving,
 * at the map version the client still has, less than SQ_HELD_S ago. */
static int held_has(const sq_client *c, uint32_t p)
{
	return c->nheld && (c->held[p / 8] & (1u << (p % 8)));
}

/* Forgets the held partitions once the map has moved on or the belief has
 * aged: the next pass asks their shards again. */
static void held_expire(sq_client *c)
{
	if (c->nheld &&
	    (c->held_version != c->map_version || sq_mono_s() - c->held_at >= SQ_HELD_S)) {
		memset(c->held, 0, c->partitions / 8 + 1);
		c->nheld = 0;
	}
}

/* Holds the partitions a "moving" answer names: its DETAIL is "moving: P1,
 * P2,..." from a shard of schema 10 (sql/shard/010_moving_list.sql); an
 * older shard's names one partition, bare, and holds nothing here. The
 * number of partitions newly held. */
static size_t held_add(sq_client *c, const char *detail)
{
	static const char tag[] = "moving: ";
	size_t added = 0;
	if (!detail || strncmp(detail, tag, sizeof(tag) - 1))
		return 0;
	if (!c->held && !(c->held = calloc(c->partitions / 8 + 1, 1)))
		return 0;
	for (const char *p = detail + sizeof(tag) - 1; *p;) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p)
			break;
		if (v < c->partitions && !(c->held[v / 8] & (1u << (v % 8)))) {
			if (!c->nheld) {
				c->held_version = c->map_version;
				c->held_at = sq_mono_s();
			}
			c->held[v / 8] |= (unsigned char)(1u << (v % 8));
			c->nheld++;
			added++;
		}
		p = *end == ',' ? end + 1 : end;
	}
	return added;
}

/* Sends every shard's batch at once. A shard that answers "moving" or
 * "moved" wrote nothing (its pipeline is one transaction): its rows keep
 * id -1, to be routed again; *moved says which answer came (2: moved,
 * 1: moving, 0: none). Other errors are returned; a shard whose connection
 * broke after its part was sent is asked what committed (settle_lost_part). */
static sq_status send_all(sq_client *c, shard_batch *sb, const sq_job_spec *jobs,
			  sq_enqueue_result *res, int *moved, size_t *held, sq_error *err)
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
			/* results: gate, then the check that said so */
			if (st == SQ_EMOVING)
				*held += held_add(c, sq_pgconn_result_detail(pc, 1));
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

/* The partition of every job: a keyed job's from its key; keyless jobs
 * in runs of KEYLESS_RUN, or one by one for a limited type. */
static void route(const sq_client *c, const sq_job_spec *jobs, size_t n, int64_t first,
		  uint32_t *parts)
{
	const char *type_name = NULL;
	int limited = 0;
	uint32_t lead = 0;
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
}

/* One pass's batch: per shard, its rounds and the keys it has seen. */
typedef struct batch {
	shard_batch *sb;
	keyset *ks;
	size_t pending; /* rows in it */
} batch;

static void batch_free(const sq_client *c, batch *bt)
{
	for (int s = 0; s < c->nshards && bt->sb && bt->ks; s++) {
		for (int k = 0; k < MAX_ROUNDS; k++)
			round_free(&bt->sb[s].r[k]);
		sq_buf_free(&bt->sb[s].parts);
		free(bt->sb[s].seen_part);
		free(bt->ks[s].h);
		free(bt->ks[s].count);
		free(bt->ks[s].first);
	}
	free(bt->sb);
	free(bt->ks);
	bt->sb = NULL;
	bt->ks = NULL;
}

/* Adds partition part to the shard's list for the gate's check, once. */
static int batch_add_part(const sq_client *c, shard_batch *b, uint32_t part)
{
	if (!b->seen_part) {
		if (!(b->seen_part = calloc(c->partitions / 8 + 1, 1)))
			return -1;
		sq_arr_open(&b->parts);
	}
	if (!(b->seen_part[part / 8] & (1u << (part % 8)))) {
		b->seen_part[part / 8] |= (unsigned char)(1u << (part % 8));
		sq_arr_i64(&b->parts, part);
	}
	return 0;
}

/* A shard's key set, sized for the n jobs of the call. */
static int keyset_init(keyset *k, size_t n)
{
	k->cap = 64;
	while (k->cap < 2 * n)
		k->cap *= 2;
	k->h = calloc(k->cap, sizeof(uint64_t));
	k->count = calloc(k->cap, sizeof(int));
	k->first = calloc(k->cap, sizeof(size_t));
	return k->h && k->count && k->first ? 0 : -1;
}

/* Puts job i in the round of its shard that its key allows (a key seen
 * before in the batch goes one round later), or makes it an alias of the
 * first copy of its key under policy ignore. */
static sq_status batch_add(sq_client *c, batch *bt, const sq_job_spec *jobs, size_t n, size_t i,
			   int64_t first, uint32_t part, sq_enqueue_result *res, size_t *alias,
			   sq_error *err)
{
	const sq_job_spec *j = &jobs[i];
	int s = c->map[part], rnd = 0;
	shard_batch *b = &bt->sb[s];
	res[i].shard = s;
	if (batch_add_part(c, b, part))
		return sq_err(err, SQ_ENOMEM, "out of memory");
	if (j->key) {
		keyset *k = &bt->ks[s];
		size_t f;
		if (!k->h && keyset_init(k, n))
			return sq_err(err, SQ_ENOMEM, "out of memory");
		rnd = keyset_bump(k, j->type, j->key, i, &f);
		/* under ignore, later copies in the batch are the first's duplicates */
		if (rnd && sq_config_type(c->cfg, j->type)->dedup == SQ_DEDUP_IGNORE) {
			alias[i] = f;
			return SQ_OK;
		}
	}
	if (rnd >= MAX_ROUNDS)
		return sq_err(err, SQ_EINVAL,
			      "job %zu: key '%s' of type '%s' appears more than %d times in one "
			      "batch; its policy applies them in order, so split the batch",
			      i + 1, j->key, j->type, MAX_ROUNDS);
	while (b->nrounds <= rnd)
		b->nrounds++;
	if (round_add(&b->r[rnd], c, j, sq_make_id(first + (int64_t)i, part), part, i))
		return sq_err(err, SQ_ENOMEM, "out of memory");
	bt->pending++;
	return SQ_OK;
}

/* Builds the batch of the rows still to send (id -1, not an alias) and
 * ends its arrays. */
static sq_status batch_make(sq_client *c, batch *bt, const sq_job_spec *jobs, size_t n,
			    int64_t first, const uint32_t *parts, sq_enqueue_result *res,
			    size_t *alias, sq_error *err)
{
	sq_status st;
	bt->sb = calloc((size_t)c->nshards, sizeof(*bt->sb));
	bt->ks = calloc((size_t)c->nshards, sizeof(*bt->ks));
	bt->pending = 0;
	if (!bt->sb || !bt->ks)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (res[i].id != -1 || alias[i] != i || held_has(c, parts[i]))
			continue;
		if ((st = batch_add(c, bt, jobs, n, i, first, parts[i], res, alias, err)))
			return st;
	}
	for (int s = 0; s < c->nshards; s++) {
		shard_batch *b = &bt->sb[s];
		int oom = 0;
		for (int k = 0; k < b->nrounds; k++)
			oom |= round_close(&b->r[k]);
		if (b->nrounds) {
			sq_arr_close(&b->parts);
			b->parts_val[0] = b->parts.data;
			oom |= b->parts.oom;
		}
		if (oom)
			return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	return SQ_OK;
}

/* After a pass: how many rows are left to send, and how many of those are
 * not held (*sendable). A duplicate that finished between the insert and
 * its lookup left id 0: it is sent again, and counted. */
static size_t rows_left(const sq_client *c, sq_enqueue_result *res, const size_t *alias, size_t n,
			const uint32_t *parts, int *dup_tries, size_t *sendable)
{
	size_t left = 0;
	*sendable = 0;
	for (size_t i = 0; i < n; i++) {
		if (alias[i] != i)
			continue;
		if (res[i].id == 0) {
			res[i].id = -1;
			(*dup_tries)++;
		}
		if (res[i].id == -1) {
			left++;
			*sendable += !held_has(c, parts[i]);
		}
	}
	return left;
}

/* One batch's enqueue under way: sq_enqueue_checked sends it in passes,
 * and waits between them while its only unwritten jobs are those of
 * partitions being moved. */
typedef struct enq_run {
	const sq_job_spec *jobs;
	size_t n;
	sq_enqueue_result *res;
	int64_t first;   /* the id block's first id */
	uint32_t *parts; /* each job's partition */
	size_t *alias;   /* a key's later copy under policy ignore: its first's index */
	int dup_tries, move_tries;
	double deadline; /* the moving wait's end, monotonic s (0: none yet) */
} enq_run;

/* Takes the batch's ids and routes it; every result starts "not written".
 * On an error, enq_end is still called. */
static sq_status enq_begin(sq_client *c, enq_run *r, const sq_job_spec *jobs, size_t n,
			   sq_enqueue_result *res, sq_error *err)
{
	sq_status st;
	memset(r, 0, sizeof(*r));
	r->jobs = jobs;
	r->n = n;
	r->res = res;
	for (size_t i = 0; i < n; i++) {
		res[i].id = -1;
		res[i].outcome = SQ_ENQ_NOT_WRITTEN;
		res[i].shard = -1;
	}
	if ((st = sq_client_take_ids(c, n, &r->first, err)))
		return st;
	if (!(r->alias = malloc(n * sizeof(size_t))))
		return sq_err(err, SQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		r->alias[i] = i;
	if (!(r->parts = malloc(n * sizeof(uint32_t))))
		return sq_err(err, SQ_ENOMEM, "out of memory");
	route(c, jobs, n, r->first, r->parts);
	return SQ_OK;
}

/* Sends the rows in passes until each is answered, or until only rows of
 * partitions a shard said are moving are left (*waiting). A shard that
 * answers "moving" names its moving partitions: the pass after it sends
 * the shard's other rows at once, and only those partitions' rows wait.
 * One answering "moved" leaves its rows to be routed again by the
 * refreshed map. A duplicate that finished between our insert and its
 * lookup is sent again too (rare, bounded). */
static sq_status enq_send(sq_client *c, enq_run *r, int *waiting, sq_error *err)
{
	sq_status st;
	*waiting = 0;
	sq_client_check_map(c); /* a move may have switched: LISTEN says so */
	held_expire(c);
	for (;;) {
		int moved = 0;
		size_t newly_held = 0, sendable;
		batch bt = {NULL, NULL, 0};
		st = batch_make(c, &bt, r->jobs, r->n, r->first, r->parts, r->res, r->alias, err);
		if (st == SQ_OK && bt.pending)
			st = send_all(c, bt.sb, r->jobs, r->res, &moved, &newly_held, err);
		batch_free(c, &bt);
		sq_client_reset(c);
		if (st != SQ_OK)
			return st;
		if (!rows_left(c, r->res, r->alias, r->n, r->parts, &r->dup_tries, &sendable))
			return SQ_OK;
		if (r->dup_tries > 3 * (int)r->n)
			return sq_err(err, SQ_EDB,
				      "some jobs could not be placed (a duplicate kept finishing "
				      "concurrently); enqueue them again");
		if (moved == 2) {
			if ((st = sq_client_wait_moved(c, 1, &r->move_tries, &r->deadline, err)))
				return st;
			held_expire(c);
			continue;
		}
		/* nothing left but held rows, or "moving" that named no partition
		 * (a shard of schema 9 or older): wait for the move */
		if (!sendable || (moved == 1 && !newly_held)) {
			*waiting = 1;
			return SQ_OK;
		}
	}
}

/* How long to wait before the next enq_send, in seconds; SQ_EMOVING once
 * the batch has waited moving_wait. */
static sq_status enq_delay(sq_client *c, enq_run *r, double *delay, sq_error *err)
{
	return sq_client_moving_delay(c, &r->move_tries, &r->deadline, delay, err);
}

/* Settles the results of a key's later copies, and frees the run. */
static void enq_end(enq_run *r)
{
	if (r->alias)
		settle_aliases(r->res, r->alias, r->n);
	free(r->alias);
	free(r->parts);
	memset(r, 0, sizeof(*r));
}

sq_status sq_enqueue(sq_client *c, const sq_job_spec *jobs, size_t n, sq_enqueue_result *res,
		     sq_error *err)
{
	sq_status st;
	if (n == 0)
		return SQ_OK;
	if ((st = sq_enqueue_check(c->cfg, jobs, n, err)))
		return st;
	return sq_enqueue_checked(c, jobs, n, res, err);
}

sq_status sq_enqueue_checked(sq_client *c, const sq_job_spec *jobs, size_t n,
			     sq_enqueue_result *res, sq_error *err)
{
	enq_run r;
	int waiting = 0;
	double delay;
	sq_status st = enq_begin(c, &r, jobs, n, res, err);
	while (st == SQ_OK && (st = enq_send(c, &r, &waiting, err)) == SQ_OK && waiting &&
	       (st = enq_delay(c, &r, &delay, err)) == SQ_OK)
		usleep((useconds_t)(delay * 1e6));
	enq_end(&r);
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

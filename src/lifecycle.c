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
#include "sql_queries.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The statements' text, and why each is shaped as it is:
 * sql/queries/fenced.sql (the fenced writes) and lifecycle.sql. */
static const sq_stmt stmt_start = {"sq_start", sq_sql_fenced_start};
static const sq_stmt stmt_heartbeat = {"sq_heartbeat", sq_sql_fenced_heartbeat};
static const sq_stmt stmt_complete = {"sq_complete", sq_sql_fenced_complete};
static const sq_stmt stmt_complete_plain = {"sq_complete_plain", sq_sql_fenced_complete_plain};
static const sq_stmt stmt_fail = {"sq_fail", sq_sql_fenced_fail};
static const sq_stmt stmt_release = {"sq_release", sq_sql_fenced_release};
static const sq_stmt stmt_unclaim = {"sq_unclaim", sq_sql_fenced_unclaim};
static const sq_stmt stmt_not_owned = {"sq_not_owned", sq_sql_not_owned};
static const sq_stmt stmt_cancel = {"sq_cancel", sq_sql_cancel};
static const sq_stmt stmt_retry = {"sq_retry", sq_sql_retry};
static const sq_stmt stmt_cancel_key = {"sq_cancel_key", sq_sql_cancel_key};
static const sq_stmt stmt_get = {"sq_get", sq_sql_get};
static const sq_stmt stmt_get_history = {"sq_get_history", sq_sql_get_history};
static const sq_stmt stmt_get_error = {"sq_get_error", sq_sql_get_error};

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
		/* the ownership report runs in the plan made once per session
		 * (sql/queries/fenced.sql, not_owned), not in the write's mode:
		 * a batch of more than SQ_GENERIC_PLAN_ROWS is planned for its
		 * values */
		sq_client_push_plans(c, s, 1);
		r->base = c->shards[s].qn;
		sq_client_push_gate(c, s);
		sq_pgconn_push(&c->shards[s], &stmt_not_owned, 1, r->parts_val);
		sq_client_push_plans(c, s, r->n <= SQ_GENERIC_PLAN_ROWS);
		r->write = c->shards[s].qn;
		sq_pgconn_push(&c->shards[s], o->stmt, o->nparams, r->vals);
		/* jobs back behind the claims' cursors, with the order key they
		 * had (a failed job's is now or later: after them) */
		if (o->stmt == &stmt_release || o->stmt == &stmt_unclaim)
			sq_client_claim_rewind(c, s);
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
			sq_status why = !strcmp(st, "moving_out") || !strcmp(st, "importing") ||
							!strcmp(st, "adopted")
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

/* Cancel and retry by id: the same machinery without a fence on worker. */
static sq_status ids_pass(sq_client *c, const sq_stmt *stmt, const int64_t *ids, size_t n,
			  sq_status *out, int *moved, sq_error *err);

static sq_status by_ids(sq_client *c, const sq_stmt *stmt, const int64_t *ids, size_t n,
			sq_status *out, sq_error *err)
{
	int tries = 0, moved = 0;
	double deadline = 0;
	sq_status st;
	for (size_t i = 0; i < n; i++)
		out[i] = SQ_EINVAL; /* to do */
	sq_client_check_map(c);
	while ((st = ids_pass(c, stmt, ids, n, out, &moved, err)) == SQ_OK && moved) {
		if ((st = sq_client_wait_moved(c, moved == 2, &tries, &deadline, err)))
			break;
	}
	for (size_t i = 0; i < n; i++)
		if (out[i] == SQ_EINVAL) /* not answered: the call's error */
			out[i] = st != SQ_OK ? st : SQ_EDB;
	return st;
}

sq_status sq_cancel(sq_client *c, const int64_t *ids, size_t n, sq_status *out, sq_error *err)
{
	return by_ids(c, &stmt_cancel, ids, n, out, err);
}

sq_status sq_retry(sq_client *c, const int64_t *ids, size_t n, sq_status *out, sq_error *err)
{
	return by_ids(c, &stmt_retry, ids, n, out, err);
}

/* One shard's answer to ids_pass: an id it returns is done (SQ_OK), or,
 * with a second column that is false, found but not in a state the
 * statement acts on (SQ_ESTATE); an id it does not return is not there. */
static void ids_answer(sq_client *c, int s, PGresult *r, const int64_t *ids, size_t n,
		       sq_status *out)
{
	for (size_t i = 0; i < n; i++)
		if (out[i] == SQ_EINVAL && sq_shard_of_id(c, ids[i]) == s)
			out[i] = SQ_ENOTFOUND;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t id = atoll(PQgetvalue(r, row, 0));
		int done = PQnfields(r) < 2 || !strcmp(PQgetvalue(r, row, 1), "t");
		for (size_t i = 0; i < n; i++)
			if (ids[i] == id)
				out[i] = done ? SQ_OK : SQ_ESTATE;
	}
}

/* Runs stmt on the ids whose out[] is SQ_EINVAL ("to do"); a shard that
 * answers moving/moved leaves its ids to do, and *moved says so (1 moving,
 * 2 moved). */
static sq_status ids_pass(sq_client *c, const sq_stmt *stmt, const int64_t *ids, size_t n,
			  sq_status *out, int *moved, sq_error *err)
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
		sq_pgconn_push(&c->shards[s], stmt, 1, &vals[2 * s]);
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
		ids_answer(c, s, c->shards[s].res[2], ids, n, out);
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
	if (!sq_config_type(c->cfg, type))
		return sq_err(err, SQ_EINVAL, "unknown type '%s': give a [type] of the config",
			      type);
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

/* The shard other than s that answers st (get_history, get_error) for the
 * id in v with a row: a job that finished in a partition that moved since
 * (its history stays where it ran). -1 and SQ_OK: none; else the run's
 * error, as a shard that does not answer may hold it. */
static int found_elsewhere(sq_client *c, int s, const sq_stmt *st, const char *const *v,
			   sq_status *status, sq_error *err)
{
	int at = -1;
	sq_client_reset(c);
	for (int o = 0; o < c->nshards; o++)
		if (o != s)
			sq_pgconn_push(&c->shards[o], st, 1, v);
	*status = c->nshards > 1 ? sq_client_run(c, err) : SQ_OK;
	for (int o = 0; *status == SQ_OK && at < 0 && o < c->nshards; o++)
		if (o != s && PQntuples(c->shards[o].res[0]) > 0)
			at = o;
	return at;
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
	PGresult *r = NULL;
	int history = 0; /* r is a history row */
	if (st == SQ_OK) {
		r = c->shards[s].res[0];
		if (PQntuples(r) == 0)
			r = c->shards[s].res[1], history = 1;
	}
	if (st == SQ_OK && PQntuples(r) == 0) {
		int o = found_elsewhere(c, s, &stmt_get_history, v, &st, err);
		r = o >= 0 ? c->shards[o].res[0] : NULL;
		s = o >= 0 ? o : s;
	}
	if (st == SQ_OK && !r)
		st = sq_err(err, SQ_ENOTFOUND,
			    "no job with id %lld on any shard (finished without "
			    "history, or never existed)",
			    (long long)id);
	else if (st == SQ_OK && sq_jobrow_parse(r, 0, s, job))
		st = sq_err(err, SQ_ENOMEM, "out of memory");
	else if (st == SQ_OK && history)
		sq_job_history_budget(c->cfg, job);
	sq_client_reset(c);
	return st;
}

sq_status sq_get_job_error(sq_client *c, int64_t id, char **last_error, sq_error *err)
{
	char ids[24];
	const char *v[1] = {ids};
	*last_error = NULL;
	if (id <= 0)
		return sq_err(err, SQ_EINVAL, "job id %lld is not valid", (long long)id);
	sq_client_check_map(c);
	int s = sq_shard_of_id(c, id);
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	sq_client_reset(c);
	sq_pgconn_push(&c->shards[s], &stmt_get_error, 1, v);
	sq_status st = sq_client_run(c, err);
	PGresult *r = st == SQ_OK ? c->shards[s].res[0] : NULL;
	if (st == SQ_OK && PQntuples(r) == 0) {
		int o = found_elsewhere(c, s, &stmt_get_error, v, &st, err);
		r = o >= 0 ? c->shards[o].res[0] : NULL;
	}
	if (st == SQ_OK && !r)
		st = sq_err(err, SQ_ENOTFOUND, "no job with id %lld on any shard", (long long)id);
	else if (st == SQ_OK && !PQgetisnull(r, 0, 0) &&
		 !(*last_error = strdup(PQgetvalue(r, 0, 0))))
		st = sq_err(err, SQ_ENOMEM, "out of memory");
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

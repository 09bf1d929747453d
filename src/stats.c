/* stats.c - per shard, per type, per status counts; oldest ready job;
 * expired leases; partition markers. One pipeline per shard, all at once. */
#include "client.h"
#include "buf.h"
#include "error.h"
#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sq_stmt stmt_stats = {
	"sq_stats", "SELECT task, status::text, count(*),"
		    "       COALESCE((extract(epoch from now() - min(schedule_time)"
		    "                 FILTER (WHERE status = 'ready' AND schedule_time <= now())) "
		    "* 1000)::bigint, "
		    "-1),"
		    "       count(*) FILTER (WHERE status IN ('starting', 'running')"
		    "                          AND expected_status_change_time < now())"
		    "  FROM shardq.jobs GROUP BY task, status"
		    " UNION ALL "
		    "SELECT task, status::text, count(*), -1, 0 FROM shardq.jobs_history GROUP BY "
		    "task, status"};

static const sq_stmt stmt_parts = {
	"sq_stats_parts",
	"SELECT count(*) FILTER (WHERE state = 'owned'),"
	"       count(*) FILTER (WHERE state::text IN ('importing', 'moving_out', 'adopted'))"
	"  FROM shardq.partition_state"};

/* What holds vacuum back on the shard's server (sessions of every
 * database: a table's horizon counts them all but the other databases'
 * long transactions only for shared catalogs, and an operator's open
 * transaction is what this is for), and the jobs table's vacuum figures.
 * No table of the queue is read. */
static const sq_stmt stmt_health = {
	"sq_stats_health",
	"SELECT coalesce((SELECT extract(epoch FROM now() - min(a.xact_start)) FROM "
	"pg_stat_activity a"
	"                  WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()), "
	"0),"
	"  greatest(coalesce((SELECT max(age(a.backend_xmin)) FROM pg_stat_activity a"
	"                      WHERE a.pid <> pg_backend_pid()), 0),"
	"           coalesce((SELECT max(age(p.transaction)) FROM pg_prepared_xacts p), 0),"
	"           coalesce((SELECT max(greatest(age(r.xmin), age(r.catalog_xmin)))"
	"                       FROM pg_replication_slots r), 0)),"
	"  coalesce(t.n_dead_tup, -1), coalesce(t.n_live_tup, -1), coalesce(t.autovacuum_count, "
	"-1),"
	"  coalesce(extract(epoch FROM now() - greatest(t.last_autovacuum, t.last_vacuum)), -1),"
	"  coalesce((SELECT extract(epoch FROM max(h.hi) - now())::float8"
	"              FROM shardq.history_partitions() h WHERE NOT h.is_default), 'NaN')"
	"  FROM (SELECT 1) one LEFT JOIN pg_stat_user_tables t"
	"    ON t.relid = 'shardq.jobs'::regclass"};

/* Per configured type, index-driven: ready counted up to $2, then the
 * planner's estimate (shardq.ready_estimate); starting, running and
 * expired leases from jobs_lease; the age of the next due job in claim
 * order from jobs_ready. */
/* clang-format off */
static const sq_stmt stmt_stats_fast = {
	"sq_stats_fast",
	"SELECT t.task, CASE WHEN r.n >= $2 THEN greatest(shardq.ready_estimate(t.task), r.n)"
	"                    ELSE r.n END, r.n >= $2,"
	"  (SELECT count(*) FROM shardq.jobs j"
	"    WHERE " SQ_TASK_IS("j.task", "t.task") " AND j.status = 'starting'),"
	"  (SELECT count(*) FROM shardq.jobs j"
	"    WHERE " SQ_TASK_IS("j.task", "t.task") " AND j.status = 'running'),"
	"  (SELECT count(*) FROM shardq.jobs j WHERE " SQ_TASK_IS("j.task", "t.task")
	"      AND j.status IN ('starting', 'running') AND j.expected_status_change_time < now()),"
	"  COALESCE((SELECT (extract(epoch from now() - j.schedule_time) * 1000)::bigint"
	"     FROM shardq.jobs j WHERE " SQ_TASK_IS("j.task", "t.task") " AND j.status = 'ready'"
	"      AND j.schedule_time <= now()"
	"    ORDER BY j.priority DESC, COALESCE(j.delay_tolerance_time, j.schedule_time), j.id"
	"    LIMIT 1), -1)"
	"  FROM unnest($1::text[]) AS t(task)"
	"  CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM shardq.jobs j"
	"    WHERE " SQ_TASK_IS("j.task", "t.task") " AND j.status = 'ready' LIMIT $2) x) r"};
/* clang-format on */

static sq_stats_row *row_for(sq_stats *st, size_t *cap, int shard, const char *type)
{
	for (size_t i = 0; i < st->nrows; i++)
		if (st->rows[i].shard == shard && !strcmp(st->rows[i].type, type))
			return &st->rows[i];
	if (st->nrows == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		sq_stats_row *n = realloc(st->rows, nc * sizeof(*n));
		if (!n)
			return NULL;
		st->rows = n;
		*cap = nc;
	}
	sq_stats_row *r = &st->rows[st->nrows];
	memset(r, 0, sizeof(*r));
	r->shard = shard;
	r->type = strdup(type);
	r->oldest_ready_age_ms = -1;
	if (!r->type)
		return NULL;
	st->nrows++;
	return r;
}

static int cmp_rows(const void *a, const void *b)
{
	const sq_stats_row *x = a, *y = b;
	if (x->shard != y->shard)
		return x->shard - y->shard;
	return strcmp(x->type, y->type);
}

/* An empty sq_stats for the client's shards (with shard_error[] for the
 * fast kind); NULL when out of memory. */
static sq_stats *stats_new(sq_client *c, int with_errors)
{
	sq_stats *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->nshards = c->nshards;
	st->map_version = c->map_version;
	st->partitions_owned = calloc((size_t)c->nshards, sizeof(int64_t));
	st->partitions_moving = calloc((size_t)c->nshards, sizeof(int64_t));
	if (with_errors)
		st->shard_error = calloc((size_t)c->nshards, sizeof(char *));
	if (with_errors)
		st->health = calloc((size_t)c->nshards, sizeof(sq_shard_health));
	if (!st->partitions_owned || !st->partitions_moving ||
	    (with_errors && (!st->shard_error || !st->health))) {
		sq_stats_free(st);
		return NULL;
	}
	return st;
}

sq_status sq_stats_get(sq_client *c, sq_stats **out, sq_error *err)
{
	size_t cap = 0;
	sq_status rc;
	sq_stats *st = stats_new(c, 0);
	*out = NULL;
	if (!st)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		sq_pgconn_push(&c->shards[s], &stmt_stats, 0, NULL);
		sq_pgconn_push(&c->shards[s], &stmt_parts, 0, NULL);
	}
	rc = sq_client_run(c, err);
	for (int s = 0; rc == SQ_OK && s < c->nshards; s++) {
		PGresult *r = c->shards[s].res[0];
		for (int i = 0; i < PQntuples(r); i++) {
			sq_stats_row *row = row_for(st, &cap, s, PQgetvalue(r, i, 0));
			const char *status = PQgetvalue(r, i, 1);
			if (!row) {
				rc = sq_err(err, SQ_ENOMEM, "out of memory");
				break;
			}
			for (int k = 0; k < SQ_JOB_STATUS_COUNT; k++)
				if (!strcmp(status, sq_job_status_name((sq_job_status)k)))
					row->count[k] += atoll(PQgetvalue(r, i, 2));
			int64_t age = atoll(PQgetvalue(r, i, 3));
			if (age > row->oldest_ready_age_ms)
				row->oldest_ready_age_ms = age;
			row->expired_leases += atoll(PQgetvalue(r, i, 4));
		}
		r = c->shards[s].res[1];
		st->partitions_owned[s] = atoll(PQgetvalue(r, 0, 0));
		st->partitions_moving[s] = atoll(PQgetvalue(r, 0, 1));
	}
	sq_client_reset(c);
	if (rc != SQ_OK) {
		sq_stats_free(st);
		return rc;
	}
	if (st->nrows > 1)
		qsort(st->rows, st->nrows, sizeof(*st->rows), cmp_rows);
	*out = st;
	return SQ_OK;
}

static void read_health(sq_shard_health *h, PGresult *r)
{
	h->oldest_xact_s = atof(PQgetvalue(r, 0, 0));
	h->xmin_age = atoll(PQgetvalue(r, 0, 1));
	h->jobs_dead_rows = atoll(PQgetvalue(r, 0, 2));
	h->jobs_live_rows = atoll(PQgetvalue(r, 0, 3));
	h->jobs_autovacuums = atoll(PQgetvalue(r, 0, 4));
	h->jobs_vacuum_age_s = atof(PQgetvalue(r, 0, 5));
	h->history_ahead_s = atof(PQgetvalue(r, 0, 6));
}

sq_status sq_stats_fast(sq_client *c, int64_t ready_cap, sq_stats **out, sq_error *err)
{
	size_t cap = 0;
	sq_status rc = SQ_OK;
	char capv[32];
	sq_buf types;
	sq_stats *st = stats_new(c, 1);
	*out = NULL;
	if (!st)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	snprintf(capv, sizeof(capv), "%lld", (long long)(ready_cap > 0 ? ready_cap : 10000));
	sq_buf_init(&types);
	sq_arr_open(&types);
	for (int i = 0; i < c->cfg->ntypes; i++)
		sq_arr_str(&types, c->cfg->types[i].name);
	sq_arr_close(&types);
	const char *vals[2] = {types.data, capv};
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		sq_pgconn_push(&c->shards[s], &stmt_stats_fast, 2, vals);
		sq_pgconn_push(&c->shards[s], &stmt_parts, 0, NULL);
		sq_pgconn_push(&c->shards[s], &stmt_health, 0, NULL);
	}
	sq_error run_err;
	sq_status run = sq_client_run(c, &run_err);
	int readable = 0;
	for (int s = 0; s < c->nshards; s++) {
		sq_pgconn *pc = &c->shards[s];
		sq_error e;
		if (pc->failed || pc->nres < 3) {
			st->shard_error[s] = strdup(run != SQ_OK ? run_err.msg : "no answer");
			continue;
		}
		if (sq_pgconn_result_error(pc, &e) != SQ_OK) {
			st->shard_error[s] = strdup(e.msg);
			continue;
		}
		readable++;
		PGresult *r = pc->res[0];
		for (int i = 0; i < PQntuples(r); i++) {
			sq_stats_row *row = row_for(st, &cap, s, PQgetvalue(r, i, 0));
			if (!row) {
				rc = sq_err(err, SQ_ENOMEM, "out of memory");
				break;
			}
			row->count[SQ_READY] = atoll(PQgetvalue(r, i, 1));
			row->ready_estimated = PQgetvalue(r, i, 2)[0] == 't';
			row->count[SQ_STARTING] = atoll(PQgetvalue(r, i, 3));
			row->count[SQ_RUNNING] = atoll(PQgetvalue(r, i, 4));
			row->expired_leases = atoll(PQgetvalue(r, i, 5));
			row->oldest_ready_age_ms = atoll(PQgetvalue(r, i, 6));
			row->count[SQ_COMPLETED] = row->count[SQ_FAILED] =
				row->count[SQ_CANCELLED] = -1;
		}
		r = pc->res[1];
		st->partitions_owned[s] = atoll(PQgetvalue(r, 0, 0));
		st->partitions_moving[s] = atoll(PQgetvalue(r, 0, 1));
		read_health(&st->health[s], pc->res[2]);
	}
	sq_client_reset(c);
	sq_buf_free(&types);
	if (rc == SQ_OK && readable == 0 && c->nshards > 0)
		rc = sq_err(err, run != SQ_OK ? run_err.code : SQ_ECONN,
			    "no shard could be read: %s",
			    st->shard_error[0] ? st->shard_error[0] : "?");
	if (rc != SQ_OK) {
		sq_stats_free(st);
		return rc;
	}
	if (st->nrows > 1)
		qsort(st->rows, st->nrows, sizeof(*st->rows), cmp_rows);
	*out = st;
	return SQ_OK;
}

void sq_stats_free(sq_stats *s)
{
	if (!s)
		return;
	if (s->shard_error)
		for (int i = 0; i < s->nshards; i++)
			free(s->shard_error[i]);
	free(s->shard_error);
	for (size_t i = 0; i < s->nrows; i++)
		free(s->rows[i].type);
	free(s->rows);
	free(s->partitions_owned);
	free(s->partitions_moving);
	free(s->health);
	free(s);
}

static const sq_stmt stmt_failed = {
	"sq_failed_recent",
	"SELECT id, task, attempt - attempt_base, left(coalesce(last_error, ''), 500),"
	"       (extract(epoch from updated_at) * 1000000)::bigint"
	"  FROM shardq.jobs WHERE status = 'failed' ORDER BY updated_at DESC LIMIT $1"};

static int cmp_failed(const void *a, const void *b)
{
	const sq_failed_job *x = a, *y = b;
	return x->failed_us > y->failed_us ? -1 : x->failed_us < y->failed_us;
}

sq_status sq_failed_recent(sq_client *c, int limit, sq_failed_job **out, size_t *n, sq_error *err)
{
	char lim[16];
	const char *vals[1] = {lim};
	*out = NULL;
	*n = 0;
	if (limit <= 0)
		return SQ_OK;
	snprintf(lim, sizeof(lim), "%d", limit);
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++)
		sq_pgconn_push(&c->shards[s], &stmt_failed, 1, vals);
	sq_status rc = sq_client_run(c, err);
	size_t total = 0;
	for (int s = 0; s < c->nshards; s++)
		if (!c->shards[s].failed && c->shards[s].nres > 0 &&
		    PQresultStatus(c->shards[s].res[0]) == PGRES_TUPLES_OK)
			total += (size_t)PQntuples(c->shards[s].res[0]);
	sq_failed_job *v = total ? calloc(total, sizeof(*v)) : NULL;
	if (total && !v) {
		sq_client_reset(c);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	size_t k = 0;
	for (int s = 0; s < c->nshards; s++) {
		if (c->shards[s].failed || c->shards[s].nres < 1 ||
		    PQresultStatus(c->shards[s].res[0]) != PGRES_TUPLES_OK)
			continue;
		PGresult *r = c->shards[s].res[0];
		for (int i = 0; i < PQntuples(r); i++, k++) {
			v[k].id = atoll(PQgetvalue(r, i, 0));
			v[k].shard = s;
			snprintf(v[k].type, sizeof(v[k].type), "%s", PQgetvalue(r, i, 1));
			v[k].tries = atoi(PQgetvalue(r, i, 2));
			snprintf(v[k].last_error, sizeof(v[k].last_error), "%s",
				 PQgetvalue(r, i, 3));
			v[k].failed_us = atoll(PQgetvalue(r, i, 4));
		}
	}
	sq_client_reset(c);
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_failed);
	if (k > (size_t)limit)
		k = (size_t)limit;
	*out = v;
	*n = k;
	/* the shards that answered are shown even if one did not */
	return k || rc == SQ_OK ? SQ_OK : rc;
}

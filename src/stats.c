/* stats.c - per shard, per type, per status counts; oldest ready job;
 * expired leases; partition markers. One pipeline per shard, all at once. */
#include "client.h"
#include "error.h"

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
	"sq_stats_parts", "SELECT count(*) FILTER (WHERE state = 'owned'),"
			  "       count(*) FILTER (WHERE state IN ('importing', 'moving_out'))"
			  "  FROM shardq.partition_state"};

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

sq_status sq_stats_get(sq_client *c, sq_stats **out, sq_error *err)
{
	sq_stats *st = calloc(1, sizeof(*st));
	size_t cap = 0;
	sq_status rc;
	*out = NULL;
	if (!st)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	st->nshards = c->nshards;
	st->map_version = c->map_version;
	st->partitions_owned = calloc((size_t)c->nshards, sizeof(int64_t));
	st->partitions_moving = calloc((size_t)c->nshards, sizeof(int64_t));
	if (!st->partitions_owned || !st->partitions_moving) {
		sq_stats_free(st);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
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
			for (int k = 0; k < 6; k++)
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

void sq_stats_free(sq_stats *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nrows; i++)
		free(s->rows[i].type);
	free(s->rows);
	free(s->partitions_owned);
	free(s->partitions_moving);
	free(s);
}

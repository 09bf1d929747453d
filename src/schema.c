/* schema.c - `shardq init`: applies the versioned migrations on the meta
 * database and every shard, plans the first partition map, and marks each
 * shard's partitions owned. Every step is safe to run again. */
#include "buf.h"
#include "client.h"
#include "error.h"
#include "hrw.h"
#include "schema.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static PGresult *exec(sq_pgconn *pc, const char *sql, int n, const char *const *v, sq_error *err)
{
	return sq_pgconn_exec(pc, sql, n, v, err);
}

static sq_status exec_ok(sq_pgconn *pc, const char *sql, int n, const char *const *v, sq_error *err)
{
	PGresult *r = exec(pc, sql, n, v, err);
	if (!r)
		return err->code;
	PQclear(r);
	return SQ_OK;
}

/* Applies the migrations of one set inside the caller's transaction. */
static sq_status migrate(sq_pgconn *pc, const char *schema, const struct sq_migration *m, int count,
			 sq_error *err)
{
	char sql[512];
	PGresult *r;
	int have;
	snprintf(sql, sizeof(sql),
		 "CREATE SCHEMA IF NOT EXISTS %s; "
		 "CREATE TABLE IF NOT EXISTS %s.schema_version (version integer PRIMARY KEY, "
		 "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
		 schema, schema);
	if (exec_ok(pc, sql, 0, NULL, err))
		return err->code;
	snprintf(sql, sizeof(sql), "SELECT coalesce(max(version), 0) FROM %s.schema_version",
		 schema);
	if (!(r = exec(pc, sql, 0, NULL, err)))
		return err->code;
	have = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	for (int i = 0; i < count; i++) {
		char ver[16];
		const char *v[2] = {ver, m[i].name};
		if (m[i].version <= have)
			continue;
		if (exec_ok(pc, m[i].sql, 0, NULL, err)) {
			sq_err_prefix(err, "migration %s", m[i].name);
			return err->code;
		}
		snprintf(ver, sizeof(ver), "%d", m[i].version);
		snprintf(sql, sizeof(sql),
			 "INSERT INTO %s.schema_version (version, name) VALUES ($1, $2)", schema);
		if (exec_ok(pc, sql, 2, v, err))
			return err->code;
	}
	if (have > m[count - 1].version)
		return sq_err(err, SQ_ESTATE,
			      "%s: schema %s is at version %d, newer than this build knows (%d); "
			      "upgrade shardq",
			      pc->shard_id, schema, have, m[count - 1].version);
	return SQ_OK;
}

static void new_cluster_id(char *out, size_t len)
{
	unsigned char rnd[8] = {0};
	int fd = open("/dev/urandom", O_RDONLY);
	if (fd >= 0) {
		if (read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd))
			memset(rnd, 0, sizeof(rnd));
		close(fd);
	}
	snprintf(out, len, "%02x%02x%02x%02x%02x%02x%02x%02x-%lx", rnd[0], rnd[1], rnd[2], rnd[3],
		 rnd[4], rnd[5], rnd[6], rnd[7], (unsigned long)time(NULL));
}

/* Meta database: schema, cluster row, shards, and on first run the map. */
static sq_status init_meta(sq_client *c, int *created, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	sq_pgconn *m = &c->meta;
	PGresult *r;
	char parts[16], cid[64];
	sq_status st;

	if (exec_ok(m, "BEGIN; SELECT pg_advisory_xact_lock(" SQ_INIT_KEY ")", 0, NULL, err))
		return err->code;
	if ((st = migrate(m, "shardq_meta", sq_meta_migrations, sq_meta_migration_count, err)))
		goto fail;
	if (!(r = exec(m, "SELECT partitions FROM shardq_meta.cluster", 0, NULL, err)))
		goto fail;
	if (PQntuples(r) == 1) {
		uint32_t have = (uint32_t)atol(PQgetvalue(r, 0, 0));
		PQclear(r);
		if (have != cfg->partitions) {
			sq_err(err, SQ_ESTATE,
			       "the cluster was initialised with %u partitions but the config says "
			       "%u; "
			       "the partition count cannot change: set [cluster] partitions = %u",
			       have, cfg->partitions, have);
			goto fail;
		}
		*created = 0;
	} else {
		PQclear(r);
		*created = 1;
		new_cluster_id(cid, sizeof(cid));
		snprintf(parts, sizeof(parts), "%u", cfg->partitions);
		const char *v[2] = {cid, parts};
		if (exec_ok(m,
			    "INSERT INTO shardq_meta.cluster (cluster_id, partitions) VALUES ($1, "
			    "$2)",
			    2, v, err))
			goto fail;
	}
	/* shards: new ids are registered; weights follow the config */
	for (int i = 0; i < cfg->nshards; i++) {
		char w[32];
		snprintf(w, sizeof(w), "%.17g", cfg->shards[i].weight);
		const char *v[2] = {cfg->shards[i].id, w};
		if (exec_ok(m,
			    "INSERT INTO shardq_meta.shards (shard_id, weight) VALUES ($1, $2) "
			    "ON CONFLICT (shard_id) DO UPDATE SET weight = EXCLUDED.weight",
			    2, v, err))
			goto fail;
	}
	if (*created) {
		const char *ids[SQ_MAX_SHARDS];
		double ws[SQ_MAX_SHARDS];
		int *plan = malloc(sizeof(int) * cfg->partitions);
		sq_buf pa, sa;
		if (!plan) {
			sq_err(err, SQ_ENOMEM, "out of memory");
			goto fail;
		}
		for (int i = 0; i < cfg->nshards; i++)
			ids[i] = cfg->shards[i].id, ws[i] = cfg->shards[i].weight;
		if (sq_hrw_plan(cfg->partitions, cfg->nshards, ids, ws, plan)) {
			free(plan);
			sq_err(err, SQ_ECONFIG,
			       "every shard has weight 0; give at least one a weight above 0");
			goto fail;
		}
		sq_buf_init(&pa);
		sq_buf_init(&sa);
		sq_arr_open(&pa);
		sq_arr_open(&sa);
		for (uint32_t p = 0; p < cfg->partitions; p++) {
			sq_arr_i64(&pa, p);
			sq_arr_str(&sa, ids[plan[p]]);
		}
		sq_arr_close(&pa);
		sq_arr_close(&sa);
		free(plan);
		const char *v[2] = {pa.data, sa.data};
		st = exec_ok(m,
			     "INSERT INTO shardq_meta.partition_map (partition, shard_id) "
			     "SELECT * FROM unnest($1::int[], $2::text[])",
			     2, v, err);
		sq_buf_free(&pa);
		sq_buf_free(&sa);
		if (st)
			goto fail;
	}
	if (exec_ok(m, "COMMIT", 0, NULL, err))
		return err->code;
	return SQ_OK;
fail : {
	sq_error ignore;
	PGresult *rb = exec(m, "ROLLBACK", 0, NULL, &ignore);
	if (rb)
		PQclear(rb);
}
	return err->code;
}

/* One shard: schema, identity, and ownership of its mapped partitions. */
static sq_status init_shard(sq_client *c, int s, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	sq_pgconn *pc = &c->shards[s];
	char parts[16];
	PGresult *r;
	sq_buf pa;

	if (exec_ok(pc, "BEGIN; SELECT pg_advisory_xact_lock(" SQ_INIT_KEY ")", 0, NULL, err))
		return err->code;
	if (migrate(pc, "shardq", sq_shard_migrations, sq_shard_migration_count, err))
		goto fail;
	if (!(r = exec(pc, "SELECT shard_id, cluster_id, partitions FROM shardq.node", 0, NULL,
		       err)))
		goto fail;
	if (PQntuples(r) == 1) {
		int bad = strcmp(PQgetvalue(r, 0, 0), cfg->shards[s].id) ||
			  strcmp(PQgetvalue(r, 0, 1), c->cluster_id);
		if (bad)
			sq_err(err, SQ_ESTATE,
			       "shard %s (%s): this database already belongs to shard '%s' of "
			       "cluster %s "
			       "(this cluster is %s); check the dsn of [shard %s]",
			       cfg->shards[s].id, pc->addr, PQgetvalue(r, 0, 0),
			       PQgetvalue(r, 0, 1), c->cluster_id, cfg->shards[s].id);
		PQclear(r);
		if (bad)
			goto fail;
	} else {
		PQclear(r);
		snprintf(parts, sizeof(parts), "%u", cfg->partitions);
		const char *v[3] = {cfg->shards[s].id, c->cluster_id, parts};
		if (exec_ok(pc,
			    "INSERT INTO shardq.node (shard_id, cluster_id, partitions) VALUES "
			    "($1,$2,$3)",
			    3, v, err))
			goto fail;
	}
	sq_buf_init(&pa);
	sq_arr_open(&pa);
	for (uint32_t p = 0; p < cfg->partitions; p++)
		if (c->map[p] == s)
			sq_arr_i64(&pa, p);
	sq_arr_close(&pa);
	{
		const char *v[1] = {pa.data};
		sq_status st = exec_ok(pc,
				       "INSERT INTO shardq.partition_state (partition, state) "
				       "SELECT p, 'owned' FROM unnest($1::int[]) p "
				       "ON CONFLICT (partition) DO NOTHING",
				       1, v, err);
		sq_buf_free(&pa);
		if (st)
			goto fail;
	}
	if (exec_ok(pc, "COMMIT", 0, NULL, err))
		return err->code;
	return SQ_OK;
fail : {
	sq_error ignore;
	PGresult *rb = exec(pc, "ROLLBACK", 0, NULL, &ignore);
	if (rb)
		PQclear(rb);
}
	return err->code;
}

sq_status sq_init(sq_client *c, int *created, sq_error *err)
{
	int made = 0;
	sq_status st = init_meta(c, &made, err);
	if (created)
		*created = made;
	if (st)
		return st;
	if ((st = sq_client_refresh_map(c, err)))
		return st;
	for (int s = 0; s < c->nshards; s++)
		if ((st = init_shard(c, s, err)))
			return st;
	return SQ_OK;
}

/* client.c - an sq_client: connections to the meta database and every
 * shard, the cached partition map, and job-id blocks. */
#include "client.h"
#include "buf.h"
#include "clock.h"
#include "error.h"
#include "failpoint.h"
#include "pool.h"
#include "schema.h"
#include "sql_queries.h"
#include "watch.h"

#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ID_BLOCK 65536
/* A map LISTEN connection that could not be made is tried again after
 * this long; the version poll on the meta connection covers the time. */
#define SQ_MAP_LISTEN_RETRY_S 30.0

static void map_listen_open(sq_client *c);

/* The statements' text: sql/queries/client.sql. */
const sq_stmt sq_stmt_gate_shared = {"sq_gate_shared", sq_sql_gate_shared};
const sq_stmt sq_stmt_check_owned = {"sq_check_owned", sq_sql_check_owned};
static const sq_stmt stmt_plans_generic = {"sq_plans_generic", sq_sql_plans_generic};
static const sq_stmt stmt_plans_auto = {"sq_plans_auto", sq_sql_plans_auto};

static char *type_array(const sq_config *cfg, int what)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_arr_open(&b);
	for (int i = 0; i < cfg->ntypes; i++) {
		const sq_type_conf *t = &cfg->types[i];
		char tmp[64];
		switch (what) {
		case 0: sq_arr_str(&b, t->name); continue;
		case 1: sq_arr_i64(&b, t->starting_timeout_ms); continue;
		case 2: sq_arr_i64(&b, t->execution_timeout_ms); continue;
		case 3: sq_arr_i64(&b, t->backoff); continue;
		case 4: sq_arr_i64(&b, t->backoff_base_ms); continue;
		case 5: sq_arr_i64(&b, t->backoff_cap_ms); continue;
		case 6:
			snprintf(tmp, sizeof(tmp), "%.6f,", t->backoff_jitter);
			sq_buf_puts(&b, tmp);
			continue;
		case 7: sq_arr_str(&b, t->history ? "t" : "f"); continue;
		case 8:
			if (t->history)
				sq_arr_str(&b, t->name);
			continue;
		case 9:
			if (t->history)
				sq_arr_i64(&b, sq_retention_days(t));
			continue;
		}
	}
	sq_arr_close(&b);
	return sq_buf_steal(&b);
}

static void build_type_arrays(sq_client *c)
{
	c->ta.names = type_array(c->cfg, 0);
	c->ta.start_ms = type_array(c->cfg, 1);
	c->ta.exec_ms = type_array(c->cfg, 2);
	c->ta.backoff = type_array(c->cfg, 3);
	c->ta.base_ms = type_array(c->cfg, 4);
	c->ta.cap_ms = type_array(c->cfg, 5);
	c->ta.jitter = type_array(c->cfg, 6);
	c->ta.history = type_array(c->cfg, 7);
	c->ta.hist_names = type_array(c->cfg, 8);
	c->ta.hist_days = type_array(c->cfg, 9);
	c->ta.any_history = 0;
	for (int i = 0; i < c->cfg->ntypes; i++)
		c->ta.any_history |= c->cfg->types[i].history;
}

/* The server-side settings of a connection, as libpq's `options`.
 *
 * A client's own shard connections (queue, 1) also turn sequential and
 * bitmap scans off. Every statement they run on shardq.jobs finds its rows
 * by key or reads an index in order, and their plans are cached for the
 * session. A plan made on an empty table, or on the statistics a vacuum
 * leaves on a churned one (many pages, a few live rows), would otherwise
 * read every ready job of a type, by a sequential scan or by a bitmap scan
 * and a sort, on every call until the next ANALYZE (docs/design.md, "Plans
 * that keep to the indexes"). With the settings off a sequential scan is
 * still used where no index can serve (the exact counts of sq_stats_get),
 * never in place of one; a plain index scan does what a bitmap scan would. */
static char *conn_options(const sq_config *cfg, int64_t statement_timeout_ms, const char *role,
			  int queue)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_printf(&b, "-c statement_timeout=%lld -c idle_in_transaction_session_timeout=%lld",
		      (long long)statement_timeout_ms, (long long)cfg->idle_in_tx_timeout_ms);
	if (queue)
		sq_buf_puts(&b, " -c enable_seqscan=off -c enable_bitmapscan=off");
	sq_buf_puts(&b, " -c application_name=");
	for (const char *p = cfg->application_name; p && *p; p++) {
		if (*p == ' ' || *p == '\\')
			sq_buf_putc(&b, '\\');
		sq_buf_putc(&b, *p);
	}
	if (role)
		sq_buf_printf(&b, "-%s", role);
	return sq_buf_steal(&b);
}

static int connect_timeout_s(const sq_config *cfg)
{
	return (int)((cfg->connect_timeout_ms + 999) / 1000);
}

PGconn *sq_connect_plain(const sq_config *cfg, const char *dsn, const char *role,
			 int64_t statement_timeout_ms, char *errbuf, size_t errlen)
{
	char timeout[16];
	char *opts = conn_options(
		cfg, statement_timeout_ms >= 0 ? statement_timeout_ms : cfg->statement_timeout_ms,
		role, 0);
	const char *kw[] = {"dbname", "options", "connect_timeout", NULL};
	const char *vals[] = {dsn, opts, timeout, NULL};
	PGconn *c;
	if (sq_dsn_names_host(dsn))
		sq_failpoint("lookup"); /* libpq looks the name up: a slow name server */
	snprintf(timeout, sizeof(timeout), "%d", connect_timeout_s(cfg));
	c = opts ? PQconnectdbParams(kw, vals, 1) : NULL;
	free(opts);
	if (!c) {
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		snprintf(errbuf, errlen, "%s", PQerrorMessage(c));
		errbuf[strcspn(errbuf, "\n")] = '\0';
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, sq_pq_ignore_notice, NULL);
	sq_conn_hook_call(role, c);
	return c;
}

PGconn *sq_connect_plain_stop(const sq_config *cfg, const char *dsn, const char *shard_id,
			      const char *role, const atomic_int *stop, char *errbuf, size_t errlen)
{
	sq_pgconn pc;
	sq_error e;
	PGconn *c = NULL;
	char *opts = conn_options(cfg, cfg->statement_timeout_ms, role, 0);
	if (!opts ||
	    sq_pgconn_init(&pc, shard_id, dsn, opts, connect_timeout_s(cfg), &e) != SQ_OK) {
		free(opts);
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	free(opts);
	sq_pgconn_set_connect_wait(&pc, SQ_LOOP_CONNECT_WAIT_S);
	for (;;) {
		if (sq_pgconn_ensure(&pc, &e) == SQ_OK) {
			if (!(c = sq_pgconn_detach(&pc)))
				snprintf(errbuf, errlen, "cannot leave pipeline mode");
			break;
		}
		if (!sq_pgconn_connecting(&pc)) {
			snprintf(errbuf, errlen, "%s", e.msg);
			break;
		}
		if (atomic_load(stop)) {
			snprintf(errbuf, errlen, "stopped while connecting (%s)", e.msg);
			break;
		}
		usleep(20000);
	}
	sq_pgconn_close(&pc);
	if (c) {
		PQsetnonblocking(c, 0);
		sq_conn_hook_call(role, c);
	}
	return c;
}

sq_status sq_shard_conn_init(sq_pgconn *pc, const sq_config *cfg, int shard, const char *role,
			     sq_error *err)
{
	char *opts = conn_options(cfg, cfg->statement_timeout_ms, role, 0);
	if (!opts)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	sq_status st = sq_pgconn_init(pc, cfg->shards[shard].id, cfg->shards[shard].dsn, opts,
				      connect_timeout_s(cfg), err);
	free(opts);
	sq_pgconn_set_connect_wait(pc, SQ_LOOP_CONNECT_WAIT_S);
	return st;
}

/* The meta schema from which the map's rows carry the version that last
 * moved them (sql/meta/004_map_change_versions.sql). */
#define META_MAP_VERSIONS 4

/* Reads the cluster row: checks its partition count, and says whether the
 * map may be read incrementally (*since: the rows moved after the version
 * c has; -1: all of them). whole_if_same: at the version c has, read all
 * of it (see below). */
static sq_status read_map_head(sq_client *c, int whole_if_same, int64_t *since, sq_error *err)
{
	PGresult *r = sq_pgconn_exec(&c->meta, sq_sql_map_head, 0, NULL, err);
	if (!r)
		return err ? err->code : SQ_EDB;
	if (PQntuples(r) != 1) {
		PQclear(r);
		return sq_err(err, SQ_ESTATE,
			      "the cluster is not initialised; run 'shardq init' first");
	}
	uint32_t parts = (uint32_t)atol(PQgetvalue(r, 0, 0));
	if (parts != c->cfg->partitions) {
		sq_err(err, SQ_ESTATE,
		       "the cluster was initialised with %u partitions but the config says %u; "
		       "the partition count cannot change: fix [cluster] partitions",
		       parts, c->cfg->partitions);
		PQclear(r);
		return SQ_ESTATE;
	}
	int64_t version = atoll(PQgetvalue(r, 0, 1));
	const char *cluster = PQgetvalue(r, 0, 2);
	sq_client_set_paused(c, PQgetvalue(r, 0, 4));
	/* a map read before, of this cluster, that the new one follows (a meta
	 * database restored from a backup may go back). At the same version
	 * there is nothing new to read: a caller that heard of a move its map
	 * does not show (a shard answered "moved") reads all of it, as before
	 * meta schema 4; one that waits for a move to end reads nothing. */
	int follows = c->map_version > 0 && version >= c->map_version + whole_if_same &&
		      c->cluster_id && strcmp(c->cluster_id, cluster) == 0 &&
		      atoi(PQgetvalue(r, 0, 3)) >= META_MAP_VERSIONS;
	*since = follows ? c->map_version : -1;
	c->map_version = version;
	free(c->cluster_id);
	c->cluster_id = strdup(cluster);
	PQclear(r);
	return SQ_OK;
}

/* Applies rows (partition, shard id[, the version that moved it]) of the
 * map to c->map. */
static sq_status apply_map_rows(sq_client *c, PGresult *r, sq_error *err)
{
	for (int i = 0; i < PQntuples(r); i++) {
		const char *sid = PQgetvalue(r, i, 1);
		int s = sq_config_shard_index(c->cfg, sid);
		uint32_t p = (uint32_t)atol(PQgetvalue(r, i, 0));
		if (s < 0)
			return sq_err(err, SQ_ECONFIG,
				      "the partition map places partitions on shard '%s', which is "
				      "not in the config; add a [shard %s] section with its dsn",
				      sid, sid);
		if (p >= c->partitions)
			return sq_err(err, SQ_ESTATE,
				      "the partition map has partition %u, beyond the %u of the "
				      "cluster; re-run 'shardq init'",
				      p, c->partitions);
		c->map[p] = s;
		/* rows moved after the version read a moment before: the map
		 * is at theirs (partition_map_since) */
		if (PQnfields(r) > 2 && atoll(PQgetvalue(r, i, 2)) > c->map_version)
			c->map_version = atoll(PQgetvalue(r, i, 2));
	}
	return SQ_OK;
}

/* Reads the map from the meta database: all of it the first time (or after
 * the meta database went back), then only the partitions moved since the
 * version c has (c->map_rows_read counts the rows read). */
static sq_status refresh_map(sq_client *c, int whole_if_same, sq_error *err)
{
	int64_t since = -1;
	char since_s[24];
	const char *v[1] = {since_s};
	c->map_checked_at = sq_mono_s();
	c->map_refreshes++;
	sq_status st = read_map_head(c, whole_if_same, &since, err);
	if (st != SQ_OK)
		return st;
	snprintf(since_s, sizeof(since_s), "%lld", (long long)since);
	PGresult *r = since >= 0 ? sq_pgconn_exec(&c->meta, sq_sql_partition_map_since, 1, v, err)
				 : sq_pgconn_exec(&c->meta, sq_sql_partition_map, 0, NULL, err);
	if (!r) {
		c->map_version = 0; /* read it all next time */
		return err ? err->code : SQ_EDB;
	}
	int rows = PQntuples(r);
	c->map_rows_read += (uint64_t)rows;
	if (since < 0 && (uint32_t)PQntuples(r) != c->partitions)
		st = sq_err(err, SQ_ESTATE,
			    "the partition map has %d entries, expected %u; re-run 'shardq init'",
			    PQntuples(r), c->partitions);
	else
		st = apply_map_rows(c, r, err);
	PQclear(r);
	if (st != SQ_OK) {
		c->map_version = 0;
		return st;
	}
	memset(c->map_parts, 0, sizeof(int) * (size_t)c->nshards);
	for (uint32_t p = 0; p < c->partitions; p++)
		c->map_parts[c->map[p]]++;
	if (since < 0 || rows > 0)
		sq_client_claim_rewind(c, -1); /* partitions moved in, with their jobs */
	return SQ_OK;
}

/* Per shard (its index in the config), how many times a client of this
 * process put jobs back behind the claims' cursors: every client's claims
 * there read from the front again (shardqd releases through one client
 * and claims through another). */
static _Atomic uint64_t rewinds[SQ_MAX_SHARDS];

void sq_client_set_paused(sq_client *c, const char *json)
{
	/* a JSON array of type names: [A-Za-z0-9_.:-] (the config's rule), so
	 * no escapes; "" (NULL: meta schema 4) is none */
	c->paused_at = sq_mono_s();
	memset(c->paused, 0, (size_t)(c->cfg->ntypes ? c->cfg->ntypes : 1));
	for (const char *p = json; p && (p = strchr(p, '"')) != NULL;) {
		const char *end = strchr(++p, '"');
		if (!end)
			break;
		for (int i = 0; i < c->cfg->ntypes; i++)
			if (strlen(c->cfg->types[i].name) == (size_t)(end - p) &&
			    !strncmp(c->cfg->types[i].name, p, (size_t)(end - p)))
				c->paused[i] = 1;
		p = end + 1;
	}
}

double sq_client_tend(sq_client *c)
{
	sq_client_check_map(c);
	double next = c->map_checked_at + (double)c->cfg->map_poll_ms / 1000.0 - sq_mono_s();
	if (c->map_asked_at > 0 && next > 0.05)
		next = 0.05; /* its answer, soon */
	return next > 0 ? next : 0;
}

int sq_type_paused(sq_client *c, const char *type)
{
	const sq_type_conf *t = sq_config_type(c->cfg, type);
	/* read now when older than map_poll: a client that only reads (an
	 * admin request's) has no poll of its own under way */
	if (sq_mono_s() - c->paused_at > (double)c->cfg->map_poll_ms / 1000.0) {
		sq_error e;
		PGresult *r = sq_pgconn_exec(&c->meta, sq_sql_map_poll, 0, NULL, &e);
		if (r && PQntuples(r) == 1)
			sq_client_set_paused(c, PQgetvalue(r, 0, 1));
		PQclear(r);
	}
	return t && c->paused[t - c->cfg->types];
}

sq_status sq_type_pause(sq_client *c, const char *type, int paused, sq_error *err)
{
	if (!type || !sq_config_type(c->cfg, type))
		return sq_err(
			err, SQ_EINVAL,
			"unknown type '%s': only a [type] of the config can be paused or resumed",
			type ? type : "(null)");
	const char *v[2] = {type, paused ? "true" : "false"};
	PGresult *r = sq_pgconn_exec(&c->meta, sq_sql_type_pause, 2, v, err);
	if (!r) {
		if (err && strstr(err->msg, "paused_types"))
			return sq_err(err, SQ_ESTATE,
				      "the meta database's schema has no paused types (meta schema "
				      "5); run 'shardq init' to upgrade it");
		return err ? err->code : SQ_EDB;
	}
	sq_client_set_paused(c, PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "");
	PQclear(r);
	return SQ_OK;
}

void sq_client_claim_rewind(sq_client *c, int s)
{
	for (int i = s < 0 ? 0 : s; i < (s < 0 ? c->nshards : s + 1); i++)
		atomic_fetch_add(&rewinds[i], 1);
}

int sq_client_claim_rewound(sq_client *c, int s)
{
	uint64_t now = atomic_load(&rewinds[s]);
	if (now == c->rewind_seen[s])
		return 0;
	c->rewind_seen[s] = now;
	return 1;
}

sq_status sq_client_refresh_map(sq_client *c, sq_error *err)
{
	return refresh_map(c, 1, err);
}

/* Every shard's schema must be one this build speaks: SQ_SHARD_SCHEMA_MIN
 * up to one past its last migration (SQ_SHARD_SCHEMA_AHEAD: each migration
 * keeps the previous release working, docs/operations.md "Upgrading", so a
 * process of this build restarted while the fleet is rolled forward still
 * starts). After an upgrade, `shardq init` applies the new migrations. */
sq_status sq_client_shard_schema(sq_client *c, int s, int *have, sq_error *err)
{
	PGresult *r = sq_pgconn_exec(&c->shards[s], sq_sql_shard_schema_version, 0, NULL, err);
	if (!r)
		return err ? err->code : SQ_EDB;
	*have = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	return SQ_OK;
}

static sq_status check_schema(sq_client *c, sq_error *err)
{
	int want = sq_shard_schema_newest(), have = 0;
	for (int s = 0; s < c->nshards; s++) {
		sq_error e;
		if (!c->shards[s].conn)
			continue; /* down at open (SQ_OPEN_ALLOW_DOWN): checked by its use */
		if (sq_client_shard_schema(c, s, &have, &e))
			return sq_err(err, SQ_ESTATE,
				      "shard %s (%s) has no shardq schema; run 'shardq init' first",
				      c->cfg->shards[s].id, c->shards[s].addr);
		if (have < SQ_SHARD_SCHEMA_MIN)
			return sq_err(
				err, SQ_ESTATE,
				"shard %s (%s) has schema version %d and this shardq needs %d "
				"or newer; run 'shardq init' to upgrade it",
				c->cfg->shards[s].id, c->shards[s].addr, have, SQ_SHARD_SCHEMA_MIN);
		if (have > want + SQ_SHARD_SCHEMA_AHEAD)
			return sq_err(err, SQ_ESTATE,
				      "shard %s (%s) has schema version %d and this shardq runs on "
				      "%d to %d; upgrade shardq to a release of schema %d or %d",
				      c->cfg->shards[s].id, c->shards[s].addr, have,
				      SQ_SHARD_SCHEMA_MIN, want + SQ_SHARD_SCHEMA_AHEAD, have - 1,
				      have);
	}
	return SQ_OK;
}

void sq_client_connect_wait(sq_client *c, double wait_s)
{
	for (int s = 0; s < c->nshards; s++)
		sq_pgconn_set_connect_wait(&c->shards[s], wait_s);
	sq_pgconn_set_connect_wait(&c->meta, wait_s);
}

void sq_client_answer_wait(sq_client *c, double wait_s)
{
	for (int s = 0; s < c->nshards; s++)
		sq_pgconn_set_answer_wait(&c->shards[s], wait_s);
	sq_pgconn_set_answer_wait(&c->meta, wait_s);
}

double sq_client_answer_wait_of(const sq_client *c)
{
	return c->meta.answer_wait_s;
}

double sq_lease_answer_wait(double wait_s, const sq_type_conf *t)
{
	int64_t lease = t->starting_timeout_ms < t->execution_timeout_ms ? t->starting_timeout_ms
									 : t->execution_timeout_ms;
	double w = (double)lease / 8000.0;
	if (w < SQ_ANSWER_WAIT_MIN_S)
		w = SQ_ANSWER_WAIT_MIN_S;
	return wait_s <= 0 || w < wait_s ? w : wait_s;
}

void sq_client_answer_wait_for_lease(sq_client *c, const sq_type_conf *t)
{
	sq_client_answer_wait(c, sq_lease_answer_wait(sq_client_answer_wait_of(c), t));
}

int sq_client_advance_connects(sq_client *c)
{
	int n = sq_pgconn_advance(&c->meta);
	for (int s = 0; s < c->nshards; s++)
		n += sq_pgconn_advance(&c->shards[s]);
	return n;
}

int sq_client_down_shards(const sq_client *c, char *out, size_t len)
{
	int n = 0;
	size_t at = 0;
	if (len)
		out[0] = '\0';
	for (int s = 0; s < c->nshards; s++) {
		const sq_pgconn *pc = &c->shards[s];
		if (pc->conn || sq_pgconn_connecting(pc))
			continue;
		if (at < len) {
			int w = snprintf(out + at, len - at, "%sshard %s (%s): %s", n ? "\n" : "",
					 pc->shard_id, pc->addr,
					 pc->connect_error[0] ? pc->connect_error
							      : "not connected");
			at += w > 0 ? (size_t)w : 0;
		}
		n++;
	}
	return n;
}

/* Each shard's and type's claim yield (at first 1) and cursor. */
static sq_status claim_state_new(sq_client *c)
{
	int n = c->nshards * (c->cfg->ntypes ? c->cfg->ntypes : 1);
	c->yield = malloc(sizeof(double) * (size_t)n);
	c->cursor = calloc((size_t)n, sizeof(sq_claim_cursor));
	c->rewind_seen = calloc((size_t)c->nshards, sizeof(uint64_t));
	c->paused = calloc((size_t)(c->cfg->ntypes ? c->cfg->ntypes : 1), 1);
	if (!c->yield || !c->cursor || !c->rewind_seen || !c->paused)
		return SQ_ENOMEM;
	for (int i = 0; i < n; i++)
		c->yield[i] = 1.0;
	return SQ_OK;
}

sq_status sq_client_open(const sq_config *cfg, unsigned flags, sq_client **out, sq_error *err)
{
	*out = NULL;
	if (flags & ~(SQ_OPEN_FOR_INIT | SQ_OPEN_ALLOW_DOWN))
		return sq_err(err, SQ_EINVAL, "sq_client_open: unknown flags 0x%x",
			      flags & ~(SQ_OPEN_FOR_INIT | SQ_OPEN_ALLOW_DOWN));
	sq_client *c = calloc(1, sizeof(*c));
	char *opts;
	sq_status st = SQ_OK;
	int timeout_s = connect_timeout_s(cfg);
	int for_init = (flags & SQ_OPEN_FOR_INIT) != 0;
	if (!c)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	c->cfg = cfg;
	c->nshards = cfg->nshards;
	c->partitions = cfg->partitions;
	c->base = event_base_new();
	c->shards = calloc((size_t)cfg->nshards, sizeof(sq_pgconn));
	c->map = calloc(cfg->partitions, sizeof(int));
	c->map_parts = calloc((size_t)cfg->nshards, sizeof(int));
	opts = conn_options(cfg, cfg->statement_timeout_ms, NULL, 1);
	if (!c->base || !c->shards || !c->map || !c->map_parts || !opts ||
	    claim_state_new(c) != SQ_OK) {
		free(opts);
		sq_client_close(c);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	build_type_arrays(c);
	/* every shard is tried, so the message names each unreachable one */
	int allow_down = (flags & SQ_OPEN_ALLOW_DOWN) != 0, up = 0;
	char down[sizeof(err->msg)] = "";
	/* all shards at once: n shards take as long as the slowest to connect,
	 * and as long as one connect_timeout when some never answer */
	sq_status *sst = calloc((size_t)cfg->nshards + 1, sizeof(*sst));
	sq_error *serr = calloc((size_t)cfg->nshards + 1, sizeof(*serr));
	int ready = sst && serr;
	for (int i = 0; ready && i < cfg->nshards; i++)
		ready = sq_pgconn_init(&c->shards[i], cfg->shards[i].id, cfg->shards[i].dsn, opts,
				       timeout_s, &serr[i]) == SQ_OK;
	if (!ready) {
		free(sst);
		free(serr);
		free(opts);
		sq_client_close(c);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	sq_pgconn_connect_all(c->shards, cfg->nshards, sst, serr);
	for (int i = 0; i < cfg->nshards; i++) {
		const sq_error e = serr[i];
		if (sst[i] == SQ_OK)
			up++;
		else if (allow_down && e.code == SQ_ECONN) {
			/* reconnected by the first call that needs it; named if
			 * no shard at all can be reached */
			size_t at = strlen(down);
			snprintf(down + at, sizeof(down) - at, "%s%s", at ? "\n" : "", e.msg);
			continue;
		} else {
			if (st == SQ_OK) {
				st = e.code;
				if (err)
					*err = e;
			} else if (err && strlen(err->msg) + strlen(e.msg) + 2 < sizeof(err->msg))
				strcat(strcat(err->msg, "\n"), e.msg);
		}
	}
	free(sst);
	free(serr);
	if (st == SQ_OK && up == 0 && cfg->nshards > 0)
		st = sq_err(err, SQ_ECONN, "no shard can be reached:\n%s", down);
	if (st == SQ_OK) {
		const char *meta_id =
			cfg->meta_dsn ? "meta"
				      : (cfg->meta_shard ? cfg->meta_shard : cfg->shards[0].id);
		char label[96];
		snprintf(label, sizeof(label), "%s%s", cfg->meta_dsn ? "" : "meta on ", meta_id);
		st = sq_pgconn_open(&c->meta, label, sq_config_meta_dsn(cfg), opts, timeout_s, err);
	}
	free(opts);
	/* by default: a shard ends any statement by statement_timeout, and an
	 * answer that has not come connect_timeout after that is not coming */
	double wait_s = sq_plain_answer_wait_s(cfg, cfg->statement_timeout_ms);
	if (wait_s > 0)
		sq_client_answer_wait(c, wait_s);
	if (st == SQ_OK && !for_init)
		st = check_schema(c, err);
	if (st == SQ_OK && !for_init)
		st = sq_client_refresh_map(c, err);
	if (st == SQ_OK && !for_init)
		map_listen_open(c);
	if (st != SQ_OK) {
		sq_client_close(c);
		return st;
	}
	*out = c;
	return SQ_OK;
}

void sq_client_close(sq_client *c)
{
	if (!c)
		return;
	for (int i = 0; c->shards && i < c->nshards; i++)
		sq_pgconn_close(&c->shards[i]);
	sq_pgconn_close(&c->meta);
	if (c->map_listen)
		PQfinish(c->map_listen);
	free(c->shards);
	free(c->map);
	free(c->map_parts);
	free(c->held);
	free(c->yield);
	free(c->cursor);
	free(c->rewind_seen);
	free(c->paused);
	free(c->cluster_id);
	free(c->ta.names);
	free(c->ta.start_ms);
	free(c->ta.exec_ms);
	free(c->ta.backoff);
	free(c->ta.base_ms);
	free(c->ta.cap_ms);
	free(c->ta.jitter);
	free(c->ta.history);
	free(c->ta.hist_names);
	free(c->ta.hist_days);
	if (c->base)
		event_base_free(c->base);
	free(c);
}

int sq_client_shard_of_partition(const sq_client *c, uint32_t partition)
{
	return partition < c->partitions ? c->map[partition] : -1;
}

int64_t sq_client_map_version(const sq_client *c)
{
	return c->map_version;
}

uint64_t sq_client_statements_sent(const sq_client *c, int shard)
{
	return shard >= 0 && shard < c->nshards ? c->shards[shard].statements_sent : 0;
}

sq_status sq_client_take_ids(sq_client *c, size_t n, int64_t *first, sq_error *err)
{
	/* a batch is given consecutive numbers, possibly from a fresh block */
	if ((int64_t)n > c->id_end - c->id_next) {
		int64_t blocks = ((int64_t)n + ID_BLOCK - 1) / ID_BLOCK, b0;
		char nb[24];
		const char *v[1] = {nb};
		snprintf(nb, sizeof(nb), "%lld", (long long)blocks);
		/* consecutive blocks: take `blocks` values under a lock */
		PGresult *r = sq_pgconn_exec(&c->meta, sq_sql_id_blocks, 1, v, err);
		if (!r)
			return err ? err->code : SQ_EDB;
		b0 = atoll(PQgetvalue(r, 0, 0));
		for (int i = 1; i < PQntuples(r); i++)
			if (atoll(PQgetvalue(r, i, 0)) != b0 + i) {
				/* not consecutive (a concurrent taker): use only the last */
				b0 = atoll(PQgetvalue(r, PQntuples(r) - 1, 0));
				blocks = 1;
				break;
			}
		PQclear(r);
		if ((int64_t)n > blocks * ID_BLOCK)
			return sq_client_take_ids(c, n, first, err);
		c->id_next = b0 * ID_BLOCK;
		c->id_end = (b0 + blocks) * ID_BLOCK;
		if (c->id_end >= ((int64_t)1 << 47))
			return sq_err(err, SQ_ESTATE, "job ids are exhausted (2^47 used)");
	}
	*first = c->id_next;
	c->id_next += (int64_t)n;
	return SQ_OK;
}

static void map_listen_drop(sq_client *c)
{
	PQfinish(c->map_listen);
	c->map_listen = NULL;
	c->map_asked_at = 0;
	c->map_checked_at = 0; /* what it would have said is asked at once */
}

/* Map changes arrive by NOTIFY on this connection, and the version poll
 * (every map_poll, for a NOTIFY lost) is asked on it too, without waiting
 * for the answer. It is made at connect, and made again after it broke
 * (sq_client_check_map) once the meta database has answered; one that
 * cannot be made is tried again after SQ_MAP_LISTEN_RETRY_S. */
static void map_listen_open(sq_client *c)
{
	char ignore[256];
	int fired = 0;
	double wait_s = sq_plain_answer_wait_s(c->cfg, c->cfg->statement_timeout_ms);
	c->map_asked_at = 0;
	c->map_listen_at = sq_mono_s() + SQ_MAP_LISTEN_RETRY_S;
	c->map_listen = sq_connect_plain(c->cfg, sq_config_meta_dsn(c->cfg), "map-listen", -1,
					 ignore, sizeof(ignore));
	if (!c->map_listen)
		return;
	PGresult *r =
		sq_watch_exec(c->map_listen, "LISTEN shardq_map", 0, NULL, wait_s, NULL, &fired);
	int ok = !fired && r && PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	if (!ok) {
		/* no answer, or refused: the version poll finds map changes */
		PQfinish(c->map_listen);
		c->map_listen = NULL;
		return;
	}
	PQsetnonblocking(c->map_listen, 1);
	c->map_listen_at = 0;
}

/* The version poll's answer on map_listen, once it has all come: 1 when
 * the version differs from the map's. A poll unanswered for the meta
 * connection's answer wait (SQ_MAP_LISTEN_RETRY_S without one) drops the
 * connection: a host cut off answers nothing, NOTIFYs included. */
static int map_poll_answer(sq_client *c, double now)
{
	int changed = 0;
	PGresult *r;
	while (c->map_asked_at > 0 && !PQisBusy(c->map_listen)) {
		if (!(r = PQgetResult(c->map_listen))) {
			c->map_asked_at = 0;
			break;
		}
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
			changed |= atoll(PQgetvalue(r, 0, 0)) != c->map_version;
			sq_client_set_paused(c, PQgetvalue(r, 0, 1));
		}
		PQclear(r);
	}
	double wait = c->meta.answer_wait_s > 0 ? c->meta.answer_wait_s : SQ_MAP_LISTEN_RETRY_S;
	if (c->map_asked_at > 0 && now - c->map_asked_at > wait)
		map_listen_drop(c);
	return changed;
}

/* Nothing here waits for the meta database while map_listen works: the
 * NOTIFYs and the poll's answer are read as they have come. Only without
 * it is the version asked on the meta connection, waiting (as every
 * enqueue and worker tick did before: a meta database slow to answer held
 * up one call a second in each client). */
void sq_client_check_map(sq_client *c)
{
	int changed = 0;
	double now = sq_mono_s();
	PGnotify *n;
	if (c->map_listen) {
		if (!PQconsumeInput(c->map_listen) || PQstatus(c->map_listen) == CONNECTION_BAD) {
			map_listen_drop(c);
		} else {
			while ((n = PQnotifies(c->map_listen)) != NULL) {
				if (!strcmp(n->extra, "paused"))
					c->map_checked_at = 0; /* a pause: poll now */
				else
					changed |= atoll(n->extra) != c->map_version;
				PQfreemem(n);
			}
			changed |= map_poll_answer(c, now);
		}
	}
	/* 0: at once (a map to check again, a connection lost) */
	if (!changed && (c->map_checked_at == 0 ||
			 now - c->map_checked_at >= (double)c->cfg->map_poll_ms / 1000.0)) {
		c->map_checked_at = now;
		if (c->map_listen) {
			if (!c->map_asked_at) {
				if (PQsendQuery(c->map_listen, sq_sql_map_poll) &&
				    PQflush(c->map_listen) >= 0)
					c->map_asked_at = now;
				else
					map_listen_drop(c);
			}
		} else {
			sq_error e;
			PGresult *r = sq_pgconn_exec(&c->meta, sq_sql_map_poll, 0, NULL, &e);
			c->map_checked_at = sq_mono_s();
			if (r) {
				changed = PQntuples(r) == 1 &&
					  atoll(PQgetvalue(r, 0, 0)) != c->map_version;
				if (PQntuples(r) == 1)
					sq_client_set_paused(c, PQgetvalue(r, 0, 1));
				PQclear(r);
				/* the meta database answers: listen again (NOTIFYs
				 * sent while there was no listener were lost, and
				 * this answer is newer than them) */
				if (c->map_checked_at >= c->map_listen_at)
					map_listen_open(c);
			}
		}
	}
	if (changed && refresh_map(c, 0, NULL) != SQ_OK)
		c->map_checked_at = 0; /* try again next time */
}

sq_status sq_client_moving_delay(sq_client *c, int *tries, double *deadline, double *delay,
				 sq_error *err)
{
	double now = sq_mono_s();
	if (*deadline == 0)
		*deadline = now + (double)c->cfg->moving_wait_ms / 1000.0;
	if (now >= *deadline)
		return sq_err(err, SQ_EMOVING,
			      "a partition is still being moved after %.0fs; is a mover stuck? "
			      "see shardq moves",
			      (double)c->cfg->moving_wait_ms / 1000.0);
	/* a move's freeze-to-switch takes milliseconds to seconds; the switch
	 * is heard on LISTEN shardq_map, so a wait of a few tens of ms finds
	 * it soon after, most often without asking a shard (enqueue.c) */
	int ms = 5 << (*tries < 4 ? *tries : 4);
	*delay = (ms > 50 ? 50 : ms) / 1000.0;
	(*tries)++;
	return SQ_OK;
}

sq_status sq_client_wait_moved(sq_client *c, int moved, int *tries, double *deadline, sq_error *err)
{
	double delay = 0;
	sq_status st = sq_client_moving_delay(c, tries, deadline, &delay, err);
	if (st != SQ_OK)
		return st;
	if (!moved)
		usleep((useconds_t)(delay * 1e6));
	/* "moving": the map is right until the move switches it, so only what
	 * moved since is read (nothing, mostly); "moved" at the version it has
	 * is a map that is wrong: all of it is read */
	if (refresh_map(c, moved, NULL) != SQ_OK)
		c->map_checked_at = 0;
	return SQ_OK;
}

sq_status sq_client_send(sq_client *c, sq_error *err)
{
	sq_pgconn *conns[SQ_MAX_SHARDS];
	for (int i = 0; i < c->nshards; i++)
		conns[i] = &c->shards[i];
	return sq_pgconn_run(c->base, conns, c->nshards, err);
}

sq_status sq_client_run(sq_client *c, sq_error *err)
{
	sq_pgconn *conns[SQ_MAX_SHARDS];
	sq_status st;
	for (int i = 0; i < c->nshards; i++)
		conns[i] = &c->shards[i];
	st = sq_pgconn_run(c->base, conns, c->nshards, err);
	if (st != SQ_OK)
		return st;
	for (int i = 0; i < c->nshards; i++) {
		if (!c->shards[i].qn)
			continue;
		st = sq_pgconn_result_error(&c->shards[i], err);
		if (st != SQ_OK)
			return st;
	}
	return SQ_OK;
}

void sq_client_sync_all(sq_client *c)
{
	for (int i = 0; i < c->nshards; i++)
		if (c->shards[i].qn)
			sq_pgconn_push_sync(&c->shards[i]);
}

void sq_client_reset(sq_client *c)
{
	for (int i = 0; i < c->nshards; i++)
		sq_pgconn_reset(&c->shards[i]);
}

void sq_client_push_plans(sq_client *c, int s, int generic)
{
	sq_pgconn *pc = &c->shards[s];
	if (!generic == !pc->txn_generic)
		return; /* the transaction is in that mode already */
	sq_pgconn_push(pc, generic ? &stmt_plans_generic : &stmt_plans_auto, 0, NULL);
	pc->txn_generic = !!generic;
}

void sq_client_push_gate(sq_client *c, int s)
{
	sq_pgconn_push(&c->shards[s], &sq_stmt_gate_shared, 0, NULL);
	c->shards[s].txn_gated = 1;
}

int sq_client_push_gate_once(sq_client *c, int s)
{
	if (c->shards[s].txn_gated)
		return 0;
	sq_client_push_gate(c, s);
	return 1;
}

void sq_client_push_guard(sq_client *c, int s, const char *const *parts_val)
{
	sq_client_push_gate(c, s);
	sq_pgconn_push(&c->shards[s], &sq_stmt_check_owned, 1, parts_val);
}

/* baseline.c - the baselines, in one database on the first shard's server:
 * (a) the single-table queue of seeds 001 and 004 (one job per insert,
 * per claim with SKIP LOCKED, per delete: one transaction each); (b) the
 * same table with batched inserts, claims of 100 per query and one delete
 * per claimed batch; (c) the raw limit: per transaction insert N rows,
 * update them by id, delete them; no queue logic at all. */
#include "cpu.h"
#include "handler.h"
#include "monitor.h"
#include "pgutil.h"
#include "pace.h"
#include "phase.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seed 001's table (with seed 004's locked_by), its partial index for the
 * claim order. */
static const char *const ddl_queue[] = {
	"CREATE TABLE job ("
	" id bigserial PRIMARY KEY,"
	" queue text NOT NULL,"
	" priority int NOT NULL DEFAULT 100,"
	" status text NOT NULL DEFAULT 'queued'"
	"   CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),"
	" run_at timestamptz NOT NULL DEFAULT now(),"
	" attempts int NOT NULL DEFAULT 0,"
	" max_attempts int NOT NULL DEFAULT 20,"
	" locked_by text,"
	" locked_at timestamptz,"
	" last_error text,"
	" payload jsonb NOT NULL,"
	" created_at timestamptz NOT NULL DEFAULT now(),"
	" updated_at timestamptz NOT NULL DEFAULT now())",
	"CREATE INDEX job_queued ON job (queue, priority, run_at, id) WHERE status = 'queued'",
	NULL};

static const char *const ddl_raw[] = {"CREATE TABLE raw ("
				      " id bigserial PRIMARY KEY,"
				      " payload jsonb NOT NULL,"
				      " created_at timestamptz NOT NULL DEFAULT now(),"
				      " touched_at timestamptz)",
				      NULL};

#define SQL_INSERT_ONE "INSERT INTO job (queue, payload) VALUES ($1, $2::jsonb)"
#define SQL_INSERT_MANY \
	"INSERT INTO job (queue, payload) SELECT * FROM unnest($1::text[], $2::jsonb[])"
/* seed 001's claim, with seed 004's locked_by */
#define SQL_CLAIM                                                                               \
	"WITH cte AS (SELECT id FROM job WHERE status = 'queued' AND queue = $1 AND run_at <= " \
	"now()"                                                                                 \
	" ORDER BY priority, run_at, id FOR UPDATE SKIP LOCKED LIMIT $2)"                       \
	" UPDATE job j SET status = 'running', attempts = j.attempts + 1, locked_by = $3,"      \
	" locked_at = now(), updated_at = now() FROM cte WHERE j.id = cte.id"                   \
	" RETURNING j.id, j.payload"
/* seed 004: done means deleted */
#define SQL_DELETE_ONE  "DELETE FROM job WHERE id = $1"
#define SQL_DELETE_MANY "DELETE FROM job WHERE id = ANY($1::bigint[])"
#define SQL_RAW_INSERT  "INSERT INTO raw (payload) SELECT * FROM unnest($1::jsonb[]) RETURNING id"
#define SQL_RAW_UPDATE  "UPDATE raw SET touched_at = now() WHERE id = ANY($1::bigint[])"
#define SQL_RAW_DELETE  "DELETE FROM raw WHERE id = ANY($1::bigint[])"

typedef struct brun {
	bench_env *env;
	int which; /* PH_A, PH_B, PH_C */
	tally *t;
	int claim;             /* jobs per claim */
	int batch;             /* jobs per insert */
	uint64_t total;        /* jobs to enqueue */
	_Atomic int64_t next;  /* next job number to hand out */
	_Atomic int stop;      /* workers: stop after the current batch */
	_Atomic int producing; /* producer threads still running */
	_Atomic int failed;
	int64_t t0;
	pace pace; /* rate-limited producers' schedule */
	pthread_mutex_t mu;
	char err[1024];
} brun;

typedef struct bthread {
	brun *r;
	int idx;
	int type;     /* the queue a worker claims from */
	PGconn *conn; /* a producer's, closed after the phase (see producer.c) */
} bthread;

static void fail(brun *r, const char *msg)
{
	pthread_mutex_lock(&r->mu);
	if (!r->err[0])
		snprintf(r->err, sizeof(r->err), "%s", msg);
	pthread_mutex_unlock(&r->mu);
	atomic_store(&r->failed, 1);
}

static PGconn *connect_prepared(brun *r, const char *const *names, const char *const *sqls)
{
	const scenario *sc = r->env->sc;
	char err[512];
	PGconn *c = pg_connect(sc->host[0], sc->port[0], sc->base_database, err, sizeof(err));
	if (!c) {
		fail(r, err);
		return NULL;
	}
	for (int i = 0; names[i]; i++) {
		PGresult *p = PQprepare(c, names[i], sqls[i], 0, NULL);
		if (PQresultStatus(p) != PGRES_COMMAND_OK) {
			snprintf(err, sizeof(err), "prepare %s: %s", names[i], PQerrorMessage(c));
			PQclear(p);
			PQfinish(c);
			fail(r, err);
			return NULL;
		}
		PQclear(p);
	}
	return c;
}

static PGresult *run(brun *r, PGconn *c, const char *name, int n, const char *const *vals)
{
	PGresult *res = PQexecPrepared(c, name, n, vals, NULL, NULL, 0);
	ExecStatusType s = PQresultStatus(res);
	if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
		char msg[600];
		snprintf(msg, sizeof(msg), "baseline %s: %s", name, PQerrorMessage(c));
		fail(r, msg);
		PQclear(res);
		return NULL;
	}
	return res;
}

static void sleep_us(int64_t us)
{
	if (us <= 0)
		return;
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* A growing text buffer for array literals. */
typedef struct tbuf {
	char *p;
	size_t n, cap;
} tbuf;

static int tb_add(tbuf *b, const char *s, size_t len)
{
	if (b->n + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->n + len + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return -1;
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, len);
	b->n += len;
	b->p[b->n] = '\0';
	return 0;
}

static int tb_str(tbuf *b, const char *s)
{
	return tb_add(b, s, strlen(s));
}

/* ---- producers of (a) and (b) ------------------------------------------ */

static void *producer_main(void *arg)
{
	bthread *th = arg;
	brun *r = th->r;
	const scenario *sc = r->env->sc;
	tally *t = r->t;
	const char *names[] = {"ins", NULL};
	const char *sqls[] = {r->batch > 1 ? SQL_INSERT_MANY : SQL_INSERT_ONE, NULL};
	double rate = sc->rate > 0 ? sc->rate / sc->base_producers : 0;
	int64_t sent = 0;
	tbuf types = {0}, params = {0};
	PGconn *c = connect_prepared(r, names, sqls);
	int64_t origin = pace_join(&r->pace, &r->failed);
	tally_warmup_from(t, origin, sc->warmup_ms);
	while (c && !atomic_load(&r->failed) && !atomic_load(&r->stop)) {
		if (rate > 0)
			pace_sleep_until(pace_due(&r->pace, origin, th->idx, sent, rate, r->batch));
		tally_hold_depth(t, sc->depth, r->batch, &r->stop);
		int64_t first = atomic_fetch_add(&r->next, r->batch);
		if (first >= (int64_t)r->total)
			break;
		int64_t n =
			(int64_t)r->total - first < r->batch ? (int64_t)r->total - first : r->batch;
		char p1[48];
		const char *vals[2];
		int64_t t0 = mono_us();
		snprintf(p1, sizeof(p1), "{\"t\":%lld}", (long long)wall_us());
		if (r->batch == 1) {
			vals[0] = sc->types[scenario_type_of(sc, (uint64_t)first)].name;
			vals[1] = p1;
		} else {
			types.n = params.n = 0;
			int bad = tb_str(&types, "{") || tb_str(&params, "{");
			for (int64_t i = 0; i < n && !bad; i++) {
				char q[64];
				snprintf(q, sizeof(q), "\"{\\\"t\\\":%lld}\"",
					 (long long)wall_us());
				bad = tb_str(&types, i ? "," : "") ||
				      tb_str(&types,
					     sc->types[scenario_type_of(sc, (uint64_t)(first + i))]
						     .name) ||
				      tb_str(&params, i ? "," : "") || tb_str(&params, q);
			}
			if (bad || tb_str(&types, "}") || tb_str(&params, "}")) {
				fail(r, "out of memory");
				break;
			}
			vals[0] = types.p;
			vals[1] = params.p;
		}
		PGresult *res = run(r, c, "ins", 2, vals);
		if (!res)
			break;
		PQclear(res);
		int64_t t1 = mono_us();
		atomic_fetch_add(&t->enqueued, (uint64_t)n);
		atomic_fetch_add(&t->enq_calls, 1);
		hist_record(&t->enq_rtt, (uint64_t)(t1 - t0));
		tally_first(&t->first_enq, t0);
		tally_last(&t->last_enq, t1);
		sent += n;
	}
	free(types.p);
	free(params.p);
	th->conn = c;
	atomic_fetch_sub(&r->producing, 1);
	return NULL;
}

/* ---- workers of (a) and (b) --------------------------------------------- */

static void *worker_main(void *arg)
{
	bthread *th = arg;
	brun *r = th->r;
	const scenario *sc = r->env->sc;
	const sc_type *type = &sc->types[th->type];
	tally *t = r->t;
	const char *names[] = {"claim", "del", NULL};
	const char *sqls[] = {SQL_CLAIM, r->claim > 1 ? SQL_DELETE_MANY : SQL_DELETE_ONE, NULL};
	char lim[16], wid[32];
	int64_t backoff = 0;
	tbuf ids = {0};
	PGconn *c = connect_prepared(r, names, sqls);
	snprintf(lim, sizeof(lim), "%d", r->claim);
	snprintf(wid, sizeof(wid), "baseline-%d", th->idx);
	while (c && !atomic_load(&r->failed) && !atomic_load(&r->stop)) {
		const char *cv[3] = {type->name, lim, wid};
		int64_t t0 = mono_us();
		PGresult *res = run(r, c, "claim", 3, cv);
		if (!res)
			break;
		int64_t t1 = mono_us();
		int n = PQntuples(res);
		hist_record(&t->claim_rtt, (uint64_t)(t1 - t0));
		atomic_fetch_add(&t->claims, 1);
		if (!n) {
			PQclear(res);
			atomic_fetch_add(&t->claims_empty, 1);
			/* an empty queue: poll again soon, backing off to 50 ms */
			backoff = backoff ? (backoff * 2 > 50000 ? 50000 : backoff * 2) : 1000;
			sleep_us(backoff);
			continue;
		}
		backoff = 0;
		atomic_fetch_add(&t->claimed, (uint64_t)n);
		tally_first(&t->first_claim, t0);
		tally_last(&t->last_claim, t1);
		ids.n = 0;
		tb_str(&ids, r->claim > 1 ? "{" : "");
		for (int i = 0; i < n; i++) {
			int64_t id = atoll(PQgetvalue(res, i, 0));
			job_started(t, PQgetvalue(res, i, 1), 0, th->type);
			job_execute(type, id);
			atomic_fetch_add(&t->handled, 1);
			if (i)
				tb_str(&ids, ",");
			tb_str(&ids, PQgetvalue(res, i, 0));
		}
		PQclear(res);
		if (r->claim > 1 && tb_str(&ids, "}")) {
			fail(r, "out of memory");
			break;
		}
		const char *dv[1] = {ids.p};
		int64_t t2 = mono_us();
		if (!(res = run(r, c, "del", 1, dv)))
			break;
		int64_t t3 = mono_us();
		uint64_t k = strtoull(PQcmdTuples(res), NULL, 10);
		PQclear(res);
		hist_record(&t->complete_rtt, (uint64_t)(t3 - t2));
		atomic_fetch_add(&t->completes, 1);
		atomic_fetch_add(&t->completed, k);
		atomic_fetch_add(&t->lost, (uint64_t)n - k);
		tally_first(&t->first_complete, t2);
		tally_last(&t->last_complete, t3);
	}
	free(ids.p);
	PQfinish(c);
	return NULL;
}

/* ---- (c): the raw limit --------------------------------------------------- */

static void *raw_main(void *arg)
{
	bthread *th = arg;
	brun *r = th->r;
	tally *t = r->t;
	const char *names[] = {"ins", "upd", "del", NULL};
	const char *sqls[] = {SQL_RAW_INSERT, SQL_RAW_UPDATE, SQL_RAW_DELETE, NULL};
	tbuf params = {0}, ids = {0};
	PGconn *c = connect_prepared(r, names, sqls);
	while (c && !atomic_load(&r->failed) && !atomic_load(&r->stop)) {
		int64_t first = atomic_fetch_add(&r->next, r->batch);
		if (first >= (int64_t)r->total)
			break;
		int64_t n =
			(int64_t)r->total - first < r->batch ? (int64_t)r->total - first : r->batch;
		char q[64];
		params.n = ids.n = 0;
		int bad = tb_str(&params, "{");
		snprintf(q, sizeof(q), "\"{\\\"t\\\":%lld}\"", (long long)wall_us());
		for (int64_t i = 0; i < n && !bad; i++)
			bad = tb_str(&params, i ? "," : "") || tb_str(&params, q);
		if (bad || tb_str(&params, "}")) {
			fail(r, "out of memory");
			break;
		}
		int64_t t0 = mono_us();
		PGresult *res = PQexec(c, "BEGIN");
		PQclear(res);
		const char *pv[1] = {params.p};
		if (!(res = run(r, c, "ins", 1, pv)))
			break;
		tb_str(&ids, "{");
		for (int i = 0; i < PQntuples(res); i++) {
			if (i)
				tb_str(&ids, ",");
			tb_str(&ids, PQgetvalue(res, i, 0));
		}
		PQclear(res);
		if (tb_str(&ids, "}")) {
			fail(r, "out of memory");
			break;
		}
		const char *iv[1] = {ids.p};
		if (!(res = run(r, c, "upd", 1, iv)))
			break;
		PQclear(res);
		if (!(res = run(r, c, "del", 1, iv)))
			break;
		uint64_t k = strtoull(PQcmdTuples(res), NULL, 10);
		PQclear(res);
		res = PQexec(c, "COMMIT");
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			char msg[600];
			snprintf(msg, sizeof(msg), "baseline (c) COMMIT: %s", PQerrorMessage(c));
			fail(r, msg);
			PQclear(res);
			break;
		}
		PQclear(res);
		int64_t t1 = mono_us();
		hist_record(&t->complete_rtt, (uint64_t)(t1 - t0));
		atomic_fetch_add(&t->completes, 1);
		atomic_fetch_add(&t->completed, k);
		atomic_fetch_add(&t->handled, k);
		atomic_fetch_add(&t->per_shard[0], k);
		tally_first(&t->first_complete, t0);
		tally_last(&t->last_complete, t1);
	}
	free(params.p);
	free(ids.p);
	PQfinish(c);
	return NULL;
}

/* ---- the phase -------------------------------------------------------------- */

static int setup_db(bench_env *env, int which, int64_t backlog, double *load_s, char *err,
		    size_t errlen)
{
	const scenario *sc = env->sc;
	PGconn *c;
	if (pg_fresh_database(sc->host[0], sc->port[0], sc->base_database, err, errlen))
		return -1;
	if (!(c = pg_connect(sc->host[0], sc->port[0], sc->base_database, err, errlen)))
		return -1;
	for (const char *const *q = which == PH_C ? ddl_raw : ddl_queue; *q; q++)
		if (pg_exec(c, *q, err, errlen)) {
			PQfinish(c);
			return -1;
		}
	if (backlog > 0 && which != PH_C) {
		char sql[512];
		int64_t t0 = mono_us();
		/* the backlog in the types' order, one queue after another */
		snprintf(sql, sizeof(sql),
			 "INSERT INTO job (queue, payload) SELECT q, '{\"b\":1}' FROM "
			 "unnest($1::text[]) q, generate_series(1, %lld / cardinality($1::text[]))",
			 (long long)backlog);
		tbuf names = {0};
		tb_str(&names, "{");
		for (int i = 0; i < sc->ntypes; i++) {
			tb_str(&names, i ? "," : "");
			tb_str(&names, sc->types[i].name);
		}
		tb_str(&names, "}");
		const char *v[1] = {names.p};
		PGresult *r = pg_query(c, sql, 1, v, err, errlen);
		free(names.p);
		if (!r || pg_exec(c, "VACUUM (ANALYZE) job", err, errlen)) {
			PQclear(r);
			PQfinish(c);
			return -1;
		}
		PQclear(r);
		*load_s = (double)(mono_us() - t0) / 1e6;
	}
	PQfinish(c);
	return 0;
}

static void title(const scenario *sc, int which, phase *ph)
{
	if (which == PH_A)
		snprintf(ph->title, sizeof(ph->title),
			 "(a) single table, seeds 001/004: %d producers x 1 job, %d workers x "
			 "claim 1, a transaction per job",
			 sc->base_producers, sc->base_workers);
	else if (which == PH_B)
		snprintf(ph->title, sizeof(ph->title),
			 "(b) single table: %d producers x batch %d, %d workers x claim %d",
			 sc->base_producers, sc->batch, sc->base_workers, sc->base_claim);
	else
		snprintf(ph->title, sizeof(ph->title),
			 "(c) raw limit: %d connections, per transaction insert %d rows, update "
			 "them by id, delete them",
			 sc->raw_conns, sc->raw_batch);
}

static void fill(phase *ph, tally *t, int64_t t0, int which)
{
	int64_t fe = atomic_load(&t->first_enq), le = atomic_load(&t->last_enq);
	int64_t fc = atomic_load(&t->first_claim), lc = atomic_load(&t->last_claim);
	int64_t fd = atomic_load(&t->first_complete), ld = atomic_load(&t->last_complete);
	ph->enqueued = atomic_load(&t->enqueued);
	ph->claimed = atomic_load(&t->claimed);
	ph->claims = atomic_load(&t->claims);
	ph->claims_empty = atomic_load(&t->claims_empty);
	ph->completed = atomic_load(&t->completed);
	ph->started = ph->handled = atomic_load(&t->handled);
	ph->lost = atomic_load(&t->lost);
	ph->enq_s = fe && le > fe ? (double)(le - fe) / 1e6 : 0;
	ph->claim_s = fc && lc > fc ? (double)(lc - fc) / 1e6 : 0;
	ph->complete_s = fd && ld > fd ? (double)(ld - fd) / 1e6 : 0;
	ph->e2e_s = t0 && ld > t0 ? (double)(ld - t0) / 1e6 : 0;
	if (which != PH_C) {
		ph->enq_rate = ph->enq_s > 0.001 ? (double)ph->enqueued / ph->enq_s : -1;
		ph->claim_rate = ph->claim_s > 0.001 ? (double)ph->claimed / ph->claim_s : -1;
		ph->complete_rate =
			ph->complete_s > 0.001 ? (double)ph->completed / ph->complete_s : -1;
	}
	ph->e2e_rate = ph->e2e_s > 0.001 ? (double)ph->completed / ph->e2e_s : -1;
	hist_copy(ph->e2s, &t->e2s);
	hist_copy(ph->e2s_warm, &t->e2s_warm);
	hist_copy(ph->claim_rtt, &t->claim_rtt);
	hist_copy(ph->enq_rtt, &t->enq_rtt);
	hist_copy(ph->complete_rtt, &t->complete_rtt);
	ph->nshards = 1;
	ph->per_shard[0] = which == PH_C ? ph->completed : atomic_load(&t->per_shard[0]);
	for (int i = 0; i < SC_MAX_TYPES; i++)
		ph->per_type[i] = atomic_load(&t->per_type[i]);
}

static void account(bench_env *env, phase *ph, int which, int64_t backlog)
{
	const scenario *sc = env->sc;
	char err[512];
	PGconn *c = pg_connect(sc->host[0], sc->port[0], sc->base_database, err, sizeof(err));
	long long ready = -1, other = -1;
	if (c) {
		if (which == PH_C) {
			ready = 0;
			other = pg_scalar(c, "SELECT count(*) FROM raw", err, sizeof(err));
		} else {
			ready = pg_scalar(c, "SELECT count(*) FROM job WHERE status = 'queued'",
					  err, sizeof(err));
			other = pg_scalar(c, "SELECT count(*) FROM job WHERE status <> 'queued'",
					  err, sizeof(err));
		}
		PQfinish(c);
	}
	if (ready < 0 || other < 0) {
		snprintf(ph->error, sizeof(ph->error), "accounting: %s", err);
		ph->ok = 0;
		return;
	}
	ph->left_ready = (uint64_t)ready;
	ph->left_other = (uint64_t)other;
	uint64_t in = which == PH_C ? ph->completed : (uint64_t)backlog + ph->enqueued;
	if (ph->lost || other || ph->left_ready + ph->completed != in) {
		snprintf(
			ph->error, sizeof(ph->error),
			"accounting: backlog %lld + enqueued %llu, completed %llu, lost %llu, left "
			"%lld queued and %lld other",
			(long long)backlog, (unsigned long long)ph->enqueued,
			(unsigned long long)ph->completed, (unsigned long long)ph->lost, ready,
			other);
		ph->ok = 0;
	}
}

void phase_baseline(bench_env *env, int which, uint64_t enq, uint64_t done, int64_t backlog,
		    phase *ph)
{
	static const char *const labels[] = {"shardq", "(a)", "(b)", "(c)"};
	const scenario *sc = env->sc;
	tally *t = env->t;
	brun r;
	bthread *ths = NULL;
	pthread_t *tids = NULL;
	int nprod = 0, nwork = 0, started = 0;
	monitor mon;
	char err[1024] = "";
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.mu, NULL);
	ph->ran = 1;
	ph->ok = 1;
	ph->backlog = which == PH_C ? 0 : backlog;
	title(sc, which, ph);
	tally_reset(t);
	r.env = env;
	r.which = which;
	r.t = t;
	r.claim = which == PH_B ? sc->base_claim : 1;
	r.batch = which == PH_A ? 1 : which == PH_B ? sc->batch : sc->raw_batch;
	r.total = which == PH_C ? done : enq;
	if (setup_db(env, which, ph->backlog, &ph->preload_s, err, sizeof(err)))
		goto fail;
	env_checkpoint(env);
	if (env->pgss)
		env_reset_stmts(env, sc->base_database, 1);
	env_wait_quiet(env);
	nprod = which == PH_C ? sc->raw_conns : sc->base_producers;
	nwork = which == PH_C ? 0 : sc->base_workers;
	ths = calloc((size_t)(nprod + nwork), sizeof(*ths));
	tids = calloc((size_t)(nprod + nwork), sizeof(*tids));
	if (!ths || !tids) {
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	double cpu0 = cpu_self_s(), pg0 = env_cpu_servers(env), all0 = cpu_machine_s();
	r.t0 = mono_us();
	pace_init(&r.pace, which == PH_C ? 0 : nprod);
	if (monitor_start(&mon, ph, t, labels[which], r.t0, sc->sample_ms, env->quiet)) {
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	atomic_store(&r.producing, nprod);
	for (int i = 0; i < nprod + nwork; i++) {
		ths[i].r = &r;
		ths[i].idx = i;
		ths[i].type = i < nprod ? 0 : (i - nprod) % sc->ntypes;
		void *(*fn)(void *) = which == PH_C ? raw_main
				      : i < nprod   ? producer_main
						    : worker_main;
		if (pthread_create(&tids[i], NULL, fn, &ths[i])) {
			if (i < nprod)
				atomic_fetch_sub(&r.producing, nprod - i);
			fail(&r, "cannot start a baseline thread");
			break;
		}
		started++;
	}
	uint64_t target = done;
	while (!atomic_load(&r.failed)) {
		monitor_tick(&mon, target);
		if (atomic_load(&t->completed) >= target)
			break;
		if (which == PH_C && !atomic_load(&r.producing))
			break;
		if (mono_us() - r.t0 > sc->timeout_ms * 1000) {
			fail(&r, "the baseline did not finish within [run] timeout");
			break;
		}
		if (env->interrupted && *env->interrupted) {
			fail(&r, "interrupted");
			break;
		}
		sleep_us(5000);
	}
	atomic_store(&r.stop, 1);
	for (int i = 0; i < started; i++) {
		pthread_join(tids[i], NULL);
		PQfinish(ths[i].conn);
	}
	ph->cpu_bench_s = cpu_self_s() - cpu0;
	double pg1 = env_cpu_servers(env);
	ph->cpu_pg_s = pg0 >= 0 && pg1 >= 0 ? pg1 - pg0 : -1;
	ph->cpu_other_s = env_other_cpu(all0, ph);
	ph->wall_s = (double)(mono_us() - r.t0) / 1e6;
	monitor_end(&mon);
	fill(ph, t, r.t0, which);
	if (atomic_load(&r.failed)) {
		snprintf(err, sizeof(err), "%s", r.err);
		goto fail;
	}
	account(env, ph, which, ph->backlog);
	if (env->pgss)
		env_collect_stmts(env, sc->base_database, 1, ph);
	goto out;
fail:
	ph->ok = 0;
	snprintf(ph->error, sizeof(ph->error), "%s", err);
out:
	free(ths);
	free(tids);
	pthread_mutex_destroy(&r.mu);
	if (!env->keep)
		pg_drop_database(sc->host[0], sc->port[0], sc->base_database, err, sizeof(err));
}

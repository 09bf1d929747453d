/* maintain.c - history retention: sq_maintain creates the daily partitions
 * of shardq.jobs_history ahead and drops the ones whose day has ended, one
 * runner per shard at a time; sq_maintainer runs it every
 * [cluster] maintain_interval on a thread of its own (the worker runtime and
 * shardqd start one). The partitions and their functions are in
 * sql/shard/004_history_partitions.sql; docs/operations.md tells the
 * operator's side. */
#include "maintain.h"
#include "client.h"
#include "error.h"
#include "failpoint.h"
#include "sql_queries.h"
#include "ticker.h"
#include "watch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DAY_S INT64_C(86400)

void sq_maintain_opts_init(sq_maintain_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->lock_timeout_ms = 1000;
	o->ahead_days = 2;
	o->default_delete_batch = 10000;
	o->default_count_cap = 100000;
}

void sq_maintain_report_free(sq_maintain_report *r)
{
	if (!r)
		return;
	for (int s = 0; s < r->nshards; s++) {
		free(r->shards[s].created);
		free(r->shards[s].dropped);
	}
	free(r->shards);
	memset(r, 0, sizeof(*r));
}

static int64_t real_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Days since 1970-01-01 (UTC) of a time in seconds, and back to a date. */
static int64_t day_of(int64_t s)
{
	return s >= 0 ? s / DAY_S : -((-s + DAY_S - 1) / DAY_S);
}

static void day_text(int64_t day, char *out, size_t len)
{
	time_t t = (time_t)(day * DAY_S);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%d", &tm);
}

static int add_part(sq_maintain_part **v, size_t *n, const char *name, int64_t rows)
{
	sq_maintain_part *nv = realloc(*v, sizeof(**v) * (*n + 1));
	if (!nv)
		return -1;
	*v = nv;
	snprintf(nv[*n].name, sizeof(nv[*n].name), "%s", name);
	nv[*n].rows = rows;
	(*n)++;
	return 0;
}

/* A pass's connection to one shard, and how long a statement on it may go
 * unanswered: a statement sent to a shard whose host was cut off without a
 * reset, or is stuck, is never answered, and a worker's stop waits for its
 * maintainer's pass. */
typedef struct mconn {
	PGconn *pc;
	double wait_s;          /* sq_plain_answer_wait_s; 0: none */
	const atomic_int *stop; /* the maintainer's; NULL for sq_maintain */
} mconn;

/* One statement on the shard's maintenance connection; NULL and the shard's
 * error text on failure (each statement is its own transaction). */
static PGresult *run(mconn *mc, sq_maintain_shard *sh, const char *what, const char *sql, int n,
		     const char *const *v)
{
	PGconn *pc = mc->pc;
	int fired;
	PGresult *r = sq_watch_exec(pc, sql, n, v, mc->wait_s, mc->stop, &fired);
	ExecStatusType st = PQresultStatus(r);
	if (!fired && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK))
		return r;
	if (fired) {
		PQclear(r);
		if (fired == SQ_WATCH_STOP)
			snprintf(sh->error, sizeof(sh->error), "%s: not done: stopping", what);
		else
			snprintf(sh->error, sizeof(sh->error),
				 "%s: no answer within %.1fs (its host gone or cut off?); the "
				 "next pass tries again",
				 what, mc->wait_s);
		sh->status = SQ_ECONN;
		return NULL;
	}
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
	char msg[200];
	snprintf(msg, sizeof(msg), "%s", primary ? primary : PQerrorMessage(pc));
	msg[strcspn(msg, "\n")] = '\0';
	if (state && (!strcmp(state, "42883") || !strcmp(state, "42P01")))
		snprintf(sh->error, sizeof(sh->error),
			 "%s: %s (the shard's schema predates history partitions: run 'shardq "
			 "init')",
			 what, msg);
	else if (state && !strcmp(state, "55P03"))
		snprintf(sh->error, sizeof(sh->error),
			 "%s: %s (a transaction holds shardq.jobs_history; the next pass tries "
			 "again)",
			 what, msg);
	else
		snprintf(sh->error, sizeof(sh->error), "%s: %s", what, msg);
	sh->status = PQstatus(pc) == CONNECTION_OK ? SQ_EDB : SQ_ECONN;
	PQclear(r);
	return NULL;
}

static int run_ok(mconn *mc, sq_maintain_shard *sh, const char *what, const char *sql, int n,
		  const char *const *v)
{
	PGresult *r = run(mc, sh, what, sql, n, v);
	if (!r)
		return -1;
	PQclear(r);
	return 0;
}

typedef struct part_row {
	char name[64];
	int64_t lo_s, hi_s; /* INT64_MIN / INT64_MAX: unbounded */
	int64_t est;
} part_row;

/* The pass on one shard, on a connection of its own. */
static int out_of_memory(sq_maintain_shard *sh)
{
	snprintf(sh->error, sizeof(sh->error), "out of memory");
	sh->status = SQ_ENOMEM;
	return -1;
}

/* Sets the lock timeout and takes the shard's maintenance lock; -1 on
 * error, or when another runner has it (sh->skipped). */
static int take_lock(mconn *mc, sq_maintain_shard *sh, const sq_maintain_opts *o)
{
	char buf[64];
	PGresult *r;
	snprintf(buf, sizeof(buf), "SET lock_timeout = %lld", (long long)o->lock_timeout_ms);
	if (run_ok(mc, sh, "lock_timeout", buf, 0, NULL))
		return -1;
	if (!(r = run(mc, sh, "the maintenance lock", sq_sql_maintain_lock, 0, NULL)))
		return -1;
	sh->skipped = strcmp(PQgetvalue(r, 0, 0), "t") != 0;
	PQclear(r);
	return sh->skipped ? -1 : 0;
}

/* The day partitions, with their bounds as epoch seconds (*parts: free). */
static int list_parts(mconn *mc, sq_maintain_shard *sh, part_row **parts, int *nparts)
{
	PGresult *r = run(mc, sh, "list partitions", sq_sql_history_partitions, 0, NULL);
	if (!r)
		return -1;
	*nparts = PQntuples(r);
	*parts = calloc((size_t)*nparts + 1, sizeof(**parts));
	if (!*parts) {
		PQclear(r);
		return out_of_memory(sh);
	}
	for (int i = 0; i < *nparts; i++) {
		part_row *p = &(*parts)[i];
		snprintf(p->name, sizeof(p->name), "%s", PQgetvalue(r, i, 0));
		p->lo_s = *PQgetvalue(r, i, 1) ? atoll(PQgetvalue(r, i, 1)) : INT64_MIN;
		p->hi_s = *PQgetvalue(r, i, 2) ? atoll(PQgetvalue(r, i, 2)) : INT64_MAX;
		p->est = atoll(PQgetvalue(r, i, 3));
	}
	PQclear(r);
	return 0;
}

/* Drops what ended: a partition whose upper bound is at or before now. */
static int drop_ended(mconn *mc, sq_maintain_shard *sh, part_row *parts, int nparts, int64_t now_s)
{
	char msg[512], sql[160];
	for (int i = 0; i < nparts; i++) {
		if (parts[i].hi_s == INT64_MAX || parts[i].hi_s > now_s)
			continue;
		char *id = PQescapeIdentifier(mc->pc, parts[i].name, strlen(parts[i].name));
		snprintf(sql, sizeof(sql), "DROP TABLE shardq.%s", id ? id : "\"?\"");
		PQfreemem(id);
		snprintf(msg, sizeof(msg), "drop %s", parts[i].name);
		if (run_ok(mc, sh, msg, sql, 0, NULL))
			return -1;
		if (add_part(&sh->dropped, &sh->ndropped, parts[i].name, parts[i].est))
			return out_of_memory(sh);
		parts[i].lo_s = parts[i].hi_s = INT64_MIN; /* gone */
	}
	return 0;
}

/* Creates ahead: today through today + the longest retention + ahead. */
static int create_ahead(mconn *mc, sq_maintain_shard *sh, const part_row *parts, int nparts,
			int64_t today, int64_t last)
{
	char msg[512];
	for (int64_t d = today; d <= last; d++) {
		int64_t lo = d * DAY_S, hi = lo + DAY_S;
		int covered = 0;
		for (int i = 0; i < nparts && !covered; i++)
			covered = parts[i].lo_s < hi && parts[i].hi_s > lo;
		if (covered)
			continue;
		char day[16], name[64];
		const char *v[1] = {day};
		day_text(d, day, sizeof(day));
		snprintf(msg, sizeof(msg), "create the partition of %s", day);
		PGresult *r = run(mc, sh, msg, sq_sql_history_add_day, 1, v);
		if (!r)
			return -1;
		int64_t moved = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
		if (moved < 0)
			continue; /* made meanwhile by hand */
		snprintf(name, sizeof(name), "jobs_history_p%.4s%.2s%.2s", day, day + 5, day + 8);
		if (add_part(&sh->created, &sh->ncreated, name, moved))
			return out_of_memory(sh);
	}
	sh->default_moved = 0;
	for (size_t i = 0; i < sh->ncreated; i++)
		sh->default_moved += sh->created[i].rows;
	return 0;
}

/* The default partition: expired rows go in batches; the rest counted (up
 * to the cap), and the day partitions too. */
static int clean_default(mconn *mc, sq_maintain_shard *sh, const sq_maintain_opts *o,
			 const char *nowbuf)
{
	char lim[24], buf[64];
	const char *dv[2] = {nowbuf, lim}, *v[1] = {buf};
	PGresult *r;
	snprintf(lim, sizeof(lim), "%lld", (long long)o->default_delete_batch);
	for (;;) {
		if (!(r = run(mc, sh, "delete expired rows of the default partition",
			      sq_sql_history_delete_expired_default, 2, dv)))
			return -1;
		int64_t n = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
		sh->default_deleted += n;
		if (n < o->default_delete_batch)
			break;
	}
	snprintf(buf, sizeof(buf), "%lld", (long long)o->default_count_cap + 1);
	if (!(r = run(mc, sh, "count the default partition", sq_sql_history_count_default, 1, v)))
		return -1;
	sh->default_rows = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (sh->default_rows > o->default_count_cap) {
		sh->default_rows = o->default_count_cap;
		sh->default_rows_capped = 1;
	}
	if (!(r = run(mc, sh, "count partitions", sq_sql_history_count_partitions, 0, NULL)))
		return -1;
	sh->partitions = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return 0;
}

static void maintain_shard(const sq_config *cfg, int s, int64_t now_us, int max_days,
			   const sq_maintain_opts *o, const atomic_int *stop, sq_maintain_shard *sh)
{
	char msg[512], nowbuf[32], fpname[96];
	part_row *parts = NULL;
	int nparts = 0;
	/* the maintainer's thread: a stop does not wait for this connect */
	PGconn *pc =
		stop ? sq_connect_plain_stop(cfg, cfg->shards[s].dsn, cfg->shards[s].id, "maintain",
					     stop, msg, sizeof(msg))
		     : sq_connect_plain(cfg, cfg->shards[s].dsn, "maintain", -1, msg, sizeof(msg));
	if (!pc) {
		snprintf(sh->error, sizeof(sh->error), "%s", msg);
		sh->status = SQ_ECONN;
		return;
	}
	mconn mc = {pc, sq_plain_answer_wait_s(cfg, cfg->statement_timeout_ms), stop};
	snprintf(fpname, sizeof(fpname), "maintain_connected_%s", cfg->shards[s].id);
	sq_failpoint(fpname);
	snprintf(nowbuf, sizeof(nowbuf), "%lld", (long long)now_us);
	int64_t now_s = now_us >= 0 ? now_us / 1000000 : -((-now_us + 999999) / 1000000);
	int64_t today = day_of(now_s);
	if (!take_lock(&mc, sh, o) && !list_parts(&mc, sh, &parts, &nparts) &&
	    !drop_ended(&mc, sh, parts, nparts, now_s) &&
	    !create_ahead(&mc, sh, parts, nparts, today, today + max_days + o->ahead_days) &&
	    !clean_default(&mc, sh, o, nowbuf))
		sh->ran = 1;
	free(parts);
	PQfinish(pc); /* ends the session: the advisory lock goes with it */
}

sq_status sq_maintain(sq_client *c, const sq_maintain_opts *opts, sq_maintain_report *out,
		      sq_error *err)
{
	return sq_maintain_cfg(c->cfg, opts, out, err);
}

/* sq_maintain_cfg; with stop (the maintainer's), the pass ends as soon as
 * *stop is set, its connects too. */
static sq_status maintain_cfg(const sq_config *cfg, const sq_maintain_opts *opts,
			      const atomic_int *stop, sq_maintain_report *out, sq_error *err)
{
	sq_maintain_opts o;
	sq_status first = SQ_OK;
	int max_days = 1;
	if (opts)
		o = *opts;
	else
		sq_maintain_opts_init(&o);
	memset(out, 0, sizeof(*out));
	if (o.lock_timeout_ms < 1 || o.ahead_days < 0 || o.ahead_days > 366 ||
	    o.default_delete_batch < 1 || o.default_count_cap < 0)
		return sq_err(err, SQ_EINVAL,
			      "sq_maintain: lock_timeout_ms must be >= 1, ahead_days 0..366, "
			      "default_delete_batch >= 1, default_count_cap >= 0");
	out->now_us = o.now_us ? o.now_us : real_now_us();
	for (int i = 0; i < cfg->ntypes; i++) {
		int d = sq_retention_days(&cfg->types[i]);
		if (cfg->types[i].history && d > max_days)
			max_days = d;
	}
	out->max_retention_days = max_days;
	out->shards = calloc((size_t)cfg->nshards, sizeof(*out->shards));
	if (!out->shards)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	out->nshards = cfg->nshards;
	for (int s = 0; s < cfg->nshards; s++) {
		sq_maintain_shard *sh = &out->shards[s];
		snprintf(sh->shard, sizeof(sh->shard), "%s", cfg->shards[s].id);
		if (stop && atomic_load(stop)) {
			sh->status = SQ_ECONN;
			snprintf(sh->error, sizeof(sh->error), "not done: stopping");
		} else {
			maintain_shard(cfg, s, out->now_us, max_days, &o, stop, sh);
		}
		if (sh->status && !first) {
			first = sh->status;
			sq_err(err, sh->status, "shard %s: %s", sh->shard, sh->error);
		}
	}
	return first;
}

sq_status sq_maintain_cfg(const sq_config *cfg, const sq_maintain_opts *opts,
			  sq_maintain_report *out, sq_error *err)
{
	return maintain_cfg(cfg, opts, NULL, out, err);
}

/* ---- the periodic runner -------------------------------------------------- */

struct sq_maintainer {
	atomic_int stopping; /* a pass under way ends at once */
	const sq_config *cfg;
	sq_maintainer_log log;
	void *log_arg;
	sq_ticker *ticker;
};

static void say(sq_maintainer *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(sq_maintainer *m, const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	if (!m->log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	m->log(line, m->log_arg);
}

/* One pass on every shard, on the ticker's thread; what it did is logged.
 * The next comes maintain_interval after its end. */
static int64_t maintain_pass(void *arg)
{
	sq_maintainer *m = arg;
	sq_error err;
	sq_maintain_report rep;
	if (maintain_cfg(m->cfg, NULL, &m->stopping, &rep, &err) != SQ_OK && !rep.nshards)
		say(m, "maintain: %s", err.msg); /* per shard errors follow */
	for (int s = 0; s < rep.nshards; s++) {
		sq_maintain_shard *sh = &rep.shards[s];
		if (sh->skipped)
			say(m, "maintain: shard %s: skipped: another runner", sh->shard);
		else if (sh->status)
			say(m, "maintain: shard %s: %s", sh->shard, sh->error);
		else if (sh->ncreated || sh->ndropped || sh->default_rows)
			say(m,
			    "maintain: shard %s: created %zu, dropped %zu partitions; default "
			    "partition %lld rows",
			    sh->shard, sh->ncreated, sh->ndropped, (long long)sh->default_rows);
	}
	sq_maintain_report_free(&rep);
	return m->cfg->maintain_interval_ms;
}

int64_t sq_maintain_first_ms(int64_t interval_ms, uint64_t r)
{
	int64_t last = interval_ms < SQ_MAINTAIN_SPREAD_MS ? interval_ms : SQ_MAINTAIN_SPREAD_MS;
	if (last <= SQ_MAINTAIN_FIRST_MS)
		return interval_ms < SQ_MAINTAIN_FIRST_MS ? interval_ms : SQ_MAINTAIN_FIRST_MS;
	return SQ_MAINTAIN_FIRST_MS + (int64_t)(r % (uint64_t)(last - SQ_MAINTAIN_FIRST_MS + 1));
}

/* A draw of its own for each runner: the process, the time, the runner. */
static uint64_t runner_draw(const void *m)
{
	struct timespec ts;
	uint64_t in[4];
	clock_gettime(CLOCK_REALTIME, &ts);
	in[0] = (uint64_t)getpid();
	in[1] = (uint64_t)ts.tv_sec;
	in[2] = (uint64_t)ts.tv_nsec;
	in[3] = (uint64_t)(uintptr_t)m;
	return XXH3_64bits(in, sizeof(in));
}

sq_maintainer *sq_maintainer_start(const sq_config *cfg, sq_maintainer_log log, void *log_arg)
{
	if (!cfg->maintain_interval_ms)
		return NULL;
	sq_maintainer *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cfg = cfg;
	m->log = log;
	m->log_arg = log_arg;
	int64_t every = cfg->maintain_interval_ms;
	m->ticker = sq_ticker_start(maintain_pass, m, sq_maintain_first_ms(every, runner_draw(m)));
	if (!m->ticker) {
		free(m);
		return NULL;
	}
	return m;
}

void sq_maintainer_stop(sq_maintainer *m)
{
	if (!m)
		return;
	atomic_store(&m->stopping, 1);
	sq_ticker_stop(m->ticker);
	free(m);
}

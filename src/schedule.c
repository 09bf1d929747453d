/* schedule.c - periodic jobs: a schedule's slots (by cron.c's arithmetic)
 * and the scheduler pass that enqueues each slot once (the meta table
 * shardq_meta.schedules, sql/meta/003_schedules.sql). It sits above
 * enqueue.c and client.c; the cron parser below config.c is cron.c. */
#include "schedule.h"
#include "client.h"
#include "clock.h"
#include "config.h"
#include "error.h"
#include "failpoint.h"
#include "pool.h"
#include "ticker.h"
#include "watch.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a schedule's slots: by its cron, or every N seconds -------------- */

int64_t sq_schedule_next(const sq_schedule_conf *s, int64_t t)
{
	if (s->every_ms > 0) {
		int64_t e = s->every_ms / 1000;
		return (sq_floor_div(t, e) + 1) * e;
	}
	return sq_cron_next(&s->cron, s->timezone, t);
}

int64_t sq_schedule_prev(const sq_schedule_conf *s, int64_t t)
{
	if (s->every_ms > 0) {
		int64_t e = s->every_ms / 1000;
		return sq_floor_div(t, e) * e;
	}
	return sq_cron_prev(&s->cron, s->timezone, t);
}

/* ---- the scheduler pass --------------------------------------------------
 * Per schedule, one row in shardq_meta.schedules: last_slot is the latest
 * slot some scheduler claimed (or skipped, or the baseline taken when the
 * schedule was first seen). A slot is claimed by a compare-and-set that
 * moves last_slot forward; only one scheduler's UPDATE can match. The
 * claim carries a lease (lease_until): until the winner confirms the
 * enqueue (lease_until back to NULL), the row is pending, and once the
 * lease has passed any scheduler takes the claim over and enqueues the
 * same slot again, under the same key (so a job still live dedups). */

static PGresult *q(sq_client *c, const char *sql, int n, const char *const *v, sq_error *err)
{
	PGresult *r = sq_pgconn_exec(&c->meta, sql, n, v, err);
	if (!r && strstr(err->msg, "shardq_meta.schedules") && strstr(err->msg, "does not exist"))
		sq_err(err, SQ_ESTATE,
		       "the meta database has no shardq_meta.schedules table (schema older than "
		       "version 3); run 'shardq init' to upgrade it");
	return r;
}

static int changed(PGresult *r)
{
	int n = r ? PQntuples(r) : 0;
	if (r)
		PQclear(r);
	return n;
}

static sq_status enqueue_slot(sq_client *c, const sq_schedule_conf *s, const char *who,
			      int64_t slot, sq_error *err)
{
	char key[SQ_MAX_KEY_LEN + 1], sl[32], id[32];
	const char *why;
	sq_enqueue_result res;
	sq_job_spec spec;
	sq_status st;
	snprintf(sl, sizeof(sl), "%" PRId64, slot);
	if (sq_schedule_key(s->key ? s->key : "{name}:{slot}", s->name, slot, key, sizeof(key),
			    &why) < 0)
		return sq_err(err, SQ_ECONFIG, "[schedule %s] key: %s", s->name, why);
	memset(&spec, 0, sizeof(spec));
	spec.type = s->type;
	spec.key = key;
	spec.params = s->params;
	spec.run_at_us = slot > 0 ? slot * 1000000 : 0;
	sq_failpoint("schedule_claimed");
	st = sq_enqueue(c, &spec, 1, &res, err);
	if (st != SQ_OK) {
		/* hand the claim back at once: the next pass (anyone's) retries */
		sq_error e2;
		const char *v[3] = {s->name, sl, who};
		changed(q(
			c,
			"UPDATE shardq_meta.schedules SET lease_until = now(), updated_at = now() "
			"WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND "
			"claimed_by = $3 AND lease_until IS NOT NULL RETURNING 1",
			3, v, &e2));
		sq_err_prefix(err, "[schedule %s] slot %s", s->name, key);
		return st;
	}
	sq_failpoint("schedule_enqueued");
	snprintf(id, sizeof(id), "%" PRId64, res.id);
	const char *v[4] = {s->name, sl, who, id};
	PGresult *r = q(c,
			"UPDATE shardq_meta.schedules SET lease_until = NULL, enqueued_slot = "
			"last_slot, job_id = $4, enqueues = enqueues + 1, updated_at = now() "
			"WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND claimed_by = "
			"$3 AND lease_until IS NOT NULL RETURNING 1",
			4, v, err);
	if (!r)
		return err->code;
	PQclear(r);
	return SQ_OK;
}

/* seen: (may be NULL) a slot this scheduler saw claimed and confirmed
 * already; while the due slot is not past it, the meta row is not read
 * (last_slot only ever grows), so an idle pass costs no statement. */
static sq_status run_one(sq_client *c, const sq_schedule_conf *s, const char *who, int64_t now,
			 int64_t lease_ms, sq_schedule_pass *p, int64_t *seen, sq_error *err)
{
	char due_s[32], lease_s[32], last_s[32];
	int64_t due = sq_schedule_prev(s, now);
	if (due == SQ_CRON_NONE || (seen && *seen >= due))
		return SQ_OK;
	snprintf(due_s, sizeof(due_s), "%" PRId64, due);
	snprintf(lease_s, sizeof(lease_s), "%" PRId64, lease_ms);
	const char *v1[1] = {s->name};
	PGresult *r = q(c,
			"SELECT extract(epoch from last_slot)::bigint, lease_until IS NOT NULL, "
			"coalesce(lease_until < now(), false) FROM shardq_meta.schedules WHERE "
			"name = $1",
			1, v1, err);
	if (!r)
		return err->code;
	if (PQntuples(r) == 0) {
		/* first seen: the schedule starts with its next slot */
		PQclear(r);
		const char *v[2] = {s->name, due_s};
		r = q(c,
		      "INSERT INTO shardq_meta.schedules (name, last_slot) VALUES ($1, "
		      "to_timestamp($2::bigint)) ON CONFLICT (name) DO NOTHING",
		      2, v, err);
		if (!r)
			return err->code;
		PQclear(r);
		return SQ_OK;
	}
	int64_t last = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	int pending = PQgetvalue(r, 0, 1)[0] == 't', expired = PQgetvalue(r, 0, 2)[0] == 't';
	PQclear(r);
	snprintf(last_s, sizeof(last_s), "%" PRId64, last);
	if (pending) {
		if (!expired) {
			p->busy++;
			return SQ_OK;
		}
		/* a claim whose enqueue was never confirmed: take it over */
		const char *v[3] = {s->name, last_s, who};
		const char *v4[4] = {v[0], v[1], v[2], lease_s};
		r = q(c,
		      "UPDATE shardq_meta.schedules SET claimed_by = $3, lease_until = now() + "
		      "$4::bigint * interval '1 millisecond', retries = retries + 1, updated_at = "
		      "now() WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND "
		      "lease_until < now() RETURNING 1",
		      4, v4, err);
		if (!r)
			return err->code;
		if (!changed(r))
			return SQ_OK;
		p->retried++;
		sq_status st = enqueue_slot(c, s, who, last, err);
		if (st == SQ_OK)
			p->enqueued++;
		return st;
	}
	if (last >= due) {
		if (seen)
			*seen = last;
		return SQ_OK;
	}
	const char *v[4] = {s->name, due_s, who, lease_s};
	if (s->missed == SQ_MISSED_SKIP && (now - due) * 1000 > s->max_lateness_ms) {
		/* too late for this slot: record it as passed, run the next */
		r = q(c,
		      "UPDATE shardq_meta.schedules SET last_slot = to_timestamp($2::bigint), "
		      "skipped = skipped + 1, updated_at = now() WHERE name = $1 AND last_slot < "
		      "to_timestamp($2::bigint) AND lease_until IS NULL RETURNING 1",
		      2, v, err);
		if (!r)
			return err->code;
		p->skipped += changed(r);
		if (seen)
			*seen = due;
		return SQ_OK;
	}
	r = q(c,
	      "UPDATE shardq_meta.schedules SET last_slot = to_timestamp($2::bigint), claimed_by "
	      "= $3, lease_until = now() + $4::bigint * interval '1 millisecond', updated_at = "
	      "now() WHERE name = $1 AND last_slot < to_timestamp($2::bigint) AND lease_until IS "
	      "NULL RETURNING 1",
	      4, v, err);
	if (!r)
		return err->code;
	if (!changed(r))
		return SQ_OK; /* another scheduler won the slot */
	sq_status st = enqueue_slot(c, s, who, due, err);
	if (st == SQ_OK)
		p->enqueued++;
	if (st == SQ_OK && seen)
		*seen = due;
	return st;
}

static sq_status run_pass(sq_client *c, const char *who, int64_t now_us, sq_schedule_pass *out,
			  int64_t *seen, const atomic_int *stop, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	sq_schedule_pass p;
	sq_status first = SQ_OK;
	char host[64] = "?", whobuf[128];
	memset(&p, 0, sizeof(p));
	if (!who) {
		gethostname(host, sizeof(host) - 1);
		snprintf(whobuf, sizeof(whobuf), "%s-%d", host, (int)getpid());
		who = whobuf;
	}
	if (!now_us) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	}
	for (int i = 0; i < cfg->nschedules && !(stop && atomic_load(stop)); i++) {
		sq_error e;
		e.code = SQ_OK;
		e.msg[0] = '\0';
		sq_status st =
			run_one(c, &cfg->schedules[i], who, sq_floor_div(now_us, 1000000),
				cfg->scheduler.claim_lease_ms, &p, seen ? &seen[i] : NULL, &e);
		if (st != SQ_OK) {
			p.errors++;
			if (first == SQ_OK) {
				first = st;
				if (err)
					*err = e;
			}
		}
	}
	if (out)
		*out = p;
	return first;
}

sq_status sq_schedules_run(sq_client *c, const char *who, int64_t now_us, sq_schedule_pass *out,
			   sq_error *err)
{
	return run_pass(c, who, now_us, out, NULL, NULL, err);
}

sq_status sq_schedules_list(sq_client *c, int64_t now_us, sq_schedule_info **out, size_t *n,
			    sq_error *err)
{
	const sq_config *cfg = c->cfg;
	*out = NULL;
	*n = 0;
	if (!now_us) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	}
	if (!cfg->nschedules)
		return SQ_OK;
	PGresult *r = q(c,
			"SELECT name, extract(epoch from last_slot)::bigint, lease_until IS NOT "
			"NULL, coalesce(claimed_by, ''), coalesce(extract(epoch from "
			"enqueued_slot)::bigint, 0), coalesce(job_id, 0), enqueues, retries, "
			"skipped FROM shardq_meta.schedules",
			0, NULL, err);
	if (!r)
		return err->code;
	sq_schedule_info *v = calloc((size_t)cfg->nschedules, sizeof(*v));
	if (!v) {
		PQclear(r);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	int64_t now = sq_floor_div(now_us, 1000000);
	for (int i = 0; i < cfg->nschedules; i++) {
		const sq_schedule_conf *s = &cfg->schedules[i];
		sq_schedule_info *o = &v[i];
		snprintf(o->name, sizeof(o->name), "%s", s->name);
		if (s->every_ms > 0)
			snprintf(o->spec, sizeof(o->spec), "every %" PRId64 "s",
				 s->every_ms / 1000);
		else
			snprintf(o->spec, sizeof(o->spec), "%s", s->cron_text);
		snprintf(o->timezone, sizeof(o->timezone), "%s",
			 s->every_ms > 0 ? "UTC"
			 : s->timezone   ? s->timezone
					 : "UTC");
		snprintf(o->type, sizeof(o->type), "%s", s->type);
		o->missed_skip = s->missed == SQ_MISSED_SKIP;
		int64_t next = sq_schedule_next(s, now);
		o->next_slot_us = next == SQ_CRON_NONE ? 0 : next * 1000000;
		for (int k = 0; k < PQntuples(r); k++) {
			if (strcmp(PQgetvalue(r, k, 0), s->name))
				continue;
			o->known = 1;
			o->last_slot_us = strtoll(PQgetvalue(r, k, 1), NULL, 10) * 1000000;
			o->pending = PQgetvalue(r, k, 2)[0] == 't';
			snprintf(o->claimed_by, sizeof(o->claimed_by), "%s", PQgetvalue(r, k, 3));
			o->enqueued_slot_us = strtoll(PQgetvalue(r, k, 4), NULL, 10) * 1000000;
			o->job_id = strtoll(PQgetvalue(r, k, 5), NULL, 10);
			o->enqueues = strtoll(PQgetvalue(r, k, 6), NULL, 10);
			o->retries = strtoll(PQgetvalue(r, k, 7), NULL, 10);
			o->skipped = strtoll(PQgetvalue(r, k, 8), NULL, 10);
		}
	}
	PQclear(r);
	*out = v;
	*n = (size_t)cfg->nschedules;
	return SQ_OK;
}

/* ---- the runtime hooks ---------------------------------------------------- */

struct sq_sched {
	const sq_config *cfg;
	char who[128];
	double next_at;
	int64_t seen[]; /* per schedule, see run_one */
};

sq_sched *sq_sched_new(const sq_config *cfg, const char *who)
{
	if (!cfg->scheduler.enabled || !cfg->nschedules)
		return NULL;
	sq_sched *s = calloc(1, sizeof(*s) + (size_t)cfg->nschedules * sizeof(int64_t));
	if (!s)
		return NULL;
	for (int i = 0; i < cfg->nschedules; i++)
		s->seen[i] = SQ_CRON_NONE;
	s->cfg = cfg;
	snprintf(s->who, sizeof(s->who), "%s", who);
	return s;
}

/* When the pass after one that ends now is due (monotonic): [scheduler]
 * interval later, or just past the next slot of a schedule if that comes
 * first. So a pass follows each slot's start, whatever the interval, and
 * the passes do not drift across the slots' boundaries: a pass timed off
 * the last one's end came a little later each time, and an `every = 1s`
 * lost a slot when two boundaries fell between two passes. */
static double next_pass_at(const sq_config *cfg)
{
	struct timespec ts;
	double mono = sq_mono_s(), at = mono + (double)cfg->scheduler.interval_ms / 1000.0;
	clock_gettime(CLOCK_REALTIME, &ts);
	double wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	for (int i = 0; i < cfg->nschedules; i++) {
		int64_t next = sq_schedule_next(&cfg->schedules[i], (int64_t)ts.tv_sec);
		if (next == SQ_CRON_NONE)
			continue;
		double slot = mono + ((double)next - wall) + SQ_SCHED_SLOT_MARGIN_S;
		if (slot < at)
			at = slot;
	}
	return at;
}

sq_status sq_sched_tick(sq_sched *s, sq_client *c, sq_error *err)
{
	if (!s || sq_mono_s() < s->next_at)
		return SQ_OK;
	sq_status st = run_pass(c, s->who, 0, NULL, s->seen, NULL, err);
	s->next_at = next_pass_at(s->cfg);
	return st;
}

int sq_sched_due(const sq_sched *s, double now)
{
	return s && now >= s->next_at;
}

double sq_sched_next_at(const sq_sched *s)
{
	return s ? s->next_at : HUGE_VAL;
}

void sq_sched_free(sq_sched *s)
{
	free(s);
}

struct sq_sched_thread {
	const sq_config *cfg;
	char who[128];
	void (*on_error)(const sq_error *e, void *arg);
	void *arg;
	sq_client *c;
	sq_sched *sc; /* what this runner saw claimed (NULL: out of memory) */
	char last[sizeof(((sq_error *)0)->msg)]; /* the error reported last */
	double last_at;
	sq_ticker *ticker;
	atomic_int stop_asked; /* no pass begins, and one under way ends soon */
	atomic_int in_pass;
	atomic_int stopping; /* a pass under way is cut now */
};

/* The end of a duration in seconds ("0.3s") at p, or NULL. */
static const char *seconds_end(const char *p)
{
	const char *q = p;
	while (isdigit((unsigned char)*q) || (*q == '.' && q > p && isdigit((unsigned char)q[1])))
		q++;
	return q > p && *q == 's' && !isalnum((unsigned char)q[1]) ? q + 1 : NULL;
}

/* Whether two messages differ only in their durations ("still connecting
 * (0.3s so far" and "(1.2s so far"): the same problem, said again. Any
 * other figure (a shard's address, a count) must be the same. */
static int same_but_numbers(const char *a, const char *b)
{
	for (;;) {
		const char *ea = seconds_end(a), *eb = seconds_end(b);
		if (ea && eb) {
			a = ea, b = eb;
			continue;
		}
		if (*a != *b)
			return 0;
		if (!*a)
			return 1;
		a++, b++;
	}
}

/* The pass itself: its connections are watched for the stop's cut
 * (watch.h): a shard or meta database that stopped answering (its host
 * cut off without a reset, or stuck) would hold it up to the answer wait,
 * and shardqd's stop waits for it. */
static void sched_pass_run(sq_sched_thread *t)
{
	sq_error err;
	double end = sq_mono_s() + SQ_SCHED_CONNECT_WAIT_S;
	sq_watch watch[SQ_MAX_SHARDS + 1];
	int nw = 0;
	sq_failpoint("sched_pass");
	if (t->c->meta.conn)
		sq_watch_arm(&watch[nw++], t->c->meta.conn, 0, &t->stopping);
	for (int s = 0; s < t->c->nshards; s++)
		if (t->c->shards[s].conn)
			sq_watch_arm(&watch[nw++], t->c->shards[s].conn, 0, &t->stopping);
	sq_status st = t->sc ? run_pass(t->c, t->who, 0, NULL, t->sc->seen, &t->stop_asked, &err)
			     : sq_schedules_run(t->c, t->who, 0, NULL, &err);
	int stopped = 0;
	for (int i = 0; i < nw; i++)
		stopped |= sq_watch_disarm(&watch[i]) != SQ_WATCH_NONE;
	if (stopped || atomic_load(&t->stop_asked))
		return; /* its error is the stop's */
	/* a connect under way goes on here too (this thread has no loop to
	 * take it on between passes): up to SQ_SCHED_CONNECT_WAIT_S from the
	 * pass's start, so that a server slow to answer is connected within a
	 * few passes, before its connect_timeout */
	while (sq_client_advance_connects(t->c) > 0 && sq_mono_s() < end &&
	       !atomic_load(&t->stop_asked))
		(void)poll(NULL, 0, 20);
	/* the same error again (a shard down), whatever its figures: once a
	 * minute */
	if (st != SQ_OK && t->on_error &&
	    (!same_but_numbers(t->last, err.msg) || sq_mono_s() - t->last_at >= 60)) {
		t->on_error(&err, t->arg);
		snprintf(t->last, sizeof(t->last), "%s", err.msg);
		t->last_at = sq_mono_s();
	} else if (st == SQ_OK) {
		t->last[0] = '\0';
	}
}

/* One scheduler pass, on the ticker's thread; none once the stop is asked
 * for (in_pass tells sq_sched_thread_stop whether one is under way). The
 * wait until the next (next_pass_at). */
static int64_t sched_pass(void *arg)
{
	sq_sched_thread *t = arg;
	atomic_store(&t->in_pass, 1);
	if (!atomic_load(&t->stop_asked))
		sched_pass_run(t);
	atomic_store(&t->in_pass, 0);
	double wait_ms = (next_pass_at(t->cfg) - sq_mono_s()) * 1000;
	return wait_ms > 0 ? (int64_t)ceil(wait_ms) : 0;
}

sq_sched_thread *sq_sched_thread_start(const sq_config *cfg, const char *who, sq_client *c,
				       void (*on_error)(const sq_error *e, void *arg), void *arg)
{
	if (!cfg->scheduler.enabled || !cfg->nschedules || !c)
		return NULL;
	sq_sched_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cfg = cfg;
	snprintf(t->who, sizeof(t->who), "%s", who);
	t->c = c;
	sq_client_connect_wait(c, SQ_SCHED_CONNECT_WAIT_S);
	t->on_error = on_error;
	t->arg = arg;
	t->sc = sq_sched_new(cfg, t->who);
	/* the first pass at once, then as each returns (next_pass_at) */
	t->ticker = sq_ticker_start(sched_pass, t, 0);
	if (!t->ticker) {
		sq_sched_free(t->sc);
		free(t);
		return NULL;
	}
	return t;
}

void sq_sched_thread_stop(sq_sched_thread *t)
{
	if (!t)
		return;
	/* a pass under way ends by itself (no schedule after the one under
	 * way), for SQ_SCHED_STOP_GRACE_S; then its connections are cut */
	atomic_store(&t->stop_asked, 1);
	double until = sq_mono_s() + SQ_SCHED_STOP_GRACE_S;
	while (atomic_load(&t->in_pass) && sq_mono_s() < until)
		(void)poll(NULL, 0, 10);
	atomic_store(&t->stopping, 1);
	sq_ticker_stop(t->ticker);
	sq_sched_free(t->sc);
	sq_client_close(t->c);
	free(t);
}

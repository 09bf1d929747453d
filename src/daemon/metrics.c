/* metrics.c - GET /metrics in Prometheus' text format: the daemon's own
 * counters, kept in atomics as requests pass; nothing here reads a shard,
 * so a scrape costs no query however many jobs there are. */
#include "daemon.h"

#include "clock.h"
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const double sqd_buckets[SQD_NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
					  0.1,    0.25,  0.5,    1,     2.5,  5,     10};

static const char *route_names[R_COUNT] = {
	[R_NONE] = "other",        [R_HEALTH] = "healthz",    [R_ENQUEUE] = "enqueue",
	[R_CLAIM] = "claim",       [R_START] = "start",       [R_HEARTBEAT] = "heartbeat",
	[R_COMPLETE] = "complete", [R_FAIL] = "fail",         [R_RELEASE] = "release",
	[R_CANCEL] = "cancel",     [R_GET_JOB] = "get_job",   [R_STATS] = "stats",
	[R_MAP] = "map",           [R_MOVES] = "moves",       [R_METRICS] = "metrics",
	[R_PAGE] = "page",         [R_OVERVIEW] = "overview", [R_RELEASE_GONE] = "release_gone",
	[R_TYPES] = "types",       [R_PAUSE] = "pause",       [R_RESUME] = "resume",
	[R_RETRY] = "retry",       [R_LIST] = "list",         [R_PURGE] = "purge",
};

void sqd_observe(sqd *d, sqd_route r, int status, double seconds)
{
	sqd_hist *h = &d->m.latency[r];
	int b = 0;
	while (b < SQD_NBUCKETS && seconds > sqd_buckets[b])
		b++;
	if (b < SQD_NBUCKETS)
		atomic_fetch_add(&h->bucket[b], 1);
	atomic_fetch_add(&h->count, 1);
	atomic_fetch_add(&h->sum_us, (unsigned long long)(seconds * 1e6));
	if (status >= 400)
		atomic_fetch_add(&d->m.errors[r], 1);
}

static void counter(sq_buf *b, const char *name, const char *help, unsigned long long v)
{
	sq_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

static void gauge(sq_buf *b, const char *name, const char *help, long long v)
{
	sq_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

void sqd_metrics_write(sqd *d, sq_buf *b)
{
	sqd_metrics *m = &d->m;
	sq_buf_puts(b, "# HELP shardqd_requests_total HTTP requests by endpoint.\n"
		       "# TYPE shardqd_requests_total counter\n");
	for (int r = 1; r < R_COUNT; r++)
		if (r != R_RELEASE_GONE)
			sq_buf_printf(b, "shardqd_requests_total{endpoint=\"%s\"} %llu\n",
				      route_names[r],
				      (unsigned long long)atomic_load(&m->requests[r]));
	sq_buf_puts(b, "# HELP shardqd_request_errors_total Requests answered with a status of "
		       "400 or more, by endpoint.\n"
		       "# TYPE shardqd_request_errors_total counter\n");
	for (int r = 0; r < R_COUNT; r++)
		if (r != R_RELEASE_GONE)
			sq_buf_printf(b, "shardqd_request_errors_total{endpoint=\"%s\"} %llu\n",
				      route_names[r],
				      (unsigned long long)atomic_load(&m->errors[r]));
	sq_buf_puts(b, "# HELP shardqd_request_seconds Time from a request's arrival to its "
		       "reply, by endpoint (a claim's includes its long poll).\n"
		       "# TYPE shardqd_request_seconds histogram\n");
	for (int r = 1; r < R_COUNT; r++) {
		sqd_hist *h = &m->latency[r];
		unsigned long long cum = 0, n = atomic_load(&h->count);
		if (!n && r != R_CLAIM && r != R_ENQUEUE && r != R_COMPLETE)
			continue;
		for (int k = 0; k < SQD_NBUCKETS; k++) {
			cum += atomic_load(&h->bucket[k]);
			sq_buf_printf(
				b,
				"shardqd_request_seconds_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n",
				route_names[r], sqd_buckets[k], cum);
		}
		sq_buf_printf(b,
			      "shardqd_request_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n",
			      route_names[r], n);
		sq_buf_printf(b, "shardqd_request_seconds_sum{endpoint=\"%s\"} %.6f\n",
			      route_names[r], atomic_load(&h->sum_us) / 1e6);
		sq_buf_printf(b, "shardqd_request_seconds_count{endpoint=\"%s\"} %llu\n",
			      route_names[r], n);
	}
	counter(b, "shardqd_jobs_enqueued_total", "Jobs written by enqueue (new jobs).",
		atomic_load(&m->jobs_enqueued));
	counter(b, "shardqd_jobs_claimed_total", "Jobs the claim statements took.",
		atomic_load(&m->jobs_claimed));
	counter(b, "shardqd_jobs_released_gone_total",
		"Jobs handed back at once because their client went away.",
		atomic_load(&m->jobs_released_gone));
	counter(b, "shardqd_jobs_released_extra_total",
		"Jobs a claim took that no waiting client could take (released at once).",
		atomic_load(&m->jobs_released_extra));
	sq_buf_puts(b, "# HELP shardqd_results_total Per-job results of start, heartbeat, "
		       "complete, fail and release.\n# TYPE shardqd_results_total counter\n");
	sq_buf_printf(b, "shardqd_results_total{result=\"ok\"} %llu\n",
		      (unsigned long long)atomic_load(&m->results_ok));
	sq_buf_printf(b, "shardqd_results_total{result=\"lost\"} %llu\n",
		      (unsigned long long)atomic_load(&m->results_lost));
	sq_buf_printf(b, "shardqd_results_total{result=\"unavailable\"} %llu\n",
		      (unsigned long long)atomic_load(&m->results_other));
	counter(b, "shardqd_jobs_completed_total", "Jobs completed through this daemon.",
		atomic_load(&m->jobs_completed));
	counter(b, "shardqd_jobs_failed_total", "Job failures reported through this daemon.",
		atomic_load(&m->jobs_failed));
	counter(b, "shardqd_claim_statements_total",
		"Coalesced claims sent (each is one statement per shard).",
		atomic_load(&m->claim_statements));
	counter(b, "shardqd_claim_requests_total",
		"Claim requests answered (each once, however many ticks it waited); divided by "
		"the statements: requests per statement.",
		atomic_load(&m->claim_requests));
	counter(b, "shardqd_result_calls_total",
		"Library calls made for start, heartbeat, complete, fail and release (requests "
		"of one kind waiting together share one).",
		atomic_load(&m->result_calls));
	counter(b, "shardqd_result_requests_total", "Result requests those calls served.",
		atomic_load(&m->result_requests));
	counter(b, "shardqd_claim_errors_total", "Coalesced claims that failed on a shard.",
		atomic_load(&m->claim_errors));
	counter(b, "shardqd_auth_refused_total", "Requests refused with 401 or 403.",
		atomic_load(&m->auth_refused));
	counter(b, "shardqd_connections_dropped_total",
		"Connections closed for being too slow or over max_connections.",
		atomic_load(&m->conns_dropped));
	gauge(b, "shardqd_connections", "Open client connections.", atomic_load(&m->connections));
	gauge(b, "shardqd_claims_waiting", "Claim requests waiting (long polls included).",
	      atomic_load(&m->claims_waiting));
	gauge(b, "shardqd_request_threads", "Request threads (each one connection per shard).",
	      d->nthreads);
	gauge(b, "shardqd_request_threads_busy", "Request threads running a request now.",
	      atomic_load(&m->threads_busy));
	gauge(b, "shardqd_request_queue", "Requests waiting for a request thread.",
	      atomic_load(&m->queue_len));
	gauge(b, "shardqd_shard_connections",
	      "Connections the daemon holds per shard: one per request thread and per "
	      "enqueue lane, the claimer's and its LISTEN connection.",
	      d->nthreads + d->nlanes + 2);
}

void sqd_rates_sample(sqd *d)
{
	sqd_rates *r = &d->rates;
	double now = sq_mono_s();
	unsigned long long cur[RATE_KINDS] = {
		atomic_load(&d->m.jobs_enqueued), atomic_load(&d->m.jobs_claimed),
		atomic_load(&d->m.jobs_completed), atomic_load(&d->m.jobs_failed)};
	pthread_mutex_lock(&r->mu);
	if (r->last_t > 0 && now > r->last_t) {
		for (int k = 0; k < RATE_KINDS; k++)
			r->v[k][r->at] = (double)(cur[k] - r->last[k]) / (now - r->last_t);
		r->at = (r->at + 1) % SQD_RATE_N;
		if (r->n < SQD_RATE_N)
			r->n++;
	}
	for (int k = 0; k < RATE_KINDS; k++)
		r->last[k] = cur[k];
	r->last_t = now;
	pthread_mutex_unlock(&r->mu);
}

void sqd_rates_json(sqd *d, sq_buf *b)
{
	static const char *names[RATE_KINDS] = {"enqueued", "claimed", "completed", "failed"};
	sqd_rates *r = &d->rates;
	pthread_mutex_lock(&r->mu);
	sq_buf_printf(b, "{\"seconds\":%d", r->n);
	for (int k = 0; k < RATE_KINDS; k++) {
		sq_buf_printf(b, ",\"%s\":[", names[k]);
		for (int i = 0; i < r->n; i++) {
			int at = (r->at - r->n + i + SQD_RATE_N) % SQD_RATE_N;
			sq_buf_printf(b, "%s%.1f", i ? "," : "", r->v[k][at]);
		}
		sq_buf_putc(b, ']');
	}
	sq_buf_putc(b, '}');
	pthread_mutex_unlock(&r->mu);
}

/* What holds vacuum back on each shard, and how vacuum keeps up with the
 * jobs table (docs/operations.md, "A transaction left open"): one gauge (or
 * counter) per figure, a value per shard that answered and has it. */
static void write_health(sqd *d, const sq_stats *st, sq_buf *b)
{
	static const struct {
		const char *name, *kind, *help;
	} series[] = {
		{"shardq_oldest_transaction_seconds", "gauge",
		 "Age of the oldest open transaction of a client session on the shard's server."},
		{"shardq_xmin_horizon_age", "gauge",
		 "Age in transactions of the oldest xmin holding back vacuum on the shard's server "
		 "(sessions, prepared transactions, replication slots)."},
		{"shardq_jobs_dead_rows", "gauge",
		 "Dead rows of shardq.jobs that vacuum has yet to remove."},
		{"shardq_jobs_live_rows", "gauge",
		 "Live rows of shardq.jobs, as PostgreSQL's statistics count them."},
		{"shardq_jobs_autovacuum_runs_total", "counter",
		 "Autovacuum runs on shardq.jobs since the shard's statistics were reset."},
		{"shardq_jobs_vacuum_age_seconds", "gauge",
		 "Time since shardq.jobs was last vacuumed, by autovacuum or by hand (absent: "
		 "never)."},
		{"shardq_history_ahead_seconds", "gauge",
		 "Time from now to the end of the newest day partition of the job history, "
		 "which history maintenance makes ahead (negative: maintenance has not run "
		 "since; absent: no partition)."}};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		sq_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help,
			      series[k].name, series[k].kind);
		for (int s = 0; s < st->nshards; s++) {
			const sq_shard_health *h = &st->health[s];
			/* in the order of series */
			double v[] = {h->oldest_xact_s,
				      (double)h->xmin_age,
				      (double)h->jobs_dead_rows,
				      (double)h->jobs_live_rows,
				      (double)h->jobs_autovacuums,
				      h->jobs_vacuum_age_s,
				      h->history_ahead_s};
			/* the history's may be negative; the others are -1 unknown */
			int known = k == 6 ? !isnan(v[k]) : v[k] >= 0;
			if (!st->shard_error[s] && known)
				sq_buf_printf(b, "%s{shard=\"%s\"} %.3f\n", series[k].name,
					      sq_config_shard_id(d->cfg, s), v[k]);
		}
	}
}

/* Each schedule's state in the meta database (docs/operations.md, "a
 * schedule stuck"): its latest slot, whether that slot's enqueue is still
 * unconfirmed, and how long the first slot after it has been due (0: not
 * yet due), which grows while no scheduler takes the schedule's slots. */
static void write_schedules(sqd *d, sq_client *c, sq_buf *b)
{
	sq_schedule_info *v = NULL, *after = NULL;
	size_t n = 0, n2 = 0;
	sq_error err;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	(void)d;
	if (sq_schedules_list(c, now_us, &v, &n, &err) != SQ_OK || !n) {
		free(v);
		return;
	}
	sq_buf_puts(b, "# HELP shardq_schedule_last_slot_timestamp_seconds The latest slot of a "
		       "schedule claimed, skipped or taken as its baseline (Unix time).\n"
		       "# TYPE shardq_schedule_last_slot_timestamp_seconds gauge\n");
	for (size_t i = 0; i < n; i++)
		if (v[i].known)
			sq_buf_printf(
				b,
				"shardq_schedule_last_slot_timestamp_seconds{schedule=\"%s\"} "
				"%.3f\n",
				v[i].name, v[i].last_slot_us / 1e6);
	sq_buf_puts(b, "# HELP shardq_schedule_pending 1 while the latest slot's enqueue is not "
		       "confirmed.\n# TYPE shardq_schedule_pending gauge\n");
	for (size_t i = 0; i < n; i++)
		if (v[i].known)
			sq_buf_printf(b, "shardq_schedule_pending{schedule=\"%s\"} %d\n", v[i].name,
				      v[i].pending);
	sq_buf_puts(b, "# HELP shardq_schedule_late_seconds How long the first slot after a "
		       "schedule's latest one has been due and not taken (0: not due yet).\n"
		       "# TYPE shardq_schedule_late_seconds gauge\n");
	for (size_t i = 0; i < n; i++) {
		if (!v[i].known)
			continue;
		/* the slot after the latest: the list's next slot as of that one */
		if (sq_schedules_list(c, v[i].last_slot_us + 1, &after, &n2, &err) != SQ_OK ||
		    n2 != n)
			break;
		int64_t due = after[i].next_slot_us;
		free(after);
		after = NULL;
		sq_buf_printf(b, "shardq_schedule_late_seconds{schedule=\"%s\"} %.3f\n", v[i].name,
			      due && due <= now_us ? (now_us - due) / 1e6 : 0.0);
	}
	free(after);
	free(v);
}

/* The fleet-wide limits of the limited types, for the alert on a type held
 * at its limit (with shardq_jobs), and which types are paused (as of this
 * daemon's last map poll). */
static void write_limits(sqd *d, sq_client *c, sq_buf *b)
{
	sq_buf_puts(b, "# HELP shardq_type_paused 1 while a type is paused fleet-wide (shardq "
		       "pause), as of this daemon's last map poll.\n"
		       "# TYPE shardq_type_paused gauge\n");
	for (int i = 0; i < sq_config_type_count(d->cfg); i++)
		sq_buf_printf(b, "shardq_type_paused{type=\"%s\"} %d\n",
			      sq_config_type_name(d->cfg, i),
			      sq_type_paused(c, sq_config_type_name(d->cfg, i)));
	int nt = sq_config_type_count(d->cfg);
	for (int pass = 0; pass < 2; pass++) {
		sq_buf_puts(b, pass ? "# HELP shardq_type_rate Fleet-wide rate of a type, jobs "
				      "started per second.\n# TYPE shardq_type_rate gauge\n"
				    : "# HELP shardq_type_max_running Fleet-wide max_running of a "
				      "type.\n# TYPE shardq_type_max_running gauge\n");
		for (int i = 0; i < nt; i++) {
			int32_t maxrun;
			double rate;
			sq_config_type_limits(d->cfg, i, &maxrun, &rate);
			if (pass ? rate > 0 : maxrun > 0)
				sq_buf_printf(b, "%s{type=\"%s\"} %g\n",
					      pass ? "shardq_type_rate" : "shardq_type_max_running",
					      sq_config_type_name(d->cfg, i),
					      pass ? rate : (double)maxrun);
		}
	}
}

/* Prometheus label values: the shard ids and type names are [A-Za-z0-9_.:-]
 * (the config refuses anything else), so they need no escaping. */
void sqd_metrics_write_shards(sqd *d, sq_client *c, sq_buf *b)
{
	sq_stats *st = NULL;
	sq_error err;
	if (sq_stats_fast(c, 0, &st, &err) != SQ_OK) {
		sq_buf_puts(b, "# shardq_shard_up: no shard could be read\n");
		sq_buf_puts(b, "# TYPE shardq_shard_up gauge\n");
		for (int s = 0; s < sq_config_shard_count(d->cfg); s++)
			sq_buf_printf(b, "shardq_shard_up{shard=\"%s\"} 0\n",
				      sq_config_shard_id(d->cfg, s));
		return;
	}
	sq_buf_puts(b, "# HELP shardq_shard_up Whether the shard answered this scrape.\n"
		       "# TYPE shardq_shard_up gauge\n");
	for (int s = 0; s < st->nshards; s++)
		sq_buf_printf(b, "shardq_shard_up{shard=\"%s\"} %d\n",
			      sq_config_shard_id(d->cfg, s), st->shard_error[s] ? 0 : 1);
	sq_buf_puts(b, "# HELP shardq_jobs Live jobs per shard, type and status (ready: exact "
		       "up to 10000, PostgreSQL's estimate above; see estimated).\n"
		       "# TYPE shardq_jobs gauge\n");
	for (size_t i = 0; i < st->nrows; i++) {
		const sq_stats_row *r = &st->rows[i];
		const char *sid = sq_config_shard_id(d->cfg, r->shard);
		sq_buf_printf(b, "shardq_jobs{shard=\"%s\",type=\"%s\",status=\"ready\"} %lld\n",
			      sid, r->type, (long long)r->count[SQ_READY]);
		sq_buf_printf(b, "shardq_jobs{shard=\"%s\",type=\"%s\",status=\"starting\"} %lld\n",
			      sid, r->type, (long long)r->count[SQ_STARTING]);
		sq_buf_printf(b, "shardq_jobs{shard=\"%s\",type=\"%s\",status=\"running\"} %lld\n",
			      sid, r->type, (long long)r->count[SQ_RUNNING]);
	}
	sq_buf_puts(b, "# HELP shardq_jobs_ready_estimated 1 when the ready count is an estimate.\n"
		       "# TYPE shardq_jobs_ready_estimated gauge\n");
	for (size_t i = 0; i < st->nrows; i++)
		sq_buf_printf(b, "shardq_jobs_ready_estimated{shard=\"%s\",type=\"%s\"} %d\n",
			      sq_config_shard_id(d->cfg, st->rows[i].shard), st->rows[i].type,
			      st->rows[i].ready_estimated);
	sq_buf_puts(b, "# HELP shardq_expired_leases Jobs starting or running past their lease "
		       "(their worker died or hung; the next claim takes them back).\n"
		       "# TYPE shardq_expired_leases gauge\n");
	for (size_t i = 0; i < st->nrows; i++)
		sq_buf_printf(b, "shardq_expired_leases{shard=\"%s\",type=\"%s\"} %lld\n",
			      sq_config_shard_id(d->cfg, st->rows[i].shard), st->rows[i].type,
			      (long long)st->rows[i].expired_leases);
	sq_buf_puts(b, "# HELP shardq_oldest_ready_age_seconds How long the next due job in claim "
		       "order has been due (absent: none due).\n"
		       "# TYPE shardq_oldest_ready_age_seconds gauge\n");
	for (size_t i = 0; i < st->nrows; i++)
		if (st->rows[i].oldest_ready_age_ms >= 0)
			sq_buf_printf(
				b,
				"shardq_oldest_ready_age_seconds{shard=\"%s\",type=\"%s\"} %.3f\n",
				sq_config_shard_id(d->cfg, st->rows[i].shard), st->rows[i].type,
				st->rows[i].oldest_ready_age_ms / 1000.0);
	sq_buf_puts(b, "# HELP shardq_partitions Partitions per shard and state.\n"
		       "# TYPE shardq_partitions gauge\n");
	for (int s = 0; s < st->nshards; s++)
		if (!st->shard_error[s]) {
			sq_buf_printf(b, "shardq_partitions{shard=\"%s\",state=\"owned\"} %lld\n",
				      sq_config_shard_id(d->cfg, s),
				      (long long)st->partitions_owned[s]);
			sq_buf_printf(b, "shardq_partitions{shard=\"%s\",state=\"moving\"} %lld\n",
				      sq_config_shard_id(d->cfg, s),
				      (long long)st->partitions_moving[s]);
		}
	write_health(d, st, b);
	sq_stats_free(st);
	/* moves: how many are unfinished, and the longest write stall of those */
	sq_move_info *mv = NULL;
	size_t nmv = 0;
	int meta_up = sq_moves_list(c, 0, &mv, &nmv, &err) == SQ_OK;
	sq_buf_printf(b,
		      "# HELP shardq_meta_up Whether the meta database answered this scrape (when "
		      "it does not, workers and shardqd go on from their cached map, and producers "
		      "while their block of job ids lasts).\n"
		      "# TYPE shardq_meta_up gauge\nshardq_meta_up %d\n",
		      meta_up);
	if (meta_up) {
		double stall = 0, age = 0;
		for (size_t i = 0; i < nmv; i++) {
			stall = fmax(stall, mv[i].stall_ms);
			age = fmax(age, mv[i].elapsed_ms);
		}
		sq_buf_printf(
			b,
			"# HELP shardq_moves_in_progress Partition moves not finished.\n"
			"# TYPE shardq_moves_in_progress gauge\nshardq_moves_in_progress %zu\n"
			"# HELP shardq_move_stall_seconds The longest write stall of the moves "
			"in progress.\n# TYPE shardq_move_stall_seconds gauge\n"
			"shardq_move_stall_seconds %.3f\n"
			"# HELP shardq_move_age_seconds Since the oldest move in progress began "
			"(0: "
			"none).\n# TYPE shardq_move_age_seconds gauge\n"
			"shardq_move_age_seconds %.3f\n",
			nmv, stall / 1000.0, age / 1000.0);
		free(mv);
		write_schedules(d, c, b);
	}
	write_limits(d, c, b);
}

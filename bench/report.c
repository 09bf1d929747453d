/* report.c - the human table, JSON, CSV and plot data of a run. */
#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const double report_pcts[REPORT_NPCT] = {50, 90, 95, 99, 99.9};
static const char *const pct_names[REPORT_NPCT] = {"p50", "p90", "p95", "p99", "p99.9"};
static const char *const phase_names[PH_N] = {"shardq", "(a)", "(b)", "(c)"};

static double per1000(double cpu, uint64_t jobs)
{
	return cpu >= 0 && jobs ? cpu * 1000.0 / (double)jobs : -1;
}

static double pct_ms(const hist *h, double p)
{
	return h && hist_count(h) ? (double)hist_percentile(h, p) / 1000.0 : -1;
}

/* The samples while the producers ran: up to the first one that saw every
 * enqueue (all of them in a run without producers). */
static size_t producing_samples(const phase *ph)
{
	if (ph->enqueued)
		for (size_t i = 0; i < ph->nseries; i++)
			if (ph->series[i].enqueued >= ph->enqueued)
				return i + 1;
	return ph->nseries;
}

/* The queue's depth (backlog + enqueued - completed) over the producing
 * samples: the first and last values and the least-squares slope in jobs/s,
 * over *n samples. Returns 0 when there are fewer than 2. */
static int depth_trend(const phase *ph, double *first, double *last, double *slope, int *n)
{
	size_t end = producing_samples(ph);
	double st = 0, sd = 0, stt = 0, std = 0;
	for (size_t i = 0; i < end; i++) {
		const sample *s = &ph->series[i];
		double d = (double)ph->backlog + (double)s->enqueued - (double)s->done;
		st += s->t, sd += d, stt += s->t * s->t, std += s->t * d;
		if (i == 0)
			*first = d;
		*last = d;
	}
	*n = (int)end;
	double den = (double)end * stt - st * st;
	if (end < 2 || den <= 0)
		return 0;
	*slope = ((double)end * std - st * sd) / den;
	return 1;
}

/* Completions per second in each quarter of the phase's samples (while the
 * producers ran, as depth_trend): whether the rate holds as the
 * queue grows. Returns 0 with fewer than 8 samples. */
static int quarter_rates(const phase *ph, double q[4])
{
	size_t end = producing_samples(ph);
	if (end < 8)
		return 0;
	for (int k = 0; k < 4; k++) {
		size_t a = end * (size_t)k / 4, b = end * (size_t)(k + 1) / 4 - 1;
		double dt = ph->series[b].t - ph->series[a].t;
		q[k] = dt > 0 ? (double)(ph->series[b].done - ph->series[a].done) / dt : 0;
	}
	return 1;
}

/* ---- the table ----------------------------------------------------------- */

typedef report_fig row;

static void fmt(double v, int decimals, char *out, size_t len)
{
	if (v < 0)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.*f", decimals, v);
}

static void print_row(FILE *f, const row *rw, const step *st)
{
	char b[32];
	fprintf(f, "  %-30s", rw->label);
	for (int p = 0; p < PH_N; p++) {
		if (!st->ph[p].ran)
			continue;
		fmt(rw->v[p], rw->decimals, b, sizeof(b));
		fprintf(f, " %11s", b);
	}
	for (int p = 1; p < PH_N; p++) {
		if (!st->ph[p].ran)
			continue;
		if (rw->ratios && rw->v[0] >= 0 && rw->v[p] > 0)
			fprintf(f, " %8.2f", rw->v[0] / rw->v[p]);
		else
			fprintf(f, " %8s", "-");
	}
	fputc('\n', f);
}

/* The next row of out (zeroed, labelled); NULL when out is full. */
static row *add_row(row *out, int *n, int max, int decimals, int ratios, const char *fmt_, ...)
	__attribute__((format(printf, 6, 7)));
static row *add_row(row *out, int *n, int max, int decimals, int ratios, const char *fmt_, ...)
{
	static row sink;
	row *rw = *n < max ? &out[(*n)++] : &sink;
	va_list ap;
	memset(rw, 0, sizeof(*rw));
	va_start(ap, fmt_);
	vsnprintf(rw->label, sizeof(rw->label), fmt_, ap);
	va_end(ap);
	rw->decimals = decimals;
	rw->ratios = ratios;
	return rw;
}

int report_figures(const step *st, int extra, report_fig *out, int max)
{
	int n = 0;
	row *rw = add_row(out, &n, max, 0, 0, "jobs completed");
	for (int p = 0; p < PH_N; p++)
		rw->v[p] = st->ph[p].ran ? (double)st->ph[p].completed : -1;
	const char *rate_labels[] = {"enqueue/s", "claim/s", "complete/s", "end-to-end jobs/s"};
	for (int k = 0; k < 4; k++) {
		rw = add_row(out, &n, max, 0, 1, "%s", rate_labels[k]);
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &st->ph[p];
			rw->v[p] = k == 0   ? ph->enq_rate
				   : k == 1 ? ph->claim_rate
				   : k == 2 ? ph->complete_rate
					    : ph->e2e_rate;
		}
	}
	const char *lat_labels[] = {"enqueue-to-start", "claim round trip", "enqueue round trip"};
	for (int which = 0; which < 3; which++) {
		const char *what = lat_labels[which];
		for (int k = 0; k < REPORT_NPCT; k++) {
			rw = add_row(out, &n, max, 2, 1, "%*s %s ms", (int)strlen(what),
				     k ? "" : what, pct_names[k]);
			for (int p = 0; p < PH_N; p++) {
				const phase *ph = &st->ph[p];
				const hist *h = which == 0   ? ph->e2s
						: which == 1 ? ph->claim_rtt
							     : ph->enq_rtt;
				rw->v[p] = ph->ran ? pct_ms(h, report_pcts[k]) : -1;
			}
		}
	}
	/* [run] warmup: the jobs enqueued in it, left out of enqueue-to-start
	 * above, and their own figures */
	int warm = 0;
	for (int p = 0; p < PH_N; p++)
		warm |= st->ph[p].ran && hist_count(st->ph[p].e2s_warm) > 0;
	if (warm) {
		rw = add_row(out, &n, max, 0, 0, "warm-up jobs (left out above)");
		for (int p = 0; p < PH_N; p++)
			rw->v[p] = st->ph[p].ran ? (double)hist_count(st->ph[p].e2s_warm) : -1;
		for (int k = 0; k < 2; k++) {
			rw = add_row(out, &n, max, 2, 1, "%14s %s ms", k ? "" : "warm-up pickup",
				     k ? "p99" : "p50");
			for (int p = 0; p < PH_N; p++) {
				const phase *ph = &st->ph[p];
				rw->v[p] = ph->ran && hist_count(ph->e2s_warm)
						   ? pct_ms(ph->e2s_warm, k ? 99 : 50)
						   : -1;
			}
		}
	}
	rw = add_row(out, &n, max, 1, 0, "jobs per claim");
	for (int p = 0; p < PH_N; p++) {
		const phase *ph = &st->ph[p];
		uint64_t full = ph->claims - ph->claims_empty;
		rw->v[p] = ph->ran && full ? (double)ph->claimed / (double)full : -1;
	}
	const char *cpu_labels[] = {"CPU s/1000 jobs, bench", "CPU s/1000 jobs, PostgreSQL"};
	for (int k = 0; k < 2; k++) {
		rw = add_row(out, &n, max, 3, 1, "%s", cpu_labels[k]);
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &st->ph[p];
			rw->v[p] =
				ph->ran ? per1000(k ? ph->cpu_pg_s : ph->cpu_bench_s, ph->completed)
					: -1;
		}
	}
	if (st->ph[PH_SHARDQ].daemon.ran) {
		rw = add_row(out, &n, max, 3, 0, "CPU s/1000 jobs, shardqd");
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &st->ph[p];
			rw->v[p] = ph->ran && ph->daemon.ran
					   ? per1000(ph->daemon.cpu_s, ph->completed)
					   : -1;
		}
	}
	rw = add_row(out, &n, max, 3, 0, "bench CPU / PostgreSQL CPU");
	for (int p = 0; p < PH_N; p++) {
		const phase *ph = &st->ph[p];
		rw->v[p] = ph->ran && ph->cpu_pg_s > 0 && ph->cpu_bench_s >= 0
				   ? ph->cpu_bench_s / ph->cpu_pg_s
				   : -1;
	}
	rw = add_row(out, &n, max, 2, 0, "other load, cores busy");
	for (int p = 0; p < PH_N; p++) {
		const phase *ph = &st->ph[p];
		rw->v[p] = ph->ran && ph->cpu_other_s >= 0 && ph->wall_s > 0
				   ? ph->cpu_other_s / ph->wall_s
				   : -1;
	}
	const phase *q = &st->ph[PH_SHARDQ];
	double qr[4];
	if (extra && q->ran && quarter_rates(q, qr) && qr[0] > 0) {
		rw = add_row(out, &n, max, 2, 0, "completions last/first quarter");
		for (int p = 0; p < PH_N; p++)
			rw->v[p] = -1;
		rw->v[PH_SHARDQ] = qr[3] / qr[0];
	}
	return n < max ? n : max;
}

/* A [rebalance] run's windows: completions/s and pickup p99 in each, and
 * the moves of the two rebalances. */
static void rebalance_table(FILE *f, const phase *q)
{
	const rb_result *rb = q->rb;
	fprintf(f,
		"\n  rebalance: the last shard added (weight 1), then drained (weight 0), %lld "
		"live jobs waiting; re-runs (attempt 2 or later): %llu\n",
		(long long)q->live, (unsigned long long)q->reruns);
	fprintf(f, "  %-9s %7s %7s %14s %10s %10s %6s %8s %10s %11s %11s %6s\n", "window", "from s",
		"to s", "completions/s", "p50 ms", "p99 ms", "sets", "parts", "rows", "stall max",
		"stall mean", ">100ms");
	for (int w = 0; w < RB_NWIN; w++) {
		const rb_window *x = &rb->w[w];
		double len = x->t1 - x->t0;
		if (x->t1 <= 0)
			continue;
		fprintf(f, "  %-9s %7.1f %7.1f %14.0f %10.1f %10.1f", rb_window_names[w], x->t0,
			x->t1, len > 0 ? (double)x->done / len : 0, pct_ms(x->e2s, 50),
			pct_ms(x->e2s, 99));
		if (w == RB_ADDING || w == RB_DRAINING)
			fprintf(f, " %6d %8lld %10lld %11.1f %11.1f %6d\n", x->moves,
				(long long)x->parts, (long long)x->rows, x->stall_max_ms,
				x->moves ? x->stall_sum_ms / x->moves : 0, x->stalls_over_100ms);
		else
			fprintf(f, "\n");
	}
}

static void step_table(FILE *f, const run_result *r, const step *st)
{
	const scenario *sc = r->sc;
	row rows[REPORT_MAX_FIGS];
	fprintf(f, "\n");
	if (st->backlog)
		fprintf(f, "step: %lld ready jobs preloaded\n", (long long)st->backlog);
	if (r->sc->nrates > 1)
		fprintf(f, "step: producers offering %.0f jobs/s\n", st->rate);
	for (int p = 0; p < PH_N; p++) {
		const phase *ph = &st->ph[p];
		if (!ph->ran)
			continue;
		fprintf(f, "  %-7s %s\n", phase_names[p], ph->title);
		if (ph->attempts > 1)
			fprintf(f,
				"          (run %d times: the earlier runs were disturbed by other "
				"load)\n",
				ph->attempts);
		if (ph->backlog && p == PH_SHARDQ)
			fprintf(f,
				"          backlog of %lld ready jobs loaded in %.1f s (COPY, all "
				"shards at once: %.0f rows/s) + %.1f s VACUUM ANALYZE\n",
				(long long)ph->backlog, ph->preload_s,
				ph->preload_s > 0 ? (double)ph->backlog / ph->preload_s : 0,
				ph->vacuum_s);
		else if (ph->backlog)
			fprintf(f,
				"          backlog of %lld loaded in %.1f s (INSERT ... SELECT, "
				"VACUUM ANALYZE)\n",
				(long long)ph->backlog, ph->preload_s);
		if (!ph->ok)
			fprintf(f, "          FAILED: %s\n", ph->error);
	}
	fprintf(f, "\n  %-30s", "");
	for (int p = 0; p < PH_N; p++)
		if (st->ph[p].ran)
			fprintf(f, " %11s", phase_names[p]);
	for (int p = 1; p < PH_N; p++)
		if (st->ph[p].ran)
			fprintf(f, " %8s", p == 1 ? "/(a)" : p == 2 ? "/(b)" : "/(c)");
	fprintf(f, "\n");
	int n = report_figures(st, 0, rows, REPORT_MAX_FIGS);
	for (int i = 0; i < n; i++)
		print_row(f, &rows[i], st);
	const phase *q = &st->ph[PH_SHARDQ];
	if (q->ran) {
		fprintf(f, "\n  shardq jobs per shard:");
		for (int s = 0; s < q->nshards; s++)
			fprintf(f, " s%d=%llu", s + 1, (unsigned long long)q->per_shard[s]);
		fprintf(f, "\n  shardq jobs per type:");
		for (int i = 0; i < sc->ntypes; i++)
			fprintf(f, " %s=%llu", sc->types[i].name,
				(unsigned long long)q->per_type[i]);
		if (q->via_http)
			fprintf(f,
				"\n  shardq HTTP clients: %llu claims (%llu empty: long polls that "
				"ran out), %.1f jobs per claim that brought jobs; busy share of "
				"the clients %.3f (%s)\n",
				(unsigned long long)q->claims, (unsigned long long)q->claims_empty,
				q->claims > q->claims_empty
					? (double)q->claimed / (double)(q->claims - q->claims_empty)
					: 0,
				q->slot_idle >= 0 ? 1 - q->slot_idle : 0,
				sc->pipeline ? "each runs its jobs one after another while it "
					       "claims the next ones and completes the last ones"
					     : "each runs its jobs one after another");
		else
			fprintf(f,
				"\n  shardq worker rounds (one pipeline to one shard: writes, then "
				"the claim): %llu with a claim, %.1f jobs started and %.1f "
				"completed per round; idle slot share %.3f\n",
				(unsigned long long)q->claims,
				q->claims ? (double)q->started / (double)q->claims : 0,
				q->claims ? (double)q->completed / (double)q->claims : 0,
				q->slot_idle);
		const daemon_stats *dm = &q->daemon;
		if (dm->ran) {
			fprintf(f,
				"  shardqd (%d request threads): %llu claim requests answered by "
				"%llu claim statements = %.2f requests per statement (claims "
				"received: %.2f per statement); %.1f jobs per statement\n",
				dm->threads, (unsigned long long)dm->claim_requests,
				(unsigned long long)dm->claim_statements,
				dm->claim_statements
					? (double)dm->claim_requests / (double)dm->claim_statements
					: 0,
				dm->claim_statements
					? (double)dm->req_claim / (double)dm->claim_statements
					: 0,
				dm->claim_statements
					? (double)dm->jobs_claimed / (double)dm->claim_statements
					: 0);
			fprintf(f,
				"  shardqd requests: claim %llu (mean %.1f ms in the daemon, long "
				"polls included), complete %llu (%.2f ms), enqueue %llu (%.2f ms); "
				"jobs released (client gone / extra) %llu / %llu; lost results "
				"%llu\n",
				(unsigned long long)dm->req_claim,
				dm->req_claim ? dm->sum_claim_s * 1000 / (double)dm->req_claim : 0,
				(unsigned long long)dm->req_complete,
				dm->req_complete
					? dm->sum_complete_s * 1000 / (double)dm->req_complete
					: 0,
				(unsigned long long)dm->req_enqueue,
				dm->req_enqueue ? dm->sum_enqueue_s * 1000 / (double)dm->req_enqueue
						: 0,
				(unsigned long long)dm->released_gone,
				(unsigned long long)dm->released_extra,
				(unsigned long long)dm->results_lost);
		}
		double d0, d1, slope;
		int ns;
		if (depth_trend(q, &d0, &d1, &slope, &ns))
			fprintf(f,
				"  shardq queue depth (ready and held): %.0f at the first sample, "
				"%.0f "
				"at the last%s; trend %+.0f jobs/s (least squares over %d "
				"samples)\n",
				d0, d1, q->enqueued ? " while producing" : "", slope, ns);
		double qr[4];
		if (quarter_rates(q, qr))
			fprintf(f,
				"  shardq completions/s by quarter of that time: %.0f %.0f %.0f "
				"%.0f "
				"(last / first %.2f)\n",
				qr[0], qr[1], qr[2], qr[3], qr[0] > 0 ? qr[3] / qr[0] : 0);
		if (q->rb)
			rebalance_table(f, q);
		if (st->ph[PH_C].ran && st->ph[PH_C].e2e_rate > 0 && q->e2e_rate > 0)
			fprintf(f, "  shardq end-to-end is %.2f of the raw limit (c)\n",
				q->e2e_rate / st->ph[PH_C].e2e_rate);
	}
	for (int p = 0; p < PH_N; p++) {
		const phase *ph = &st->ph[p];
		if (!ph->ran || !ph->nstmts)
			continue;
		fprintf(f, "\n  %s: statements by time on the servers (pg_stat_statements)\n",
			phase_names[p]);
		fprintf(f, "  %10s %9s %10s %8s  %s\n", "total ms", "calls", "rows", "WAL MB",
			"query");
		for (int i = 0; i < ph->nstmts; i++)
			fprintf(f, "  %10.0f %9llu %10llu %8.1f  %.90s\n", ph->stmts[i].total_ms,
				(unsigned long long)ph->stmts[i].calls,
				(unsigned long long)ph->stmts[i].rows,
				ph->stmts[i].wal_bytes / 1048576.0, ph->stmts[i].query);
	}
}

void report_table(FILE *f, const run_result *r)
{
	const scenario *sc = r->sc;
	char ex[64];
	fprintf(f, "shardq-bench: scenario %s (%s), %s\n", sc->name, sc->path, r->started_at);
	if (sc->description[0])
		fprintf(f, "  %s\n", sc->description);
	fprintf(f, "machine: %s\n", r->machine);
	if (sc->jobs)
		fprintf(f, "run: %lld jobs", (long long)sc->jobs);
	else if (sc->duration_ms)
		fprintf(f, "run: producers for %.0f s", (double)sc->duration_ms / 1000);
	else
		fprintf(f, "run: drain the backlog");
	fprintf(f, "; %d %sproducers x batch %d, %s;", sc->producers,
		sc->producers_http ? "HTTP " : "", sc->batch,
		sc->rate > 0 ? "rate-limited" : "unbounded");
	if (sc->workers_http)
		fprintf(f,
			" %d HTTP workers (keep-alive clients of shardqd, %d request threads, "
			"wait_ms %lld%s) in %d processes;",
			sc->clients, sc->daemon_threads, (long long)sc->wait_ms,
			sc->pipeline ? ", pipelined" : "", scenario_worker_procs(sc));
	else
		fprintf(f, " %d worker processes;", sc->processes);
	if (sc->rate > 0)
		fprintf(f, " rate %.0f jobs/s;", sc->rate);
	if (sc->warmup_ms)
		fprintf(f,
			" warm-up %.1f s (its jobs are left out of enqueue-to-start and shown "
			"apart);",
			(double)sc->warmup_ms / 1000);
	for (int i = 0; i < sc->ntypes; i++) {
		scenario_exec_text(&sc->types[i], ex, sizeof(ex));
		fprintf(f, " type %s: share %g, %s, %d threads, claim batch %d;", sc->types[i].name,
			sc->types[i].share, ex, sc->types[i].threads, sc->types[i].claim_batch);
	}
	fprintf(f, "\ncommand: %s\n", r->command);
	if (r->note[0])
		fprintf(f, "note: %s\n", r->note);
	fprintf(f, "ratios are shardq / baseline (for latency and CPU, lower is better)\n");
	for (int i = 0; i < r->nsteps; i++)
		step_table(f, r, &r->steps[i]);
	if (r->nsteps > 1) {
		const phase *first = &r->steps[0].ph[PH_SHARDQ];
		fprintf(f, "\nbacklog scaling (shardq, claim + complete):\n");
		fprintf(f, "  %12s %12s %12s %10s %12s %12s\n", "backlog", "complete/s", "vs first",
			"claim p99", "preload s", "vacuum s");
		for (int i = 0; i < r->nsteps; i++) {
			const phase *ph = &r->steps[i].ph[PH_SHARDQ];
			fprintf(f, "  %12lld %12.0f %12.3f %8.2fms %12.1f %12.1f\n",
				(long long)r->steps[i].backlog, ph->complete_rate,
				first->complete_rate > 0 ? ph->complete_rate / first->complete_rate
							 : 0,
				pct_ms(ph->claim_rtt, 99), ph->preload_s, ph->vacuum_s);
		}
	}
	fprintf(f, "\noutput: %s\n", r->out_dir);
}

/* ---- JSON ----------------------------------------------------------------- */

static json_t *num(double v)
{
	return v < 0 ? json_null() : json_real(v);
}

static json_t *pcts(const hist *h)
{
	json_t *o = json_object();
	for (int k = 0; k < REPORT_NPCT; k++)
		json_object_set_new(o, pct_names[k], num(pct_ms(h, report_pcts[k])));
	json_object_set_new(o, "max", num(h && hist_count(h) ? (double)h->max / 1000.0 : -1));
	json_object_set_new(o, "mean", num(h && hist_count(h) ? hist_mean(h) / 1000.0 : -1));
	json_object_set_new(o, "count", json_integer((json_int_t)(h ? hist_count(h) : 0)));
	return o;
}

static json_t *rebalance_json(const phase *ph)
{
	json_t *a = json_array();
	for (int w = 0; w < RB_NWIN; w++) {
		const rb_window *x = &ph->rb->w[w];
		double len = x->t1 - x->t0;
		json_array_append_new(
			a, json_pack("{s:s,s:f,s:f,s:f,s:o,s:o,s:i,s:I,s:I,s:f,s:f,s:i}", "window",
				     rb_window_names[w], "from_s", x->t0, "to_s", x->t1,
				     "completions_per_s", len > 0 ? (double)x->done / len : 0.0,
				     "e2s_p50_ms", num(pct_ms(x->e2s, 50)), "e2s_p99_ms",
				     num(pct_ms(x->e2s, 99)), "sets", x->moves, "partitions",
				     (json_int_t)x->parts, "rows", (json_int_t)x->rows,
				     "stall_max_ms", x->stall_max_ms, "stall_mean_ms",
				     x->moves ? x->stall_sum_ms / x->moves : 0.0,
				     "stalls_over_100ms", x->stalls_over_100ms));
	}
	return json_pack("{s:I,s:o}", "live", (json_int_t)ph->live, "windows", a);
}

static json_t *phase_json(const phase *ph, const phase *base)
{
	json_t *o = json_object();
	json_object_set_new(o, "phase", json_string(ph->key));
	json_object_set_new(o, "title", json_string(ph->title));
	json_object_set_new(o, "ok", json_boolean(ph->ok));
	json_object_set_new(o, "attempts", json_integer(ph->attempts));
	if (!ph->ok)
		json_object_set_new(o, "error", json_string(ph->error));
	json_object_set_new(o, "backlog", json_integer(ph->backlog));
	json_object_set_new(o, "preload_s", json_real(ph->preload_s));
	json_object_set_new(o, "vacuum_s", json_real(ph->vacuum_s));
	double d0, d1, slope;
	int ns;
	if (depth_trend(ph, &d0, &d1, &slope, &ns)) {
		json_t *qd = json_object();
		json_object_set_new(qd, "first", json_real(d0));
		json_object_set_new(qd, "last", json_real(d1));
		json_object_set_new(qd, "trend_per_s", json_real(slope));
		json_object_set_new(qd, "samples", json_integer(ns));
		json_object_set_new(o, "queue_depth", qd);
	}
	json_t *c = json_object();
	json_object_set_new(c, "enqueued", json_integer((json_int_t)ph->enqueued));
	json_object_set_new(c, "claimed", json_integer((json_int_t)ph->claimed));
	json_object_set_new(c, "claims", json_integer((json_int_t)ph->claims));
	json_object_set_new(c, "claims_empty", json_integer((json_int_t)ph->claims_empty));
	json_object_set_new(c, "started", json_integer((json_int_t)ph->started));
	json_object_set_new(c, "completed", json_integer((json_int_t)ph->completed));
	json_object_set_new(c, "handled", json_integer((json_int_t)ph->handled));
	json_object_set_new(c, "lost", json_integer((json_int_t)ph->lost));
	json_object_set_new(c, "left_ready", json_integer((json_int_t)ph->left_ready));
	json_object_set_new(c, "left_other", json_integer((json_int_t)ph->left_other));
	json_object_set_new(o, "counts", c);
	json_t *rt = json_object();
	json_object_set_new(rt, "enqueue", num(ph->enq_rate));
	json_object_set_new(rt, "claim", num(ph->claim_rate));
	json_object_set_new(rt, "complete", num(ph->complete_rate));
	json_object_set_new(rt, "end_to_end", num(ph->e2e_rate));
	json_object_set_new(o, "rates_per_s", rt);
	json_t *w = json_object();
	json_object_set_new(w, "enqueue", json_real(ph->enq_s));
	json_object_set_new(w, "claim", json_real(ph->claim_s));
	json_object_set_new(w, "complete", json_real(ph->complete_s));
	json_object_set_new(w, "end_to_end", json_real(ph->e2e_s));
	json_object_set_new(o, "windows_s", w);
	json_t *lat = json_object();
	json_object_set_new(lat, "enqueue_to_start", pcts(ph->e2s));
	json_object_set_new(lat, "enqueue_to_start_warmup", pcts(ph->e2s_warm));
	json_object_set_new(lat, "claim_round_trip", pcts(ph->claim_rtt));
	json_object_set_new(lat, "enqueue_round_trip", pcts(ph->enq_rtt));
	json_object_set_new(lat, "start_round_trip", pcts(ph->start_rtt));
	json_object_set_new(lat, "complete_round_trip", pcts(ph->complete_rtt));
	json_object_set_new(o, "latency_ms", lat);
	json_t *shards = json_array();
	for (int s = 0; s < ph->nshards; s++)
		json_array_append_new(shards, json_integer((json_int_t)ph->per_shard[s]));
	json_object_set_new(o, "jobs_per_shard", shards);
	json_t *cpu = json_object();
	json_object_set_new(cpu, "bench_s", num(ph->cpu_bench_s));
	json_object_set_new(cpu, "postgres_s", num(ph->cpu_pg_s));
	json_object_set_new(cpu, "bench_s_per_1000_jobs",
			    num(per1000(ph->cpu_bench_s, ph->completed)));
	json_object_set_new(cpu, "postgres_s_per_1000_jobs",
			    num(per1000(ph->cpu_pg_s, ph->completed)));
	json_object_set_new(cpu, "other_processes_s", num(ph->cpu_other_s));
	if (ph->daemon.ran) {
		json_object_set_new(cpu, "shardqd_s", num(ph->daemon.cpu_s));
		json_object_set_new(cpu, "shardqd_s_per_1000_jobs",
				    num(per1000(ph->daemon.cpu_s, ph->completed)));
	}
	json_object_set_new(cpu, "wall_s", json_real(ph->wall_s));
	json_object_set_new(o, "cpu", cpu);
	if (!strcmp(ph->key, "shardq"))
		json_object_set_new(o, "workers_via",
				    json_string(ph->via_http ? "http" : "library"));
	if (ph->daemon.ran) {
		const daemon_stats *dm = &ph->daemon;
		json_t *d = json_object();
		json_object_set_new(d, "threads", json_integer(dm->threads));
		json_object_set_new(d, "claim_requests",
				    json_integer((json_int_t)dm->claim_requests));
		json_object_set_new(d, "claim_statements",
				    json_integer((json_int_t)dm->claim_statements));
		json_object_set_new(d, "requests_per_statement",
				    num(dm->claim_statements ? (double)dm->claim_requests /
								       (double)dm->claim_statements
							     : -1));
		json_object_set_new(d, "jobs_claimed", json_integer((json_int_t)dm->jobs_claimed));
		json_object_set_new(d, "released_gone",
				    json_integer((json_int_t)dm->released_gone));
		json_object_set_new(d, "released_extra",
				    json_integer((json_int_t)dm->released_extra));
		json_object_set_new(d, "results_lost", json_integer((json_int_t)dm->results_lost));
		json_object_set_new(d, "requests_claim", json_integer((json_int_t)dm->req_claim));
		json_object_set_new(d, "requests_complete",
				    json_integer((json_int_t)dm->req_complete));
		json_object_set_new(d, "requests_enqueue",
				    json_integer((json_int_t)dm->req_enqueue));
		json_object_set_new(d, "seconds_claim", json_real(dm->sum_claim_s));
		json_object_set_new(d, "seconds_complete", json_real(dm->sum_complete_s));
		json_object_set_new(d, "seconds_enqueue", json_real(dm->sum_enqueue_s));
		json_object_set_new(o, "shardqd", d);
	}
	if (ph->slot_idle >= 0)
		json_object_set_new(o, "slot_idle_ratio", json_real(ph->slot_idle));
	if (base) {
		/* shardq's figures over each baseline's */
		json_t *rat = json_object();
		for (int p = 1; p < PH_N; p++) {
			const phase *b = &base[p];
			if (!b->ran)
				continue;
			json_t *x = json_object();
			json_object_set_new(x, "end_to_end",
					    num(b->e2e_rate > 0 && ph->e2e_rate >= 0
							? ph->e2e_rate / b->e2e_rate
							: -1));
			json_object_set_new(x, "enqueue",
					    num(b->enq_rate > 0 && ph->enq_rate >= 0
							? ph->enq_rate / b->enq_rate
							: -1));
			json_object_set_new(x, "claim",
					    num(b->claim_rate > 0 && ph->claim_rate >= 0
							? ph->claim_rate / b->claim_rate
							: -1));
			json_object_set_new(x, "complete",
					    num(b->complete_rate > 0 && ph->complete_rate >= 0
							? ph->complete_rate / b->complete_rate
							: -1));
			double pe = pct_ms(ph->e2s, 99), be = pct_ms(b->e2s, 99);
			json_object_set_new(x, "enqueue_to_start_p99",
					    num(pe >= 0 && be > 0 ? pe / be : -1));
			json_object_set_new(x, "label", json_string(phase_names[p]));
			json_object_set_new(rat, b->key, x);
		}
		json_object_set_new(o, "ratios", rat);
	}
	json_t *stm = json_array();
	for (int i = 0; i < ph->nstmts; i++) {
		json_t *s = json_object();
		json_object_set_new(s, "query", json_string(ph->stmts[i].query));
		json_object_set_new(s, "total_ms", json_real(ph->stmts[i].total_ms));
		json_object_set_new(s, "calls", json_integer((json_int_t)ph->stmts[i].calls));
		json_object_set_new(s, "rows", json_integer((json_int_t)ph->stmts[i].rows));
		json_object_set_new(s, "wal_bytes", json_real(ph->stmts[i].wal_bytes));
		json_array_append_new(stm, s);
	}
	json_object_set_new(o, "statements", stm);
	json_t *ser = json_array();
	for (size_t i = 0; i < ph->nseries; i++) {
		const sample *s = &ph->series[i];
		json_array_append_new(ser, json_pack("{s:f,s:I,s:I,s:o,s:o}", "t", s->t, "done",
						     (json_int_t)s->done, "enqueued",
						     (json_int_t)s->enqueued, "rate",
						     json_real(s->done_rate), "e2s_p99_ms",
						     num(s->e2s_p99_ms)));
	}
	json_object_set_new(o, "series", ser);
	json_object_set_new(o, "reruns", json_integer((json_int_t)ph->reruns));
	if (ph->rb)
		json_object_set_new(o, "rebalance", rebalance_json(ph));
	return o;
}

int report_json(FILE *f, const run_result *r)
{
	const scenario *sc = r->sc;
	json_t *root = json_object();
	json_object_set_new(root, "scenario", json_string(sc->name));
	json_object_set_new(root, "file", json_string(sc->path));
	json_object_set_new(root, "description", json_string(sc->description));
	json_object_set_new(root, "started_at", json_string(r->started_at));
	json_object_set_new(root, "machine", json_string(r->machine));
	json_object_set_new(root, "command", json_string(r->command));
	json_object_set_new(root, "note", json_string(r->note));
	json_object_set_new(root, "shards", json_integer(sc->nshards));
	json_object_set_new(root, "jobs", json_integer(sc->jobs));
	json_object_set_new(root, "duration_s", json_real((double)sc->duration_ms / 1000.0));
	json_object_set_new(root, "warmup_s", json_real((double)sc->warmup_ms / 1000.0));
	int ok = 1;
	json_t *steps = json_array();
	for (int i = 0; i < r->nsteps; i++) {
		const step *st = &r->steps[i];
		json_t *js = json_object();
		json_object_set_new(js, "backlog", json_integer(st->backlog));
		json_object_set_new(js, "offered_rate", json_real(st->rate));
		json_t *phs = json_array();
		for (int p = 0; p < PH_N; p++) {
			if (!st->ph[p].ran)
				continue;
			ok &= st->ph[p].ok;
			json_array_append_new(phs, phase_json(&st->ph[p], p == 0 ? st->ph : NULL));
		}
		json_object_set_new(js, "phases", phs);
		json_array_append_new(steps, js);
	}
	json_object_set_new(root, "steps", steps);
	json_object_set_new(root, "ok", json_boolean(ok));
	int rc = json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
	fputc('\n', f);
	json_decref(root);
	return rc;
}

/* ---- CSV ------------------------------------------------------------------ */

static void csv_num(FILE *f, double v, int decimals)
{
	if (v < 0)
		fputs(",", f);
	else
		fprintf(f, ",%.*f", decimals, v);
}

int report_csv(FILE *f, const run_result *r)
{
	fprintf(f, "scenario,backlog,phase,ok,jobs,enqueue_per_s,claim_per_s,complete_per_s,"
		   "end_to_end_per_s");
	const char *hs[] = {"e2s", "claim"};
	for (int h = 0; h < 2; h++)
		for (int k = 0; k < REPORT_NPCT; k++)
			fprintf(f, ",%s_%s_ms", hs[h], pct_names[k]);
	fprintf(f, ",bench_cpu_s_per_1000,postgres_cpu_s_per_1000,e2e_vs_a,e2e_vs_b,e2e_vs_c,"
		   "preload_s,vacuum_s,workers_via,shardqd_cpu_s_per_1000,"
		   "shardqd_claim_requests_per_statement\n");
	for (int i = 0; i < r->nsteps; i++) {
		const step *st = &r->steps[i];
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &st->ph[p];
			if (!ph->ran)
				continue;
			fprintf(f, "%s,%lld,%s,%d,%llu", r->sc->name, (long long)st->backlog,
				ph->key, ph->ok, (unsigned long long)ph->completed);
			csv_num(f, ph->enq_rate, 1);
			csv_num(f, ph->claim_rate, 1);
			csv_num(f, ph->complete_rate, 1);
			csv_num(f, ph->e2e_rate, 1);
			for (int k = 0; k < REPORT_NPCT; k++)
				csv_num(f, pct_ms(ph->e2s, report_pcts[k]), 3);
			for (int k = 0; k < REPORT_NPCT; k++)
				csv_num(f, pct_ms(ph->claim_rtt, report_pcts[k]), 3);
			csv_num(f, per1000(ph->cpu_bench_s, ph->completed), 4);
			csv_num(f, per1000(ph->cpu_pg_s, ph->completed), 4);
			for (int b = 1; b < PH_N; b++) {
				const phase *bp = &st->ph[b];
				csv_num(f,
					p == 0 && bp->ran && bp->e2e_rate > 0 && ph->e2e_rate >= 0
						? ph->e2e_rate / bp->e2e_rate
						: -1,
					3);
			}
			csv_num(f, ph->preload_s, 2);
			csv_num(f, ph->vacuum_s, 2);
			fprintf(f, ",%s", p ? "" : ph->via_http ? "http" : "library");
			csv_num(f, ph->daemon.ran ? per1000(ph->daemon.cpu_s, ph->completed) : -1,
				4);
			csv_num(f,
				ph->daemon.claim_statements
					? (double)ph->daemon.claim_requests /
						  (double)ph->daemon.claim_statements
					: -1,
				2);
			fputc('\n', f);
		}
	}
	return ferror(f) ? -1 : 0;
}

int report_series_csv(FILE *f, const run_result *r)
{
	fprintf(f, "backlog,phase,t_s,enqueued,claimed,done,done_per_s,e2s_p50_ms,e2s_p99_ms\n");
	for (int i = 0; i < r->nsteps; i++)
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &r->steps[i].ph[p];
			for (size_t k = 0; ph->ran && k < ph->nseries; k++) {
				const sample *s = &ph->series[k];
				fprintf(f, "%lld,%s,%.3f,%llu,%llu,%llu,%.1f",
					(long long)r->steps[i].backlog, ph->key, s->t,
					(unsigned long long)s->enqueued,
					(unsigned long long)s->claimed, (unsigned long long)s->done,
					s->done_rate);
				csv_num(f, s->e2s_p50_ms, 3);
				csv_num(f, s->e2s_p99_ms, 3);
				fputc('\n', f);
			}
		}
	return ferror(f) ? -1 : 0;
}

/* The percentile spectrum: x = 1/(1-q), the way HdrHistogram plots it. */
static int spectrum(const char *path, const hist *h)
{
	static const double qs[] = {0,    25,   50,    75,    90,     95,     99,
				    99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100};
	FILE *f;
	if (!h || !hist_count(h))
		return 0;
	if (!(f = fopen(path, "w")))
		return -1;
	fprintf(f, "# percentile 1/(1-q) ms\n");
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double q = qs[i] / 100.0, x = q >= 1 ? 1e6 : 1.0 / (1.0 - q);
		if (qs[i] < 100 && (double)hist_count(h) * (1 - q) < 1)
			continue; /* fewer samples than the percentile needs */
		fprintf(f, "%g %g %g\n", qs[i], x, pct_ms(h, qs[i]));
	}
	return fclose(f);
}

int report_plot_data(const char *dir, const run_result *r)
{
	char path[1024];
	for (int i = 0; i < r->nsteps; i++)
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &r->steps[i].ph[p];
			if (!ph->ran)
				continue;
			snprintf(path, sizeof(path), "%s/series-%d-%s.dat", dir, i, ph->key);
			FILE *f = fopen(path, "w");
			if (!f)
				return -1;
			fprintf(f, "# t_s done_per_s e2s_p50_ms e2s_p99_ms\n");
			for (size_t k = 0; k < ph->nseries; k++) {
				const sample *s = &ph->series[k];
				fprintf(f, "%.3f %.1f %g %g\n", s->t, s->done_rate,
					s->e2s_p50_ms < 0 ? NAN : s->e2s_p50_ms,
					s->e2s_p99_ms < 0 ? NAN : s->e2s_p99_ms);
			}
			if (fclose(f))
				return -1;
			snprintf(path, sizeof(path), "%s/pct-%d-%s-e2s.dat", dir, i, ph->key);
			if (spectrum(path, ph->e2s))
				return -1;
			snprintf(path, sizeof(path), "%s/pct-%d-%s-claim.dat", dir, i, ph->key);
			if (spectrum(path, ph->claim_rtt))
				return -1;
		}
	return 0;
}

/* ---- repeated runs ------------------------------------------------------- */

int report_runs_add(report_runs *rr, const run_result *r)
{
	if (rr->nruns >= REPORT_MAX_RUNS)
		return -1;
	int k = rr->nruns++;
	if (k == 0 || r->nsteps < rr->nsteps)
		rr->nsteps = r->nsteps;
	for (int i = 0; i < r->nsteps; i++) {
		const step *st = &r->steps[i];
		int n = report_figures(st, 1, rr->fig[k][i], REPORT_MAX_FIGS);
		if (k == 0 || n < rr->nfig[i])
			rr->nfig[i] = n;
		for (int p = 0; p < PH_N; p++)
			rr->ran[i][p] = (k == 0 || rr->ran[i][p]) && st->ph[p].ran;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median, minimum and maximum of the n values given (those < 0 are none);
 * how many there were. */
static int spread(const double *v, int n, double *med, double *lo, double *hi)
{
	double s[REPORT_MAX_RUNS];
	int m = 0;
	for (int i = 0; i < n; i++)
		if (v[i] >= 0)
			s[m++] = v[i];
	if (!m)
		return 0;
	qsort(s, (size_t)m, sizeof(double), cmp_double);
	*med = m % 2 ? s[m / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
	*lo = s[0];
	*hi = s[m - 1];
	return m;
}

/* Run k's value of figure j of step i: a phase's (col < PH_N), or the
 * ratio of shardq to baseline col - PH_N + 1 within that run. */
static double run_value(const report_runs *rr, int k, int i, int j, int col)
{
	const report_fig *fg = &rr->fig[k][i][j];
	if (col < PH_N)
		return fg->v[col];
	int b = col - PH_N + 1;
	return fg->ratios && fg->v[0] >= 0 && fg->v[b] > 0 ? fg->v[0] / fg->v[b] : -1;
}

static void cell(FILE *f, const report_runs *rr, int i, int j, int col, int decimals, int width)
{
	double v[REPORT_MAX_RUNS], med, lo, hi;
	char b[96];
	for (int k = 0; k < rr->nruns; k++)
		v[k] = run_value(rr, k, i, j, col);
	if (!spread(v, rr->nruns, &med, &lo, &hi))
		snprintf(b, sizeof(b), "-");
	else
		snprintf(b, sizeof(b), "%.*f [%.*f, %.*f]", decimals, med, decimals, lo, decimals,
			 hi);
	fprintf(f, " %*s", width, b);
}

void report_runs_table(FILE *f, const report_runs *rr, const run_result *last)
{
	fprintf(f,
		"\nshardq-bench: %d runs of scenario %s, each on fresh databases (shardq, then "
		"the baselines);\nmedian [lowest, highest] over the runs; a ratio is taken "
		"within each run, then summarized\n",
		rr->nruns, last->sc->name);
	for (int i = 0; i < rr->nsteps; i++) {
		const step *st = &last->steps[i];
		fprintf(f, "\n");
		if (st->backlog)
			fprintf(f, "step: %lld ready jobs preloaded\n", (long long)st->backlog);
		if (last->sc->nrates > 1)
			fprintf(f, "step: producers offering %.0f jobs/s\n", st->rate);
		fprintf(f, "  %-30s", "");
		for (int p = 0; p < PH_N; p++)
			if (rr->ran[i][p])
				fprintf(f, " %26s", phase_names[p]);
		for (int p = 1; p < PH_N; p++)
			if (rr->ran[i][p])
				fprintf(f, " %20s", p == 1 ? "/(a)" : p == 2 ? "/(b)" : "/(c)");
		fprintf(f, "\n");
		for (int j = 0; j < rr->nfig[i]; j++) {
			const report_fig *fg = &rr->fig[0][i][j];
			fprintf(f, "  %-30s", fg->label);
			for (int p = 0; p < PH_N; p++)
				if (rr->ran[i][p])
					cell(f, rr, i, j, p, fg->decimals, 26);
			for (int p = 1; p < PH_N; p++) {
				if (!rr->ran[i][p])
					continue;
				if (fg->ratios)
					cell(f, rr, i, j, PH_N + p - 1, 2, 20);
				else
					fprintf(f, " %20s", "-");
			}
			fputc('\n', f);
		}
	}
}

int report_runs_csv(FILE *f, const report_runs *rr)
{
	fprintf(f, "step,figure,of");
	for (int k = 0; k < rr->nruns; k++)
		fprintf(f, ",run%d", k + 1);
	fprintf(f, ",median,min,max\n");
	char head[sizeof(rr->fig[0][0][0].label)] = "";
	for (int i = 0; i < rr->nsteps; i++)
		for (int j = 0; j < rr->nfig[i]; j++) {
			const report_fig *fg = &rr->fig[0][i][j];
			/* an indented label continues the last one that was not
			 * ("enqueue-to-start p50 ms", then "  ...  p90 ms") */
			char label[2 * sizeof(fg->label)];
			size_t a = strspn(fg->label, " ");
			if (!a)
				snprintf(head, sizeof(head), "%s", fg->label);
			snprintf(label, sizeof(label), "%.*s%s", (int)a, head, fg->label + a);
			for (int col = 0; col < 2 * PH_N - 1; col++) {
				int p = col < PH_N ? col : col - PH_N + 1;
				double v[REPORT_MAX_RUNS], med, lo, hi;
				if (!rr->ran[i][p] || (col >= PH_N && !fg->ratios))
					continue;
				for (int k = 0; k < rr->nruns; k++)
					v[k] = run_value(rr, k, i, j, col);
				if (!spread(v, rr->nruns, &med, &lo, &hi))
					continue;
				fprintf(f, "%d,\"%s\",%s%s", i + 1, label,
					col < PH_N ? "" : "shardq/", phase_names[p]);
				for (int k = 0; k < rr->nruns; k++)
					if (v[k] >= 0)
						fprintf(f, ",%.6g", v[k]);
					else
						fprintf(f, ",");
				fprintf(f, ",%.6g,%.6g,%.6g\n", med, lo, hi);
			}
		}
	return ferror(f) ? -1 : 0;
}

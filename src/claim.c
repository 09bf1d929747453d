/* claim.c - the multi-type claim: one statement per shard, all shards at
 * once, each type's limit shared among the shards by their recent yield. */
#include "buf.h"
#include "clock.h"
#include "client.h"
#include "error.h"
#include "jobrow.h"
#include "claim.h"
#include "schema.h"
#include "sql_queries.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The statements' text and why each is shaped as it is:
 * sql/queries/claim.sql. */
static const sq_stmt stmt_claim = {"sq_claim", sq_sql_claim};
static const sq_stmt stmt_claim_limited = {"sq_claim_limited", sq_sql_claim_limited};
static const sq_stmt stmt_limit_lock = {"sq_limit_lock", sq_sql_limit_lock};

/* Shares `limit` among shards in proportion to w[] (largest remainder),
 * starting the tie-break at `rot` so small limits rotate over shards. */
static void share(int32_t limit, const double *w, int n, unsigned rot, int32_t *out)
{
	double sum = 0, frac[SQ_MAX_SHARDS];
	int32_t given = 0;
	for (int s = 0; s < n; s++)
		sum += w[s];
	for (int s = 0; s < n; s++) {
		double exact = limit * w[s] / sum;
		out[s] = (int32_t)floor(exact);
		frac[s] = exact - out[s];
		given += out[s];
	}
	while (given < limit) {
		int best = -1;
		for (int k = 0; k < n; k++) {
			int s = (int)((rot + (unsigned)k) % (unsigned)n);
			if (best < 0 || frac[s] > frac[best] + 1e-9)
				best = s;
		}
		out[best]++;
		frac[best] = -1;
		given++;
	}
}

static int cmp_jobs(const void *a, const void *b)
{
	const sq_job *x = a, *y = b;
	int64_t ox = x->delay_tolerance_time_us ? x->delay_tolerance_time_us : x->schedule_time_us;
	int64_t oy = y->delay_tolerance_time_us ? y->delay_tolerance_time_us : y->schedule_time_us;
	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	if (ox != oy)
		return ox < oy ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

typedef struct shard_req {
	sq_buf types, limits, leases, starts;
	sq_buf maxrun, rate, burst, ltypes; /* a limited claim's shares */
	sq_buf full, cur_p, cur_us, cur_id; /* the cursors (claim_cursor_key) */
	const char *vals[12];
	const char *lvals[1]; /* the lock's; kept until the pipeline is sent */
	int base;             /* index of the gate statement in the shard's pipeline */
	int claim;            /* index of the claim statement */
	int32_t start[SQ_MAX_TYPES];
	int32_t asked[SQ_MAX_TYPES];
	int32_t got[SQ_MAX_TYPES];
	int32_t got_run[SQ_MAX_TYPES];      /* of got, how many came back running */
	unsigned char full_k[SQ_MAX_TYPES]; /* the claim of type k reads from the front */
	double pushed_at;
	int any;
} shard_req;

typedef struct job_vec {
	sq_job *v;
	size_t n, cap;
} job_vec;

/* Queues one round: shard s asks sr[s].asked[k] jobs of type k, of which
 * sr[s].start[k] start at once; the gate and the claim are a transaction of
 * their own (a Sync after them). */
/* A type with `rate` or `max_running` is limited on each shard to the
 * shard's share, in proportion to the partitions it holds by the cached
 * map: the shares of max_running are whole slots (at least one per shard
 * that holds partitions while there are slots, the rest by largest
 * remainder, ties to the lower shard id), so every client with the same
 * map computes the same split and the shards' caps add up to the limit. */
static void limit_shares(sq_client *c, const sq_type_conf *t, int32_t *maxrun, double *rate,
			 double *burst)
{
	int n = c->nshards;
	double frac[SQ_MAX_SHARDS];
	int32_t left = t->max_running;
	for (int s = 0; s < n; s++) {
		double share = (double)c->map_parts[s] / c->partitions;
		maxrun[s] = -1;
		rate[s] = burst[s] = -1;
		if (t->rate_per_s > 0) {
			double b = t->burst > 0 ? t->burst : t->rate_per_s;
			rate[s] = t->rate_per_s * share;
			burst[s] = fmax(1.0, b * share);
		}
	}
	if (t->max_running <= 0)
		return;
	for (int s = 0; s < n; s++) {
		maxrun[s] = 0;
		frac[s] = -1;
		if (!c->map_parts[s] || left <= 0)
			continue;
		maxrun[s] = 1;
		left--;
	}
	int32_t rest = left;
	for (int s = 0; s < n && rest > 0; s++) {
		if (!c->map_parts[s])
			continue;
		double exact = (double)rest * c->map_parts[s] / c->partitions;
		int32_t whole = (int32_t)floor(exact);
		maxrun[s] += whole;
		left -= whole;
		frac[s] = exact - whole;
	}
	while (left > 0) {
		int best = -1;
		for (int s = 0; s < n; s++) {
			if (frac[s] < 0)
				continue;
			if (best < 0 || frac[s] > frac[best] + 1e-12 ||
			    (fabs(frac[s] - frac[best]) <= 1e-12 &&
			     strcmp(c->cfg->shards[s].id, c->cfg->shards[best].id) < 0))
				best = s;
		}
		if (best < 0)
			break;
		maxrun[best]++;
		frac[best] = -1;
		left--;
	}
}

/* The limited types' shares on every shard, [k * n + s] for request k on
 * shard s (n shards); NULL when no type of the request is limited, or
 * without memory (then the limited types claim nothing). */
typedef struct limit_split {
	int32_t *maxrun;
	double *rate, *burst;
} limit_split;

static void limit_split_make(sq_client *c, const int *ti, size_t nreqs, limit_split *ls)
{
	size_t n = (size_t)c->nshards;
	ls->maxrun = malloc(sizeof(int32_t) * nreqs * n);
	ls->rate = malloc(sizeof(double) * nreqs * n * 2);
	ls->burst = ls->rate ? ls->rate + nreqs * n : NULL;
	for (size_t k = 0; k < nreqs && ls->maxrun && ls->rate; k++)
		if (sq_type_limited(&c->cfg->types[ti[k]]))
			limit_shares(c, &c->cfg->types[ti[k]], ls->maxrun + k * n, ls->rate + k * n,
				     ls->burst + k * n);
}

static void shard_req_reset(shard_req *r, size_t nreqs)
{
	sq_buf_reset(&r->types);
	sq_buf_reset(&r->limits);
	sq_buf_reset(&r->leases);
	sq_buf_reset(&r->starts);
	sq_buf_reset(&r->maxrun);
	sq_buf_reset(&r->rate);
	sq_buf_reset(&r->burst);
	sq_buf_reset(&r->ltypes);
	sq_buf_reset(&r->full);
	sq_buf_reset(&r->cur_p);
	sq_buf_reset(&r->cur_us);
	sq_buf_reset(&r->cur_id);
	r->any = 0;
	r->base = r->claim = -1;
	memset(r->got, 0, sizeof(r->got[0]) * nreqs);
	memset(r->got_run, 0, sizeof(r->got_run[0]) * nreqs);
	memset(r->full_k, 0, sizeof(r->full_k[0]) * nreqs);
}

/* How often a client's claim of a type on a shard reads from the front
 * whatever its cursor (sql/queries/claim.sql, claim_cursor_key): every
 * CLAIM_FULL_EVERY_S, or CLAIM_FULL_SHARE times as long as the last such
 * claim took when that is longer (a full claim that steps over 10^6 dead
 * entries takes a quarter of a second): what lies behind a cursor waits
 * that long at most, and full claims cost a client a tenth of its time at
 * most. */
#define CLAIM_FULL_EVERY_S 1.0
#define CLAIM_FULL_SHARE   10.0

/* Adds the cursor of type tix on shard s to r's arrays: a full claim when
 * it has none, when jobs were put back behind it (released: rare, and the
 * fleet expects them back at once), or when its last full one is old
 * enough. */
static void cursor_add(sq_client *c, shard_req *r, size_t k, int s, int tix)
{
	sq_claim_cursor *cu = &c->cursor[s * c->cfg->ntypes + tix];
	double now = sq_mono_s();
	int full = !cu->has || cu->rewound ||
		   now - cu->full_at >= fmax(CLAIM_FULL_EVERY_S, CLAIM_FULL_SHARE * cu->full_cost);
	r->full_k[k] = (unsigned char)full;
	r->pushed_at = now;
	if (full)
		cu->full_at = now, cu->rewound = 0;
	sq_arr_str(&r->full, full ? "t" : "f");
	sq_arr_i64(&r->cur_p, cu->has ? cu->prio : 0);
	sq_arr_i64(&r->cur_us, cu->has ? cu->key_us : 0);
	sq_arr_i64(&r->cur_id, cu->has ? cu->id : 0);
}

/* Adds type t (request k, type index tix) to shard s's arrays; the shares
 * go in only when a type of the request is limited (ls non-NULL). Returns
 * whether t is limited. */
static int shard_req_add(sq_client *c, shard_req *r, int tix, size_t k, int s,
			 const limit_split *ls)
{
	const sq_type_conf *t = &c->cfg->types[tix];
	int nshards = c->nshards, limited = 0;
	if (!r->any) {
		sq_arr_open(&r->types);
		sq_arr_open(&r->limits);
		sq_arr_open(&r->leases);
		sq_arr_open(&r->starts);
		sq_arr_open(&r->full);
		sq_arr_open(&r->cur_p);
		sq_arr_open(&r->cur_us);
		sq_arr_open(&r->cur_id);
		if (ls) {
			sq_arr_open(&r->maxrun);
			sq_arr_open(&r->rate);
			sq_arr_open(&r->burst);
			sq_arr_open(&r->ltypes);
		}
		r->any = 1;
	}
	sq_arr_str(&r->types, t->name);
	sq_arr_i64(&r->limits, r->asked[k]);
	sq_arr_i64(&r->leases, t->starting_timeout_ms);
	sq_arr_i64(&r->starts, r->start[k]);
	cursor_add(c, r, k, s, tix);
	if (ls) {
		int ok = ls->maxrun && ls->rate;
		size_t i = k * (size_t)nshards + (size_t)s;
		limited = sq_type_limited(t);
		sq_arr_i64(&r->maxrun, !limited ? -1 : ok ? ls->maxrun[i] : 0);
		sq_arr_f64(&r->rate, !limited ? -1 : ok ? ls->rate[i] : 0);
		sq_arr_f64(&r->burst, !limited ? -1 : ok ? ls->burst[i] : 0);
		if (limited)
			sq_arr_str(&r->ltypes, t->name);
	}
	return limited;
}

/* Queues shard s's gate, the limited types' locks (lim_here) and its
 * claim, with a Sync after them unless the client merges transactions. */
static void shard_req_queue(sq_client *c, int s, shard_req *r, const char *worker, int lim_here)
{
	sq_arr_close(&r->types);
	sq_arr_close(&r->limits);
	sq_arr_close(&r->leases);
	sq_arr_close(&r->starts);
	sq_arr_close(&r->full);
	sq_arr_close(&r->cur_p);
	sq_arr_close(&r->cur_us);
	sq_arr_close(&r->cur_id);
	r->vals[0] = r->types.data;
	r->vals[1] = r->limits.data;
	r->vals[2] = r->leases.data;
	r->vals[3] = worker;
	r->vals[4] = r->starts.data;
	r->base = c->shards[s].qn;
	sq_client_push_gate_once(c, s);
	/* the claim always runs the plan made once per session: why, in
	 * sql/queries/claim.sql (sequential scans are off on these
	 * connections, so it is index-driven also when it was made on a small
	 * table) */
	sq_client_push_plans(c, s, 1);
	if (lim_here) {
		sq_arr_close(&r->maxrun);
		sq_arr_close(&r->rate);
		sq_arr_close(&r->burst);
		sq_arr_close(&r->ltypes);
		r->vals[5] = r->maxrun.data;
		r->vals[6] = r->rate.data;
		r->vals[7] = r->burst.data;
		r->vals[8] = r->full.data;
		r->vals[9] = r->cur_p.data;
		r->vals[10] = r->cur_us.data;
		r->vals[11] = r->cur_id.data;
		r->lvals[0] = r->ltypes.data;
		sq_pgconn_push(&c->shards[s], &stmt_limit_lock, 1, r->lvals);
		r->claim = c->shards[s].qn;
		sq_pgconn_push_binary(&c->shards[s], &stmt_claim_limited, 12, r->vals);
	} else {
		r->vals[5] = r->full.data;
		r->vals[6] = r->cur_p.data;
		r->vals[7] = r->cur_us.data;
		r->vals[8] = r->cur_id.data;
		r->claim = c->shards[s].qn;
		sq_pgconn_push_binary(&c->shards[s], &stmt_claim, 9, r->vals);
	}
	if (!c->merge_txn)
		sq_pgconn_push_sync(&c->shards[s]);
}

/* Queues one round: shard s asks sr[s].asked[k] jobs of type k, of which
 * sr[s].start[k] start at once; the gate and the claim are a transaction of
 * their own (a Sync after them). A request with a limited type takes those
 * types' locks between the two. */
static void claim_push(sq_client *c, const char *worker, const int *ti, size_t nreqs, shard_req *sr)
{
	const sq_config *cfg = c->cfg;
	int any_limited = 0;
	limit_split ls = {NULL, NULL, NULL};
	for (size_t k = 0; k < nreqs; k++)
		any_limited |= sq_type_limited(&cfg->types[ti[k]]);
	if (any_limited)
		limit_split_make(c, ti, nreqs, &ls);
	for (int s = 0; s < c->nshards; s++) {
		shard_req *r = &sr[s];
		int lim_here = 0;
		shard_req_reset(r, nreqs);
		if (sq_client_claim_rewound(c, s))
			for (int i = 0; i < cfg->ntypes; i++)
				c->cursor[s * cfg->ntypes + i].rewound = 1;
		for (size_t k = 0; k < nreqs; k++)
			if (r->asked[k])
				lim_here |=
					shard_req_add(c, r, ti[k], k, s, any_limited ? &ls : NULL);
		if (r->any)
			shard_req_queue(c, s, r, worker, lim_here);
	}
	free(ls.maxrun);
	free(ls.rate);
}

/* A cursor row of shard s's answer (claim_cursor_rows: a negative id) is
 * the new cursor of its type there; 0 for a job's row. */
static int cursor_row(sq_client *c, const PGresult *res, int row, int s, const sq_claim_req *reqs,
		      const int *ti, size_t nreqs)
{
	int64_t id = sq_jobrow_bin_id(res, row);
	if (id >= 0)
		return 0;
	for (size_t k = 0; k < nreqs; k++)
		if (!strcmp(reqs[k].type, PQgetvalue(res, row, 6))) {
			sq_claim_cursor *cu = &c->cursor[s * c->cfg->ntypes + ti[k]];
			cu->has = 1;
			cu->id = -id;
			sq_jobrow_bin_cursor(res, row, &cu->prio, &cu->key_us);
		}
	return 1;
}

/* The full claims of shard s's answer: how long they took. */
static void full_cost(sq_client *c, const shard_req *r, int s, const int *ti, size_t nreqs)
{
	double took = sq_mono_s() - r->pushed_at;
	for (size_t k = 0; k < nreqs; k++)
		if (r->asked[k] && r->full_k[k])
			c->cursor[s * c->cfg->ntypes + ti[k]].full_cost = took;
}

/* Reads a round's answers into out; sr[s].got[] counts them, and the
 * cursor rows move the cursors. A shard that failed does not cost the jobs
 * claimed on the others: they are kept, and the first shard's error is
 * returned. */
static sq_status claim_collect(sq_client *c, const char *worker, const sq_claim_req *reqs,
			       const int *ti, size_t nreqs, shard_req *sr, job_vec *out,
			       sq_error *err)
{
	sq_status first = SQ_OK;
	for (int s = 0; s < c->nshards; s++) {
		shard_req *r = &sr[s];
		sq_error e;
		if (!r->any)
			continue;
		sq_status se = sq_pgconn_range_error(&c->shards[s], r->base, r->claim + 1, &e);
		if (se != SQ_OK) {
			r->any = 0;
			if (first == SQ_OK) {
				first = se;
				if (err)
					*err = e;
			}
			continue;
		}
		PGresult *res = c->shards[s].res[r->claim];
		const char *bad = sq_jobrow_check_bin(res);
		full_cost(c, r, s, ti, nreqs);
		if (bad) {
			/* what it claimed comes back after the starting lease */
			r->any = 0;
			if (first == SQ_OK) {
				first = SQ_EDB;
				sq_err(err, SQ_EDB,
				       "shard %s: %s; is its schema up to date? run shardq init",
				       c->shards[s].shard_id, bad);
			}
			continue;
		}
		size_t need = out->n + (size_t)PQntuples(res);
		if (need > out->cap) {
			sq_job *nv = realloc(out->v, need * sizeof(sq_job));
			if (!nv)
				return sq_err(err, SQ_ENOMEM, "out of memory");
			out->v = nv;
			out->cap = need;
		}
		for (int row = 0; row < PQntuples(res); row++) {
			if (cursor_row(c, res, row, s, reqs, ti, nreqs))
				continue;
			if (sq_jobrow_parse_bin(res, row, s, worker, &out->v[out->n]))
				continue; /* out of memory: its lease brings it back */
			for (size_t k = 0; k < nreqs; k++)
				if (!strcmp(reqs[k].type, out->v[out->n].type)) {
					r->got[k]++;
					r->got_run[k] += out->v[out->n].status == SQ_RUNNING;
				}
			out->n++;
		}
	}
	return first;
}

static sq_status claim_round(sq_client *c, const char *worker, const sq_claim_req *reqs,
			     const int *ti, size_t nreqs, shard_req *sr, job_vec *out,
			     sq_error *err)
{
	sq_status st, st2;
	sq_client_reset(c);
	claim_push(c, worker, ti, nreqs, sr);
	st = sq_client_send(c, err);
	st2 = claim_collect(c, worker, reqs, ti, nreqs, sr, out, st == SQ_OK ? err : NULL);
	sq_client_reset(c);
	return st != SQ_OK ? st : st2;
}

/* Of `start` jobs to start at once, each shard takes a share of what it is
 * asked for, in proportion. */
static void share_start(int32_t start, const int32_t *asked, int n, unsigned rot, int32_t *out)
{
	double w[SQ_MAX_SHARDS];
	int32_t total = 0;
	for (int s = 0; s < n; s++)
		total += asked[s], w[s] = asked[s];
	if (start > total)
		start = total;
	if (start <= 0 || total == 0) {
		memset(out, 0, sizeof(int32_t) * (size_t)n);
		return;
	}
	share(start, w, n, rot, out);
	for (int s = 0; s < n; s++)
		if (out[s] > asked[s])
			out[s] = asked[s];
}

static sq_status check_reqs(sq_client *c, const char *worker, const sq_claim_req *reqs,
			    size_t nreqs, int *ti, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	if (!worker || !*worker || strlen(worker) > 200)
		return sq_err(err, SQ_EINVAL, "a worker id (1-200 bytes) is required to claim");
	if (!sq_utf8_valid(worker))
		return sq_err(err, SQ_EINVAL, "the worker id is not valid UTF-8");
	if (nreqs > SQ_MAX_TYPES)
		return sq_err(err, SQ_EINVAL, "too many types in one claim (at most %d)",
			      SQ_MAX_TYPES);
	for (size_t k = 0; k < nreqs; k++) {
		const sq_type_conf *t = reqs[k].type ? sq_config_type(cfg, reqs[k].type) : NULL;
		if (!t)
			return sq_err(err, SQ_EINVAL,
				      "unknown task type '%s'; add a [type %s] section",
				      reqs[k].type ? reqs[k].type : "(null)",
				      reqs[k].type ? reqs[k].type : "");
		for (size_t i = 0; i < k; i++)
			if (!strcmp(reqs[i].type, reqs[k].type))
				return sq_err(err, SQ_EINVAL,
					      "type '%s' is named twice in one claim; name each "
					      "type once",
					      reqs[k].type);
		if (reqs[k].limit < 0 || reqs[k].limit > 100000)
			return sq_err(err, SQ_EINVAL, "limit %d for type '%s' is outside 0..100000",
				      reqs[k].limit, reqs[k].type);
		if (reqs[k].start < 0 || reqs[k].start > reqs[k].limit)
			return sq_err(err, SQ_EINVAL, "start %d for type '%s' is outside 0..%d",
				      reqs[k].start, reqs[k].type, reqs[k].limit);
		ti[k] = (int)(t - cfg->types);
	}
	return SQ_OK;
}

/* Round 1: each type's limit shared by recent yield; its starts in
 * proportion to what each shard is asked. */
static void plan_round1(sq_client *c, const sq_claim_req *reqs, size_t nreqs, const int *ti,
			const unsigned char *only, shard_req *sr)
{
	int any = 0;
	for (int s = 0; only && s < c->nshards; s++)
		any |= only[s];
	if (!any)
		only = NULL;
	for (size_t k = 0; k < nreqs; k++) {
		double w[SQ_MAX_SHARDS] = {0};
		int32_t part[SQ_MAX_SHARDS], st[SQ_MAX_SHARDS];
		for (int s = 0; s < c->nshards; s++)
			w[s] = only && !only[s] ? 0
						: fmax(c->yield[s * c->cfg->ntypes + ti[k]], 0.02);
		share(reqs[k].limit, w, c->nshards, c->rotate, part);
		share_start(reqs[k].start, part, c->nshards, c->rotate, st);
		/* a type paused fleet-wide is asked of no shard */
		int paused = c->paused[ti[k]];
		for (int s = 0; s < c->nshards; s++) {
			sr[s].asked[k] = paused ? 0 : part[s];
			sr[s].start[k] = paused ? 0 : st[s];
		}
	}
	c->rotate++;
}

/* Learns each shard's yield from a first round: the fraction of its ask
 * that was filled; a shard not asked drifts back up so it is probed again.
 * only: NULL, or the shards the round was for (the others are left). */
static void learn(sq_client *c, size_t nreqs, const int *ti, const shard_req *sr,
		  const unsigned char *only)
{
	for (size_t k = 0; k < nreqs; k++)
		for (int s = 0; s < c->nshards; s++) {
			double *y = &c->yield[s * c->cfg->ntypes + ti[k]];
			if (only && !only[s])
				continue;
			if (sr[s].asked[k])
				*y = 0.5 * *y + 0.5 * (double)sr[s].got[k] / sr[s].asked[k];
			else
				*y = 0.9 * *y + 0.1;
		}
}

static void free_reqs(sq_client *c, shard_req *sr)
{
	for (int s = 0; sr && s < c->nshards; s++) {
		sq_buf_free(&sr[s].types);
		sq_buf_free(&sr[s].limits);
		sq_buf_free(&sr[s].leases);
		sq_buf_free(&sr[s].starts);
		sq_buf_free(&sr[s].maxrun);
		sq_buf_free(&sr[s].rate);
		sq_buf_free(&sr[s].burst);
		sq_buf_free(&sr[s].ltypes);
		sq_buf_free(&sr[s].full);
		sq_buf_free(&sr[s].cur_p);
		sq_buf_free(&sr[s].cur_us);
		sq_buf_free(&sr[s].cur_id);
	}
	free(sr);
}

sq_status sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs, size_t nreqs,
		   sq_job **jobs_out, size_t *njobs_out, sq_error *err)
{
	int ti[SQ_MAX_TYPES] = {0};
	shard_req *sr;
	sq_status st;
	job_vec jv = {NULL, 0, 0};
	int32_t want2[SQ_MAX_TYPES] = {0}, start2[SQ_MAX_TYPES] = {0};
	int again = 0;

	*jobs_out = NULL;
	*njobs_out = 0;
	if ((st = check_reqs(c, worker, reqs, nreqs, ti, err)))
		return st;
	sq_client_check_map(c); /* the paused types, each map_poll */
	sr = calloc((size_t)c->nshards, sizeof(*sr));
	if (!sr)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	plan_round1(c, reqs, nreqs, ti, NULL, sr);
	st = claim_round(c, worker, reqs, ti, nreqs, sr, &jv, err);
	learn(c, nreqs, ti, sr, NULL);
	for (size_t k = 0; k < nreqs; k++) {
		want2[k] = reqs[k].limit;
		start2[k] = reqs[k].start;
		for (int s = 0; s < c->nshards; s++) {
			want2[k] -= sr[s].got[k];
			start2[k] -= sr[s].got_run[k];
		}
		again |= want2[k] > 0;
	}
	/* more rounds, only when short: the rest is shared among the shards that
	 * were not asked yet in this call or gave all they were asked (they may
	 * have more). Every round asks exactly what is missing, so the limit is
	 * never exceeded, even for a moment; a limit smaller than the number of
	 * shards still finds a lone job, at one round trip per round. */
	unsigned char *tried = calloc((size_t)c->nshards * nreqs + 1, 1);
	for (int round = 1; st == SQ_OK && again && tried && round < c->nshards + 1; round++) {
		int any2 = 0;
		for (size_t k = 0; k < nreqs; k++) {
			double w[SQ_MAX_SHARDS] = {0};
			int32_t part[SQ_MAX_SHARDS], stp[SQ_MAX_SHARDS];
			int cand = 0;
			for (int s = 0; s < c->nshards; s++) {
				unsigned char *tr = &tried[s * nreqs + k];
				int full = sr[s].asked[k] && sr[s].got[k] == sr[s].asked[k];
				if (sr[s].asked[k])
					*tr = 1;
				w[s] = (!*tr || full) ? 1.0 : 0.0;
				cand += w[s] > 0;
			}
			for (int s = 0; s < c->nshards; s++)
				sr[s].asked[k] = sr[s].start[k] = 0;
			if (want2[k] <= 0 || !cand || c->paused[ti[k]])
				continue;
			share(want2[k], w, c->nshards, c->rotate++, part);
			for (int s = 0; s < c->nshards; s++)
				if (w[s] <= 0)
					part[s] = 0;
			share_start(start2[k], part, c->nshards, c->rotate, stp);
			for (int s = 0; s < c->nshards; s++) {
				sr[s].asked[k] = part[s];
				sr[s].start[k] = stp[s];
				any2 |= part[s] > 0;
			}
		}
		if (!any2)
			break;
		st = claim_round(c, worker, reqs, ti, nreqs, sr, &jv, err);
		again = 0;
		for (size_t k = 0; k < nreqs; k++) {
			for (int s = 0; s < c->nshards; s++) {
				want2[k] -= sr[s].got[k];
				start2[k] -= sr[s].got_run[k];
			}
			again |= want2[k] > 0;
		}
	}
	free(tried);
	if (jv.n > 1)
		qsort(jv.v, jv.n, sizeof(sq_job), cmp_jobs);
	*jobs_out = jv.n ? jv.v : NULL;
	*njobs_out = jv.n;
	if (!jv.n)
		free(jv.v);
	free_reqs(c, sr);
	return st;
}

/* ---- the two halves, for the worker's one-pipeline tick ------------------ */

struct sq_claim_pending {
	shard_req *sr;
	char worker[256]; /* check_reqs: at most 200 bytes */
	sq_claim_req reqs[SQ_MAX_TYPES];
	int ti[SQ_MAX_TYPES];
	size_t nreqs;
	unsigned char only[SQ_MAX_SHARDS]; /* sq_claim_push's, when has_only */
	int has_only;
};

sq_claim_pending *sq_claim_push(sq_client *c, const char *worker, const sq_claim_req *reqs,
				size_t nreqs, const unsigned char *only, sq_error *err)
{
	sq_claim_pending *p = calloc(1, sizeof(*p));
	if (!p) {
		sq_err(err, SQ_ENOMEM, "out of memory");
		return NULL;
	}
	if (check_reqs(c, worker, reqs, nreqs, p->ti, err) != SQ_OK ||
	    !(p->sr = calloc((size_t)c->nshards, sizeof(shard_req)))) {
		free(p);
		return NULL;
	}
	sq_client_check_map(c); /* the paused types, each map_poll */
	snprintf(p->worker, sizeof(p->worker), "%s", worker);
	memcpy(p->reqs, reqs, nreqs * sizeof(*reqs));
	p->nreqs = nreqs;
	for (int s = 0; only && s < c->nshards; s++)
		p->has_only |= (p->only[s] = only[s]) != 0;
	plan_round1(c, reqs, nreqs, p->ti, only, p->sr);
	claim_push(c, worker, p->ti, nreqs, p->sr);
	return p;
}

void sq_claim_share(sq_client *c, const sq_claim_req *reqs, size_t nreqs,
		    const unsigned char *among, int s, sq_claim_req *out)
{
	for (size_t k = 0; k < nreqs; k++) {
		const sq_type_conf *t = sq_config_type(c->cfg, reqs[k].type);
		double sum = 0, mine = 0;
		out[k] = reqs[k];
		if (!t)
			continue; /* the claim names it as unknown */
		for (int i = 0; i < c->nshards; i++)
			if (among[i] || i == s) {
				double y = fmax(
					c->yield[i * c->cfg->ntypes + (int)(t - c->cfg->types)],
					0.02);
				sum += y;
				mine = i == s ? y : mine;
			}
		out[k].limit = (int32_t)ceil(reqs[k].limit * mine / sum);
		out[k].start = (int32_t)ceil(reqs[k].start * mine / sum);
		if (out[k].start > out[k].limit)
			out[k].start = out[k].limit;
	}
}

void sq_claim_skip_shard(sq_claim_pending *p, int s)
{
	p->sr[s].any = 0;
}

sq_status sq_claim_collect(sq_client *c, sq_claim_pending *p, sq_job **jobs, size_t *n,
			   sq_error *err)
{
	job_vec jv = {NULL, 0, 0};
	sq_status st = claim_collect(c, p->worker, p->reqs, p->ti, p->nreqs, p->sr, &jv, err);
	learn(c, p->nreqs, p->ti, p->sr, p->has_only ? p->only : NULL);
	if (jv.n > 1)
		qsort(jv.v, jv.n, sizeof(sq_job), cmp_jobs);
	*jobs = jv.n ? jv.v : NULL;
	*n = jv.n;
	if (!jv.n)
		free(jv.v);
	free_reqs(c, p->sr);
	free(p);
	return st;
}

/* claim.c - the multi-type claim: one statement per shard, all shards at
 * once, each type's limit shared among the shards by their recent yield. */
#include "buf.h"
#include "client.h"
#include "error.h"
#include "jobrow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per type: expired leases first (a dead worker's jobs come back), then due
 * ready jobs in priority / delay-tolerance order; at most lim in all. Both
 * arms are index scans (jobs_lease, jobs_ready) and skip partitions that
 * are not owned here (normally none: an empty partial index). */
static const sq_stmt stmt_claim = {
	"sq_claim",
	"WITH t AS ("
	"  SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[]) AS t(task, lim, lease_ms)"
	"), picked AS ("
	"  SELECT c.id, c.expired, t.lease_ms FROM t CROSS JOIN LATERAL ("
	"    SELECT u.id, u.expired FROM ("
	"      SELECT e.id, true AS expired FROM ("
	"        SELECT j.id FROM shardq.jobs j"
	"         WHERE j.task = t.task AND j.status IN ('starting', 'running')"
	"           AND j.expected_status_change_time < now()"
	"           AND NOT EXISTS (SELECT 1 FROM shardq.partition_state ps"
	"                            WHERE ps.partition = j.partition AND ps.state <> 'owned')"
	"         ORDER BY j.expected_status_change_time"
	"         LIMIT t.lim FOR UPDATE SKIP LOCKED) e"
	"      UNION ALL"
	"      SELECT r.id, false FROM ("
	"        SELECT j.id FROM shardq.jobs j"
	"         WHERE j.task = t.task AND j.status = 'ready' AND j.schedule_time <= now()"
	"           AND NOT EXISTS (SELECT 1 FROM shardq.partition_state ps"
	"                            WHERE ps.partition = j.partition AND ps.state <> 'owned')"
	"         ORDER BY j.priority DESC, COALESCE(j.delay_tolerance_time, j.schedule_time), j.id"
	"         LIMIT t.lim FOR UPDATE SKIP LOCKED) r"
	"    ) u LIMIT t.lim"
	"  ) c"
	"), upd AS ("
	/* a job whose lease expired on its last attempt (it killed or hung
	 * every worker that took it) is failed, not handed out forever */
	"  UPDATE shardq.jobs j SET"
	"    status = (CASE WHEN p.expired AND j.attempt >= j.max_attempts THEN 'failed'"
	"                   ELSE 'starting' END)::shardq.job_status,"
	"    worker = CASE WHEN p.expired AND j.attempt >= j.max_attempts THEN j.worker"
	"                  ELSE $4 END,"
	"    attempt = CASE WHEN p.expired AND j.attempt >= j.max_attempts THEN j.attempt"
	"                   ELSE j.attempt + 1 END,"
	"    expected_status_change_time = CASE WHEN p.expired AND j.attempt >= j.max_attempts"
	"        THEN NULL ELSE now() + p.lease_ms * interval '1 millisecond' END,"
	"    last_error = CASE WHEN p.expired AND j.attempt >= j.max_attempts"
	"        THEN format('the lease of attempt %s of %s expired (worker %s died or hung)',"
	"                    j.attempt, j.max_attempts, j.worker)"
	"        ELSE j.last_error END,"
	"    updated_at = now()"
	"  FROM picked p WHERE j.id = p.id"
	"  RETURNING j.*"
	")"
	"SELECT " SQ_JOB_COLUMNS " FROM upd j WHERE j.status = 'starting'"};

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
	sq_buf types, limits, leases;
	const char *vals[4];
	int32_t asked[SQ_MAX_TYPES];
	int32_t got[SQ_MAX_TYPES];
	int any;
} shard_req;

typedef struct job_vec {
	sq_job *v;
	size_t n, cap;
} job_vec;

/* One round: shard s asks sr[s].asked[k] jobs of type k; results are
 * appended to out, and sr[s].got[] counts them. A failing shard does not
 * cost the jobs claimed on the others: they are kept, and the error is
 * returned. */
static sq_status claim_round(sq_client *c, const char *worker, const sq_claim_req *reqs,
			     const int *ti, size_t nreqs, shard_req *sr, job_vec *out,
			     sq_error *err)
{
	const sq_config *cfg = c->cfg;
	sq_status st;
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++) {
		shard_req *r = &sr[s];
		sq_buf_reset(&r->types);
		sq_buf_reset(&r->limits);
		sq_buf_reset(&r->leases);
		r->any = 0;
		memset(r->got, 0, sizeof(r->got[0]) * nreqs);
		for (size_t k = 0; k < nreqs; k++) {
			if (!r->asked[k])
				continue;
			if (!r->any) {
				sq_arr_open(&r->types);
				sq_arr_open(&r->limits);
				sq_arr_open(&r->leases);
				r->any = 1;
			}
			sq_arr_str(&r->types, cfg->types[ti[k]].name);
			sq_arr_i64(&r->limits, r->asked[k]);
			sq_arr_i64(&r->leases, cfg->types[ti[k]].starting_timeout_ms);
		}
		if (!r->any)
			continue;
		sq_arr_close(&r->types);
		sq_arr_close(&r->limits);
		sq_arr_close(&r->leases);
		r->vals[0] = r->types.data;
		r->vals[1] = r->limits.data;
		r->vals[2] = r->leases.data;
		r->vals[3] = worker;
		sq_pgconn_push(&c->shards[s], &sq_stmt_gate_shared, 0, NULL);
		sq_pgconn_push(&c->shards[s], &stmt_claim, 4, r->vals);
	}
	st = sq_client_run(c, err);
	for (int s = 0; s < c->nshards; s++) {
		shard_req *r = &sr[s];
		if (!r->any)
			continue;
		if (sq_pgconn_result_error(&c->shards[s], NULL) != SQ_OK) {
			r->any = 0;
			continue;
		}
		PGresult *res = c->shards[s].res[1];
		size_t need = out->n + (size_t)PQntuples(res);
		if (need > out->cap) {
			sq_job *nv = realloc(out->v, need * sizeof(sq_job));
			if (!nv)
				return sq_err(err, SQ_ENOMEM, "out of memory");
			out->v = nv;
			out->cap = need;
		}
		for (int row = 0; row < PQntuples(res); row++) {
			if (sq_jobrow_parse(res, row, s, &out->v[out->n]))
				continue; /* out of memory: its lease brings it back */
			for (size_t k = 0; k < nreqs; k++)
				if (!strcmp(reqs[k].type, out->v[out->n].type))
					r->got[k]++;
			out->n++;
		}
	}
	sq_client_reset(c);
	return st;
}

sq_status sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs, size_t nreqs,
		   sq_job **jobs_out, size_t *njobs_out, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	int ti[SQ_MAX_TYPES] = {0};
	shard_req *sr;
	sq_status st;
	job_vec jv = {NULL, 0, 0};
	int32_t total_got[SQ_MAX_TYPES] = {0};

	*jobs_out = NULL;
	*njobs_out = 0;
	if (!worker || !*worker || strlen(worker) > 200)
		return sq_err(err, SQ_EINVAL, "a worker id (1-200 bytes) is required to claim");
	if (nreqs > SQ_MAX_TYPES)
		return sq_err(err, SQ_EINVAL, "too many types in one claim (at most %d)",
			      SQ_MAX_TYPES);
	for (size_t k = 0; k < nreqs; k++) {
		const sq_type_conf *t = reqs[k].type ? sq_config_type(cfg, reqs[k].type) : NULL;
		if (!t)
			return sq_err(err, SQ_EINVAL,
				      "claim: unknown task type '%s'; add a [type %s] section",
				      reqs[k].type ? reqs[k].type : "(null)",
				      reqs[k].type ? reqs[k].type : "");
		if (reqs[k].limit < 0 || reqs[k].limit > 100000)
			return sq_err(err, SQ_EINVAL,
				      "claim: limit %d for type '%s' is outside 0..100000",
				      reqs[k].limit, reqs[k].type);
		ti[k] = (int)(t - cfg->types);
	}
	sr = calloc((size_t)c->nshards, sizeof(*sr));
	if (!sr)
		return sq_err(err, SQ_ENOMEM, "out of memory");

	/* round 1: each type's limit shared by recent yield */
	for (size_t k = 0; k < nreqs; k++) {
		double w[SQ_MAX_SHARDS] = {0};
		int32_t part[SQ_MAX_SHARDS];
		for (int s = 0; s < c->nshards; s++)
			w[s] = fmax(c->yield[s * cfg->ntypes + ti[k]], 0.02);
		share(reqs[k].limit, w, c->nshards, c->rotate, part);
		for (int s = 0; s < c->nshards; s++)
			sr[s].asked[k] = part[s];
	}
	c->rotate++;
	st = claim_round(c, worker, reqs, ti, nreqs, sr, &jv, err);

	/* learn the yield: fraction of the ask that was filled; a shard not
	 * asked drifts back up so it is probed again */
	int again = 0;
	int32_t want2[SQ_MAX_TYPES] = {0};
	for (size_t k = 0; k < nreqs; k++) {
		for (int s = 0; s < c->nshards; s++) {
			double *y = &c->yield[s * cfg->ntypes + ti[k]];
			if (sr[s].asked[k])
				*y = 0.5 * *y + 0.5 * (double)sr[s].got[k] / sr[s].asked[k];
			else
				*y = 0.9 * *y + 0.1;
			total_got[k] += sr[s].got[k];
		}
		want2[k] = reqs[k].limit - total_got[k];
		if (want2[k] > 0)
			again = 1;
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
			int32_t part[SQ_MAX_SHARDS];
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
				sr[s].asked[k] = 0;
			if (want2[k] <= 0 || !cand)
				continue;
			share(want2[k], w, c->nshards, c->rotate++, part);
			for (int s = 0; s < c->nshards; s++) {
				sr[s].asked[k] = w[s] > 0 ? part[s] : 0;
				any2 |= sr[s].asked[k] > 0;
			}
		}
		if (!any2)
			break;
		st = claim_round(c, worker, reqs, ti, nreqs, sr, &jv, err);
		again = 0;
		for (size_t k = 0; k < nreqs; k++) {
			for (int s = 0; s < c->nshards; s++)
				want2[k] -= sr[s].got[k];
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
	for (int s = 0; s < c->nshards; s++) {
		sq_buf_free(&sr[s].types);
		sq_buf_free(&sr[s].limits);
		sq_buf_free(&sr[s].leases);
	}
	free(sr);
	return st;
}

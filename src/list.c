/* list.c - finding jobs: one type's jobs in one status, a page at a time
 * over every shard (sq_jobs_list; sql/queries/list.sql), and acting on
 * every job a filter finds (cancel, retry) or deleting a type's history. */
#include "client.h"
#include "error.h"
#include "buf.h"
#include "jobrow.h"
#include "sql_queries.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sq_stmt stmt_ready = {"sq_list_ready", sq_sql_list_ready};
static const sq_stmt stmt_leased = {"sq_list_leased", sq_sql_list_leased};
static const sq_stmt stmt_failed = {"sq_list_failed", sq_sql_list_failed};
static const sq_stmt stmt_key = {"sq_list_key", sq_sql_list_key};
static const sq_stmt stmt_completed = {"sq_list_completed", sq_sql_list_completed};
static const sq_stmt stmt_cancelled = {"sq_list_cancelled", sq_sql_list_cancelled};
static const sq_stmt stmt_errors = {"sq_list_errors", sq_sql_list_errors};

/* The end of time for a finish-time bound (9999-12-31, µs since the epoch). */
#define FAR_FUTURE_US INT64_C(253402300799000000)
/* Index entries a shard reads in one call when a creation window filters
 * (list.sql, list_take_head), and in one round of it. */
#define SCAN_BUDGET 100000
#define SCAN_ROUND  10000

/* A row's place in its status's order (list.sql: "a.b.c"). */
typedef struct cursor {
	int64_t a, b, c;
} cursor;

typedef struct found {
	cursor k;
	sq_job job;
} found;

/* The order of ready jobs (ready nonzero): the priority (a) first, highest
 * first; every status's: (b, c). */
static int cmp_cursor(int ready, const cursor *p, const cursor *q)
{
	if (ready && p->a != q->a)
		return p->a > q->a ? -1 : 1;
	if (p->b != q->b)
		return p->b < q->b ? -1 : 1;
	return p->c < q->c ? -1 : p->c > q->c;
}

static int cmp_found(const void *x, const void *y)
{
	return cmp_cursor(0, &((const found *)x)->k, &((const found *)y)->k);
}

static int cmp_ready(const void *x, const void *y)
{
	return cmp_cursor(1, &((const found *)x)->k, &((const found *)y)->k);
}

static int parse_cursor(const char *s, cursor *k)
{
	char end;
	return sscanf(s, "%" SCNd64 ".%" SCNd64 ".%" SCNd64 "%c", &k->a, &k->b, &k->c, &end) == 3;
}

static const char *status_of(const sq_job_filter *f)
{
	return f->status ? f->status : "ready";
}

/* What a listing's `next` begins with: 16 bits of the hash of its type and
 * status, so that a cursor from another listing is refused, not read as a
 * place in this one's order. */
static unsigned cursor_tag(const sq_job_filter *f)
{
	char s[SQ_MAX_TYPE_LEN + 16];
	int n = snprintf(s, sizeof(s), "%s/%s", f->type, status_of(f));
	return sq_partition_of_key(s, n < 0 ? 0 : (size_t)n, 65536);
}

/* A `next` of this listing ("tag.a.b.c") into k. */
static int parse_next(const char *s, const sq_job_filter *f, cursor *k)
{
	unsigned tag;
	char end;
	return sscanf(s, "%4x.%" SCNd64 ".%" SCNd64 ".%" SCNd64 "%c", &tag, &k->a, &k->b, &k->c,
		      &end) == 4 &&
	       tag == cursor_tag(f);
}

static int windowed(const sq_job_filter *f)
{
	return f->created_after_us || f->created_before_us;
}

/* The first page's cursor: from the start, or where a job created in the
 * window can first be. A job fails, is cancelled and finishes after it is
 * created, so those orders start at created_after_us. */
static cursor first_cursor(const sq_job_filter *f)
{
	cursor k = {INT32_MAX, 0, 0};
	const char *s = status_of(f);
	if (!strcmp(s, "completed") && f->finished_after_us > 0)
		k = (cursor){INT32_MAX, f->finished_after_us, INT64_MAX}; /* after it */
	if ((!strcmp(s, "failed") || !strcmp(s, "cancelled") || !strcmp(s, "completed")) &&
	    f->created_after_us > k.b)
		k = (cursor){INT32_MAX, f->created_after_us, INT64_MAX};
	return k;
}

/* Whether (after, before] in µs, each 0 for no bound, holds some time up
 * to 9999-12-31. */
static int window_ok(int64_t after, int64_t before)
{
	return after >= 0 && before >= 0 && after <= FAR_FUTURE_US && before <= FAR_FUTURE_US &&
	       (!before || after < before);
}

static sq_status window_err(const char *what, int64_t after, int64_t before, sq_error *err)
{
	return sq_err(err, SQ_EINVAL,
		      "%s window (%" PRId64 ", %" PRId64 "] µs: give its start before its end, "
		      "each 0 (no bound) to 9999-12-31",
		      what, after, before);
}

static sq_status check_filter(sq_client *c, const sq_job_filter *f, const char *after, int limit,
			      cursor *k, sq_error *err)
{
	static const char *const statuses[] = {"ready",  "starting",  "running",
					       "failed", "completed", "cancelled"};
	int known = 0;
	if (!f || !f->type || !sq_config_type(c->cfg, f->type))
		return sq_err(err, SQ_EINVAL, "unknown type '%s': give a [type] of the config",
			      f && f->type ? f->type : "(none)");
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		known |= !f->status || !strcmp(f->status, statuses[i]);
	if (!known)
		return sq_err(err, SQ_EINVAL,
			      "status '%s' cannot be listed: give ready, starting, running, "
			      "failed, completed or cancelled",
			      f->status);
	if (!window_ok(f->finished_after_us, f->finished_before_us))
		return window_err("finish-time", f->finished_after_us, f->finished_before_us, err);
	if ((f->finished_after_us && strcmp(status_of(f), "completed")) ||
	    (f->finished_before_us && strcmp(status_of(f), "completed") &&
	     strcmp(status_of(f), "failed")))
		return sq_err(err, SQ_EINVAL,
			      "a finish time filters completed jobs (and failed ones by when they "
			      "failed), not %s ones: leave it out, or list completed jobs",
			      status_of(f));
	if (!strcmp(status_of(f), "completed") && !sq_config_type(c->cfg, f->type)->history)
		return sq_err(err, SQ_EINVAL,
			      "type '%s' keeps no history, so none of its jobs is listed as "
			      "completed: set `history = true` in its [type] section to keep them",
			      f->type);
	if (f->key && !*f->key)
		return sq_err(err, SQ_EINVAL, "an empty key finds nothing: give the job's key");
	if (f->key && f->status && strcmp(f->status, "ready") && strcmp(f->status, "starting") &&
	    strcmp(f->status, "running"))
		return sq_err(err, SQ_EINVAL,
			      "a key finds a type's live job (ready, starting or running), not a "
			      "%s one: find that by its id (shardq get ID)",
			      f->status);
	if (f->shard < -1 || f->shard >= c->nshards)
		return sq_err(err, SQ_EINVAL, "shard index %d: the config has %d shards", f->shard,
			      c->nshards);
	if (limit < 1 || limit > 10000)
		return sq_err(err, SQ_EINVAL, "limit %d: give 1 to 10000", limit);
	if (!window_ok(f->created_after_us, f->created_before_us))
		return window_err("creation", f->created_after_us, f->created_before_us, err);
	*k = first_cursor(f);
	if (after && *after && !parse_next(after, f, k))
		return sq_err(err, SQ_EINVAL,
			      "cursor '%s' is not one a listing of %s jobs of type %s gave: pass "
			      "the `next` of the page before, or none for the first page",
			      after, status_of(f), f->type);
	return SQ_OK;
}

/* Queues the round's statement on shard s: `limit` jobs of the `scan`
 * rows after k. */
static void push_page(sq_client *c, int s, const sq_job_filter *f, const cursor *k, int limit,
		      int scan, char (*v)[24], const char **vals)
{
	const char *status = status_of(f);
	snprintf(v[0], 24, "%" PRId64, k->a);
	snprintf(v[1], 24, "%" PRId64, k->b);
	snprintf(v[2], 24, "%" PRId64, k->c);
	snprintf(v[3], 24, "%d", limit);
	snprintf(v[4], 24, "%d", scan);
	snprintf(v[5], 24, "%" PRId64, f->created_after_us);
	snprintf(v[6], 24, "%" PRId64, f->created_before_us ? f->created_before_us : FAR_FUTURE_US);
	snprintf(v[7], 24, "%" PRId64,
		 f->finished_before_us ? f->finished_before_us : FAR_FUTURE_US);
	vals[0] = f->type;
	vals[1] = !strcmp(status, "ready") ? v[0] : status;
	for (int i = 2; i < 9; i++)
		vals[i] = v[i - 1];
	const sq_stmt *st = !strcmp(status, "ready")       ? &stmt_ready
			    : !strcmp(status, "failed")    ? &stmt_failed
			    : !strcmp(status, "completed") ? &stmt_completed
			    : !strcmp(status, "cancelled") ? &stmt_cancelled
							   : &stmt_leased;
	/* planned for the type: a generic plan guesses its share of the
	 * status, and for failed jobs picked jobs_failed and sorted them all */
	sq_pgconn_push_planned(&c->shards[s], st,
			       st == &stmt_completed || st == &stmt_failed ? 9 : 8, vals);
}

/* Where a shard's answer to a round leaves it: open, it may hold more
 * after `upto`; closed, it has no more. */
typedef struct shard_end {
	int open;
	cursor upto;
} shard_end;

static sq_status grow(found **v, size_t *cap, size_t want, sq_error *err)
{
	if (want <= *cap)
		return SQ_OK;
	found *nv = realloc(*v, want * sizeof(found));
	if (!nv)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	*v = nv;
	*cap = want;
	return SQ_OK;
}

/* Appends shard s's jobs (take_) to v and says where it ends: a whole
 * page of jobs ends at its last one, a whole scan at the last row read. */
static sq_status read_page(sq_client *c, int s, int limit, int scan, found **v, size_t *n,
			   size_t *cap, shard_end *end, sq_error *err)
{
	sq_status st = sq_pgconn_result_error(&c->shards[s], err);
	if (st != SQ_OK)
		return st;
	PGresult *r = c->shards[s].res[0];
	int rows = PQntuples(r), take = PQfnumber(r, "take_"), read = PQfnumber(r, "n_");
	int taken = 0;
	cursor last = {0, 0, 0}, last_taken = {0, 0, 0};
	if ((st = grow(v, cap, *n + (size_t)rows, err)))
		return st;
	for (int i = 0; i < rows; i++) {
		found *f = &(*v)[*n];
		if (!parse_cursor(PQgetvalue(r, i, 14), &last))
			continue;
		if (PQgetvalue(r, i, take)[0] != 't' || sq_jobrow_parse(r, i, s, &f->job))
			continue;
		if (f->job.status == SQ_COMPLETED) /* the history's row */
			sq_job_history_budget(c->cfg, &f->job);
		f->k = last_taken = last;
		taken++;
		(*n)++;
	}
	*end = (shard_end){0, last};
	if (taken >= limit)
		*end = (shard_end){1, last_taken};
	else if (rows && atoi(PQgetvalue(r, 0, read)) >= scan)
		end->open = 1;
	return SQ_OK;
}

/* One round on every shard f names, from k: appends to v the jobs up to
 * the least end of an open shard (*more: there is one; *upto: that end). */
static sq_status list_round(sq_client *c, const sq_job_filter *f, const cursor *k, int limit,
			    int scan, found **v, size_t *n, size_t *cap, int *more, cursor *upto,
			    sq_error *err)
{
	char val[SQ_MAX_SHARDS][8][24];
	const char *vals[SQ_MAX_SHARDS][9];
	int ready = !strcmp(status_of(f), "ready");
	size_t from = *n;
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++)
		if (f->shard < 0 || f->shard == s)
			push_page(c, s, f, k, limit, scan, val[s], vals[s]);
	sq_status st = sq_client_send(c, err);
	*more = 0;
	for (int s = 0; st == SQ_OK && s < c->nshards; s++) {
		shard_end e;
		if (f->shard >= 0 && f->shard != s)
			continue;
		st = read_page(c, s, limit, scan, v, n, cap, &e, err);
		if (st == SQ_OK && e.open && (!*more || cmp_cursor(ready, &e.upto, upto) < 0))
			*more = 1, *upto = e.upto;
	}
	sq_client_reset(c);
	/* a row past an open shard's end may come after rows it has not read */
	size_t keep = from;
	for (size_t i = from; i < *n; i++) {
		if (st == SQ_OK && (!*more || cmp_cursor(ready, &(*v)[i].k, upto) <= 0))
			(*v)[keep++] = (*v)[i];
		else
			sq_job_clear(&(*v)[i].job);
	}
	*n = keep;
	return st;
}

/* The page: the first `limit` of v in order, the rest freed; next set. */
static sq_status take_page(found *v, size_t n, int limit, int more, const cursor *upto,
			   const sq_job_filter *f, sq_job **out, size_t *nout, char *next,
			   size_t nextlen, sq_error *err)
{
	int ready = !strcmp(status_of(f), "ready");
	if (n > 1)
		qsort(v, n, sizeof(*v), ready ? cmp_ready : cmp_found);
	size_t keep = n < (size_t)limit ? n : (size_t)limit;
	sq_job *jobs = keep ? malloc(keep * sizeof(sq_job)) : NULL;
	if (keep && !jobs) {
		for (size_t i = 0; i < n; i++)
			sq_job_clear(&v[i].job);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		if (i < keep && jobs)
			jobs[i] = v[i].job;
		else
			sq_job_clear(&v[i].job);
	}
	*out = jobs;
	*nout = keep;
	const cursor *k = keep == (size_t)limit ? &v[keep - 1].k : upto;
	if (next && nextlen)
		next[0] = '\0';
	if ((n > keep || more) && next)
		snprintf(next, nextlen, "%04x.%" PRId64 ".%" PRId64 ".%" PRId64, cursor_tag(f),
			 k->a, k->b, k->c);
	return SQ_OK;
}

/* The live job of (type, key), on the shard its key hashes to. */
static sq_status list_by_key(sq_client *c, const sq_job_filter *f, sq_job **out, size_t *n,
			     sq_error *err)
{
	uint32_t p = sq_partition_of_key(f->key, strlen(f->key), c->partitions);
	int s = c->map[p];
	const char *vals[2] = {f->type, f->key};
	sq_client_reset(c);
	sq_pgconn_push(&c->shards[s], &stmt_key, 2, vals);
	sq_status st = sq_client_send(c, err);
	if (st == SQ_OK)
		st = sq_pgconn_result_error(&c->shards[s], err);
	if (st == SQ_OK && PQntuples(c->shards[s].res[0]) == 1) {
		sq_job *j = malloc(sizeof(*j));
		if (j && !sq_jobrow_parse(c->shards[s].res[0], 0, s, j))
			*out = j, *n = 1;
		else
			free(j);
	}
	sq_client_reset(c);
	/* the live job, as the filter's other fields keep it */
	if (*n && ((f->status && strcmp(f->status, sq_job_status_name((*out)->status))) ||
		   (f->shard >= 0 && (*out)->shard != f->shard) ||
		   (f->created_after_us && (*out)->created_us <= f->created_after_us) ||
		   (f->created_before_us && (*out)->created_us > f->created_before_us))) {
		sq_jobs_free(*out, *n);
		*out = NULL, *n = 0;
	}
	return st;
}

sq_status sq_jobs_list(sq_client *c, const sq_job_filter *f, const char *after, int limit,
		       sq_job **out, size_t *n, char *next, size_t nextlen, sq_error *err)
{
	cursor k, upto = {0, 0, 0};
	sq_status st;
	*out = NULL;
	*n = 0;
	if (next && nextlen)
		next[0] = '\0';
	if ((st = check_filter(c, f, after, limit, &k, err)))
		return st;
	if (f->key)
		return list_by_key(c, f, out, n, err);
	/* unfiltered, a round's scan is the page; windowed, rounds go on
	 * until the page is whole or the budget spent */
	int scan = windowed(f) ? (limit > SCAN_ROUND ? limit : SCAN_ROUND) : limit;
	int rounds = windowed(f) ? SCAN_BUDGET / scan : 1, more = 0;
	found *rows = NULL;
	size_t nrows = 0, cap = 0;
	for (int i = 0; st == SQ_OK && i < rounds; i++) {
		st = list_round(c, f, &k, limit, scan, &rows, &nrows, &cap, &more, &upto, err);
		if (!more || nrows >= (size_t)limit)
			break;
		k = upto;
	}
	if (st != SQ_OK) {
		for (size_t i = 0; i < nrows; i++)
			sq_job_clear(&rows[i].job);
		free(rows);
		return st;
	}
	st = take_page(rows, nrows, limit, more, &upto, f, out, n, next, nextlen, err);
	free(rows);
	return st;
}

/* Reads shard s's answer to list_errors: order[k] is the place in jobs of
 * the shard's k-th id. */
static sq_status read_errors(sq_client *c, int s, const size_t *order, size_t nshard, char **errors,
			     sq_error *err)
{
	sq_status st = sq_pgconn_result_error(&c->shards[s], err);
	PGresult *r = st == SQ_OK ? c->shards[s].res[0] : NULL;
	for (int i = 0; r && i < PQntuples(r); i++) {
		long k = atol(PQgetvalue(r, i, 0)) - 1;
		if (k < 0 || (size_t)k >= nshard || PQgetisnull(r, i, 1))
			continue;
		if (!(errors[order[k]] = strdup(PQgetvalue(r, i, 1))))
			return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	return st;
}

/* The shard to read job j's error on: the one it was listed from. */
static int shard_of_job(sq_client *c, const sq_job *j)
{
	return j->shard >= 0 && j->shard < c->nshards ? j->shard : sq_shard_of_id(c, j->id);
}

sq_status sq_jobs_errors(sq_client *c, const sq_job *jobs, size_t n, char **errors, sq_error *err)
{
	size_t *order = n ? malloc(n * sizeof(*order)) : NULL, start[SQ_MAX_SHARDS + 1];
	sq_buf arr[SQ_MAX_SHARDS];
	const char *vals[SQ_MAX_SHARDS][1];
	sq_status st = n && !order ? sq_err(err, SQ_ENOMEM, "out of memory") : SQ_OK;
	for (size_t i = 0; i < n; i++)
		errors[i] = NULL;
	if (!n || st != SQ_OK)
		return st;
	sq_client_check_map(c);
	sq_client_reset(c);
	/* each shard's ids as an array, and their places in ids */
	size_t m = 0;
	for (int s = 0; s < c->nshards; s++) {
		start[s] = m;
		sq_buf_init(&arr[s]);
		sq_buf_putc(&arr[s], '{');
		for (size_t i = 0; i < n; i++)
			if (shard_of_job(c, &jobs[i]) == s) {
				sq_buf_printf(&arr[s], "%s%" PRId64, m > start[s] ? "," : "",
					      jobs[i].id);
				order[m++] = i;
			}
		sq_buf_putc(&arr[s], '}');
		vals[s][0] = arr[s].data;
		if (m > start[s])
			sq_pgconn_push(&c->shards[s], &stmt_errors, 1, vals[s]);
	}
	start[c->nshards] = m;
	st = sq_client_send(c, err);
	for (int s = 0; st == SQ_OK && s < c->nshards; s++)
		if (start[s + 1] > start[s])
			st = read_errors(c, s, order + start[s], start[s + 1] - start[s], errors,
					 err);
	sq_client_reset(c);
	for (int s = 0; s < c->nshards; s++)
		sq_buf_free(&arr[s]);
	free(order);
	return st;
}

sq_status sq_history_purge(sq_client *c, const char *type, int64_t before_us, int batch,
			   void (*progress)(int64_t purged, void *arg), void *arg, int64_t *purged,
			   sq_error *err)
{
	int64_t total = 0;
	sq_status st = SQ_OK;
	char b[24], lim[16];
	const char *vals[3] = {type, b, lim};
	if (!type || !sq_config_type(c->cfg, type))
		return sq_err(err, SQ_EINVAL, "unknown type '%s': give a [type] of the config",
			      type ? type : "(none)");
	if (batch < 0 || batch > 100000)
		return sq_err(err, SQ_EINVAL, "batch %d: give 1 to 100000 (0: 10000)", batch);
	batch = batch ? batch : 10000;
	snprintf(b, sizeof(b), "%" PRId64, before_us);
	snprintf(lim, sizeof(lim), "%d", batch);
	for (int s = 0; st == SQ_OK && s < c->nshards; s++) {
		int64_t n;
		do {
			PGresult *r =
				sq_pgconn_exec(&c->shards[s], sq_sql_history_purge, 3, vals, err);
			if (!r) {
				st = err ? err->code : SQ_EDB;
				break;
			}
			n = atoll(PQgetvalue(r, 0, 0));
			PQclear(r);
			total += n;
			if (progress)
				progress(total, arg);
		} while (n == batch);
	}
	if (purged)
		*purged = total;
	return st;
}

/* What a bulk action does with one page of ids: writes out[i] per id. */
typedef sq_status (*page_act)(sq_client *c, const int64_t *ids, size_t n, sq_status *out,
			      sq_error *err);

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Runs act on the ids of every page f finds, `batch` a page, each page
 * after the last one's cursor, leaving out the jobs created after
 * created_by_us; counts[0] gets the ids act answered SQ_OK, counts[1]
 * SQ_ESTATE, and progress each page's totals. */
static sq_status each_page(sq_client *c, const sq_job_filter *f, int batch, int64_t created_by_us,
			   page_act act, void (*progress)(const int64_t *counts, void *arg),
			   void *arg, int64_t *counts, sq_error *err)
{
	char cur[64] = "", next[64];
	int64_t *ids = malloc(sizeof(*ids) * (size_t)batch);
	sq_status *out = malloc(sizeof(*out) * (size_t)batch);
	sq_status st = !ids || !out ? sq_err(err, SQ_ENOMEM, "out of memory") : SQ_OK;
	counts[0] = counts[1] = 0;
	while (st == SQ_OK) {
		sq_job *jobs = NULL;
		size_t n = 0, k = 0;
		if ((st = sq_jobs_list(c, f, cur, batch, &jobs, &n, next, sizeof(next), err)))
			break;
		for (size_t i = 0; i < n; i++)
			if (jobs[i].created_us <= created_by_us)
				ids[k++] = jobs[i].id;
		sq_jobs_free(jobs, n);
		if (k && (st = act(c, ids, k, out, err)) != SQ_OK)
			break;
		for (size_t i = 0; i < k; i++) {
			counts[0] += out[i] == SQ_OK;
			counts[1] += out[i] == SQ_ESTATE;
		}
		if (progress)
			progress(counts, arg);
		if (!next[0])
			break;
		snprintf(cur, sizeof(cur), "%s", next);
	}
	free(ids);
	free(out);
	return st;
}

typedef struct progress_to {
	void (*cancel)(int64_t cancelled, void *arg);
	sq_retry_progress retry;
	void *arg;
} progress_to;

static void cancel_progress(const int64_t *counts, void *arg)
{
	const progress_to *p = arg;
	p->cancel(counts[0], p->arg);
}

static void retry_progress(const int64_t *counts, void *arg)
{
	const progress_to *p = arg;
	p->retry(counts[0], counts[1], p->arg);
}

sq_status sq_cancel_matching(sq_client *c, const sq_job_filter *f, int batch,
			     void (*progress)(int64_t cancelled, void *arg), void *arg,
			     int64_t *cancelled, sq_error *err)
{
	int64_t counts[2] = {0, 0};
	progress_to to = {progress, NULL, arg};
	if (f && f->status && strcmp(f->status, "ready") && strcmp(f->status, "starting") &&
	    strcmp(f->status, "running"))
		return sq_err(err, SQ_EINVAL,
			      "status '%s': only ready, starting or running jobs can be cancelled",
			      f->status);
	if (batch < 0 || batch > 1000)
		return sq_err(err, SQ_EINVAL, "batch %d: give 1 to 1000 (0: 1000)", batch);
	/* not the ones enqueued since the call began */
	sq_status st = each_page(c, f, batch ? batch : 1000, now_us(), sq_cancel,
				 progress ? cancel_progress : NULL, &to, counts, err);
	if (cancelled)
		*cancelled = counts[0];
	return st;
}

sq_status sq_retry_type(sq_client *c, const char *type, int64_t until_us, int batch,
			sq_retry_progress progress, void *arg, int64_t *retried,
			int64_t *not_allowed, sq_error *err)
{
	int64_t counts[2] = {0, 0};
	progress_to to = {NULL, progress, arg};
	if (batch < 0 || batch > 10000)
		return sq_err(err, SQ_EINVAL, "batch %d: give 1 to 10000 (0: 1000)", batch);
	/* the failed jobs that fail again meanwhile come after until_us */
	sq_job_filter f = {type, "failed", NULL, -1, 0, until_us ? until_us : now_us(), 0, 0};
	sq_status st = each_page(c, &f, batch ? batch : 1000, INT64_MAX, sq_retry,
				 progress ? retry_progress : NULL, &to, counts, err);
	if (retried)
		*retried = counts[0];
	if (not_allowed)
		*not_allowed = counts[1];
	return st;
}

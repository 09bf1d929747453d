/* api.c - shardqd's endpoints: JSON in, library calls, JSON out
 * (docs/http.md). Runs on the request threads, except sqd_claim_parse.
 *
 * Requests are read with jansson, except the enqueue body: its params go to
 * the shards as the client wrote them (jansson would turn 0.1 into
 * 0.10000000000000001 and refuse integers beyond 64 bits, which jsonb
 * keeps), so it is walked with the library's own validating scanner.
 * Replies are written straight into a buffer: a job's params are spliced in
 * as PostgreSQL returned them, never parsed again. */
#include "daemon.h"
#include "log.h"
#include "json.h"
#include "router_internal.h"

#include <errno.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH 10000

/* 503 for what a shard's failure means to a client; else 500. */
static void fail_status(sqd_task *t, sq_status st, const sq_error *err)
{
	if (st == SQ_EMOVING || st == SQ_EMOVED) {
		t->retry_after = 1;
		sqd_error(t, 503, "moving", "%s; try again in a moment", err->msg);
	} else if (st == SQ_ECONN || st == SQ_EDB) {
		t->retry_after = 1;
		sqd_error(t, 503, "unavailable", "%s; try again in a moment", err->msg);
	} else if (st == SQ_EINVAL) {
		sqd_error(t, 400, "bad_request", "%s", err->msg);
	} else if (st == SQ_ENOTFOUND) {
		sqd_error(t, 404, "not_found", "%s", err->msg);
	} else {
		sqd_error(t, 500, "internal", "%s", err->msg);
	}
}

/* ---- enqueue ---------------------------------------------------------------- */

static int member_is(const sq_json_member *m, const char *name)
{
	return m->key_len == strlen(name) && !memcmp(m->key, name, m->key_len);
}

/* A JSON integer member into *out; -1 when it is not one. */
static int int_of(const sq_json_member *m, int64_t *out)
{
	char num[32];
	char *end;
	if (m->kind != SQ_JSON_NUMBER || m->val_len >= sizeof(num))
		return -1;
	memcpy(num, m->val, m->val_len);
	num[m->val_len] = '\0';
	errno = 0;
	long long v = strtoll(num, &end, 10);
	if (*end || errno)
		return -1;
	*out = v;
	return 0;
}

/* A string member decoded into a new string (NULL on null). */
static char *str_of(const sq_json_member *m)
{
	char *s = malloc(m->val_len + 1);
	if (!s)
		return NULL;
	sq_json_unescape(m->val + 1, m->val_len - 2, s);
	return s;
}

/* What an enqueue's job owns: the strings its sq_job_spec points at. */
typedef struct enq_job {
	char *type, *key, *params;
} enq_job;

/* The fields of a job in an enqueue; each may be given once. */
static const char *const job_fields[] = {
	"type",         "key", "params", "priority", "run_at_ms", "delay_ms", "delay_tolerance_ms",
	"max_attempts", NULL};
/* What each of job_fields takes, for the message that refuses a value. */
static const char *const job_field_rules[] = {
	"a string, a type of the config",
	"a string or null",
	"a JSON object or null",
	"an integer in -1000000..1000000",
	"an integer, milliseconds since the epoch, 1..253402300799999",
	"an integer in 0..3155760000000 (milliseconds)",
	"an integer in 1..31536000000 (milliseconds), or null for none",
	"an integer in 1..1000000",
};

/* The "jobs" array of an enqueue's body into *arr; -1 with the error set
 * when the body is not an object with one such array. */
static int enqueue_array(sqd_task *t, sq_json_member *arr)
{
	size_t where, pos = 0;
	const char *what;
	if (sq_json_validate_object(t->body, t->len, &where, &what)) {
		sqd_error(t, 400, "bad_json",
			  "the body is not one JSON object: %s at byte %zu; send "
			  "{\"jobs\":[{\"type\":...}]}",
			  what, where);
		return -1;
	}
	sq_json_member m;
	int found = 0;
	while (sq_json_next_member(t->body, t->len, &pos, &m))
		if (member_is(&m, "jobs")) {
			if (found) {
				sqd_error(t, 400, "bad_json",
					  "\"jobs\" is given twice; send one \"jobs\" array");
				return -1;
			}
			if (m.kind != SQ_JSON_ARRAY)
				break;
			*arr = m;
			found = 1;
		}
	if (!found) {
		sqd_error(t, 400, "bad_request",
			  "no \"jobs\" array; send {\"jobs\":[{\"type\":...}]}");
		return -1;
	}
	return 0;
}

/* Sets job s's field f (one of job_fields; the strings it needs owned by
 * o): 0; 1 when its value is not what the field takes (job_field_rules);
 * -1 out of memory. */
static int set_job_field(sq_job_spec *s, enq_job *o, const sq_json_member *f)
{
	int64_t v;
	if (member_is(f, "type") && f->kind == SQ_JSON_STRING)
		return (s->type = o->type = str_of(f)) ? 0 : -1;
	if (member_is(f, "key") && f->kind == SQ_JSON_STRING)
		return (s->key = o->key = str_of(f)) ? 0 : -1;
	if ((member_is(f, "key") || member_is(f, "params")) && f->kind == SQ_JSON_NULL)
		return 0;
	if (member_is(f, "params") && f->kind == SQ_JSON_OBJECT) {
		if (!(o->params = malloc(f->val_len + 1)))
			return -1;
		memcpy(o->params, f->val, f->val_len);
		o->params[f->val_len] = '\0';
		s->params = o->params;
		return 0;
	}
	if (member_is(f, "delay_tolerance_ms") && f->kind == SQ_JSON_NULL) {
		s->delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE;
		return 0;
	}
	if (int_of(f, &v))
		return 1;
	if (member_is(f, "priority") && v >= SQ_MIN_PRIORITY && v <= SQ_MAX_PRIORITY) {
		s->has_priority = 1;
		s->priority = (int32_t)v;
	} else if (member_is(f, "run_at_ms") && v > 0 && v <= SQ_MAX_RUN_AT_US / 1000) {
		s->run_at_us = v * 1000;
	} else if (member_is(f, "delay_ms") && v >= 0 && v <= SQ_MAX_DELAY_MS) {
		s->delay_ms = v;
	} else if (member_is(f, "delay_tolerance_ms") && v > 0 && v <= SQ_MAX_DELAY_TOLERANCE_MS) {
		s->delay_tolerance_ms = v;
	} else if (member_is(f, "max_attempts") && v >= 1 && v <= SQ_MAX_ATTEMPTS) {
		s->max_attempts = (int32_t)v;
	} else {
		return 1;
	}
	return 0;
}

/* Job i of an enqueue (the array's element e) into s and o; -1 with the
 * error set. */
static int parse_job(sqd_task *t, size_t i, const sq_json_member *e, sq_job_spec *s, enq_job *o)
{
	if (e->kind != SQ_JSON_OBJECT) {
		sqd_error(t, 400, "bad_job", "job %zu: not a JSON object", i);
		return -1;
	}
	sq_json_member f;
	size_t fp = 0;
	unsigned seen = 0;
	while (sq_json_next_member(e->val, e->val_len, &fp, &f)) {
		int k = 0;
		while (job_fields[k] && !member_is(&f, job_fields[k]))
			k++;
		if (!job_fields[k]) {
			sqd_error(t, 400, "bad_job",
				  "job %zu: unknown field \"%.*s\"; a job's fields are type, key, "
				  "params, priority, run_at_ms, delay_ms, delay_tolerance_ms and "
				  "max_attempts",
				  i, (int)(f.key_len > 64 ? 64 : f.key_len), f.key);
			return -1;
		}
		if (seen & (1u << k)) {
			sqd_error(t, 400, "bad_json",
				  "job %zu: field \"%s\" is given twice; give each field once", i,
				  job_fields[k]);
			return -1;
		}
		seen |= 1u << k;
		int r = set_job_field(s, o, &f);
		if (r < 0) {
			sqd_error(t, 500, "internal", "out of memory");
			return -1;
		}
		if (r > 0) {
			sqd_error(t, 400, "bad_job", "job %zu: \"%s\" must be %s", i, job_fields[k],
				  job_field_rules[k]);
			return -1;
		}
	}
	if (!s->type) {
		sqd_error(t, 400, "bad_job", "job %zu: no \"type\"", i);
		return -1;
	}
	return 0;
}

/* The reply of an enqueue that was sent: each job's fate, after the error
 * when st is not SQ_OK (the jobs on the shards that answered are written
 * all the same). */
static void enqueue_reply(sqd *d, sqd_task *t, const sq_enqueue_result *res, size_t n, sq_status st,
			  const sq_error *err)
{
	size_t written = 0;
	sq_buf out;
	sq_buf_init(&out);
	sq_buf_puts(&out, "{\"results\":[");
	for (size_t i = 0; i < n; i++) {
		written += res[i].id > 0 && res[i].outcome == SQ_ENQ_INSERTED;
		const char *sid = sq_config_shard_id(d->cfg, res[i].shard);
		sq_buf_printf(&out, "%s{\"id\":%lld,\"outcome\":\"%s\",\"shard\":", i ? "," : "",
			      (long long)res[i].id, sq_enqueue_outcome_name(res[i].outcome));
		sq_json_put_string(&out, sid ? sid : "");
		sq_buf_putc(&out, '}');
	}
	sq_buf_puts(&out, "]");
	atomic_fetch_add(&d->m.jobs_enqueued, written);
	if (st != SQ_OK) {
		sqd_log("enqueue: %s", err->msg);
		fail_status(t, st, err);
		/* keep the error and add the per-job fates */
		if (t->resp.len && t->resp.data[t->resp.len - 1] == '}') {
			t->resp.len--;
			t->resp.data[t->resp.len] = '\0';
			sq_buf_putc(&t->resp, ',');
			sq_buf_append(&t->resp, out.data + 1, out.len - 1);
			sq_buf_putc(&t->resp, '}');
		}
	} else {
		sq_buf_reset(&t->resp);
		sq_buf_append(&t->resp, out.data, out.len);
		sq_buf_putc(&t->resp, '}');
	}
	sq_buf_free(&out);
}

/* An enqueue handed to the lanes: its task, for the callback. */
typedef struct enq_call {
	sqd *d;
	sqd_task *t;
} enq_call;

/* A lane's callback: the reply written, the task back to the main
 * thread. */
static void enqueue_done(void *arg, sq_status st, const sq_enqueue_result *res, size_t n,
			 const sq_error *err)
{
	enq_call *ec = arg;
	if (st == SQ_EINVAL)
		sqd_error(ec->t, 400, "bad_job", "%s", err->msg);
	else
		enqueue_reply(ec->d, ec->t, res, n, st, err);
	sqd_done(ec->d, ec->t);
	free(ec);
}

/* Parses the n jobs of arr, checks them against the config and hands them
 * to the enqueue lanes; 1 once handed over (t is the lane's then). */
static int enqueue_jobs(sqd *d, sqd_task *t, const sq_json_member *arr, sq_job_spec *specs,
			enq_job *own, size_t n)
{
	sq_json_member e;
	size_t pos = 0;
	for (size_t i = 0; sq_json_next_element(arr->val, arr->val_len, &pos, &e); i++)
		if (parse_job(t, i, &e, &specs[i], &own[i]))
			return 0;
	sq_error err;
	for (size_t i = 0; i < n; i++)
		if (sq_job_spec_check(d->cfg, &specs[i], &err) != SQ_OK) {
			sqd_error(t, 400, "bad_job", "job %zu: %s", i, err.msg);
			return 0;
		}
	enq_call *ec = malloc(sizeof(*ec));
	if (!ec) {
		sqd_error(t, 500, "internal", "out of memory");
		return 0;
	}
	ec->d = d;
	ec->t = t;
	/* from here the callback may run (and the task be answered and freed)
	 * before the send returns */
	sq_status st = sq_enqueue_send(d->enq, specs, n, enqueue_done, ec, &err);
	if (st == SQ_OK)
		return 1;
	free(ec);
	sqd_error(t, st == SQ_EINVAL ? 400 : 500, st == SQ_EINVAL ? "bad_job" : "internal", "%s",
		  err.msg);
	return 0;
}

/* 1 when the batch was handed to the lanes (see sqd_run). */
static int do_enqueue(sqd *d, sqd_task *t)
{
	sq_json_member arr, e;
	if (enqueue_array(t, &arr))
		return 0;
	size_t n = 0, pos = 0;
	while (sq_json_next_element(arr.val, arr.val_len, &pos, &e))
		n++;
	if (n == 0 || n > MAX_BATCH) {
		sqd_error(t, 400, "bad_request",
			  "\"jobs\" holds %zu jobs; send 1 to %d per request", n, MAX_BATCH);
		return 0;
	}
	sq_job_spec *specs = calloc(n, sizeof(*specs));
	enq_job *own = calloc(n, sizeof(*own));
	int handed = 0;
	if (specs && own)
		handed = enqueue_jobs(d, t, &arr, specs, own, n);
	else
		sqd_error(t, 500, "internal", "out of memory");
	/* the lanes took copies */
	for (size_t i = 0; own && i < n; i++) {
		free(own[i].type);
		free(own[i].key);
		free(own[i].params);
	}
	free(own);
	free(specs);
	return handed;
}

/* ---- results: start, heartbeat, complete, fail, release ------------------------- */

static json_t *load_body(sqd_task *t, const char *example)
{
	json_error_t je;
	json_t *root = json_loadb(t->body, t->len, JSON_REJECT_DUPLICATES, &je);
	if (!root || !json_is_object(root)) {
		sqd_error(t, 400, "bad_json",
			  "the body is not one JSON object%s%s (line %d, column %d); send %s",
			  root ? "" : ": ", root ? "" : je.text, je.line, je.column, example);
		json_decref(root);
		return NULL;
	}
	return root;
}

/* Whether root holds no key but those of `keys` (NULL-ended); else a 400
 * that names the first other one and what to send, and 0. An admin action
 * must not read a misspelled filter as no filter. */
static int only_keys(sqd_task *t, json_t *root, const char *const *keys, const char *form)
{
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v)
	{
		int known = 0;
		for (size_t i = 0; keys[i]; i++)
			known |= !strcmp(k, keys[i]);
		if (!known) {
			sqd_error(t, 400, "bad_request",
				  "field '%s' has no meaning here: send %s, and nothing else", k,
				  form);
			return 0;
		}
	}
	return 1;
}

static const char *result_name(sq_status s)
{
	switch (s) {
	case SQ_OK: return "ok";
	case SQ_ELOST: return "lost";
	case SQ_ENOTFOUND: return "not_found";
	case SQ_ESTATE: return "not_allowed";
	case SQ_EMOVED:
	case SQ_EMOVING: return "moving";
	default: return "unavailable";
	}
}

/* One result request, parsed. */
typedef struct res_req {
	json_t *root;
	size_t n;
	sq_job_ref *refs;
	sq_fail_req *fails;
	const char **workers;
	sq_status *out;
	const int64_t *lease; /* start, heartbeat: the lease of each ok ref */
	size_t at;            /* its first entry in the merged arrays */
} res_req;

/* A ref's worker name and its place in the merged arrays. */
typedef struct worker_ref {
	const char *w;
	size_t i;
} worker_ref;

static int by_worker(const void *a, const void *b)
{
	const worker_ref *x = a, *y = b;
	int c = strcmp(x->w, y->w);
	return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Distinct worker names one result request may carry: each costs a call
 * (a transaction on every shard its refs are on). The claim gives every
 * job of a daemon its one worker name. */
#define MAX_WORKERS 16

/* Parses a result request; -1 with the task's error set. */
static int parse_results(sqd_task *t, res_req *q)
{
	const char *ex = "{\"jobs\":[{\"id\":1,\"attempt\":1,\"worker\":\"...\"}]}";
	memset(q, 0, sizeof(*q));
	if (!(q->root = load_body(t, ex)))
		return -1;
	json_t *jobs = json_object_get(q->root, "jobs");
	size_t n = json_is_array(jobs) ? json_array_size(jobs) : 0;
	if (n == 0 || n > MAX_BATCH) {
		sqd_error(t, 400, "bad_request",
			  "\"jobs\" must be an array of 1 to %d jobs, each {\"id\",\"attempt\","
			  "\"worker\"} as the claim returned them",
			  MAX_BATCH);
		return -1;
	}
	q->n = n;
	q->refs = calloc(n, sizeof(*q->refs));
	q->fails = calloc(n, sizeof(*q->fails));
	q->out = calloc(n, sizeof(*q->out));
	q->workers = calloc(n, sizeof(*q->workers));
	if (!q->refs || !q->fails || !q->out || !q->workers) {
		sqd_error(t, 500, "internal", "out of memory");
		return -1;
	}
	const char *names[MAX_WORKERS];
	size_t nw = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *j = json_array_get(jobs, i);
		json_t *id = json_object_get(j, "id"), *at = json_object_get(j, "attempt"),
		       *w = json_object_get(j, "worker");
		if (!json_is_integer(id) || json_integer_value(id) <= 0 || !json_is_integer(at) ||
		    json_integer_value(at) < 0 || json_integer_value(at) > INT32_MAX ||
		    !json_is_string(w) || !json_string_length(w)) {
			sqd_error(t, 400, "bad_request",
				  "job %zu: needs \"id\" (a positive integer), \"attempt\" (an "
				  "integer) and \"worker\" (a non-empty string), as the claim "
				  "returned them",
				  i);
			return -1;
		}
		q->refs[i].id = json_integer_value(id);
		q->refs[i].attempt = (int32_t)json_integer_value(at);
		q->workers[i] = json_string_value(w);
		size_t k = 0;
		while (k < nw && strcmp(names[k], q->workers[i]))
			k++;
		if (k == nw) {
			if (nw == MAX_WORKERS) {
				sqd_error(
					t, 400, "bad_request",
					"job %zu: more than %d distinct \"worker\" names in one "
					"request; send each job's worker as the claim returned it, "
					"or split the request",
					i, MAX_WORKERS);
				return -1;
			}
			names[nw++] = q->workers[i];
		}
		q->out[i] = SQ_ECONN;
		if (t->route == R_FAIL) {
			json_t *e = json_object_get(j, "error"),
			       *p = json_object_get(j, "permanent");
			if ((e && !json_is_string(e) && !json_is_null(e)) ||
			    (p && !json_is_boolean(p))) {
				sqd_error(t, 400, "bad_request",
					  "job %zu: \"error\" must be a string and \"permanent\" "
					  "true or false",
					  i);
				return -1;
			}
			q->fails[i].ref = q->refs[i];
			q->fails[i].error = json_is_string(e) ? json_string_value(e) : NULL;
			q->fails[i].permanent = json_is_true(p);
		}
	}
	return 0;
}

static void free_results(res_req *q)
{
	free(q->refs);
	free(q->fails);
	free(q->out);
	free(q->workers);
	json_decref(q->root);
}

/* The reply of one result request, from its per-job outcomes. */
static void answer_results(sqd *d, sq_client *c, sqd_task *t, res_req *q, sq_status first_err,
			   const sq_error *err)
{
	size_t n = q->n;
	int lost = 0, unavailable = 0, moving = 0;
	for (size_t i = 0; i < n; i++) {
		if (q->out[i] == SQ_ELOST) {
			/* not ours any more: lost, or gone altogether */
			sq_job j;
			sq_error e2;
			if (sq_get_job(c, q->refs[i].id, &j, &e2) == SQ_ENOTFOUND)
				q->out[i] = SQ_ENOTFOUND;
			else
				sq_job_clear(&j);
		}
		if (q->out[i] == SQ_OK) {
			atomic_fetch_add(&d->m.results_ok, 1);
			if (t->route == R_COMPLETE)
				atomic_fetch_add(&d->m.jobs_completed, 1);
			else if (t->route == R_FAIL)
				atomic_fetch_add(&d->m.jobs_failed, 1);
		} else if (q->out[i] == SQ_ELOST || q->out[i] == SQ_ENOTFOUND) {
			atomic_fetch_add(&d->m.results_lost, 1);
			lost++;
		} else {
			atomic_fetch_add(&d->m.results_other, 1);
			unavailable++;
			moving += q->out[i] == SQ_EMOVING || q->out[i] == SQ_EMOVED;
		}
	}
	sq_buf_reset(&t->resp);
	if (unavailable) {
		t->status = 503;
		t->retry_after = 1;
		sq_buf_puts(&t->resp, "{\"error\":{\"code\":");
		/* from this request's own jobs: a merged call's other requests
		 * may have failed otherwise */
		sq_json_put_string(&t->resp, moving == unavailable ? "moving" : "unavailable");
		sq_buf_puts(&t->resp, ",\"message\":");
		char msg[1200];
		if (moving == unavailable)
			snprintf(msg, sizeof(msg),
				 "%d of %zu jobs could not be written: their partitions are "
				 "moving; send those again in a moment",
				 unavailable, n);
		else
			snprintf(msg, sizeof(msg),
				 "%d of %zu jobs could not be written (%d on a partition that is "
				 "moving, %d on a shard that failed%s%s); send those again in a "
				 "moment",
				 unavailable, n, moving, unavailable - moving,
				 first_err != SQ_OK ? ": " : "",
				 first_err != SQ_OK ? err->msg : "");
		sq_json_put_string(&t->resp, msg);
		sq_buf_puts(&t->resp, "},");
	} else if (lost) {
		t->status = 409;
		sq_buf_puts(&t->resp, "{\"error\":{\"code\":\"lost\",\"message\":");
		char msg[256];
		snprintf(msg, sizeof(msg),
			 "%d of %zu jobs are no longer held under this fence (their lease ran "
			 "out, or they finished or moved on); the ok ones were applied",
			 lost, n);
		sq_json_put_string(&t->resp, msg);
		sq_buf_puts(&t->resp, "},");
	} else {
		t->status = 200;
		sq_buf_putc(&t->resp, '{');
	}
	sq_buf_puts(&t->resp, "\"results\":[");
	for (size_t i = 0; i < n; i++) {
		sq_buf_printf(&t->resp, "%s{\"id\":%lld,\"result\":\"%s\"", i ? "," : "",
			      (long long)q->refs[i].id, result_name(q->out[i]));
		if (q->lease && q->out[i] == SQ_OK && q->lease[i] > 0)
			sq_buf_printf(&t->resp, ",\"lease_until_ms\":%lld",
				      (long long)(q->lease[i] / 1000));
		sq_buf_putc(&t->resp, '}');
	}
	sq_buf_puts(&t->resp, "]}");
}

/* The jobs of several result requests of one kind, merged: the requests'
 * refs one after another (each request's from its res_req.at), and the
 * share of one call (one worker name) in the sub* arrays. */
typedef struct res_merge {
	sqd_route route;
	size_t total;
	sq_job_ref *refs;
	sq_fail_req *fails;
	const char **workers;
	sq_status *out;
	int64_t *lease; /* start, heartbeat: each ok ref's lease */
	sq_job_ref *sub;
	sq_fail_req *subf;
	sq_status *subo;
	int64_t *subl;
	size_t *idx; /* sub[j] is refs[idx[j]] */
	worker_ref *byw;
	sq_status first_err; /* the first call that failed, for the answers */
	sq_error first_e;
} res_merge;

static void merge_free(res_merge *m)
{
	free(m->refs);
	free(m->fails);
	free(m->workers);
	free(m->out);
	free(m->lease);
	free(m->sub);
	free(m->subf);
	free(m->subo);
	free(m->subl);
	free(m->idx);
	free(m->byw);
}

/* m's arrays for `total` refs, zeroed; -1 out of memory. */
static int merge_alloc(res_merge *m, sqd_route route, size_t total)
{
	size_t n = total ? total : 1;
	memset(m, 0, sizeof(*m));
	m->route = route;
	m->total = total;
	m->refs = calloc(n, sizeof(*m->refs));
	m->fails = calloc(n, sizeof(*m->fails));
	m->workers = calloc(n, sizeof(*m->workers));
	m->out = calloc(n, sizeof(*m->out));
	m->lease = calloc(n, sizeof(*m->lease));
	m->sub = calloc(n, sizeof(*m->sub));
	m->subf = calloc(n, sizeof(*m->subf));
	m->subo = calloc(n, sizeof(*m->subo));
	m->subl = calloc(n, sizeof(*m->subl));
	m->idx = calloc(n, sizeof(*m->idx));
	m->byw = calloc(n, sizeof(*m->byw));
	return m->refs && m->fails && m->workers && m->out && m->lease && m->sub && m->subf &&
			       m->subo && m->subl && m->idx && m->byw
		       ? 0
		       : -1;
}

/* Copies the parsed requests' (ok[k]) refs into m. */
static void merge_fill(res_merge *m, const res_req *q, const char *ok, size_t ntasks)
{
	for (size_t k = 0; k < ntasks; k++)
		if (ok[k])
			for (size_t i = 0; i < q[k].n; i++) {
				m->refs[q[k].at + i] = q[k].refs[i];
				m->fails[q[k].at + i] = q[k].fails[i];
				m->workers[q[k].at + i] = q[k].workers[i];
				m->out[q[k].at + i] = SQ_ECONN;
			}
}

/* One library call for the k refs of m->sub, all of worker w; their
 * outcomes go back to their places in m. */
static void call_one_worker(sq_client *c, res_merge *m, const char *w, size_t k)
{
	sq_error err = {0};
	sq_status st;
	switch (m->route) {
	case R_START: st = sq_start_lease(c, w, m->sub, k, m->subo, m->subl, &err); break;
	case R_HEARTBEAT: st = sq_heartbeat_lease(c, w, m->sub, k, m->subo, m->subl, &err); break;
	case R_COMPLETE: st = sq_complete(c, w, m->sub, k, m->subo, &err); break;
	case R_RELEASE: st = sq_unclaim(c, w, m->sub, k, m->subo, &err); break;
	default: st = sq_fail(c, w, m->subf, k, m->subo, &err); break;
	}
	if (st != SQ_OK && m->first_err == SQ_OK) {
		m->first_err = st;
		m->first_e = err;
		sqd_log("%s: %s", m->route == R_COMPLETE ? "complete" : "results", err.msg);
	}
	int leased = m->route == R_START || m->route == R_HEARTBEAT;
	for (size_t j = 0; j < k; j++) {
		m->out[m->idx[j]] = m->subo[j];
		m->lease[m->idx[j]] = leased ? m->subl[j] : 0;
	}
}

/* One library call per worker name: the refs sorted by it, each name's
 * gathered into m->sub. */
static void call_per_worker(sq_client *c, res_merge *m)
{
	for (size_t i = 0; i < m->total; i++)
		m->byw[i].w = m->workers[i], m->byw[i].i = i;
	qsort(m->byw, m->total, sizeof(*m->byw), by_worker);
	for (size_t g = 0; g < m->total;) {
		const char *w = m->workers[m->byw[g].i];
		size_t k = 0;
		for (; g < m->total && !strcmp(m->byw[g].w, w); g++) {
			size_t j = m->byw[g].i;
			m->sub[k] = m->refs[j];
			m->subf[k] = m->fails[j];
			m->subo[k] = SQ_ECONN;
			m->idx[k++] = j;
		}
		call_one_worker(c, m, w, k);
	}
}

/*
 * Start, heartbeat, complete, fail or release for several requests of one
 * kind at once: a request thread takes every request of that kind waiting
 * in the queue, and their jobs go to the shards as one call per worker
 * name (normally one, the daemon's), one transaction per shard, rather
 * than one per request. Each request gets its own answer.
 */
static void run_results(sqd *d, sq_client *c, sqd_task **tasks, size_t ntasks)
{
	res_req *q = calloc(ntasks, sizeof(*q));
	char *ok = calloc(ntasks, 1);
	res_merge m;
	size_t total = 0;
	for (size_t k = 0; q && ok && k < ntasks; k++)
		if (parse_results(tasks[k], &q[k]) == 0) {
			ok[k] = 1;
			q[k].at = total;
			total += q[k].n;
		}
	if (!q || !ok || merge_alloc(&m, tasks[0]->route, total)) {
		for (size_t k = 0; k < ntasks; k++)
			if (!q || !ok || ok[k])
				sqd_error(tasks[k], 500, "internal", "out of memory");
	} else {
		merge_fill(&m, q, ok, ntasks);
		call_per_worker(c, &m);
		for (size_t k = 0; k < ntasks; k++)
			if (ok[k]) {
				memcpy(q[k].out, m.out + q[k].at, q[k].n * sizeof(*m.out));
				q[k].lease = m.lease + q[k].at;
				answer_results(d, c, tasks[k], &q[k], m.first_err, &m.first_e);
			}
		atomic_fetch_add(&d->m.result_calls, 1);
		atomic_fetch_add(&d->m.result_requests, ntasks);
	}
	if (q && ok)
		merge_free(&m);
	for (size_t k = 0; q && k < ntasks; k++)
		free_results(&q[k]);
	free(q);
	free(ok);
}

static void do_release_gone(sqd *d, sq_client *c, sqd_task *t)
{
	sq_status *out = calloc(t->nrefs, sizeof(*out));
	sq_error err;
	if (!out)
		return;
	if (sq_unclaim(c, d->worker_id, t->refs, t->nrefs, out, &err) != SQ_OK)
		sqd_log("releasing %zu jobs of a client that went away: %s (their lease brings "
			"them back)",
			t->nrefs, err.msg);
	size_t ok = 0;
	for (size_t i = 0; i < t->nrefs; i++)
		ok += out[i] == SQ_OK;
	atomic_fetch_add(&d->m.jobs_released_gone, ok);
	free(out);
}

/* ---- cancel, get, stats, map, moves ------------------------------------------ */

/* The job ids of a body's "ids" (1 to MAX_BATCH positive integers;
 * alone: the body has no other member), malloc'd, or NULL with the error
 * answered (`other` is the body's other form, for the message). */
static int64_t *ids_of(sqd_task *t, json_t *ids, int alone, const char *other, size_t *n)
{
	*n = json_is_array(ids) ? json_array_size(ids) : 0;
	if (*n == 0 || *n > MAX_BATCH || !alone) {
		sqd_error(t, 400, "bad_request", "send {\"ids\":[...]} with 1 to %d job ids, or %s",
			  MAX_BATCH, other);
		return NULL;
	}
	int64_t *v = calloc(*n, sizeof(*v));
	if (!v) {
		sqd_error(t, 500, "internal", "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < *n; i++) {
		json_t *x = json_array_get(ids, i);
		if (!json_is_integer(x) || json_integer_value(x) <= 0) {
			sqd_error(t, 400, "bad_request",
				  "ids[%zu] is not a job id (a positive integer)", i);
			free(v);
			return NULL;
		}
		v[i] = json_integer_value(x);
	}
	return v;
}

/* Whether v is a time in Unix ms up to 9999-12-31. */
static int ms_time(const json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) >= 0 &&
	       json_integer_value(v) <= INT64_C(253402300799000);
}

/* {"type":"T","status":"S"} and created_after_ms, created_before_ms: every
 * job of T in S created in that window, for an admin token only
 * (sq_cancel_matching); logged with the token's name. */
static void cancel_matching(sqd_task *t, sq_client *c, json_t *root)
{
	const char *type = json_string_value(json_object_get(root, "type")),
		   *status = json_string_value(json_object_get(root, "status"));
	json_t *ca = json_object_get(root, "created_after_ms"),
	       *cb = json_object_get(root, "created_before_ms");
	sq_job_filter f = {type, status, NULL, -1, 0, 0, 0, 0};
	sq_error err;
	int64_t n = 0;
	if (!(t->scopes & SQ_SCOPE_ADMIN)) {
		sqd_error(t, 403, "forbidden",
			  "token '%s' may cancel by id or key; cancelling every job of a type "
			  "in a status needs an admin token",
			  t->who);
		return;
	}
	if ((ca && !ms_time(ca)) || (cb && !ms_time(cb))) {
		sqd_error(t, 400, "bad_request",
			  "created_after_ms and created_before_ms are Unix milliseconds: "
			  "integers, 0 to 253402300799000");
		return;
	}
	f.created_after_us = ca ? json_integer_value(ca) * 1000 : 0;
	f.created_before_us = cb ? json_integer_value(cb) * 1000 : 0;
	sq_status st = sq_cancel_matching(c, &f, 0, NULL, NULL, &n, &err);
	if (st != SQ_OK) {
		fail_status(t, err.code, &err);
	} else {
		sq_buf_reset(&t->resp);
		sq_buf_puts(&t->resp, "{\"type\":");
		sq_json_put_string(&t->resp, type);
		sq_buf_puts(&t->resp, ",\"status\":");
		sq_json_put_string(&t->resp, status);
		sq_buf_printf(&t->resp, ",\"cancelled\":%lld}", (long long)n);
	}
	char window[96] = "";
	if (ca || cb)
		snprintf(window, sizeof(window), ", created after %lld ms and by %lld ms,",
			 ca ? (long long)json_integer_value(ca) : 0LL,
			 cb ? (long long)json_integer_value(cb) : 0LL);
	if (st == SQ_OK || n) /* what was done: not a request refused */
		sqd_log("cancel of the %s jobs of type %s%s by token '%s': %lld cancelled%s",
			status, type, window, t->who, (long long)n,
			st == SQ_OK ? "" : " (stopped by an error)");
}

static void do_cancel(sqd *d, sq_client *c, sqd_task *t)
{
	static const char *const by_ids[] = {"ids", NULL}, *const by_key[] = {"type", "key", NULL},
				 *const by_status[] = {"type", "status", "created_after_ms",
						       "created_before_ms", NULL};
	json_t *root = load_body(t, "{\"ids\":[1,2]}, {\"type\":\"T\",\"key\":\"K\"} or "
				    "{\"type\":\"T\",\"status\":\"S\"}");
	if (!root)
		return;
	json_t *ids = json_object_get(root, "ids");
	json_t *type = json_object_get(root, "type"), *key = json_object_get(root, "key");
	json_t *status = json_object_get(root, "status");
	sq_error err;
	int ok = ids      ? only_keys(t, root, by_ids, "{\"ids\":[1,2]}")
		 : status ? only_keys(t, root, by_status,
				      "{\"type\":\"T\",\"status\":\"S\"} (and created_after_ms, "
				      "created_before_ms)")
			  : only_keys(t, root, by_key, "{\"type\":\"T\",\"key\":\"K\"}");
	if (!ok) {
		json_decref(root);
		return;
	}
	if (json_is_string(type) && json_is_string(status)) {
		cancel_matching(t, c, root);
		json_decref(root);
		return;
	}
	if (json_is_string(type) && json_is_string(key) && !ids) {
		int64_t id = 0;
		sq_status st = sq_cancel_key(c, json_string_value(type), json_string_value(key),
					     &id, &err);
		if (st == SQ_OK) {
			sq_buf_reset(&t->resp);
			sq_buf_printf(&t->resp, "{\"results\":[{\"id\":%lld,\"result\":\"ok\"}]}",
				      (long long)id);
		} else if (st == SQ_ENOTFOUND) {
			sqd_error(t, 404, "not_found", "no live job of type '%s' with this key",
				  json_string_value(type));
		} else {
			fail_status(t, st, &err);
		}
		json_decref(root);
		return;
	}
	size_t n;
	sq_status *out = NULL;
	int64_t *v = ids_of(t, ids, 1, "{\"type\":\"T\",\"key\":\"K\"}", &n);
	if (!v || !(out = calloc(n, sizeof(*out)))) {
		if (v)
			sqd_error(t, 500, "internal", "out of memory");
		goto out;
	}
	sq_status st = sq_cancel(c, v, n, out, &err);
	if (st != SQ_OK) {
		/* the error, and what became of each id: those on the shards
		 * that answered are cancelled (or not found) all the same */
		fail_status(t, st, &err);
		if (!t->resp.len || t->resp.data[t->resp.len - 1] != '}')
			goto out;
		t->resp.len--;
		t->resp.data[t->resp.len] = '\0';
		sq_buf_puts(&t->resp, ",\"results\":[");
	} else {
		sq_buf_reset(&t->resp);
		sq_buf_puts(&t->resp, "{\"results\":[");
	}
	for (size_t i = 0; i < n; i++)
		sq_buf_printf(&t->resp, "%s{\"id\":%lld,\"result\":\"%s\"}", i ? "," : "",
			      (long long)v[i], result_name(out[i]));
	sq_buf_puts(&t->resp, "]}");
out:
	free(v);
	free(out);
	json_decref(root);
}

/* POST /v1/jobs/retry (admin): {"ids":[...]}: failed -> ready, per job
 * ok, not_found or not_allowed (not failed, or its key taken by a live
 * job); or {"type":"T"}: every job of T failed so far, in batches. Logged
 * with the token's name. */
static void do_retry(sqd *d, sq_client *c, sqd_task *t)
{
	json_t *root = load_body(t, "{\"ids\":[1,2]} or {\"type\":\"T\"}");
	if (!root)
		return;
	static const char *const by_ids[] = {"ids", NULL}, *const by_type[] = {"type", NULL};
	json_t *ids = json_object_get(root, "ids"), *type = json_object_get(root, "type");
	sq_error err;
	(void)d;
	if (!(ids ? only_keys(t, root, by_ids, "{\"ids\":[1,2]}")
		  : only_keys(t, root, by_type, "{\"type\":\"T\"}"))) {
		json_decref(root);
		return;
	}
	if (json_is_string(type) && !ids && json_object_size(root) == 1) {
		int64_t ok = 0, na = 0;
		sq_status st =
			sq_retry_type(c, json_string_value(type), 0, 0, NULL, NULL, &ok, &na, &err);
		if (st != SQ_OK) {
			fail_status(t, st, &err);
		} else {
			sq_buf_reset(&t->resp);
			sq_buf_puts(&t->resp, "{\"type\":");
			sq_json_put_string(&t->resp, json_string_value(type));
			sq_buf_printf(&t->resp, ",\"retried\":%lld,\"not_allowed\":%lld}",
				      (long long)ok, (long long)na);
		}
		if (st == SQ_OK || ok) /* what was done: not a request refused */
			sqd_log("retry of the failed jobs of type %s by token '%s': %lld made "
				"ready, %lld left%s",
				json_string_value(type), t->who, (long long)ok, (long long)na,
				st == SQ_OK ? "" : " (stopped by an error)");
		json_decref(root);
		return;
	}
	size_t n, okn = 0;
	sq_status *out = NULL;
	int64_t *v = ids_of(t, ids, json_object_size(root) == 1, "{\"type\":\"T\"}", &n);
	if (!v || !(out = calloc(n, sizeof(*out)))) {
		if (v)
			sqd_error(t, 500, "internal", "out of memory");
		goto out;
	}
	sq_status st = sq_retry(c, v, n, out, &err);
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		goto out;
	}
	sq_buf_reset(&t->resp);
	sq_buf_puts(&t->resp, "{\"results\":[");
	for (size_t i = 0; i < n; i++) {
		sq_buf_printf(&t->resp, "%s{\"id\":%lld,\"result\":\"%s\"}", i ? "," : "",
			      (long long)v[i], result_name(out[i]));
		okn += out[i] == SQ_OK;
	}
	sq_buf_puts(&t->resp, "]}");
	sqd_log("retry of %zu jobs by token '%s': %zu made ready", n, t->who, okn);
out:
	free(v);
	free(out);
	json_decref(root);
}

/* The last errors of a page of jobs (calloc'd, each malloc'd or NULL), or
 * NULL: the page goes without them when they cannot be read. */
static char **page_errors(sq_client *c, const sq_job *jobs, size_t n)
{
	char **errors = n ? calloc(n, sizeof(*errors)) : NULL;
	sq_error err;
	if (errors && sq_jobs_errors(c, jobs, n, errors, &err) != SQ_OK) {
		sqd_log("the last errors of a page of jobs could not be read: %s", err.msg);
		for (size_t i = 0; i < n; i++)
			free(errors[i]);
		free(errors);
		errors = NULL;
	}
	return errors;
}

/* A job as sqd_put_job writes it, with its last error when it has one (or
 * always, null for none, when `always`). */
static void put_job_error(sq_buf *b, const sq_config *cfg, const sq_job *j, const char *error,
			  int always)
{
	sqd_put_job(b, cfg, j);
	if (!error && !always)
		return;
	b->data[--b->len] = '\0'; /* its closing brace */
	sq_buf_puts(b, ",\"last_error\":");
	if (error)
		sq_json_put_string(b, error);
	else
		sq_buf_puts(b, "null");
	sq_buf_putc(b, '}');
}

/* Whether every parameter of the job list's query is one it knows, once;
 * else a 400 that names the first other (a misspelled filter must not
 * list every job) and 0. */
static int list_params_known(sqd_task *t, struct evkeyvalq *kv)
{
	static const char *const known[] = {"type",
					    "status",
					    "key",
					    "shard",
					    "limit",
					    "after",
					    "finished_after_ms",
					    "finished_before_ms",
					    "created_after_ms",
					    "created_before_ms"};
	for (struct evkeyval *p = kv->tqh_first; p; p = p->next.tqe_next) {
		int seen = 0;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			seen |= !strcmp(p->key, known[i]);
		for (struct evkeyval *q = kv->tqh_first; seen && q != p; q = q->next.tqe_next)
			if (!strcmp(q->key, p->key)) {
				sqd_error(t, 400, "bad_request", "parameter '%s' is given twice",
					  p->key);
				return 0;
			}
		if (!seen) {
			sqd_error(
				t, 400, "bad_request",
				"parameter '%s' is not one the job list takes: give type, status, "
				"key, shard, limit, after, finished_after_ms, finished_before_ms, "
				"created_after_ms or created_before_ms",
				p->key);
			return 0;
		}
	}
	return 1;
}

/* The time in query parameter `name` (Unix ms; absent: 0) as µs in *us;
 * else a 400 that names it, and -1. */
static int query_ms(sqd_task *t, struct evkeyvalq *kv, const char *name, int64_t *us)
{
	const char *v = evhttp_find_header(kv, name);
	char *end = NULL;
	long long ms = v ? strtoll(v, &end, 10) : 0;
	*us = 0;
	if (!v)
		return 0;
	if (*v && !*end && ms >= 0 && ms <= INT64_C(253402300799000)) {
		*us = (int64_t)ms * 1000;
		return 0;
	}
	sqd_error(t, 400, "bad_request",
		  "%s '%s': give a time as Unix milliseconds, 0 to 253402300799000", name, v);
	return -1;
}

/* GET /v1/jobs?type=T&status=S&key=K&shard=ID&limit=N&after=C and the
 * times finished_after_ms, finished_before_ms, created_after_ms,
 * created_before_ms (admin): a page of jobs (sq_jobs_list), and the
 * cursor of the next one. */
static void do_list(sqd *d, sq_client *c, sqd_task *t)
{
	struct evkeyvalq kv;
	if (evhttp_parse_query_str(t->query ? t->query : "", &kv)) {
		sqd_error(t, 400, "bad_request", "the query string is not valid");
		return;
	}
	if (!list_params_known(t, &kv)) {
		evhttp_clear_headers(&kv);
		return;
	}
	const char *shard = evhttp_find_header(&kv, "shard"),
		   *limit = evhttp_find_header(&kv, "limit");
	sq_job_filter f = {evhttp_find_header(&kv, "type"),
			   evhttp_find_header(&kv, "status"),
			   evhttp_find_header(&kv, "key"),
			   -1,
			   0,
			   0,
			   0,
			   0};
	char next[64], *end = NULL;
	long lim = limit ? strtol(limit, &end, 10) : 100;
	sq_job *jobs = NULL;
	size_t n = 0;
	sq_error err;
	if (query_ms(t, &kv, "finished_after_ms", &f.finished_after_us) ||
	    query_ms(t, &kv, "finished_before_ms", &f.finished_before_us) ||
	    query_ms(t, &kv, "created_after_ms", &f.created_after_us) ||
	    query_ms(t, &kv, "created_before_ms", &f.created_before_us)) {
		/* answered */
	} else if (limit && (!*limit || *end || lim < 1 || lim > 1000)) {
		sqd_error(t, 400, "bad_request", "limit '%s': give 1 to 1000", limit);
	} else if (shard && (f.shard = sq_config_shard_index(d->cfg, shard)) < 0) {
		sqd_error(t, 400, "bad_request", "no shard '%s' in the config", shard);
	} else if (!f.type) {
		sqd_error(t, 400, "bad_request",
			  "give ?type=T (and status=ready, starting, running, failed, "
			  "cancelled or completed, or key=K)");
	} else if (sq_jobs_list(c, &f, evhttp_find_header(&kv, "after"), (int)lim, &jobs, &n, next,
				sizeof(next), &err) != SQ_OK) {
		fail_status(t, err.code, &err);
	} else {
		char **errors = page_errors(c, jobs, n);
		sq_buf_reset(&t->resp);
		sq_buf_puts(&t->resp, "{\"jobs\":[");
		for (size_t i = 0; i < n; i++) {
			if (i)
				sq_buf_putc(&t->resp, ',');
			put_job_error(&t->resp, d->cfg, &jobs[i], errors ? errors[i] : NULL,
				      errors != NULL);
			free(errors ? errors[i] : NULL);
		}
		free(errors);
		sq_buf_puts(&t->resp, "],\"next\":");
		if (next[0])
			sq_json_put_string(&t->resp, next);
		else
			sq_buf_puts(&t->resp, "null");
		sq_buf_putc(&t->resp, '}');
		sq_jobs_free(jobs, n);
	}
	evhttp_clear_headers(&kv);
}

/* POST /v1/jobs/purge (admin), {"type":"T","finished_before_ms":MS}: the
 * type's history rows that finished then or before, deleted in batches;
 * logged with the token's name. */
static void do_purge(sqd *d, sq_client *c, sqd_task *t)
{
	json_t *root = load_body(t, "{\"type\":\"T\",\"finished_before_ms\":1795406483327}");
	if (!root)
		return;
	json_t *type = json_object_get(root, "type"),
	       *before = json_object_get(root, "finished_before_ms");
	sq_error err;
	int64_t purged = 0;
	(void)d;
	static const char *const fields[] = {"type", "finished_before_ms", NULL};
	if (!only_keys(t, root, fields, "{\"type\":\"T\",\"finished_before_ms\":MS}")) {
		/* answered */
	} else if (!json_is_string(type) || !ms_time(before) || json_object_size(root) != 2) {
		sqd_error(t, 400, "bad_request",
			  "send {\"type\":\"T\",\"finished_before_ms\":MS}: the type, and the "
			  "latest finish time to delete (Unix ms)");
	} else if (sq_history_purge(c, json_string_value(type),
				    (int64_t)json_integer_value(before) * 1000, 0, NULL, NULL,
				    &purged, &err) != SQ_OK) {
		fail_status(t, err.code, &err);
	} else {
		sq_buf_reset(&t->resp);
		sq_buf_puts(&t->resp, "{\"type\":");
		sq_json_put_string(&t->resp, json_string_value(type));
		sq_buf_printf(&t->resp, ",\"purged\":%lld}", (long long)purged);
		sqd_log("purge of type %s's history by token '%s': %lld rows",
			json_string_value(type), t->who, (long long)purged);
	}
	json_decref(root);
}

static void do_get_job(sqd *d, sq_client *c, sqd_task *t)
{
	sq_job j;
	sq_error err;
	sq_status st = sq_get_job(c, t->id, &j, &err);
	if (st == SQ_ENOTFOUND) {
		sqd_error(t, 404, "not_found",
			  "no job %lld (never enqueued, or completed without history)",
			  (long long)t->id);
		return;
	}
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		return;
	}
	char *last_error = NULL;
	if (sq_get_job_error(c, t->id, &last_error, &err) != SQ_OK)
		last_error = NULL;
	sq_buf_reset(&t->resp);
	put_job_error(&t->resp, d->cfg, &j, last_error, 0);
	sq_job_clear(&j);
	free(last_error);
}

/* Partitions per shard in the client's map (calloc'd, one per shard). */
static int64_t *map_counts(sqd *d, sq_client *c)
{
	int ns = sq_config_shard_count(d->cfg);
	int64_t *count = calloc((size_t)ns, sizeof(*count));
	for (uint32_t p = 0; count && p < sq_config_partitions(d->cfg); p++) {
		int sh = sq_client_shard_of_partition(c, p);
		if (sh >= 0 && sh < ns)
			count[sh]++;
	}
	return count;
}

/* The "shards" and "types" members of a stats answer (fast or exact); a
 * shard that could not be read has its error and no rows. */
static void put_stats(sqd *d, sq_buf *b, const sq_stats *s, const int64_t *map_count)
{
	sq_buf_puts(b, "\"shards\":[");
	for (int i = 0; i < s->nshards; i++) {
		sq_buf_printf(b, "%s{\"id\":", i ? "," : "");
		sq_json_put_string(b, sq_config_shard_id(d->cfg, i));
		sq_buf_printf(b,
			      ",\"weight\":%g,\"partitions_owned\":%lld,\"partitions_moving\":%lld",
			      sq_config_shard_weight(d->cfg, i), (long long)s->partitions_owned[i],
			      (long long)s->partitions_moving[i]);
		if (map_count)
			sq_buf_printf(b, ",\"partitions\":%lld", (long long)map_count[i]);
		sq_buf_puts(b, ",\"error\":");
		if (s->shard_error && s->shard_error[i])
			sq_json_put_string(b, s->shard_error[i]);
		else
			sq_buf_puts(b, "null");
		sq_buf_putc(b, '}');
	}
	sq_buf_puts(b, "],\"types\":[");
	for (size_t i = 0; i < s->nrows; i++) {
		const sq_stats_row *r = &s->rows[i];
		sq_buf_printf(b, "%s{\"shard\":", i ? "," : "");
		sq_json_put_string(b, sq_config_shard_id(d->cfg, r->shard));
		sq_buf_puts(b, ",\"type\":");
		sq_json_put_string(b, r->type);
		sq_buf_printf(
			b,
			",\"ready\":%lld,\"ready_estimated\":%s,\"starting\":%lld,\"running\":%lld,"
			"\"completed\":%lld,\"failed\":%lld,\"cancelled\":%lld,"
			"\"oldest_ready_age_ms\":%lld,\"expired_leases\":%lld}",
			(long long)r->count[SQ_READY], r->ready_estimated ? "true" : "false",
			(long long)r->count[SQ_STARTING], (long long)r->count[SQ_RUNNING],
			(long long)r->count[SQ_COMPLETED], (long long)r->count[SQ_FAILED],
			(long long)r->count[SQ_CANCELLED], (long long)r->oldest_ready_age_ms,
			(long long)r->expired_leases);
	}
	sq_buf_putc(b, ']');
}

/* Fast (index-driven, sq_stats_fast) unless ?exact=1 (a scan). */
static void do_stats(sqd *d, sq_client *c, sqd_task *t)
{
	sq_stats *s;
	sq_error err;
	sq_status st = t->exact ? sq_stats_get(c, &s, &err) : sq_stats_fast(c, 0, &s, &err);
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		return;
	}
	sq_buf *b = &t->resp;
	sq_buf_reset(b);
	sq_buf_printf(b, "{\"map_version\":%lld,\"exact\":%s,", (long long)s->map_version,
		      t->exact ? "true" : "false");
	put_stats(d, b, s, NULL);
	sq_buf_putc(b, '}');
	sq_stats_free(s);
}

/* Everything the admin page shows, in one answer: a shard that cannot be
 * read is named, the others shown. */
static void do_overview(sqd *d, sq_client *c, sqd_task *t)
{
	sq_stats *s;
	sq_error err;
	sq_status st = sq_stats_fast(c, 0, &s, &err);
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		return;
	}
	uint32_t np = sq_config_partitions(d->cfg);
	/* the map as last loaded if the meta database cannot be read now */
	if (sq_client_refresh_map(c, &err) != SQ_OK)
		sqd_log("overview: the map could not be reloaded: %s", err.msg);
	int64_t *count = map_counts(d, c);
	if (!count) {
		sq_stats_free(s);
		sqd_error(t, 500, "internal", "out of memory");
		return;
	}
	sq_buf *b = &t->resp;
	sq_buf_reset(b);
	sq_buf_printf(b, "{\"map_version\":%lld,\"partitions\":%u,",
		      (long long)sq_client_map_version(c), np);
	put_stats(d, b, s, count);
	free(count);
	sq_stats_free(s);
	sq_buf_puts(b, ",\"moves\":[");
	sq_move_info *v = NULL;
	size_t n = 0;
	if (sq_moves_list(c, 0, &v, &n, &err) == SQ_OK) {
		for (size_t i = 0; i < n; i++) {
			sq_buf_printf(b, "%s{\"id\":%lld,\"from\":", i ? "," : "",
				      (long long)v[i].move_id);
			sq_json_put_string(b, v[i].from);
			sq_buf_puts(b, ",\"to\":");
			sq_json_put_string(b, v[i].to);
			sq_buf_printf(b, ",\"partitions\":%d,\"step\":", v[i].npartitions);
			sq_json_put_string(b, v[i].step);
			sq_buf_printf(b, ",\"rows\":%lld,\"stall_ms\":%.1f,\"error\":",
				      (long long)v[i].rows, v[i].stall_ms);
			sq_json_put_string(b, v[i].error);
			sq_buf_putc(b, '}');
		}
		free(v);
	}
	sq_buf_puts(b, "],\"failed\":[");
	sq_failed_job *f = NULL;
	if (sq_failed_recent(c, 10, &f, &n, &err) == SQ_OK) {
		for (size_t i = 0; i < n; i++) {
			sq_buf_printf(b, "%s{\"id\":%lld,\"type\":", i ? "," : "",
				      (long long)f[i].id);
			sq_json_put_string(b, f[i].type);
			sq_buf_puts(b, ",\"shard\":");
			sq_json_put_string(b, sq_config_shard_id(d->cfg, f[i].shard));
			sq_buf_printf(b, ",\"tries\":%d,\"failed_ms\":%lld,\"last_error\":",
				      f[i].tries, (long long)(f[i].failed_us / 1000));
			sq_json_put_string(b, f[i].last_error);
			sq_buf_putc(b, '}');
		}
		free(f);
	}
	sq_buf_puts(b, "],\"paused\":[");
	for (int i = 0, npaused = 0; i < sq_config_type_count(d->cfg); i++)
		if (sq_type_paused(c, sq_config_type_name(d->cfg, i))) {
			sq_buf_puts(b, npaused++ ? "," : "");
			sq_json_put_string(b, sq_config_type_name(d->cfg, i));
		}
	sq_buf_puts(b, "],\"rates\":");
	sqd_rates_json(d, b);
	sq_buf_putc(b, '}');
}

static void do_metrics(sqd *d, sq_client *c, sqd_task *t)
{
	t->text = 1;
	sq_buf_reset(&t->resp);
	sqd_metrics_write(d, &t->resp);
	sqd_metrics_write_shards(d, c, &t->resp);
}

static void do_map(sqd *d, sq_client *c, sqd_task *t)
{
	sq_error err;
	sq_status st = sq_client_refresh_map(c, &err);
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		return;
	}
	uint32_t np = sq_config_partitions(d->cfg);
	int ns = sq_config_shard_count(d->cfg);
	int64_t *count = map_counts(d, c);
	if (!count) {
		sqd_error(t, 500, "internal", "out of memory");
		return;
	}
	sq_buf *b = &t->resp;
	sq_buf_reset(b);
	sq_buf_printf(b, "{\"version\":%lld,\"partitions\":%u,\"shards\":[",
		      (long long)sq_client_map_version(c), np);
	for (int s = 0; s < ns; s++) {
		sq_buf_printf(b, "%s{\"id\":", s ? "," : "");
		sq_json_put_string(b, sq_config_shard_id(d->cfg, s));
		sq_buf_printf(b, ",\"weight\":%g,\"partitions\":%lld}",
			      sq_config_shard_weight(d->cfg, s), (long long)count[s]);
	}
	sq_buf_puts(b, "]}");
	free(count);
}

static void do_moves(sqd *d, sq_client *c, sqd_task *t)
{
	sq_move_info *v = NULL;
	size_t n = 0;
	sq_error err;
	sq_status st = sq_moves_list(c, t->all, &v, &n, &err);
	if (st != SQ_OK) {
		fail_status(t, st, &err);
		return;
	}
	sq_buf *b = &t->resp;
	sq_buf_reset(b);
	sq_buf_puts(b, "{\"moves\":[");
	for (size_t i = 0; i < n; i++) {
		sq_buf_printf(b, "%s{\"id\":%lld,\"from\":", i ? "," : "", (long long)v[i].move_id);
		sq_json_put_string(b, v[i].from);
		sq_buf_puts(b, ",\"to\":");
		sq_json_put_string(b, v[i].to);
		sq_buf_printf(b, ",\"partitions\":%d,\"step\":", v[i].npartitions);
		sq_json_put_string(b, v[i].step);
		sq_buf_printf(b, ",\"rows\":%lld,\"stall_ms\":%.1f,\"elapsed_ms\":%.1f,\"error\":",
			      (long long)v[i].rows, v[i].stall_ms, v[i].elapsed_ms);
		sq_json_put_string(b, v[i].error);
		sq_buf_putc(b, '}');
	}
	sq_buf_puts(b, "]}");
	free(v);
}

/* GET /v1/types: the config's types, each with whether it is paused (as
 * of a map poll at most map_poll old) and its fleet-wide limits
 * (max_running, rate: 0 when it has none). */
static void do_types(sqd *d, sq_client *c, sqd_task *t)
{
	sq_buf *b = &t->resp;
	sq_buf_reset(b);
	sq_buf_puts(b, "{\"types\":[");
	for (int i = 0; i < sq_config_type_count(d->cfg); i++) {
		const char *name = sq_config_type_name(d->cfg, i);
		sq_buf_puts(b, i ? ",{\"type\":" : "{\"type\":");
		sq_json_put_string(b, name);
		int32_t max_running;
		double rate;
		sq_config_type_limits(d->cfg, i, &max_running, &rate);
		sq_buf_printf(b, ",\"paused\":%s,\"max_running\":%d,\"rate\":%g}",
			      sq_type_paused(c, name) ? "true" : "false", (int)max_running, rate);
	}
	sq_buf_puts(b, "]}");
}

/* POST /v1/types/pause and resume, {"type":"T"}: the fleet's claims leave
 * the type out (or take it again) within map_poll; logged with the token. */
static void do_pause(sqd *d, sq_client *c, sqd_task *t, int paused)
{
	json_t *root = load_body(t, "{\"type\":\"T\"}");
	if (!root)
		return;
	json_t *type = json_object_get(root, "type");
	sq_error err;
	if (!json_is_string(type) || json_object_size(root) != 1) {
		sqd_error(t, 400, "bad_request", "send {\"type\":\"T\"}: the type to %s",
			  paused ? "pause" : "resume");
	} else if (sq_type_pause(c, json_string_value(type), paused, &err) != SQ_OK) {
		if (err.code == SQ_EINVAL)
			sqd_error(t, 400, "bad_request", "%s", err.msg);
		else
			fail_status(t, err.code, &err);
	} else {
		sqd_log("type %s %s by token '%s'", json_string_value(type),
			paused ? "paused" : "resumed", t->who);
		do_types(d, c, t);
	}
	json_decref(root);
}

void sqd_run_results(sqd *d, sq_client *c, sqd_task **tasks, size_t ntasks)
{
	/* the workers' leases wait on these: a shard that answers nothing
	 * holds them up for an eighth of the shortest lease at most */
	double keep = sq_client_answer_wait_of(c);
	sq_client_answer_wait(c, d->results_wait_s);
	run_results(d, c, tasks, ntasks);
	sq_client_answer_wait(c, keep);
}

int sqd_run(sqd *d, sq_client *c, sqd_task *t)
{
	switch (t->route) {
	case R_ENQUEUE: return do_enqueue(d, t);
	case R_START:
	case R_HEARTBEAT:
	case R_COMPLETE:
	case R_FAIL:
	case R_RELEASE: sqd_run_results(d, c, &t, 1); break;
	case R_RELEASE_GONE: do_release_gone(d, c, t); break;
	case R_CANCEL: do_cancel(d, c, t); break;
	case R_GET_JOB: do_get_job(d, c, t); break;
	case R_STATS: do_stats(d, c, t); break;
	case R_OVERVIEW: do_overview(d, c, t); break;
	case R_METRICS: do_metrics(d, c, t); break;
	case R_MAP: do_map(d, c, t); break;
	case R_MOVES: do_moves(d, c, t); break;
	case R_TYPES: do_types(d, c, t); break;
	case R_RETRY: do_retry(d, c, t); break;
	case R_LIST: do_list(d, c, t); break;
	case R_PURGE: do_purge(d, c, t); break;
	case R_PAUSE: do_pause(d, c, t, 1); break;
	case R_RESUME: do_pause(d, c, t, 0); break;
	default: sqd_error(t, 500, "internal", "no handler for this route");
	}
	return 0;
}

/* ---- claim: parsed on the main thread, run by the claimer ---------------------- */

int sqd_claim_parse(sqd *d, sqd_task *t)
{
	const char *ex = "{\"worker\":\"w1\",\"types\":[{\"type\":\"T\",\"limit\":10}],"
			 "\"wait_ms\":5000}";
	json_t *root = load_body(t, ex);
	if (!root)
		return -1;
	sqd_claim *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		sqd_error(t, 500, "internal", "out of memory");
		json_decref(root);
		return -1;
	}
	t->claim = cl;
	cl->start = 1;
	json_t *w = json_object_get(root, "worker"), *types = json_object_get(root, "types"),
	       *wait = json_object_get(root, "wait_ms"), *start = json_object_get(root, "start");
	int rc = -1;
	if (!json_is_string(w) || !json_string_length(w) || json_string_length(w) > 128) {
		sqd_error(t, 400, "bad_request",
			  "\"worker\" must name the client (1 to 128 characters); send %s", ex);
		goto out;
	}
	snprintf(cl->worker, sizeof(cl->worker), "%s", json_string_value(w));
	size_t n = json_is_array(types) ? json_array_size(types) : 0;
	if (n == 0 || n > SQ_WORKER_MAX_TYPES) {
		sqd_error(t, 400, "bad_request",
			  "\"types\" must be an array of 1 to %d {\"type\",\"limit\"}; send %s",
			  SQ_WORKER_MAX_TYPES, ex);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(types, i);
		json_t *ty = json_object_get(e, "type"), *lim = json_object_get(e, "limit");
		const char *type = json_is_string(ty)
					   ? sq_config_type_lookup(d->cfg, json_string_value(ty))
					   : NULL;
		if (!type) {
			sqd_error(t, 400, "bad_request",
				  "types[%zu]: %s; the types are the [type NAME] sections of the "
				  "daemon's config",
				  i, json_is_string(ty) ? "not a configured type" : "no \"type\"");
			goto out;
		}
		if (!json_is_integer(lim) || json_integer_value(lim) < 1 ||
		    json_integer_value(lim) > MAX_BATCH) {
			sqd_error(t, 400, "bad_request",
				  "types[%zu]: \"limit\" must be an integer from 1 to %d", i,
				  MAX_BATCH);
			goto out;
		}
		for (int k = 0; k < cl->ntypes; k++)
			if (cl->types[k].type == type) {
				sqd_error(
					t, 400, "bad_request",
					"types[%zu]: type '%s' is listed twice; give it once with "
					"the sum of the limits",
					i, type);
				goto out;
			}
		cl->types[cl->ntypes].type = type;
		cl->types[cl->ntypes].limit = (int32_t)json_integer_value(lim);
		cl->ntypes++;
	}
	int64_t wait_ms = 0;
	if (wait) {
		if (!json_is_integer(wait) || json_integer_value(wait) < 0) {
			sqd_error(t, 400, "bad_request",
				  "\"wait_ms\" must be an integer of milliseconds, 0 or more");
			goto out;
		}
		wait_ms = json_integer_value(wait);
		if (wait_ms > sq_config_daemon(d->cfg)->claim_wait_max_ms)
			wait_ms = sq_config_daemon(d->cfg)->claim_wait_max_ms;
	}
	if (start) {
		if (!json_is_boolean(start)) {
			sqd_error(t, 400, "bad_request", "\"start\" must be true or false");
			goto out;
		}
		cl->start = json_is_true(start);
	}
	cl->deadline = t->t0 + wait_ms / 1000.0;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

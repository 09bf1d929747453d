/* httpworker.c - HTTP clients of shardqd as the bench's workers (see
 * httpworker.h). Replies are read with a small scanner of shardqd's own
 * JSON (docs/http.md), not a general parser: the bench's CPU should be
 * the clients' work, not JSON trees. */
#include "httpworker.h"
#include "handler.h"
#include "http.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct hjob {
	int64_t id;
	int attempt;
	const char *worker; /* its JSON string, quotes included */
	size_t wlen;
	int type_idx;
	int shard;    /* 0-based, from "sN" */
	char *params; /* the params object's text (not terminated) */
	size_t plen;
} hjob;

typedef struct hclient {
	tally *t;
	int proc, idx;
	pthread_t th;
	_Atomic int state; /* 0 connecting, 1 connected, -1 failed */
	double busy_s, total_s;
	uint64_t claims, lost;
	_Atomic uint64_t retries; /* by the claimer and the completer of a pipelined client */
	double claim_s;           /* sum of claim round trips that brought jobs */
	char err[512];
} hclient;

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The end of the JSON value at p (a string, object, array or scalar). */
static char *skip_value(char *p)
{
	if (*p == '"') {
		for (p++; *p && *p != '"'; p++)
			if (*p == '\\' && p[1])
				p++;
		return *p ? p + 1 : p;
	}
	if (*p == '{' || *p == '[') {
		int depth = 0;
		for (; *p; p++) {
			if (*p == '"') {
				p = skip_value(p) - 1;
			} else if (*p == '{' || *p == '[') {
				depth++;
			} else if (*p == '}' || *p == ']') {
				if (--depth == 0)
					return p + 1;
			}
		}
		return p;
	}
	while (*p && *p != ',' && *p != '}' && *p != ']')
		p++;
	return p;
}

/* One job object at p ('{'); its end, or NULL if it is not one. */
static char *parse_job(const scenario *sc, char *p, hjob *j)
{
	memset(j, 0, sizeof(*j));
	j->type_idx = j->shard = -1;
	if (*p != '{')
		return NULL;
	p++;
	while (*p == '"') {
		char *key = p + 1, *kend = strchr(key, '"');
		if (!kend || kend[1] != ':')
			return NULL;
		size_t klen = (size_t)(kend - key);
		char *v = kend + 2, *vend = skip_value(v);
#define KEY(s) (klen == sizeof(s) - 1 && !memcmp(key, s, klen))
		if (KEY("id")) {
			j->id = strtoll(v, NULL, 10);
		} else if (KEY("attempt")) {
			j->attempt = atoi(v);
		} else if (KEY("worker")) {
			j->worker = v;
			j->wlen = (size_t)(vend - v);
		} else if (KEY("type") && *v == '"') {
			size_t tl = (size_t)(vend - v) - 2;
			for (int i = 0; i < sc->ntypes; i++)
				if (strlen(sc->types[i].name) == tl &&
				    !memcmp(sc->types[i].name, v + 1, tl))
					j->type_idx = i;
		} else if (KEY("shard") && v[0] == '"' && v[1] == 's') {
			j->shard = atoi(v + 2) - 1; /* the bench names its shards s1..sN */
		} else if (KEY("params")) {
			j->params = v;
			j->plen = (size_t)(vend - v);
		}
#undef KEY
		p = vend;
		if (*p == ',')
			p++;
	}
	if (*p != '}' || !j->id || !j->worker || j->type_idx < 0)
		return NULL;
	return p + 1;
}

/* The jobs of a claim reply into *jobs (grown as needed); their count, or
 * -1 when the reply is not what shardqd sends. */
static int parse_claim(const scenario *sc, char *body, hjob **jobs, int *cap)
{
	char *p = strstr(body, "\"jobs\":[");
	int n = 0;
	if (!p)
		return -1;
	p += 8;
	while (*p == '{') {
		if (n == *cap) {
			int nc = *cap ? *cap * 2 : 256;
			hjob *nj = realloc(*jobs, (size_t)nc * sizeof(**jobs));
			if (!nj)
				return -1;
			*jobs = nj;
			*cap = nc;
		}
		p = parse_job(sc, p, &(*jobs)[n]);
		if (!p)
			return -1;
		n++;
		if (*p == ',')
			p++;
	}
	return *p == ']' ? n : -1;
}

static double now_s(void)
{
	return (double)mono_us() / 1e6;
}

/* Completes jobs[0..n): one POST, again for the jobs a 503 left undone. */
static int complete(hclient *cl, hconn *c, hjob *jobs, int n, hbuf *b)
{
	tally *t = cl->t;
	char *body;
	size_t len;
	while (n > 0) {
		hbuf_reset(b);
		hbuf_put(b, "{\"jobs\":[", 9);
		for (int i = 0; i < n; i++) {
			hbuf_printf(b, "%s{\"id\":%lld,\"attempt\":%d,\"worker\":", i ? "," : "",
				    (long long)jobs[i].id, jobs[i].attempt);
			hbuf_put(b, jobs[i].worker, jobs[i].wlen);
			hbuf_put(b, "}", 1);
		}
		if (hbuf_put(b, "]}", 2)) {
			snprintf(cl->err, sizeof(cl->err), "out of memory");
			return -1;
		}
		int64_t t0 = mono_us();
		int st = hconn_request(c, "POST", "/v1/jobs/complete", t->http_token, b->p, b->len,
				       &body, &len, cl->err, sizeof(cl->err));
		int64_t t1 = mono_us();
		if (st < 0)
			return -1;
		uint64_t ok = 0, lost = 0;
		int again = 0;
		if (st == 200) {
			ok = (uint64_t)n;
		} else if (st == 409 || st == 503) {
			/* results in input order: keep the jobs to send again */
			char *p = strstr(body, "\"results\":[");
			int i = 0;
			for (p = p ? p + 11 : NULL; p && *p == '{' && i < n; i++) {
				char *e = skip_value(p), *r = strstr(p, "\"result\":\"");
				if (!r || r > e)
					break;
				r += 10;
				if (!strncmp(r, "ok\"", 3))
					ok++;
				else if (!strncmp(r, "lost\"", 5))
					lost++;
				else
					jobs[again++] = jobs[i];
				p = *e == ',' ? e + 1 : e;
			}
			if (i != n) {
				snprintf(cl->err, sizeof(cl->err),
					 "POST /v1/jobs/complete: status %d with results that do "
					 "not "
					 "match the jobs: %.300s",
					 st, body);
				return -1;
			}
		} else {
			snprintf(cl->err, sizeof(cl->err),
				 "POST /v1/jobs/complete: status %d: %.300s", st, body);
			return -1;
		}
		hist_record(&t->complete_rtt, (uint64_t)(t1 - t0));
		count(&t->completes, 1);
		count(&t->completed, ok);
		count(&t->lost, lost);
		cl->lost += lost;
		tally_first(&t->first_complete, t0);
		tally_last(&t->last_complete, t1);
		n = again;
		if (n) {
			cl->retries++;
			sleep_ms(100);
		}
	}
	return 0;
}

/* The claim request of client cl: every type at its claim batch, started
 * by the claim (as the library's tick does). */
static int claim_body(hclient *cl, hbuf *claim)
{
	const scenario *sc = &cl->t->sc;
	hbuf_printf(claim, "{\"worker\":\"bench-%d-%d\",\"types\":[", cl->proc, cl->idx);
	for (int i = 0; i < sc->ntypes; i++)
		hbuf_printf(claim, "%s{\"type\":\"%s\",\"limit\":%d}", i ? "," : "",
			    sc->types[i].name, sc->types[i].claim_batch);
	if (hbuf_printf(claim, "],\"wait_ms\":%lld,\"start\":true}", (long long)sc->wait_ms)) {
		snprintf(cl->err, sizeof(cl->err), "out of memory");
		return -1;
	}
	return 0;
}

/* Opens connection c (initialised) with one request, before the phase
 * starts. */
static int connect_early(hclient *cl, hconn *c)
{
	char *body;
	size_t len;
	int st = hconn_request(c, "GET", "/healthz", cl->t->http_token, NULL, 0, &body, &len,
			       cl->err, sizeof(cl->err));
	if (st != 200 && st > 0)
		snprintf(cl->err, sizeof(cl->err), "GET /healthz: status %d", st);
	return st == 200 ? 0 : -1;
}

/* One POST /v1/claim into *jobs (pointing into the reply, or into a copy
 * of it in *copy when copy is not NULL: the batch then outlives the
 * connection's next request). The count of jobs, 0 after a 503 (a shard
 * or a move: tried again shortly) or a long poll that ran out, -1 on
 * failure (cl->err). */
static int claim_jobs(hclient *cl, hconn *c, const hbuf *claim, hjob **jobs, int *cap, char **copy)
{
	tally *t = cl->t;
	char *body;
	size_t len;
	int64_t t0 = mono_us();
	int st = hconn_request(c, "POST", "/v1/claim", t->http_token, claim->p, claim->len, &body,
			       &len, cl->err, sizeof(cl->err));
	int64_t t1 = mono_us();
	if (st < 0)
		return -1;
	if (st == 503) {
		cl->retries++;
		sleep_ms(100);
		return 0;
	}
	if (copy && st == 200) {
		free(*copy);
		if (!(*copy = malloc(len + 1))) {
			snprintf(cl->err, sizeof(cl->err), "out of memory");
			return -1;
		}
		memcpy(*copy, body, len);
		(*copy)[len] = '\0';
		body = *copy;
	}
	int n = st == 200 ? parse_claim(&t->sc, body, jobs, cap) : -1;
	if (n < 0) {
		snprintf(cl->err, sizeof(cl->err), "POST /v1/claim: status %d: %.300s", st, body);
		return -1;
	}
	count(&t->claims, 1);
	cl->claims++;
	if (!n) {
		count(&t->claims_empty, 1);
		return 0;
	}
	/* only claims that brought jobs are timed: an empty one is a long poll
	 * that ran out */
	cl->claim_s += (double)(t1 - t0) / 1e6;
	hist_record(&t->claim_rtt, (uint64_t)(t1 - t0));
	count(&t->claimed, (uint64_t)n);
	tally_first(&t->first_claim, t0);
	tally_last(&t->last_claim, t1);
	/* start: true: the claim started them */
	hist_record(&t->start_rtt, (uint64_t)(t1 - t0));
	count(&t->starts, 1);
	count(&t->started, (uint64_t)n);
	tally_first(&t->first_start, t0);
	tally_last(&t->last_start, t1);
	return n;
}

/* Runs jobs[0..n) one after another, as the client's one slot. */
static void run_jobs(hclient *cl, hjob *jobs, int n)
{
	tally *t = cl->t;
	double b0 = now_s();
	for (int i = 0; i < n; i++) {
		hjob *j = &jobs[i];
		char keep = 0;
		if (j->params) {
			keep = j->params[j->plen];
			j->params[j->plen] = '\0';
		}
		job_started(t, j->params, j->shard, j->type_idx);
		if (j->params)
			j->params[j->plen] = keep;
		job_execute(&t->sc.types[j->type_idx], j->id);
		count(&t->handled, 1);
	}
	cl->busy_s += now_s() - b0;
}

/* A client that fails during the run ends its process, and the bench
 * says why; before it, the process sees its state. */
static void client_failed(hclient *cl)
{
	if (atomic_load(&cl->state) == 1) {
		proc_report *pr = &cl->t->procs[cl->proc];
		snprintf(pr->error, sizeof(pr->error), "worker %d client %d: %s", cl->proc, cl->idx,
			 cl->err);
		atomic_store(&pr->state, -1);
		_exit(1);
	}
	atomic_store(&cl->state, -1);
}

/* The plain client: claim, run the jobs, complete them, on one
 * connection, one request after another. */
static void client_plain(hclient *cl, hconn *c, const hbuf *claim)
{
	hbuf done = {0};
	hjob *jobs = NULL;
	int cap = 0;
	double start = now_s();
	while (atomic_load(&cl->t->go) == 1) {
		int n = claim_jobs(cl, c, claim, &jobs, &cap, NULL);
		if (n < 0)
			goto fail;
		run_jobs(cl, jobs, n);
		/* the reply buffer holds the workers' strings: complete before the
		 * next request reuses it */
		if (n && complete(cl, c, jobs, n, &done))
			goto fail;
	}
	cl->total_s = now_s() - start;
	hbuf_free(&done);
	free(jobs);
	return;
fail:
	client_failed(cl);
	hbuf_free(&done);
	free(jobs);
}

/* ---- the pipelined client ----------------------------------------------
 * Three threads and two connections: the claimer claims the next batch
 * while the runner runs one, and the completer completes run batches, as
 * the library's runtime keeps a buffer and completes in the background. */

typedef struct hbatch {
	struct hbatch *next;
	char *body; /* the claim reply the jobs point into */
	hjob *jobs;
	int n, cap;
} hbatch;

typedef struct hpipe {
	hclient *cl;
	const hbuf *claim;
	hconn claims, completes;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	hbatch *ready;     /* claimed, not yet run: at most one */
	hbatch *done;      /* run, not yet completed (a stack) */
	int claimer_ended; /* nothing more will be ready */
	int runner_ended;  /* nothing more will be done */
} hpipe;

static void batch_free(hbatch *b)
{
	if (b) {
		free(b->body);
		free(b->jobs);
		free(b);
	}
}

static void *claimer_main(void *arg)
{
	hpipe *p = arg;
	hbatch *b = NULL;
	while (atomic_load(&p->cl->t->go) == 1) {
		if (!b && !(b = calloc(1, sizeof(*b)))) {
			snprintf(p->cl->err, sizeof(p->cl->err), "out of memory");
			client_failed(p->cl);
		}
		b->n = claim_jobs(p->cl, &p->claims, p->claim, &b->jobs, &b->cap, &b->body);
		if (b->n < 0)
			client_failed(p->cl);
		if (!b->n)
			continue;
		pthread_mutex_lock(&p->mu);
		while (p->ready)
			pthread_cond_wait(&p->cv, &p->mu);
		p->ready = b;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		b = NULL;
	}
	batch_free(b);
	pthread_mutex_lock(&p->mu);
	p->claimer_ended = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void *completer_main(void *arg)
{
	hpipe *p = arg;
	hbuf buf = {0};
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->done && !p->runner_ended)
			pthread_cond_wait(&p->cv, &p->mu);
		hbatch *list = p->done;
		p->done = NULL;
		int last = p->runner_ended;
		pthread_mutex_unlock(&p->mu);
		for (hbatch *b = list, *next; b; b = next) {
			next = b->next;
			if (complete(p->cl, &p->completes, b->jobs, b->n, &buf))
				client_failed(p->cl);
			batch_free(b);
		}
		if (last && !list)
			break;
	}
	hbuf_free(&buf);
	return NULL;
}

/* The runner: takes each claimed batch, runs it, hands it on, until the
 * claimer has ended and nothing is left (what it claimed at the end runs
 * too, so no job is left claimed). */
static void client_pipelined(hclient *cl, hconn *c, const hbuf *claim)
{
	hpipe p = {.cl = cl, .claim = claim, .claims = *c};
	pthread_t claimer, completer;
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	hconn_init(&p.completes, cl->t->http_port);
	if (connect_early(cl, &p.completes)) {
		client_failed(cl);
		hconn_close(&p.completes);
		return;
	}
	double start = now_s();
	pthread_create(&claimer, NULL, claimer_main, &p);
	pthread_create(&completer, NULL, completer_main, &p);
	for (;;) {
		pthread_mutex_lock(&p.mu);
		while (!p.ready && !p.claimer_ended)
			pthread_cond_wait(&p.cv, &p.mu);
		hbatch *b = p.ready;
		p.ready = NULL;
		pthread_cond_broadcast(&p.cv);
		pthread_mutex_unlock(&p.mu);
		if (!b)
			break;
		run_jobs(cl, b->jobs, b->n);
		pthread_mutex_lock(&p.mu);
		b->next = p.done;
		p.done = b;
		pthread_cond_broadcast(&p.cv);
		pthread_mutex_unlock(&p.mu);
	}
	pthread_mutex_lock(&p.mu);
	p.runner_ended = 1;
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	pthread_join(claimer, NULL);
	pthread_join(completer, NULL);
	cl->total_s = now_s() - start;
	*c = p.claims;
	hconn_close(&p.completes);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&p.mu);
}

static void *client_main(void *arg)
{
	hclient *cl = arg;
	hconn c;
	hbuf claim = {0};
	hconn_init(&c, cl->t->http_port);
	if (claim_body(cl, &claim) || connect_early(cl, &c)) {
		client_failed(cl);
		hconn_close(&c);
		hbuf_free(&claim);
		return NULL;
	}
	atomic_store(&cl->state, 1);
	while (atomic_load(&cl->t->go) == 0)
		sleep_ms(1);
	if (cl->t->sc.pipeline)
		client_pipelined(cl, &c, &claim);
	else
		client_plain(cl, &c, &claim);
	hconn_close(&c);
	hbuf_free(&claim);
	return NULL;
}

int httpworker_main(tally *t, int idx)
{
	const scenario *sc = &t->sc;
	proc_report *pr = &t->procs[idx];
	int n = scenario_clients_of(sc, idx);
	hclient *cls = calloc((size_t)(n > 0 ? n : 1), sizeof(*cls));
	int started = 0, rc = 0;
	if (!cls || n <= 0) {
		snprintf(pr->error, sizeof(pr->error), "worker %d: %s", idx,
			 cls ? "no clients" : "out of memory");
		free(cls);
		return 1;
	}
	for (; started < n; started++) {
		cls[started].t = t;
		cls[started].proc = idx;
		cls[started].idx = started;
		if (pthread_create(&cls[started].th, NULL, client_main, &cls[started])) {
			snprintf(pr->error, sizeof(pr->error), "worker %d: cannot start client %d",
				 idx, started);
			atomic_store(&t->go, 2); /* nothing runs without every client */
			rc = 1;
			break;
		}
	}
	/* ready once every client holds its connection */
	for (int ready = 0; !rc && ready < started;) {
		ready = 0;
		for (int i = 0; i < started; i++) {
			int s = atomic_load(&cls[i].state);
			if (s < 0) {
				snprintf(pr->error, sizeof(pr->error), "worker %d client %d: %s",
					 idx, i, cls[i].err);
				rc = 1;
				break;
			}
			ready += s == 1;
		}
		if (!rc && ready < started)
			sleep_ms(1);
	}
	if (rc) {
		atomic_store(&pr->state, -1);
		_exit(1); /* the clients may still wait on the go flag */
	}
	atomic_store(&pr->state, 1);
	double busy = 0, total = 0, claim_s = 0;
	for (int i = 0; i < started; i++) {
		pthread_join(cls[i].th, NULL);
		if (atomic_load(&cls[i].state) < 0 && !rc) {
			snprintf(pr->error, sizeof(pr->error), "worker %d client %d: %s", idx, i,
				 cls[i].err);
			rc = 1;
		}
		busy += cls[i].busy_s;
		total += cls[i].total_s;
		pr->claims += cls[i].claims;
		pr->lost += cls[i].lost;
		pr->retries += cls[i].retries;
		claim_s += cls[i].claim_s;
	}
	pr->slot_idle_ratio = total > 0 ? 1 - busy / total : 0;
	pr->claim_rtt_ms = pr->claims ? claim_s * 1000 / (double)pr->claims : 0;
	free(cls);
	return rc;
}

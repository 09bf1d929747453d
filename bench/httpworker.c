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
	uint64_t claims, retries, lost;
	double claim_s; /* sum of claim round trips that brought jobs */
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

static void *client_main(void *arg)
{
	hclient *cl = arg;
	tally *t = cl->t;
	const scenario *sc = &t->sc;
	hconn c;
	hbuf claim = {0}, done = {0};
	hjob *jobs = NULL;
	int cap = 0;
	char *body;
	size_t len;
	hconn_init(&c, t->http_port);
	hbuf_printf(&claim, "{\"worker\":\"bench-%d-%d\",\"types\":[", cl->proc, cl->idx);
	for (int i = 0; i < sc->ntypes; i++)
		hbuf_printf(&claim, "%s{\"type\":\"%s\",\"limit\":%d}", i ? "," : "",
			    sc->types[i].name, sc->types[i].claim_batch);
	if (hbuf_printf(&claim, "],\"wait_ms\":%lld,\"start\":true}", (long long)sc->wait_ms)) {
		snprintf(cl->err, sizeof(cl->err), "out of memory");
		goto fail;
	}
	/* one request to open the connection before the phase starts */
	int st = hconn_request(&c, "GET", "/healthz", t->http_token, NULL, 0, &body, &len, cl->err,
			       sizeof(cl->err));
	if (st != 200) {
		if (st > 0)
			snprintf(cl->err, sizeof(cl->err), "GET /healthz: status %d", st);
		goto fail;
	}
	atomic_store(&cl->state, 1);
	while (atomic_load(&t->go) == 0)
		sleep_ms(1);
	double start = now_s();
	while (atomic_load(&t->go) == 1) {
		int64_t t0 = mono_us();
		st = hconn_request(&c, "POST", "/v1/claim", t->http_token, claim.p, claim.len,
				   &body, &len, cl->err, sizeof(cl->err));
		int64_t t1 = mono_us();
		if (st < 0)
			goto fail;
		if (st == 503) { /* a shard or a move: Retry-After, in short */
			cl->retries++;
			sleep_ms(100);
			continue;
		}
		int n = st == 200 ? parse_claim(sc, body, &jobs, &cap) : -1;
		if (n < 0) {
			snprintf(cl->err, sizeof(cl->err), "POST /v1/claim: status %d: %.300s", st,
				 body);
			goto fail;
		}
		count(&t->claims, 1);
		cl->claims++;
		if (!n) {
			count(&t->claims_empty, 1);
			continue;
		}
		/* only claims that brought jobs are timed: an empty one is a long
		 * poll that ran out */
		cl->claim_s += (double)(t1 - t0) / 1e6;
		hist_record(&t->claim_rtt, (uint64_t)(t1 - t0));
		count(&t->claimed, (uint64_t)n);
		tally_first(&t->first_claim, t0);
		tally_last(&t->last_claim, t1);
		/* start: true: the claim started them (as the library's tick does) */
		hist_record(&t->start_rtt, (uint64_t)(t1 - t0));
		count(&t->starts, 1);
		count(&t->started, (uint64_t)n);
		tally_first(&t->first_start, t0);
		tally_last(&t->last_start, t1);
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
			job_execute(&sc->types[j->type_idx], j->id);
			count(&t->handled, 1);
		}
		cl->busy_s += now_s() - b0;
		/* the reply buffer holds the workers' strings: complete before
		 * the next request reuses it */
		if (complete(cl, &c, jobs, n, &done))
			goto fail;
	}
	cl->total_s = now_s() - start;
	hconn_close(&c);
	hbuf_free(&claim);
	hbuf_free(&done);
	free(jobs);
	return NULL;
fail:
	if (atomic_load(&cl->state) == 1) {
		/* during the run: the process ends, and the bench says why */
		proc_report *pr = &t->procs[cl->proc];
		snprintf(pr->error, sizeof(pr->error), "worker %d client %d: %s", cl->proc, cl->idx,
			 cl->err);
		atomic_store(&pr->state, -1);
		_exit(1);
	}
	atomic_store(&cl->state, -1);
	hconn_close(&c);
	hbuf_free(&claim);
	hbuf_free(&done);
	free(jobs);
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

/* producer.c - producer threads: batches through sq_enqueue (or, with
 * [producers] in_flight > 1, through an sq_enqueuer that keeps that many
 * under way), paced to the scenario's rate, each job stamped with the wall
 * clock of its enqueue. */
#include "producer.h"
#include "http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct producer {
	producer_set *set;
	int idx;
	_Atomic int failed;
	char err[1024];
	/* closed by producers_join, after the phase: a shard backend's exit
	 * costs the servers a few ms of CPU each (unmapping the shared buffers
	 * it touched), and four producers closing their four shard
	 * connections while their last jobs are being claimed held those
	 * claims up by 15-40 ms (docs/operations.md, "Connections") */
	sq_client *client;
	sq_enqueuer *enq; /* [producers] in_flight > 1: the batches go here */
} producer;

/* A batch handed to the enqueuer: when it was sent, for the round trip. */
typedef struct in_flight {
	producer *p;
	int64_t t0;
} in_flight;

/* The enqueuer's callback: the batch's jobs counted as the synchronous
 * path counts them, its round trip from the send to this call. */
static void batch_done(void *arg, sq_status st, const sq_enqueue_result *res, size_t n,
		       const sq_error *err)
{
	in_flight *f = arg;
	producer *p = f->p;
	tally *t = p->set->t;
	int64_t t1 = mono_us();
	if (st != SQ_OK) {
		snprintf(p->err, sizeof(p->err), "producer %d: %s", p->idx, err->msg);
		atomic_store(&p->failed, 1);
	}
	uint64_t ins = 0;
	for (size_t i = 0; i < n; i++)
		ins += res[i].outcome == SQ_ENQ_INSERTED;
	atomic_fetch_add(&t->enqueued, ins);
	atomic_fetch_add(&t->enq_calls, 1);
	hist_record(&t->enq_rtt, (uint64_t)(t1 - f->t0));
	tally_first(&t->first_enq, f->t0);
	tally_last(&t->last_enq, t1);
	free(f);
}

/* One batch through the enqueuer (returns once a lane has room); 0, or
 * -1 with p->err set. */
static int send_batch(producer *p, const sq_job_spec *specs, int64_t n, int64_t t0)
{
	sq_error err;
	in_flight *f = malloc(sizeof(*f));
	if (!f) {
		snprintf(p->err, sizeof(p->err), "producer %d: out of memory", p->idx);
		return -1;
	}
	f->p = p;
	f->t0 = t0;
	if (sq_enqueue_send(p->enq, specs, (size_t)n, batch_done, f, &err) != SQ_OK) {
		free(f);
		snprintf(p->err, sizeof(p->err), "producer %d: %s", p->idx, err.msg);
		return -1;
	}
	return 0;
}

/* One batch through shardqd: POST /v1/jobs; the jobs inserted, or -1. */
static int64_t enqueue_http(producer *p, hconn *hc, hbuf *b, int64_t first, int64_t n, int64_t at)
{
	const scenario *sc = p->set->sc;
	tally *t = p->set->t;
	char *body;
	size_t len;
	hbuf_reset(b);
	hbuf_put(b, "{\"jobs\":[", 9);
	for (int64_t i = 0; i < n; i++) {
		int64_t job = first + i;
		hbuf_printf(b, "%s{\"type\":\"%s\",", i ? "," : "",
			    sc->types[scenario_type_of(sc, (uint64_t)job)].name);
		if (sc->keys)
			hbuf_printf(b, "\"key\":\"k%lld\",", (long long)job);
		hbuf_printf(b, "\"params\":{\"t\":%lld}}", (long long)at);
	}
	if (hbuf_put(b, "]}", 2)) {
		snprintf(p->err, sizeof(p->err), "producer %d: out of memory", p->idx);
		return -1;
	}
	int st = hconn_request(hc, "POST", "/v1/jobs", t->http_token, b->p, b->len, &body, &len,
			       p->err, sizeof(p->err));
	if (st != 200) {
		if (st > 0)
			snprintf(p->err, sizeof(p->err),
				 "producer %d: POST /v1/jobs: status %d: %.300s", p->idx, st, body);
		return -1;
	}
	int64_t ins = 0;
	for (const char *q = body; (q = strstr(q, "\"outcome\":\"inserted\"")) != NULL; q += 20)
		ins++;
	return ins;
}

static void *producer_main(void *arg)
{
	producer *p = arg;
	producer_set *ps = p->set;
	const scenario *sc = ps->sc;
	tally *t = ps->t;
	sq_client *c = NULL;
	sq_error err;
	int b = sc->batch;
	sq_job_spec *specs = calloc((size_t)b, sizeof(*specs));
	sq_enqueue_result *res = calloc((size_t)b, sizeof(*res));
	char(*keys)[24] = sc->keys ? calloc((size_t)b, 24) : NULL;
	char params[48];
	double rate = sc->rate > 0 ? sc->rate / ps->n : 0;
	int64_t sent = 0;
	hconn hc;
	hbuf hb = {0};
	hconn_init(&hc, t->http_port);
	if (!specs || !res || (sc->keys && !keys)) {
		snprintf(p->err, sizeof(p->err), "producer %d: out of memory", p->idx);
		p->failed = 1;
		pace_join(&ps->pace, NULL);
		goto out;
	}
	if (!sc->producers_http && sc->in_flight > 1 &&
	    sq_enqueuer_open(ps->cfg, sc->in_flight, 0, &p->enq, &err) != SQ_OK) {
		snprintf(p->err, sizeof(p->err), "producer %d: %s", p->idx, err.msg);
		p->failed = 1;
		pace_join(&ps->pace, NULL);
		goto out;
	}
	if (!sc->producers_http && !p->enq && sq_client_open(ps->cfg, 0, &c, &err) != SQ_OK) {
		snprintf(p->err, sizeof(p->err), "producer %d: %s", p->idx, err.msg);
		p->failed = 1;
		pace_join(&ps->pace, NULL);
		goto out;
	}
	int64_t origin = pace_join(&ps->pace, &ps->stop);
	tally_warmup_from(t, origin, sc->warmup_ms);
	while (!atomic_load(&ps->stop)) {
		if (ps->until && mono_us() >= ps->until)
			break;
		if (rate > 0)
			pace_sleep_until(pace_due(&ps->pace, origin, p->idx, sent, rate, b));
		tally_hold_depth(t, sc->depth, b, &ps->stop);
		int64_t first = atomic_fetch_add(&ps->next_job, b);
		if (first >= ps->total)
			break;
		int64_t n = ps->total - first < b ? ps->total - first : b;
		for (int64_t i = 0; i < n; i++) {
			int64_t job = first + i;
			memset(&specs[i], 0, sizeof(specs[i]));
			specs[i].type = sc->types[scenario_type_of(sc, (uint64_t)job)].name;
			specs[i].params = params;
			if (keys) {
				snprintf(keys[i], 24, "k%lld", (long long)job);
				specs[i].key = keys[i];
			}
		}
		int64_t t0 = mono_us();
		if (sc->producers_http) {
			int64_t ins = enqueue_http(p, &hc, &hb, first, n, wall_us());
			int64_t t1 = mono_us();
			if (ins < 0) {
				p->failed = 1;
				break;
			}
			atomic_fetch_add(&t->enqueued, (uint64_t)ins);
			atomic_fetch_add(&t->enq_calls, 1);
			hist_record(&t->enq_rtt, (uint64_t)(t1 - t0));
			tally_first(&t->first_enq, t0);
			tally_last(&t->last_enq, t1);
			sent += n;
			continue;
		}
		snprintf(params, sizeof(params), "{\"t\":%lld}", (long long)wall_us());
		if (p->enq) {
			if (send_batch(p, specs, n, t0) || atomic_load(&p->failed)) {
				p->failed = 1;
				break;
			}
			sent += n;
			continue;
		}
		if (sq_enqueue(c, specs, (size_t)n, res, &err) != SQ_OK) {
			snprintf(p->err, sizeof(p->err), "producer %d: %s", p->idx, err.msg);
			p->failed = 1;
			break;
		}
		int64_t t1 = mono_us();
		uint64_t ins = 0;
		for (int64_t i = 0; i < n; i++)
			ins += res[i].outcome == SQ_ENQ_INSERTED;
		atomic_fetch_add(&t->enqueued, ins);
		atomic_fetch_add(&t->enq_calls, 1);
		hist_record(&t->enq_rtt, (uint64_t)(t1 - t0));
		tally_first(&t->first_enq, t0);
		tally_last(&t->last_enq, t1);
		sent += n;
	}
out:
	sq_enqueuer_close(p->enq); /* the batches under way finish first */
	p->enq = NULL;
	hconn_close(&hc);
	hbuf_free(&hb);
	p->client = c;
	free(specs);
	free(res);
	free(keys);
	atomic_fetch_sub(&ps->running, 1);
	return NULL;
}

int producers_start(producer_set *ps, const scenario *sc, const sq_config *cfg, tally *t,
		    int64_t total, int64_t until_us, char *err, size_t errlen)
{
	memset(ps, 0, sizeof(*ps));
	ps->sc = sc;
	ps->cfg = cfg;
	ps->t = t;
	ps->n = sc->producers;
	ps->total = total > 0 ? total : INT64_MAX;
	ps->until = until_us;
	pace_init(&ps->pace, sc->producers);
	if (!ps->n)
		return 0;
	ps->threads = calloc((size_t)ps->n, sizeof(*ps->threads));
	ps->p = calloc((size_t)ps->n, sizeof(*ps->p));
	if (!ps->threads || !ps->p) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < ps->n; i++) {
		ps->p[i].set = ps;
		ps->p[i].idx = i;
		atomic_fetch_add(&ps->running, 1);
		if (pthread_create(&ps->threads[i], NULL, producer_main, &ps->p[i])) {
			atomic_fetch_sub(&ps->running, 1);
			atomic_store(&ps->stop, 1);
			for (int k = 0; k < i; k++) {
				pthread_join(ps->threads[k], NULL);
				sq_client_close(ps->p[k].client);
			}
			free(ps->threads);
			free(ps->p);
			ps->threads = NULL;
			ps->p = NULL;
			snprintf(err, errlen, "cannot start producer thread %d", i);
			return -1;
		}
	}
	return 0;
}

int producers_running(producer_set *ps)
{
	return atomic_load(&ps->running);
}

int producers_failed(producer_set *ps)
{
	int n = 0;
	for (int i = 0; ps->p && i < ps->n; i++)
		n += atomic_load(&ps->p[i].failed);
	return n;
}

void producers_stop(producer_set *ps)
{
	atomic_store(&ps->stop, 1);
}

int producers_join(producer_set *ps, char *err, size_t errlen)
{
	int rc = 0;
	for (int i = 0; ps->threads && i < ps->n; i++) {
		pthread_join(ps->threads[i], NULL);
		sq_client_close(ps->p[i].client);
		if (ps->p[i].failed && !rc) {
			snprintf(err, errlen, "%s", ps->p[i].err);
			rc = -1;
		}
	}
	free(ps->threads);
	free(ps->p);
	ps->threads = NULL;
	ps->p = NULL;
	return rc;
}

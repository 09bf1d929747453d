/* enqueuer.c - pipelined enqueue: a producer hands batches over and goes on
 * while up to `in_flight` of them are under way, each on a lane of its own
 * (a thread with its own client, so its own session on every shard); the
 * producer's callback gets each batch's results once its fate is known. A
 * batch runs as sq_enqueue runs it, so every result means what it means
 * there. Above enqueue.c and client.c, which it calls; called through the
 * public API, and by shardqd (router_internal.h). */
#include "enqueue.h"
#include "error.h"
#include "router_internal.h"
#include "shardq.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A batch handed over: its jobs (with copies of their strings) and where
 * its results go. */
typedef struct pending {
	struct pending *next;
	sq_job_spec *jobs;
	char **own; /* the copied strings, three a job */
	sq_enqueue_result *res;
	size_t n;
	sq_enqueue_cb done;
	void *arg;
} pending;

typedef struct lane {
	struct sq_enqueuer *q;
	sq_client *client;
	pthread_t th;
	int started;
	int opened; /* its client's open has returned: open_st */
	sq_status open_st;
	sq_error open_err;
} lane;

struct sq_enqueuer {
	const sq_config *cfg;
	unsigned flags;
	void (*setup)(sq_client *c, void *arg); /* on each lane's client, once open */
	void *setup_arg;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* a batch waits, or the enqueuer closes */
	pthread_cond_t room; /* a batch finished, or a lane opened */
	pending *head, *tail;
	int outstanding; /* handed over and not yet called back */
	int in_flight;
	int closing;
	lane *lanes;
};

static void pending_free(pending *p)
{
	if (!p)
		return;
	for (size_t i = 0; p->own && i < 3 * p->n; i++)
		free(p->own[i]);
	free(p->own);
	free(p->res);
	free(p->jobs);
	free(p);
}

/* A copy of string s into *slot (NULL stays NULL); -1 when out of memory. */
static int copy_str(const char *s, char **slot, const char **to)
{
	*to = NULL;
	if (!s)
		return 0;
	if (!(*slot = strdup(s)))
		return -1;
	*to = *slot;
	return 0;
}

/* The batch with copies of everything the caller's specs point to. */
static pending *pending_make(const sq_job_spec *jobs, size_t n, sq_enqueue_cb done, void *arg)
{
	pending *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n = n;
	p->done = done;
	p->arg = arg;
	p->jobs = malloc(n * sizeof(*p->jobs));
	p->own = calloc(3 * n, sizeof(*p->own));
	p->res = calloc(n, sizeof(*p->res));
	if (!p->jobs || !p->own || !p->res) {
		pending_free(p);
		return NULL;
	}
	memcpy(p->jobs, jobs, n * sizeof(*jobs));
	for (size_t i = 0; i < n; i++)
		if (copy_str(jobs[i].type, &p->own[3 * i], &p->jobs[i].type) ||
		    copy_str(jobs[i].key, &p->own[3 * i + 1], &p->jobs[i].key) ||
		    copy_str(jobs[i].params, &p->own[3 * i + 2], &p->jobs[i].params)) {
			pending_free(p);
			return NULL;
		}
	return p;
}

/* The next batch for a lane, or NULL once the enqueuer closes and none
 * is left. */
static pending *next_batch(sq_enqueuer *q)
{
	pthread_mutex_lock(&q->mu);
	while (!q->head && !q->closing)
		pthread_cond_wait(&q->wake, &q->mu);
	pending *p = q->head;
	if (p) {
		q->head = p->next;
		if (!q->head)
			q->tail = NULL;
	}
	pthread_mutex_unlock(&q->mu);
	return p;
}

/* One batch on a lane's client, and its callback. */
static void run_batch(lane *l, pending *p)
{
	sq_error err;
	memset(&err, 0, sizeof(err));
	/* checked at the send */
	sq_status st = sq_enqueue_checked(l->client, p->jobs, p->n, p->res, &err);
	if (p->done)
		p->done(p->arg, st, p->res, p->n, &err);
}

static void *lane_main(void *arg)
{
	lane *l = arg;
	sq_enqueuer *q = l->q;
	pending *p;
	sq_status st = sq_client_open(q->cfg, q->flags, &l->client, &l->open_err);
	if (st == SQ_OK && q->setup)
		q->setup(l->client, q->setup_arg);
	pthread_mutex_lock(&q->mu);
	l->open_st = st;
	l->opened = 1;
	pthread_cond_broadcast(&q->room);
	pthread_mutex_unlock(&q->mu);
	if (st != SQ_OK)
		return NULL;
	while ((p = next_batch(q)) != NULL) {
		run_batch(l, p);
		pending_free(p);
		pthread_mutex_lock(&q->mu);
		q->outstanding--;
		pthread_cond_broadcast(&q->room);
		pthread_mutex_unlock(&q->mu);
	}
	return NULL;
}

static void stop_lanes(sq_enqueuer *q)
{
	pthread_mutex_lock(&q->mu);
	q->closing = 1;
	pthread_cond_broadcast(&q->wake);
	pthread_mutex_unlock(&q->mu);
	for (int i = 0; i < q->in_flight; i++) {
		if (q->lanes[i].started)
			pthread_join(q->lanes[i].th, NULL);
		sq_client_close(q->lanes[i].client);
	}
}

/* Waits for every started lane's client to be opened; the first lane's
 * error, or SQ_OK. */
static sq_status lanes_opened(sq_enqueuer *q, int started, sq_error *err)
{
	sq_status st = SQ_OK;
	pthread_mutex_lock(&q->mu);
	for (int i = 0; i < started; i++) {
		while (!q->lanes[i].opened)
			pthread_cond_wait(&q->room, &q->mu);
		if (q->lanes[i].open_st != SQ_OK && st == SQ_OK) {
			st = q->lanes[i].open_st;
			if (err)
				*err = q->lanes[i].open_err;
		}
	}
	pthread_mutex_unlock(&q->mu);
	return st;
}

sq_status sq_enqueuer_open(const sq_config *cfg, int in_flight, unsigned flags, sq_enqueuer **out,
			   sq_error *err)
{
	return sq_enqueuer_open_setup(cfg, in_flight, flags, NULL, NULL, out, err);
}

sq_status sq_enqueuer_open_setup(const sq_config *cfg, int in_flight, unsigned flags,
				 void (*setup)(sq_client *c, void *arg), void *arg,
				 sq_enqueuer **out, sq_error *err)
{
	sq_status st;
	*out = NULL;
	if (in_flight < 1 || in_flight > SQ_ENQUEUER_MAX_IN_FLIGHT)
		return sq_err(err, SQ_EINVAL,
			      "in_flight is %d; give 1 to %d batches under way at once", in_flight,
			      SQ_ENQUEUER_MAX_IN_FLIGHT);
	sq_enqueuer *q = calloc(1, sizeof(*q));
	if (!q || !(q->lanes = calloc((size_t)in_flight, sizeof(*q->lanes)))) {
		free(q);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	q->cfg = cfg;
	q->flags = flags;
	q->setup = setup;
	q->setup_arg = arg;
	q->in_flight = in_flight;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->wake, NULL);
	pthread_cond_init(&q->room, NULL);
	/* each lane opens its client on its own thread: a shard that does not
	 * answer costs one connect_timeout, not one a lane */
	int started = 0;
	for (; started < in_flight; started++) {
		lane *l = &q->lanes[started];
		l->q = q;
		if (pthread_create(&l->th, NULL, lane_main, l))
			break;
		l->started = 1;
	}
	st = lanes_opened(q, started, err);
	if (st == SQ_OK && started < in_flight)
		st = sq_err(err, SQ_ENOMEM, "cannot start an enqueue thread");
	if (st != SQ_OK) {
		sq_enqueuer_close(q);
		return st;
	}
	*out = q;
	return SQ_OK;
}

sq_status sq_enqueue_send(sq_enqueuer *q, const sq_job_spec *jobs, size_t n, sq_enqueue_cb done,
			  void *arg, sq_error *err)
{
	sq_status st;
	if (n == 0)
		return sq_err(err, SQ_EINVAL, "no jobs: send a batch of 1 or more");
	if ((st = sq_enqueue_check(q->cfg, jobs, n, err)) != SQ_OK)
		return st;
	pending *p = pending_make(jobs, n, done, arg);
	if (!p)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	pthread_mutex_lock(&q->mu);
	while (q->outstanding >= q->in_flight)
		pthread_cond_wait(&q->room, &q->mu);
	q->outstanding++;
	if (q->tail)
		q->tail->next = p;
	else
		q->head = p;
	q->tail = p;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->mu);
	return SQ_OK;
}

void sq_enqueuer_flush(sq_enqueuer *q)
{
	pthread_mutex_lock(&q->mu);
	while (q->outstanding > 0)
		pthread_cond_wait(&q->room, &q->mu);
	pthread_mutex_unlock(&q->mu);
}

void sq_enqueuer_close(sq_enqueuer *q)
{
	if (!q)
		return;
	sq_enqueuer_flush(q);
	stop_lanes(q);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->wake);
	pthread_cond_destroy(&q->room);
	free(q->lanes);
	free(q);
}

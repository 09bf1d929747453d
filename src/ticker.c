/* ticker.c - a thread that runs one function periodically until stopped. */
#include "ticker.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct sq_ticker {
	int64_t (*fn)(void *arg);
	void *arg;
	int64_t first_ms;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
};

/* Waits ms or until stopped; returns 1 when stopped. */
static int wait_ms(sq_ticker *t, int64_t ms)
{
	struct timespec at;
	clock_gettime(CLOCK_MONOTONIC, &at);
	at.tv_sec += (time_t)(ms / 1000);
	at.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (at.tv_nsec >= 1000000000L)
		at.tv_sec++, at.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&t->mu);
	while (!t->stop && pthread_cond_timedwait(&t->cv, &t->mu, &at) == 0)
		;
	int stop = t->stop;
	pthread_mutex_unlock(&t->mu);
	return stop;
}

static void *ticker_main(void *arg)
{
	sq_ticker *t = arg;
	for (int64_t wait = t->first_ms; !wait_ms(t, wait);)
		wait = t->fn(t->arg);
	return NULL;
}

sq_ticker *sq_ticker_start(int64_t (*fn)(void *arg), void *arg, int64_t first_ms)
{
	sq_ticker *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->fn = fn;
	t->arg = arg;
	t->first_ms = first_ms;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&t->mu, NULL);
	if (pthread_create(&t->thread, NULL, ticker_main, t)) {
		pthread_cond_destroy(&t->cv);
		pthread_mutex_destroy(&t->mu);
		free(t);
		return NULL;
	}
	return t;
}

void sq_ticker_stop(sq_ticker *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

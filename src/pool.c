/* pool.c - handler threads of the worker runtime. Handlers never touch the
 * database: they take a task, run it, and hand it back to the loop. */
#include "pool.h"

#include "buf.h"
#include "clock.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The next handed task of a type whose deadline has not passed; the ones
 * whose has go to `stale`. Under the mutex. */
static sq_task *take_handed(sq_pool *p, int type, double now)
{
	sq_task *t;
	while ((t = p->hand_head[type]) != NULL) {
		p->hand_head[type] = t->next;
		if (!p->hand_head[type])
			p->hand_tail[type] = NULL;
		if (now < t->local_until)
			return t;
		t->next = p->stale;
		p->stale = t;
	}
	return NULL;
}

/* A task shorter than this (the pool's running average) is not worth a
 * thread's wake-up of its own: one thread at a time is woken for the
 * queue, and a woken thread that leaves tasks behind wakes the next, so
 * a burst of short tasks is drained mostly by the threads already awake
 * instead of waking every idle one (a futex wake and two context
 * switches each). Longer tasks wake a thread each, as they need one. */
#define SQ_POOL_SHORT_TASK_S 100e-6

/* Under the mutex: wakes an idle thread if the queued tasks want one.
 * Short tasks: one wake-up at a time (never none while tasks wait, so a
 * handler that blocks for once cannot hold the queue up). Long ones: one
 * per queued task. */
static void wake_for_queue(sq_pool *p)
{
	if (!p->todo_head || p->nidle <= p->nwoken)
		return;
	if (p->nwoken >= (p->avg_run_s < SQ_POOL_SHORT_TASK_S ? 1 : p->ntodo))
		return;
	p->nwoken++;
	pthread_cond_signal(&p->cv);
}

static sq_task *take_todo(sq_pool *p)
{
	sq_task *t = p->todo_head;
	p->todo_head = t->next;
	if (!p->todo_head)
		p->todo_tail = NULL;
	p->ntodo--;
	return t;
}

/* The handler's message (buf zeroed before the call, len bytes) as a shard
 * can store it: it ends at its last non-NUL byte even if the handler left no
 * terminator or a NUL inside; bytes that are not UTF-8 become U+FFFD and
 * NULs are dropped (sq_utf8_clean). Cleaned here, on the handler's thread,
 * not by the loop. NULL without memory (the failure is stored without its
 * text). */
static char *keep_error(const char *buf, size_t len)
{
	char clean[SQ_MAX_ERROR_LEN + 1];
	while (len && !buf[len - 1])
		len--;
	size_t n = sq_utf8_clean(clean, sizeof(clean), buf, len);
	char *e = malloc(n + 1);
	if (e)
		memcpy(e, clean, n + 1);
	return e;
}

static void *pool_main(void *arg)
{
	sq_pool *p = arg;
	sq_task *t = NULL;
	char ebuf[SQ_MAX_ERROR_LEN + 1];
	sigset_t all;
	/* signals are the loop's business */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		if (!t) {
			pthread_mutex_lock(&p->mu);
			while (!p->todo_head && !p->quit) {
				p->nidle++;
				pthread_cond_wait(&p->cv, &p->mu);
				p->nidle--;
				if (p->nwoken > 0) /* a spurious wake-up may take one */
					p->nwoken--;
			}
			if (!p->todo_head) {
				pthread_mutex_unlock(&p->mu);
				return NULL;
			}
			t = take_todo(p);
			wake_for_queue(p); /* what is left wants another thread */
			pthread_mutex_unlock(&p->mu);
		}

		/* zeroed, so the message ends at its last non-NUL byte even if
		 * the handler left no terminator or a NUL inside it */
		memset(ebuf, 0, sizeof(ebuf));
		t->started = sq_mono_s();
		t->result = t->fn(&t->job, t->arg, ebuf, sizeof(ebuf));
		t->finished = sq_mono_s();
		if (t->result != SQ_RESULT_DONE)
			t->err = keep_error(ebuf, sizeof(ebuf));

		pthread_mutex_lock(&p->mu);
		p->avg_run_s = 0.9 * p->avg_run_s + 0.1 * (t->finished - t->started);
		/* the loop is told only when the list was empty: it takes the whole
		 * list after reading the pipe, so one byte per take is enough */
		int tell = p->done == NULL;
		t->next = p->done;
		p->done = t;
		/* the slot this task frees takes a handed task of its type, else a
		 * queued one (without sleeping in between) */
		sq_task *next = p->quit ? NULL : take_handed(p, t->type, t->finished);
		if (next) {
			/* the loop takes it from `started`; the pool owns the task (and
			 * runs it) until it comes back from take_done */
			t->swapped = 1;
			next->run_next = p->started;
			p->started = next;
		} else if (p->todo_head) {
			next = take_todo(p);
			wake_for_queue(p);
		}
		pthread_mutex_unlock(&p->mu);
		if (tell) {
			char b = 1;
			ssize_t w = write(p->wake_fd, &b, 1); /* a full pipe already wakes */
			(void)w;
		}
		t = next;
	}
}

int sq_pool_start(sq_pool *p, int n, int ntypes, int wake_fd)
{
	memset(p, 0, sizeof(*p));
	p->wake_fd = wake_fd;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->ntypes = ntypes;
	/* taken as long until shown otherwise: the first tasks each get a
	 * thread */
	p->avg_run_s = 1e-3;
	p->hand_head = calloc((size_t)ntypes, sizeof(*p->hand_head));
	p->hand_tail = calloc((size_t)ntypes, sizeof(*p->hand_tail));
	p->threads = calloc((size_t)n, sizeof(pthread_t));
	if (!p->threads || !p->hand_head || !p->hand_tail) {
		free(p->threads);
		free(p->hand_head);
		free(p->hand_tail);
		p->threads = NULL;
		p->hand_head = p->hand_tail = NULL;
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (pthread_create(&p->threads[i], NULL, pool_main, p)) {
			sq_pool_stop(p); /* the threads started so far must not outlive us */
			return -1;
		}
		p->nthreads++;
	}
	return 0;
}

void sq_pool_submit(sq_pool *p, sq_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->todo_tail)
		p->todo_tail->next = t;
	else
		p->todo_head = t;
	p->todo_tail = t;
	p->ntodo++;
	wake_for_queue(p);
	pthread_mutex_unlock(&p->mu);
}

sq_task *sq_pool_take_done(sq_pool *p, sq_task **started, sq_task **stale)
{
	sq_task *d;
	pthread_mutex_lock(&p->mu);
	d = p->done;
	p->done = NULL;
	if (started) {
		*started = p->started;
		p->started = NULL;
	}
	if (stale) {
		*stale = p->stale;
		p->stale = NULL;
	}
	pthread_mutex_unlock(&p->mu);
	return d;
}

void sq_pool_hand(sq_pool *p, sq_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->hand_tail[t->type])
		p->hand_tail[t->type]->next = t;
	else
		p->hand_head[t->type] = t;
	p->hand_tail[t->type] = t;
	pthread_mutex_unlock(&p->mu);
}

sq_task *sq_pool_unhand_one(sq_pool *p, int type)
{
	pthread_mutex_lock(&p->mu);
	sq_task *t = p->hand_head[type];
	if (t) {
		p->hand_head[type] = t->next;
		if (!p->hand_head[type])
			p->hand_tail[type] = NULL;
		t->next = NULL;
	}
	pthread_mutex_unlock(&p->mu);
	return t;
}

sq_task *sq_pool_unhand_all(sq_pool *p)
{
	sq_task *all = NULL, **end = &all;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->ntypes; i++) {
		*end = p->hand_head[i];
		while (*end)
			end = &(*end)->next;
		p->hand_head[i] = p->hand_tail[i] = NULL;
	}
	pthread_mutex_unlock(&p->mu);
	return all;
}

void sq_pool_stop(sq_pool *p)
{
	if (!p->threads)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	free(p->hand_head);
	free(p->hand_tail);
	p->threads = NULL;
	p->hand_head = p->hand_tail = NULL;
}

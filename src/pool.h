/* pool.h - the worker's handler threads, a queue of tasks in and a list of
 * finished tasks out; a byte on wake_fd tells the loop something finished. */
#ifndef SQ_POOL_H
#define SQ_POOL_H

#include "shardq.h"

#include <pthread.h>

typedef struct sq_task {
	struct sq_task *next;     /* in the pool's queues, or the loop's buffer */
	struct sq_task *run_next; /* the loop's list of running tasks */
	sq_job job;               /* owned by the task */
	int type;                 /* index of the worker's type */
	sq_handler fn;
	void *arg;
	sq_job_result result; /* written by the pool thread */
	char err[SQ_MAX_ERROR_LEN + 1];
	double started, finished; /* monotonic seconds, by the pool thread */
	double hb_due;            /* loop: next heartbeat */
	int lost;                 /* loop: the lease was found lost */
	/* loop: a write the shards could not take yet */
	double retry_at;     /* not sent again before this (monotonic seconds) */
	double moving_since; /* first "moving" answer of the current wait, or 0 */
	int moving_tries;    /* "moving" answers in a row: the retry backoff */
	int refused;         /* times a shard refused this job's write on its own */
	int looked;          /* a completion found no row once: the next is final */
} sq_task;

typedef struct sq_pool {
	pthread_t *threads;
	int nthreads;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sq_task *todo_head, *todo_tail;
	sq_task *done;
	int quit;
	int wake_fd;
} sq_pool;

/* Starts n threads; returns 0 or -1. */
int sq_pool_start(sq_pool *p, int n, int wake_fd);
/* Queues a task; the pool owns it until it comes back from take_done. */
void sq_pool_submit(sq_pool *p, sq_task *t);
/* Takes every finished task (a list through ->next), or NULL. */
sq_task *sq_pool_take_done(sq_pool *p);
/* Lets queued tasks run, then joins every thread. */
void sq_pool_stop(sq_pool *p);

double sq_mono_s(void);

#endif

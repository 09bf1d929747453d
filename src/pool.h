/* pool.h - the worker's handler threads, a queue of tasks in and a list of
 * finished tasks out; a byte on wake_fd tells the loop something finished
 * (written when the finished list goes from empty to not empty).
 *
 * Hand-off: the loop may also hand the pool buffered tasks of a type
 * (sq_pool_hand). A thread that finishes a task of that type starts the
 * next one at once, without waiting for the loop (which may be waiting on
 * the shards), if the task's local deadline (`local_until`) has not
 * passed; so a type never runs more tasks than the loop started, and a
 * freed slot does not wait a round trip. The loop learns of those starts
 * (and of handed tasks that went stale) when it takes the finished ones. */
#ifndef SQ_POOL_H
#define SQ_POOL_H

#include "shardq.h"

#include <pthread.h>
#include <stdatomic.h>

#define SQ_TASK_MAGIC UINT64_C(0x73715f7461736b21) /* "sq_task!" */

typedef struct sq_task {
	struct sq_task *next;     /* in the pool's queues, or the loop's buffer */
	struct sq_task *run_next; /* the loop's list of running tasks (and the
				     pool's list of tasks it started) */
	struct sq_task *run_prev; /* the loop's list of running tasks, so that a
				     finished task leaves it at once */
	/* SQ_TASK_MAGIC while the task lives, right before its job, so that
	 * sq_job_lease_lost can tell a job it was not meant for */
	uint64_t magic;
	sq_job job; /* owned by the task */
	int type;   /* index of the worker's type */
	sq_handler fn;
	void *arg;
	sq_job_result result; /* written by the pool thread */
	/* the handler's message when it did not return done, as a shard can
	 * store it (pool.c, keep_error; malloc'd), else NULL. Kept out of the
	 * task, so that a task is a small allocation */
	char *err;
	double started, finished; /* monotonic seconds, by the pool thread */
	double hb_due;            /* loop: next heartbeat */
	int lost;                 /* loop: the lease was found lost */
	/* loop: a write the shards could not take yet */
	double retry_at;     /* not sent again before this (monotonic seconds) */
	double moving_since; /* first "moving" answer of the current wait, or 0 */
	int moving_tries;    /* "moving" answers in a row: the retry backoff */
	int refused;         /* times a shard refused this job's write on its own */
	int looked;          /* a completion found no row once: the next is final */
	/* loop: started on a free slot before its `running` was written (its
	 * start is sent like a heartbeat); local_until: when a buffered task
	 * may no longer be started that way (half its starting lease) */
	int unstarted;
	double local_until;
	int swapped; /* pool: a handed task took this one's slot as it finished */
	/* loop: a write of it is in a shard's round that has not answered
	 * (it goes in no other round until then); orphan: it ended lost
	 * meanwhile, and is freed when the round answers */
	int inflight, orphan;
	/* the lease as this worker knows it: stop_by is when a run must have
	 * stopped (monotonic seconds: from before the write that set the lease
	 * was sent, plus the lease, less a margin; see lease_stop_by in
	 * worker.c); gone: the lease is no longer ours (answered lost, or
	 * stop_by passed). Read by the handler (sq_job_lease_lost), so atomic;
	 * gone never goes back to 0. */
	_Atomic double stop_by;
	atomic_int gone;
	int answered_lost; /* loop: a start or heartbeat of it answered lost */
} sq_task;

typedef struct sq_pool {
	pthread_t *threads;
	int nthreads;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sq_task *todo_head, *todo_tail;
	int ntodo;
	/* threads waiting for a task, and those of them signalled and not yet
	 * up; the running average of a task's time (seconds), which decides
	 * how many to wake (pool.c, wake_for_queue) */
	int nidle, nwoken;
	double avg_run_s;
	sq_task *done;
	/* handed tasks per type (FIFO), the ones threads started from there,
	 * and the ones found past their deadline */
	sq_task **hand_head, **hand_tail;
	int ntypes;
	sq_task *started, *stale;
	int quit;
	int wake_fd;
} sq_pool;

/* Starts n threads for tasks of ntypes types; returns 0 or -1. */
int sq_pool_start(sq_pool *p, int n, int ntypes, int wake_fd);
/* Queues a task; the pool owns it until it comes back from take_done. */
void sq_pool_submit(sq_pool *p, sq_task *t);
/* Takes every finished task (a list through ->next), or NULL; with
 * started and stale (if not NULL), at the same moment, the handed tasks
 * threads started since the last call, and the handed ones they found past
 * their deadline (given back to the loop, not run). */
sq_task *sq_pool_take_done(sq_pool *p, sq_task **started, sq_task **stale);
/* Hands a buffered task to the pool (see above). */
void sq_pool_hand(sq_pool *p, sq_task *t);
/* Takes back the first handed task of a type not yet started, or NULL. */
sq_task *sq_pool_unhand_one(sq_pool *p, int type);
/* Takes back every handed task not yet started (a list, in hand order per
 * type). */
sq_task *sq_pool_unhand_all(sq_pool *p);
/* Lets queued tasks run, then joins every thread; sq_pool_take_done still
 * works afterwards (the finished tasks are there). */
void sq_pool_stop(sq_pool *p);

#endif

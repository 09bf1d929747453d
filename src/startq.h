/* startq.h - a worker's start queue: the claimed jobs of one task type
 * that wait, in `starting`, for a free slot (the worker's buffer). */
#ifndef SQ_STARTQ_H
#define SQ_STARTQ_H

#include "pool.h"

/* A FIFO of tasks linked through sq_task.next, in claim order; a task
 * whose start write failed goes back to its head. Zeroed: empty. */
typedef struct sq_startq {
	sq_task *head, *tail;
	int n; /* tasks queued */
} sq_startq;

/* Appends k at the tail. */
void sq_startq_push(sq_startq *q, sq_task *k);
/* Puts k back at the head (a task taken whose start is to be sent again). */
void sq_startq_unpop(sq_startq *q, sq_task *k);
/* Takes the head, or NULL when empty. */
sq_task *sq_startq_pop(sq_startq *q);
/* Which tasks a take or a count is about (NULL: any): nonzero for those. */
typedef int (*sq_startq_pick)(const sq_task *k, const void *arg);
/* Takes the first task whose start may be sent at `now` (retry_at passed:
 * not waiting on a moving partition or a retry) and that pick accepts;
 * with fresh, one that may also start without a written start (now <
 * local_until). NULL if none. */
sq_task *sq_startq_take(sq_startq *q, double now, int fresh, sq_startq_pick pick, const void *arg);
/* The tasks whose start may be sent at `now` (see sq_startq_take). */
int sq_startq_ready(const sq_startq *q, double now, sq_startq_pick pick, const void *arg);

#endif

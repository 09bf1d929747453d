/* startq.c - a worker's start queue: claimed jobs waiting for a free slot
 * (see startq.h). */
#include "startq.h"

#include <stddef.h>

void sq_startq_push(sq_startq *q, sq_task *k)
{
	k->next = NULL;
	if (q->tail)
		q->tail->next = k;
	else
		q->head = k;
	q->tail = k;
	q->n++;
}

void sq_startq_unpop(sq_startq *q, sq_task *k)
{
	k->next = q->head;
	q->head = k;
	if (!q->tail)
		q->tail = k;
	q->n++;
}

sq_task *sq_startq_pop(sq_startq *q)
{
	sq_task *k = q->head;
	if (!k)
		return NULL;
	q->head = k->next;
	if (!q->head)
		q->tail = NULL;
	q->n--;
	return k;
}

sq_task *sq_startq_take(sq_startq *q, double now, int fresh, sq_startq_pick pick, const void *arg)
{
	sq_task *prev = NULL;
	for (sq_task *k = q->head; k; prev = k, k = k->next)
		if (k->retry_at <= now && (!fresh || now < k->local_until) &&
		    (!pick || pick(k, arg))) {
			if (prev)
				prev->next = k->next;
			else
				q->head = k->next;
			if (q->tail == k)
				q->tail = prev;
			q->n--;
			return k;
		}
	return NULL;
}

int sq_startq_ready(const sq_startq *q, double now, sq_startq_pick pick, const void *arg)
{
	int n = 0;
	for (const sq_task *k = q->head; k; k = k->next)
		n += k->retry_at <= now && (!pick || pick(k, arg));
	return n;
}

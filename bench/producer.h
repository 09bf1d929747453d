/* producer.h - producer threads of the shardq phase: each with its own
 * sq_client, enqueueing batches through sq_enqueue at the scenario's rate
 * (or as fast as it goes), each job's params carrying its enqueue time. */
#ifndef BENCH_PRODUCER_H
#define BENCH_PRODUCER_H

#include "pace.h"
#include "tally.h"

#include <pthread.h>
#include <shardq.h>

typedef struct producer_set {
	const scenario *sc;
	const sq_config *cfg;
	tally *t;
	int n;
	pthread_t *threads;
	struct producer *p;
	_Atomic int64_t next_job; /* the next job number to hand out */
	int64_t total;            /* jobs to enqueue; INT64_MAX: until `until` */
	int64_t until;            /* monotonic us when a timed run stops; 0: none */
	pace pace;                /* rate-limited: the producers' schedule */
	_Atomic int running;
	_Atomic int stop;
} producer_set;

/* Starts sc->producers threads enqueueing `total` jobs (or until
 * `until_us`, monotonic); 0, or -1 with a message. */
int producers_start(producer_set *ps, const scenario *sc, const sq_config *cfg, tally *t,
		    int64_t total, int64_t until_us, char *err, size_t errlen);
/* Threads still enqueueing. */
int producers_running(producer_set *ps);
/* Threads that stopped on an error. */
int producers_failed(producer_set *ps);
/* Asks them to stop after the current batch. */
void producers_stop(producer_set *ps);
/* Joins every thread and frees; returns the first error (0 if none). */
int producers_join(producer_set *ps, char *err, size_t errlen);

#endif

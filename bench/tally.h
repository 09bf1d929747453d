/* tally.h - what a phase counts and measures, in memory shared with the
 * worker processes: counters, first/last times, per-shard and per-type
 * counts, and the latency histograms. Every field is atomic, so handler
 * threads of every process record into it directly. */
#ifndef BENCH_TALLY_H
#define BENCH_TALLY_H

#include "hist.h"
#include "scenario.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TALLY_CONFIG_MAX 16384
#define TALLY_MAX_PROCS  64

/* What a worker process reports when it exits. */
typedef struct proc_report {
	/* 0 starting, 1 ready (waiting for go), 3 running (a library worker
	 * whose loop has done its first tick), 2 done, -1 failed */
	_Atomic int state;
	uint64_t claims;
	double claim_rtt_ms; /* the runtime's moving average */
	double slot_idle_ratio;
	uint64_t lost, released;
	uint64_t retries; /* HTTP workers: requests sent again after a 503 */
	char error[512];
} proc_report;

typedef struct tally {
	/* written by the parent before the workers start */
	scenario sc;
	char config[TALLY_CONFIG_MAX]; /* the generated shardq config */
	int http_port;                 /* shardqd's, when the phase runs it */
	char http_token[72];           /* its bearer token */
	_Atomic int go;                /* 1: workers may start; 2: stop */

	_Atomic uint64_t enqueued, enq_calls;
	_Atomic uint64_t claimed, claims, claims_empty;
	_Atomic uint64_t started, starts;
	_Atomic uint64_t completed, completes, lost;
	_Atomic uint64_t handled, handled_backlog, retried;
	_Atomic uint64_t reruns; /* handler runs of a job's attempt 2 or later */
	/* monotonic microseconds; 0 = not yet */
	_Atomic int64_t first_enq, last_enq, first_claim, last_claim, first_start, last_start,
		first_complete, last_complete;
	_Atomic uint64_t per_shard[SC_MAX_SHARDS];
	_Atomic uint64_t per_type[SC_MAX_TYPES];
	hist e2s; /* enqueue (producer's clock) to the handler's start */
	/* jobs enqueued before this (wall clock, us) are the warm-up's: their
	 * enqueue-to-start goes to e2s_warm instead (0: no warm-up) */
	_Atomic int64_t e2s_from;
	hist e2s_warm;
	hist claim_rtt; /* one sq_claim call (or one baseline claim query) */
	hist start_rtt, complete_rtt, enq_rtt;
	proc_report procs[TALLY_MAX_PROCS];
} tally;

/* Maps a zeroed tally in shared memory that survives exec: *fd is the
 * descriptor to hand to a child (not close-on-exec). NULL with a message. */
tally *tally_create(int *fd, char *err, size_t errlen);
/* Maps the tally of a parent from its descriptor. */
tally *tally_attach(int fd, char *err, size_t errlen);
void tally_unmap(tally *t);
/* Zeroes the counters and histograms (not sc, config). */
void tally_reset(tally *t);

/* A producer about to enqueue n jobs waits while that would leave more
 * than depth jobs enqueued and not completed (depth 0: no wait), or until
 * *stop is set. */
void tally_hold_depth(tally *t, int64_t depth, int64_t n, _Atomic int *stop);

/* Monotonic and wall clocks in microseconds. */
int64_t mono_us(void);
int64_t wall_us(void);
/* first = min(first, v) if unset or later; last = max(last, v). */
void tally_first(_Atomic int64_t *first, int64_t v);
void tally_last(_Atomic int64_t *last, int64_t v);
/* [run] warmup: the jobs stamped before the producers' origin (monotonic)
 * plus warmup_ms are the warm-up's. Every producer calls it once the pacer
 * has its origin and before it stamps a job; the first call sets it. */
void tally_warmup_from(tally *t, int64_t origin_us, int64_t warmup_ms);

#endif

/* result.h - the figures of one phase (shardq or a baseline) of one step
 * of a run, and of the whole run; filled by the phases, read by the
 * reports. */
#ifndef BENCH_RESULT_H
#define BENCH_RESULT_H

#include "hist.h"
#include "scenario.h"

#include <stddef.h>
#include <stdint.h>

/* One point of the time series (per sample interval). */
typedef struct sample {
	double t;                         /* seconds since the phase started */
	uint64_t enqueued, claimed, done; /* cumulative */
	double done_rate;                 /* jobs/s over the interval */
	double e2s_p50_ms, e2s_p99_ms;    /* over the interval; -1: no sample */
} sample;

/* A statement's share of the shards' time (pg_stat_statements). */
typedef struct stmt_stat {
	char query[160];
	double total_ms;
	uint64_t calls, rows;
	double wal_bytes;
} stmt_stat;

#define PHASE_MAX_STMTS 10

/* shardqd's own figures, scraped from GET /metrics at the end of a phase
 * that ran it (HTTP workers or producers). */
typedef struct daemon_stats {
	int ran;
	int threads;               /* its request threads */
	double cpu_s;              /* its utime + stime over the phase; -1: unknown */
	uint64_t claim_requests;   /* shardqd_claim_requests_total */
	uint64_t claim_statements; /* shardqd_claim_statements_total */
	uint64_t jobs_claimed, released_gone, released_extra, results_lost;
	/* requests and the sum of their times, by endpoint */
	uint64_t req_claim, req_complete, req_enqueue;
	double sum_claim_s, sum_complete_s, sum_enqueue_s;
} daemon_stats;

/* A [rebalance] run (bench/rebalance.c): its stretches, plain running or
 * one rebalance under way. */
enum { RB_BEFORE, RB_ADDING, RB_BETWEEN, RB_DRAINING, RB_AFTER, RB_NWIN };

typedef struct rb_window {
	double t0, t1; /* seconds since the phase began */
	uint64_t done; /* completions within it */
	hist *e2s;     /* enqueue-to-start of the jobs started within it */
	int moves;     /* sets moved (the two rebalance windows) */
	int64_t parts; /* partitions moved */
	int64_t rows;  /* rows copied */
	double stall_max_ms, stall_sum_ms;
	int stalls_over_100ms;
} rb_window;

typedef struct rb_result {
	int ok;
	char error[512];
	rb_window w[RB_NWIN];
} rb_result;

extern const char *const rb_window_names[RB_NWIN];
/* Allocates the windows' histograms; 0 or -1. */
int rb_result_init(rb_result *r);
void rb_result_free(rb_result *r);

typedef struct phase {
	char key[16];    /* "shardq", "a", "b", "c" */
	char title[160]; /* what ran */
	int ran, ok;
	int attempts; /* runs it took (--retry-disturbed) */
	char error[1024];
	int64_t backlog; /* ready jobs preloaded before the phase */
	double preload_s, vacuum_s;
	/* counts */
	uint64_t enqueued, claimed, claims, claims_empty, started, completed, lost, handled;
	uint64_t left_ready, left_other; /* rows left in the queue tables */
	/* windows (seconds) and rates (per second); rate < 0: not applicable */
	double enq_s, claim_s, complete_s, e2e_s;
	double enq_rate, claim_rate, complete_rate, e2e_rate;
	/* latency (microseconds) */
	hist *e2s, *claim_rtt, *enq_rtt, *start_rtt, *complete_rtt;
	hist *e2s_warm; /* enqueue-to-start of the warm-up's jobs ([run] warmup) */
	int nshards;
	uint64_t per_shard[SC_MAX_SHARDS];
	uint64_t per_type[SC_MAX_TYPES];
	double cpu_bench_s, cpu_pg_s; /* -1: not readable */
	double cpu_other_s;           /* the rest of the machine: other load */
	double wall_s;                /* the phase's wall time (for the above) */
	double slot_idle;             /* the runtime's idle slot share (shardq) */
	int via_http;                 /* shardq: workers were HTTP clients of shardqd */
	daemon_stats daemon;
	sample *series;
	size_t nseries, capseries;
	uint64_t reruns;      /* handler runs of a job's attempt 2 or later */
	int64_t live;         /* [rebalance] live jobs that waited throughout */
	struct rb_result *rb; /* a [rebalance] run's windows; NULL: none */
	stmt_stat stmts[PHASE_MAX_STMTS];
	int nstmts;
} phase;

enum { PH_SHARDQ, PH_A, PH_B, PH_C, PH_N };

typedef struct step {
	int64_t backlog;
	double rate; /* offered jobs/s (0: unbounded) */
	phase ph[PH_N];
} step;

typedef struct run_result {
	const scenario *sc;
	char started_at[32]; /* UTC, ISO 8601 */
	char machine[512];   /* CPU model, cores, memory, kernel, PostgreSQL */
	char command[1024];
	char note[256]; /* --note: e.g. the source commit */
	char out_dir[512];
	int nsteps;
	step steps[SC_MAX_STEPS];
} run_result;

/* Allocates a phase's histograms; 0 or -1. */
int phase_init(phase *p, const char *key);
void phase_free(phase *p);
/* Appends a sample; out of memory drops it. */
void phase_add_sample(phase *p, const sample *s);

#endif

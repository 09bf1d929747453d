/* scenario.h - a benchmark scenario: the shards, producers, workers, task
 * mix, backlog, length and baselines, read from an INI file under
 * bench/scenarios/ (every key is documented in bench/scenarios/default.ini). */
#ifndef BENCH_SCENARIO_H
#define BENCH_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#define SC_MAX_TYPES  16
#define SC_MAX_SHARDS 64
#define SC_MAX_STEPS  8

typedef enum exec_kind { EXEC_NOOP = 0, EXEC_FIXED, EXEC_EXP } exec_kind;

typedef struct sc_type {
	char name[65];
	double share;    /* weight in the mix */
	exec_kind exec;  /* how long a handler runs */
	int64_t exec_us; /* fixed value, or the mean of the exponential */
	int threads;     /* handler slots per worker process */
	int claim_batch; /* most jobs of this type one claim asks for */
	int line;
} sc_type;

typedef struct scenario {
	char path[512];
	char name[64];
	char description[512];
	/* [shards] */
	int nshards;
	char host[SC_MAX_SHARDS][64];
	int port[SC_MAX_SHARDS];
	char database[64];
	uint32_t partitions;
	int notify;
	/* [producers] */
	int producers;
	int batch;
	double rate; /* jobs/s over all producers; 0: as fast as they go (the
		      * current step's, of rates[]) */
	int nrates;
	double rates[SC_MAX_STEPS]; /* `rate = A, B, ...`: one step each */
	int keys;                   /* jobs carry unique dedup keys */
	int producers_http;         /* `via = http`: POST /v1/jobs to shardqd */
	int in_flight;              /* `in_flight`: batches under way at once per
				       producer (an sq_enqueuer); 1: sq_enqueue */
	int64_t depth;              /* `depth`: no batch while as many jobs are enqueued and not
			* yet completed (0: no such cap) */
	/* [workers] */
	int processes;
	int min_prefetch;
	int listen;
	int64_t poll_ms;
	int workers_http; /* `via = http`: HTTP clients of shardqd, not sq_worker */
	int clients;      /* HTTP clients over all worker processes */
	int64_t wait_ms;  /* a client's claim wait_ms */
	int pipeline;     /* a client claims its next jobs and completes its last
			   * ones on connections of their own while it runs */
	/* [daemon] (shardqd, when workers or producers go through HTTP) */
	int daemon_threads;
	int64_t daemon_claim_poll_ms;
	/* [type NAME] */
	int ntypes;
	sc_type types[SC_MAX_TYPES];
	/* [run] */
	int64_t jobs;        /* jobs to run; 0 when duration is given */
	int64_t duration_ms; /* producers run this long; 0 when jobs is given */
	/* the enqueue-to-start figures leave out the jobs enqueued this long
	 * after the producers start (reported apart); 0: none left out */
	int64_t warmup_ms;
	int nsteps;
	int64_t backlog[SC_MAX_STEPS]; /* ready jobs preloaded, per step */
	int64_t timeout_ms;            /* a phase that takes longer fails */
	int64_t stall_ms;              /* ... and one with no completion this long */
	int sample_ms;                 /* time series resolution */
	int run_a, run_b, run_c;       /* which baselines run */
	/* [rebalance]: the last shard of `hosts` starts with weight 0 (no
	 * partitions); while producers and workers run, it is rebalanced in
	 * (weight 1), then drained out again (weight 0), with rb_steady_ms of
	 * plain running before, between and after; rb_live keyed jobs of a
	 * type no worker runs wait in the queue and move with their
	 * partitions. The run lasts as long as that takes ([run] jobs and
	 * duration are not given); no baseline runs. */
	int rebalance;
	int64_t rb_live;
	int64_t rb_steady_ms;
	int rb_set_size;
	/* [baselines] */
	int base_workers;   /* connections claiming in (a) and (b) */
	int base_producers; /* connections enqueueing in (a) and (b) */
	int base_claim;     /* jobs per claim in (b) */
	int raw_batch;      /* rows per transaction in (c) */
	int raw_conns;      /* connections in (c) */
	char base_database[64];
} scenario;

/*
 * Reads a scenario file, then applies overrides ("section.key=value", as
 * given with --set; a type's keys as "type NAME.key=value"). On error
 * returns -1 with every problem in errbuf, one per line, as
 * "FILE:LINE: [section] key: what is wrong".
 */
int scenario_load(const char *path, const char *const *overrides, int noverrides, scenario *sc,
		  char *errbuf, size_t errlen);

/* Replaces the shard list by 127.0.0.1:PORT for each comma-separated port;
 * -1 (with a message) on a bad list. */
int scenario_set_ports(scenario *sc, const char *ports, char *errbuf, size_t errlen);

/* Whether the phase needs shardqd (HTTP workers or producers). */
int scenario_uses_daemon(const scenario *sc);

/* HTTP clients of worker process idx (of the processes that run). */
int scenario_clients_of(const scenario *sc, int idx);

/* Worker processes that run: with HTTP workers, no more than clients. */
int scenario_worker_procs(const scenario *sc);

/* Total handler threads of one worker process. */
int scenario_threads(const scenario *sc);

/* The type of job number i: deterministic, in proportion to the shares. */
int scenario_type_of(const scenario *sc, uint64_t i);

/* Text of an execution-time distribution ("noop", "fixed 5ms", "exp 2ms"). */
void scenario_exec_text(const sc_type *t, char *out, size_t outlen);

#endif

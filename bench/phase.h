/* phase.h - the phases of a step: shardq itself and the three baselines,
 * each on fresh databases of the same servers, with the same job count. */
#ifndef BENCH_PHASE_H
#define BENCH_PHASE_H

#include "result.h"
#include "scenario.h"
#include "tally.h"

#include <signal.h>

typedef struct bench_env {
	const scenario *sc;
	tally *t;
	int tally_fd;
	int quiet; /* no progress lines */
	int pgss;  /* collect pg_stat_statements per phase */
	int keep;  /* keep the databases after the run */
	const char *out_dir;
	int pm[SC_MAX_SHARDS]; /* postmaster pid of each server; -1: unknown */
	double quiet_wait_s;   /* before a phase, wait this long at most for */
	double quiet_cores;    /* other load to fall below this many cores */
	volatile sig_atomic_t *interrupted;
} bench_env;

/* Finds the servers' postmasters (for CPU figures); 0, or -1 when a server
 * cannot be reached. */
int env_find_servers(bench_env *env, char *err, size_t errlen);

/* Writes the shardq config the bench uses for the scenario into out. */
int phase_shardq_config(const scenario *sc, char *out, size_t outlen);
/* The same with the last shard's weight (< 0: none written; a [rebalance]
 * run starts it at 0). */
int phase_shardq_config_weight(const scenario *sc, double last_weight, char *out, size_t outlen);

/* Runs shardq: fresh cluster, `backlog` jobs preloaded, worker processes,
 * producers, until the step's jobs are done. Fills ph (ph->ok). */
void phase_shardq(bench_env *env, int64_t backlog, phase *ph);

/* Runs baseline (a) or (b), or (c): enqueues `enq` jobs onto `backlog`
 * preloaded ones and runs until `done` are complete ((c): `done` rows).
 * Fills ph. */
void phase_baseline(bench_env *env, int which, uint64_t enq, uint64_t done, int64_t backlog,
		    phase *ph);

/* Shared by the phases: CPU readings around a phase. */
double env_cpu_servers(const bench_env *env);
/* Machine CPU since all0 (cpu_machine_s) less the phase's bench and server
 * CPU: the load of other processes, which disturbs the figures. */
double env_other_cpu(double all0, const phase *ph);
/* pg_stat_statements of database db, summed over the servers; reset when
 * reset != 0. */
void env_collect_stmts(const bench_env *env, const char *db, int nservers, phase *ph);
int env_reset_stmts(const bench_env *env, const char *db, int nservers);
/* Waits (up to env->quiet_wait_s) until other processes use less than
 * env->quiet_cores; 0 when quiet (or not asked), -1 when it gave up. */
int env_wait_quiet(const bench_env *env);
/* CHECKPOINT on every server, so a phase does not inherit dirty pages. */
void env_checkpoint(const bench_env *env);

#endif

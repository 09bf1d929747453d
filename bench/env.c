/* env.c - what the phases share about the servers: their postmasters (for
 * CPU time), checkpoints between phases, and pg_stat_statements. */
#include "cpu.h"
#include "pgutil.h"
#include "phase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int env_find_servers(bench_env *env, char *err, size_t errlen)
{
	const scenario *sc = env->sc;
	for (int s = 0; s < sc->nshards; s++) {
		PGconn *c = pg_connect(sc->host[s], sc->port[s], "postgres", err, errlen);
		if (!c)
			return -1;
		env->pm[s] = pg_postmaster_pid(c);
		PQfinish(c);
	}
	return 0;
}

double env_cpu_servers(const bench_env *env)
{
	for (int s = 0; s < env->sc->nshards; s++)
		if (env->pm[s] <= 0)
			return -1;
	return cpu_servers_s(env->pm, env->sc->nshards);
}

void env_checkpoint(const bench_env *env)
{
	char err[512];
	for (int s = 0; s < env->sc->nshards; s++)
		if (pg_checkpoint(env->sc->host[s], env->sc->port[s], err, sizeof(err)) &&
		    !env->quiet)
			fprintf(stderr, "shardq-bench: note: %s\n", err);
}

int env_reset_stmts(const bench_env *env, const char *db, int nservers)
{
	char err[512];
	int rc = 0;
	for (int s = 0; s < nservers; s++) {
		PGconn *c = pg_connect(env->sc->host[s], env->sc->port[s], db, err, sizeof(err));
		if (!c || pg_exec(c, "SELECT pg_stat_statements_reset()", err, sizeof(err)))
			rc = -1;
		PQfinish(c);
	}
	return rc;
}

static int by_time(const void *a, const void *b)
{
	const stmt_stat *x = a, *y = b;
	return x->total_ms < y->total_ms ? 1 : x->total_ms > y->total_ms ? -1 : 0;
}

void env_collect_stmts(const bench_env *env, const char *db, int nservers, phase *ph)
{
	enum { MAXS = 64 };
	stmt_stat all[MAXS];
	int n = 0;
	char err[512];
	memset(all, 0, sizeof(all));
	for (int s = 0; s < nservers; s++) {
		PGconn *c = pg_connect(env->sc->host[s], env->sc->port[s], db, err, sizeof(err));
		PGresult *r;
		if (!c)
			continue;
		r = pg_query(c,
			     "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 150), "
			     "total_exec_time, calls, rows, wal_bytes "
			     "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
			     "WHERE d.datname = current_database() "
			     "ORDER BY total_exec_time DESC LIMIT 20",
			     0, NULL, err, sizeof(err));
		for (int i = 0; r && i < PQntuples(r); i++) {
			const char *q = PQgetvalue(r, i, 0);
			int k = 0;
			while (k < n && strcmp(all[k].query, q))
				k++;
			if (k == n) {
				if (n == MAXS)
					continue;
				snprintf(all[n++].query, sizeof(all[0].query), "%s", q);
			}
			all[k].total_ms += atof(PQgetvalue(r, i, 1));
			all[k].calls += strtoull(PQgetvalue(r, i, 2), NULL, 10);
			all[k].rows += strtoull(PQgetvalue(r, i, 3), NULL, 10);
			all[k].wal_bytes += atof(PQgetvalue(r, i, 4));
		}
		PQclear(r);
		PQfinish(c);
	}
	qsort(all, (size_t)n, sizeof(all[0]), by_time);
	ph->nstmts = n < PHASE_MAX_STMTS ? n : PHASE_MAX_STMTS;
	memcpy(ph->stmts, all, (size_t)ph->nstmts * sizeof(all[0]));
}

double env_other_cpu(double all0, const phase *ph)
{
	double all1 = cpu_machine_s();
	if (all0 < 0 || all1 < 0 || ph->cpu_pg_s < 0 || ph->cpu_bench_s < 0)
		return -1;
	double o = all1 - all0 - ph->cpu_bench_s - ph->cpu_pg_s -
		   (ph->daemon.cpu_s > 0 ? ph->daemon.cpu_s : 0);
	return o > 0 ? o : 0;
}

int env_wait_quiet(const bench_env *env)
{
	int64_t deadline = mono_us() + (int64_t)(env->quiet_wait_s * 1e6);
	int noted = 0;
	if (env->quiet_wait_s <= 0)
		return 0;
	for (;;) {
		double all0 = cpu_machine_s(), pg0 = env_cpu_servers(env);
		struct timespec ts = {2, 0};
		nanosleep(&ts, NULL);
		double all1 = cpu_machine_s(), pg1 = env_cpu_servers(env);
		if (all0 < 0 || all1 < 0)
			return 0;
		/* what neither we nor our servers use, per second */
		double other = (all1 - all0 - (pg0 >= 0 && pg1 >= 0 ? pg1 - pg0 : 0)) / 2.0;
		if (other < env->quiet_cores) {
			if (noted && !env->quiet)
				fprintf(stderr,
					"shardq-bench: quiet now (%.2f cores busy elsewhere)\n",
					other);
			return 0;
		}
		if (mono_us() > deadline) {
			if (!env->quiet)
				fprintf(stderr,
					"shardq-bench: note: still %.2f cores busy elsewhere after "
					"waiting %.0f s; running anyway\n",
					other, env->quiet_wait_s);
			return -1;
		}
		if (!noted && !env->quiet)
			fprintf(stderr,
				"shardq-bench: %.2f cores busy elsewhere; waiting for a quiet "
				"machine "
				"(at most %.0f s)\n",
				other, env->quiet_wait_s);
		noted = 1;
	}
}

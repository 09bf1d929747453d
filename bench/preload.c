/* preload.c - fast backlog load: the rows are generated in C and streamed
 * with COPY (text) on one connection per shard, all shards at once. The
 * rows are what sq_enqueue would write for keyless jobs; the preload skips
 * the enqueue statement only to be fast. */
#include "preload.h"
#include "pgutil.h"
#include "tally.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Job numbers come from the cluster's allocator in blocks of this many
 * (shardq_meta.id_block, as in src/client.c); an id is number << 16 |
 * partition. */
#define ID_BLOCK 65536
/* The config default of max_attempts (the generated config leaves it). */
#define MAX_ATTEMPTS 5
#define COPY_CHUNK   (1 << 20)

typedef struct loader {
	const scenario *sc;
	const int *map; /* partition -> shard, copied from the client */
	int shard;
	int64_t first, n; /* job numbers first .. first+n-1 */
	int vacuum;       /* 0: COPY; 1: VACUUM ANALYZE */
	int live;         /* keyed jobs of type PRELOAD_PARKED (preload_live) */
	int64_t rows;
	int failed;
	char err[1024];
} loader;

static int put(PGconn *pc, const char *buf, size_t len, loader *l)
{
	if (PQputCopyData(pc, buf, (int)len) != 1) {
		snprintf(l->err, sizeof(l->err), "shard %d: COPY: %s", l->shard + 1,
			 PQerrorMessage(pc));
		return -1;
	}
	return 0;
}

static void copy_rows(loader *l, PGconn *pc)
{
	const scenario *sc = l->sc;
	uint32_t mask = sc->partitions - 1;
	char *buf = malloc(COPY_CHUNK + 512);
	size_t used = 0;
	PGresult *r;
	if (!buf) {
		snprintf(l->err, sizeof(l->err), "out of memory");
		l->failed = 1;
		return;
	}
	r = PQexec(pc, l->live ? "COPY shardq.jobs (id, partition, task, params, max_attempts, "
				 "active_uid) FROM STDIN"
			       : "COPY shardq.jobs (id, partition, task, params, max_attempts) "
				 "FROM STDIN");
	if (PQresultStatus(r) != PGRES_COPY_IN) {
		snprintf(l->err, sizeof(l->err), "shard %d: cannot start COPY: %s", l->shard + 1,
			 PQerrorMessage(pc));
		PQclear(r);
		free(buf);
		l->failed = 1;
		return;
	}
	PQclear(r);
	for (int64_t j = 0; j < l->n; j++) {
		int64_t u = l->first + j;
		char key[32] = "";
		int klen = l->live ? snprintf(key, sizeof(key), "live-%lld", (long long)j) : 0;
		uint32_t part = l->live ? sq_partition_of_key(key, (size_t)klen, sc->partitions)
					: (uint32_t)(XXH3_64bits(&u, sizeof(u)) & mask);
		if (l->map[part] != l->shard)
			continue;
		int64_t id = (int64_t)(((uint64_t)u << 16) | part);
		used += (size_t)snprintf(
			buf + used, 512, "%lld\t%u\t%s\t{\"b\":1}\t%d", (long long)id, part,
			l->live ? PRELOAD_PARKED
				: sc->types[scenario_type_of(sc, (uint64_t)j)].name,
			MAX_ATTEMPTS);
		used += (size_t)(l->live ? snprintf(buf + used, 512, "\t%s\n", key)
					 : snprintf(buf + used, 512, "\n"));
		l->rows++;
		if (used >= COPY_CHUNK) {
			if (put(pc, buf, used, l))
				break;
			used = 0;
		}
	}
	if (!l->err[0] && used)
		put(pc, buf, used, l);
	free(buf);
	if (PQputCopyEnd(pc, l->err[0] ? "preload failed" : NULL) != 1 && !l->err[0])
		snprintf(l->err, sizeof(l->err), "shard %d: COPY end: %s", l->shard + 1,
			 PQerrorMessage(pc));
	while ((r = PQgetResult(pc)) != NULL) {
		if (PQresultStatus(r) != PGRES_COMMAND_OK && !l->err[0])
			snprintf(l->err, sizeof(l->err), "shard %d: COPY: %s", l->shard + 1,
				 PQerrorMessage(pc));
		PQclear(r);
	}
	l->failed = l->err[0] != 0;
}

static void *loader_main(void *arg)
{
	loader *l = arg;
	const scenario *sc = l->sc;
	PGconn *pc = pg_connect(sc->host[l->shard], sc->port[l->shard], sc->database, l->err,
				sizeof(l->err));
	if (!pc) {
		l->failed = 1;
		return NULL;
	}
	if (l->vacuum)
		l->failed =
			pg_exec(pc, "VACUUM (ANALYZE) shardq.jobs", l->err, sizeof(l->err)) != 0;
	else
		copy_rows(l, pc);
	PQfinish(pc);
	return NULL;
}

/* Takes consecutive blocks of job numbers from the cluster's allocator. */
static int take_numbers(const scenario *sc, int64_t n, int64_t *first, char *err, size_t errlen)
{
	int64_t blocks = (n + ID_BLOCK - 1) / ID_BLOCK;
	char sql[256];
	PGconn *pc = pg_connect(sc->host[0], sc->port[0], sc->database, err, errlen);
	if (!pc)
		return -1;
	snprintf(sql, sizeof(sql),
		 "SELECT min(v), max(v), count(*) FROM (SELECT nextval('shardq_meta.id_block') "
		 "AS v FROM generate_series(1, %lld)) s",
		 (long long)blocks);
	PGresult *r = pg_query(pc, sql, 0, NULL, err, errlen);
	PQfinish(pc);
	if (!r)
		return -1;
	int64_t lo = atoll(PQgetvalue(r, 0, 0)), hi = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	if (hi - lo + 1 != blocks) {
		snprintf(err, errlen,
			 "preload: the id blocks taken are not consecutive (%lld..%lld for %lld); "
			 "is something else enqueueing into database %s?",
			 (long long)lo, (long long)hi, (long long)blocks, sc->database);
		return -1;
	}
	*first = lo * ID_BLOCK;
	return 0;
}

static int run_loaders(const scenario *sc, const int *map, int64_t first, int64_t n, int vacuum,
		       int live, char *err, size_t errlen)
{
	loader *ls = calloc((size_t)sc->nshards, sizeof(*ls));
	pthread_t *th = calloc((size_t)sc->nshards, sizeof(*th));
	int rc = 0, started = 0;
	if (!ls || !th) {
		free(ls);
		free(th);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int s = 0; s < sc->nshards; s++) {
		ls[s] = (loader){sc, map, s, first, n, vacuum, live, 0, 0, ""};
		if (pthread_create(&th[s], NULL, loader_main, &ls[s])) {
			snprintf(err, errlen, "cannot start a preload thread");
			rc = -1;
			break;
		}
		started++;
	}
	for (int s = 0; s < started; s++) {
		pthread_join(th[s], NULL);
		if (ls[s].failed && !rc) {
			snprintf(err, errlen, "preload: %s", ls[s].err);
			rc = -1;
		}
	}
	free(ls);
	free(th);
	return rc;
}

static int preload(const scenario *sc, sq_client *c, int64_t n, int live, double *copy_s,
		   double *vacuum_s, char *err, size_t errlen)
{
	int64_t first, t0, t1;
	*copy_s = *vacuum_s = 0;
	if (n <= 0)
		return 0;
	if (take_numbers(sc, n, &first, err, errlen))
		return -1;
	/* the map, read once: the client is not shared between threads */
	int *map = malloc(sc->partitions * sizeof(int));
	if (!map) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint32_t p = 0; p < sc->partitions; p++)
		map[p] = sq_client_shard_of_partition(c, p);
	t0 = mono_us();
	int rc = run_loaders(sc, map, first, n, 0, live, err, errlen);
	t1 = mono_us();
	*copy_s = (double)(t1 - t0) / 1e6;
	if (!rc)
		rc = run_loaders(sc, map, first, n, 1, live, err, errlen);
	*vacuum_s = (double)(mono_us() - t1) / 1e6;
	free(map);
	return rc;
}

int preload_jobs(const scenario *sc, sq_client *c, int64_t n, double *copy_s, double *vacuum_s,
		 char *err, size_t errlen)
{
	return preload(sc, c, n, 0, copy_s, vacuum_s, err, errlen);
}

int preload_live(const scenario *sc, sq_client *c, int64_t n, double *copy_s, double *vacuum_s,
		 char *err, size_t errlen)
{
	return preload(sc, c, n, 1, copy_s, vacuum_s, err, errlen);
}

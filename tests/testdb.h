/* testdb.h - real shards for the integration suites: each suite gets fresh
 * databases of its own on every local shard, so suites can run in parallel. */
#ifndef SQ_TESTDB_H
#define SQ_TESTDB_H

#include "shardq.h"

#include <libpq-fe.h>

/* Ports of the local shards: $SHARDQ_TEST_PORTS ("55431,55432,..."), at
 * least two. */
int testdb_ports(int *ports, int max);

/*
 * Drops and creates database `db` on the first `nshards` shards, writes a
 * config (the shard sections, [cluster] partitions, then `extra`, which
 * holds the [type] sections), loads it and runs init. Aborts the test on
 * any failure. The caller frees with testdb_close.
 */
typedef struct testdb {
	sq_config *cfg;
	sq_client *client;
	char *ini;
	char *extra;
	unsigned partitions;
	int nshards;
	int ports[16];
	char db[64];
} testdb;

void testdb_open(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra);
/* Same, with a weight per shard (NULL: all 1). */
void testdb_open_w(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra,
		   const double *weights);
/* The config text of this cluster with other weights (malloc'd). */
char *testdb_ini(testdb *t, const double *weights, const char *extra_cluster);
void testdb_close(testdb *t);
/* Another client on the same cluster (e.g. for a second worker). */
sq_client *testdb_client(testdb *t);
/* A plain libpq connection to shard i's test database. */
PGconn *testdb_pg(testdb *t, int shard);
/* Runs SQL on shard i and returns the first column of the first row as a
 * number (or -1 if no row). */
long long testdb_scalar(testdb *t, int shard, const char *sql);
/* Sum of testdb_scalar over all shards. */
long long testdb_sum(testdb *t, const char *sql);

#endif

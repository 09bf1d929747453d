/* testdb.h - real shards for the integration suites: each suite gets fresh
 * databases of its own on every local shard, so suites can run in parallel. */
#ifndef SQ_TESTDB_H
#define SQ_TESTDB_H

#include "shardq.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>

/* Ports of the local shards: $SHARDQ_TEST_PORTS ("55431,55432,..."), at
 * least two. */
int testdb_ports(int *ports, int max);

/*
 * Makes database `db` empty on the first `nshards` shards, writes a
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

/* The database name of `db` in this process: with SHARDQ_TEST_PART=K/N
 * (support.h), db_pK, so that the parts of a suite run at once apart. */
char *testdb_name(char *out, size_t len, const char *db);
void testdb_open(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra);
/* Same, with a weight per shard (NULL: all 1). */
void testdb_open_w(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra,
		   const double *weights);
/* The config text of this cluster with other weights (malloc'd). */
char *testdb_ini(testdb *t, const double *weights, const char *extra_cluster);
/* Closes the client and gives the database back to the run's pool on
 * every test shard (testdb.c: the next open empties and reuses it). */
void testdb_close(testdb *t);
/* Closes the client and frees t, keeping the database (for a suite that
 * makes it once for its cases: drop it with testdb_drop at the end). */
void testdb_release(testdb *t);
/* Drops database db on every test shard that answers. */
void testdb_drop(const char *db);
/* The pool of databases closed cases leave: begun by the runner process
 * before its cases (they inherit it), dropped by it at the end. */
void testdb_pool_begin(void);
void testdb_pool_end(void);
/* Another client on the same cluster (e.g. for a second worker). */
sq_client *testdb_client(testdb *t);
/* A plain libpq connection to shard i's test database. */
PGconn *testdb_pg(testdb *t, int shard);
/* Runs SQL on shard i and returns the first column of the first row as a
 * number (or -1 if no row). */
long long testdb_scalar(testdb *t, int shard, const char *sql);
/* Sum of testdb_scalar over all shards. */
long long testdb_sum(testdb *t, const char *sql);

/* Live rows (ready, starting, running) per shard, type and status, as lines
 * "s2 m running 4", for a test's failure message. Writes at most len bytes
 * (NUL-terminated); returns buf. */
char *testdb_live_report(testdb *t, char *buf, size_t len);

/*
 * A directory of this process for the test's files (made with mkdtemp under
 * $TMPDIR, else /tmp, on first use), so that suites and clones running at
 * once never share a file. testdb_path writes DIR/name into out.
 * testdb_tmpdir_remove deletes the directory and what is in it.
 */
const char *testdb_tmpdir(void);
char *testdb_path(char *out, size_t len, const char *name);
void testdb_tmpdir_remove(void);

/* Seconds without progress after which a waiting test gives up:
 * $SHARDQ_TEST_STALL, default 90. A wait fails only when nothing moved for
 * that long, never because a machine is slow. */
double testdb_stall_s(void);

/*
 * The live processes whose environment holds the entry `want` ("NAME=VALUE";
 * ending in '*': any entry that begins with what precedes the '*'), this
 * process left out; zombies have no environment left to read. Fills at
 * most max entries of v and returns how many there are.
 */
typedef struct testdb_proc {
	int pid, ppid;
	char cmd[120];
} testdb_proc;
int testdb_procs(const char *want, testdb_proc *v, int max);
/* "  pid P (parent Q): CMD" lines for a failure message. */
void testdb_procs_describe(const testdb_proc *v, int n, char *out, size_t len);

/*
 * A TCP proxy on a port of its own in front of one shard (127.0.0.1:target),
 * run by a thread; set its modes with atomic_store. By default it passes
 * everything through.
 * - armed: lets through a connection's next batch (a write naming
 *   sq_enqueue), then cuts that connection's client side at the shard's
 *   first answer while still draining the shard's side: the shard has the
 *   whole batch and commits it, and the client never hears of it. Counted
 *   in cuts; disarms itself.
 * - refuse: closes every new connection at once (the shard cannot be
 *   reached).
 * - hole: a host that is gone without a trace. The connections it holds
 *   are closed, and new ones are not accepted: they wait in the listen
 *   queue, their startup packet unanswered. Cleared, it accepts them again
 *   and passes them through. Set it with testdb_proxy_hole, which returns
 *   once the proxy acts on it.
 * - freeze: a host cut off without a reset, or stuck: the connections it
 *   holds stay open and nothing passes either way; new ones wait in the
 *   listen queue. Cleared, it passes everything again. Set it with
 *   testdb_proxy_freeze, which returns once the proxy acts on it.
 * - testdb_proxy_zombie: the connections it holds die unseen (as behind a
 *   network cut that ended, or a NAT that forgot them): their shard side is
 *   closed, and their client side stays open and silent for good; new
 *   connections pass as before. Returns once done.
 */
typedef struct testdb_proxy {
	int lfd, port, target;
	atomic_int armed, cuts, stop, refuse, hole, hole_seen, freeze, freeze_seen, zombie;
	int zombies[64], nzombies;
	pthread_t th;
} testdb_proxy;
void testdb_proxy_start(testdb_proxy *px, int target);
void testdb_proxy_hole(testdb_proxy *px, int on);
void testdb_proxy_freeze(testdb_proxy *px, int on);
void testdb_proxy_zombie(testdb_proxy *px);
void testdb_proxy_stop(testdb_proxy *px);
/* A host that takes connections and never answers, as one that is gone
 * without a trace does (no RST): a socket on 127.0.0.1 that listens and
 * that the test accepts from, or not. The kernel completes connects into
 * its backlog, and a client then waits for the server's first message;
 * later ones wait in SYN_SENT. Returns the socket; its port in *port. */
int testdb_black_hole(int backlog, int *port);
/* A black hole that also accepts: a thread takes each connect and holds
 * it unanswered (a host that took the connection and then went), until
 * the test sets `cut` (the ones held are closed: their clients fail at
 * once) or stops it. n: held now; took: taken in all. Its port in
 * h->port. */
typedef struct testdb_hole {
	int lfd, port;
	int fds[256];
	atomic_int n, took, cut, stop;
	pthread_t th;
} testdb_hole;
void testdb_hole_start(testdb_hole *h, int backlog);
void testdb_hole_stop(testdb_hole *h);
/* fn(arg) on a thread of its own (testdb_call_start), and the wait for it
 * to return (testdb_call_wait), up to the stall limit: past it the test
 * fails, saying that `what` has not returned and for how long. The wait
 * returns the seconds it waited. testdb_call_within does both. */
typedef struct testdb_call {
	void (*fn)(void *arg);
	void *arg;
	atomic_int done;
	pthread_t th;
} testdb_call;
void testdb_call_start(testdb_call *c, void (*fn)(void *arg), void *arg);
double testdb_call_wait(testdb_call *c, const char *what);
double testdb_call_within(void (*fn)(void *arg), void *arg, const char *what);
/* A failpoint that holds the process (failpoint builds): sets
 * $SHARDQ_FAILPOINT_WAIT for failpoint `name` (children inherit it) and
 * returns that setting as "VAR=VALUE" for a command line;
 * testdb_failpoint_await waits (up to the stall limit, then fails the
 * test with `what`) until a process is held there; testdb_failpoint_go
 * lets it go on and clears the setting. */
const char *testdb_failpoint_hold(const char *name);
void testdb_failpoint_await(const char *what);
void testdb_failpoint_go(void);
/* A copy of config text `ini` (malloc'd) with the first `from` replaced
 * by `to`. */
char *testdb_ini_sub(const char *ini, const char *from, const char *to);
/* A copy of config text `ini` (malloc'd) whose shard at `port` is reached
 * through port `via` instead. */
char *testdb_ini_via(const char *ini, int port, int via);

#endif

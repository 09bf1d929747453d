/* support.h - the helpers the suites share, each written once: assertions
 * and the runner, the clock and the wait for progress, jobs, files, the
 * CLI, spawned workers, worker threads and shardqd. The shards' databases
 * are testdb.h's. */
#ifndef SQ_TEST_SUPPORT_H
#define SQ_TEST_SUPPORT_H

#include "testdb.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define OK(call)                                                                   \
	do {                                                                       \
		sq_error e_;                                                       \
		sq_status s_ = (call);                                             \
		(void)e_;                                                          \
		ck_assert_msg(s_ == SQ_OK, "%s -> %s", #call, sq_status_name(s_)); \
	} while (0)

/* Calls that take an sq_error named `err` in scope. */
#define OKE(call) ck_assert_msg((call) == SQ_OK, "%s: %s", #call, err.msg)

/* qsort and bsearch order of int64_t (ids). */
int test_cmp_i64(const void *a, const void *b);

/* ---- the runner ----------------------------------------------------------- */

/* The shards an integration case spreads over: 4, or fewer if fewer run. */
int test_shard_count(void);

/*
 * A suite can be run in parts, so that ctest balances a long suite's cases
 * over its jobs: SHARDQ_TEST_PART=K/N runs the K-th of every N tests added
 * (K from 1), in databases of the part's own (testdb_open). Unset, all of
 * them. test_take_next says whether the next test added is this part's.
 */
int test_take_next(void);
#define ADD_TEST(tc, fn)                        \
	do {                                    \
		if (test_take_next())           \
			tcase_add_test(tc, fn); \
	} while (0)

/* One test case per test, named for it, so that CK_RUN_CASE=NAME runs one
 * test alone. */
#define ADD_CASE(suite, fn, timeout_s)                       \
	do {                                                 \
		if (test_take_next()) {                      \
			TCase *tc_ = tcase_create(#fn);      \
			tcase_set_timeout(tc_, (timeout_s)); \
			tcase_add_test(tc_, fn);             \
			suite_add_tcase((suite), tc_);       \
		}                                            \
	} while (0)

/* Runs the suite (line-buffered output, so what a test prints reaches the
 * log even when its forked process dies on a failed assertion); 0 if all
 * passed. */
int run_suite(Suite *s);

/* ---- time and waits ------------------------------------------------------- */

/* Monotonic seconds: every wait and every duration. */
double test_now_s(void);
/* Wall-clock seconds, only to set beside a time a job's shell wrote with
 * `date +%s.%N`. */
double test_wall_s(void);

/*
 * Waits for progress: returns 1 once remaining(arg) is 0; returns 0 when its
 * value has not fallen for testdb_stall_s() seconds (a stall, not a slow
 * machine). *left gets the last value.
 */
typedef long long (*test_remaining_fn)(void *arg);
int wait_progress(test_remaining_fn remaining, void *arg, long long *left);

/* ---- jobs ----------------------------------------------------------------- */

/* Enqueues one job and returns its id. */
int64_t enqueue_one(sq_client *c, const char *type, const char *key, const char *params,
		    sq_enqueue_outcome *outcome);
/* Enqueues n jobs of a type (params may be NULL) in one call. */
void test_enqueue_n(sq_client *c, const char *type, int n, const char *params);
/* The job with this id (sq_job_clear it). */
sq_job test_get_job(sq_client *c, int64_t id);
/* Claims everything of one type up to limit for worker. */
size_t claim_type(sq_client *c, const char *worker, const char *type, int limit, sq_job **jobs);
/* Jobs ready, starting or running, on all of t's shards. */
long long test_live_jobs(testdb *t);
/* Every job row on all of t's shards, whatever its status. */
long long test_all_jobs(testdb *t);

/* sq_worker_run(w) on a thread of its own (*th); the run must return
 * SQ_OK (checked in that thread) once the test stops the worker. */
void test_worker_thread(pthread_t *th, sq_worker *w);

/* ---- a producer thread ---------------------------------------------------- */

/*
 * Enqueues batches of jobs on a client of its own until stopped. A job
 * counts as acknowledged when its result carries an id (kept in acked).
 * A keyed producer ("<prefix>-<seq>") sends a job that was not
 * acknowledged again with the same key (dedup makes that safe); a keyless
 * one sends it again only when it was surely not written, and counts the
 * rest as unknown. Set the fields above `th`, then test_producer_start.
 */
typedef struct test_producer {
	testdb *t;
	const char *type;
	const char *prefix; /* keys, when keyed */
	int keyed;
	int batch;           /* jobs per call, at most 1000 */
	useconds_t pause_us; /* between calls */
	long max_jobs;       /* new jobs in all (0: no limit) */
	int (*hold)(void *); /* while it returns 1, no new batch (NULL: none) */
	void *hold_arg;
	pthread_t th;
	volatile int stop;
	pthread_mutex_t mu; /* over acked and nacked */
	int64_t *acked;
	size_t nacked, cap;
	long sent, retried, unknown, failed_calls;
	uint64_t map_rows_read; /* its client's, once it stopped */
	char last_error[256];
} test_producer;

void test_producer_start(test_producer *p);
/* Jobs acknowledged so far (while it runs). */
size_t test_producer_acked(test_producer *p);
/* Stops it after its unacknowledged keyed jobs have gone through, and
 * waits for the thread. */
void test_producer_stop(test_producer *p);
void test_producer_free(test_producer *p);

/* ---- files ---------------------------------------------------------------- */

/* Writes the file at path from a format (exec: made executable). */
void test_write_file(const char *path, int exec, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Writes data[0..len) to the file at path. */
void test_write_bytes(const char *path, const char *data, size_t len);
/* The whole file, NUL-terminated (malloc'd); "" if there is none. */
char *test_read_file(const char *path);
/* The same, kept by the helper until its next call from this thread (for
 * a message or a look): no need to free it. */
const char *test_file_text(const char *path);
/* The last len-1 bytes of a file into buf ("" if none); returns buf. */
char *test_tail(const char *path, char *buf, size_t len);

/* ---- processes ------------------------------------------------------------ */

enum {
	TEST_SPAWN_GROUP = 1,  /* the leader of a process group of its own */
	TEST_SPAWN_PDEATH = 2, /* killed should the test die first */
};
/* Starts `sh -c cmd` (flags: TEST_SPAWN_*); returns its pid. */
pid_t test_spawn(const char *cmd, int flags);
/* Waits for pid to exit and returns its exit code (128+N: signal N); -1
 * when it is still there after hang_s seconds (it is then killed). hang_s
 * 0: waits as long as it runs. */
int test_wait_exit(pid_t pid, double hang_s);

/* Waits until no live process's environment holds `want` (testdb_procs:
 * "SHARDQ_WORKER=ID", or a prefix and '*'), for as long as their number
 * changes; on a stall kills them (so that a failed run leaves nothing
 * behind) and fails with their list, after `why`. Returns the seconds it
 * took. */
double test_wait_no_procs(const char *want, const char *why);

/*
 * Starts `shardq -c INI work --worker ID --types TYPES --exec 'EXEC' EXTRA`,
 * its output to out_path (appended if append). flags: TEST_SPAWN_*.
 */
typedef struct test_worker_cmd {
	const char *ini, *id, *types, *exec, *extra, *out_path;
	int append, flags;
	const char *cli; /* the program (NULL: $SHARDQ_CLI) */
} test_worker_cmd;
pid_t test_spawn_worker(const test_worker_cmd *w);

/*
 * Runs `[ENV] $SHARDQ_CLI ARGS` (a shell line from fmt; env may be NULL),
 * its stdout and stderr joined; returns its exit code, the start of its
 * output in out (which may be NULL). testdb_run_cli is the same without an
 * environment.
 */
int test_cli(const char *env, char *out, size_t outlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The same with another program than $SHARDQ_CLI (another release's). */
int test_cli_of(const char *cli, const char *env, char *out, size_t outlen, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
#define testdb_run_cli(out, outlen, ...) test_cli(NULL, out, outlen, __VA_ARGS__)
/* `shardq check` on t's cluster (its config written to the test's
 * directory) must find nothing: every soak and move case ends with it. */
void test_check_cluster(testdb *t);
/* The CLI with argv (args[0] is the first argument after the program) and
 * stdin from in[0..inlen), SHARDQ_CONFIG unset; returns its exit code, its
 * stdout and stderr in *out and *err (free them). */
int test_cli_argv(const char *const *args, const char *in, size_t inlen, char **out, char **err);

/*
 * shardqd -c ini_path, its stdout and stderr in the file `name` of the
 * test's directory. test_daemon_spawn does not wait; test_daemon_wait
 * waits for its "listening on" line (port and worker id); test_daemon_start
 * does both. test_daemon_stop signals it and returns its exit status
 * (128+N for signal N), failing if it does not exit within the stall time.
 */
typedef struct test_daemon {
	pid_t pid;
	int port;
	char out[512]; /* its stdout and stderr */
	char worker_id[160];
	const char *bin; /* set before the spawn (NULL: $SHARDQ_DAEMON) */
} test_daemon;
void test_daemon_spawn(test_daemon *d, const char *ini_path, const char *name);
void test_daemon_wait(test_daemon *d);
void test_daemon_start(test_daemon *d, const char *ini_path, const char *name);
int test_daemon_stop(test_daemon *d, int sig);

/* A small HTTP/1.1 client for shardqd: hc_connect to 127.0.0.1:port (the
 * test fails if it cannot), hc_send one request (token and body may be
 * NULL; -1 if the connection broke), hc_recv one response (-1, errno set,
 * if the connection ended first; r->body malloc'd, NUL-ended). */
/* The `hash = ...` line of a [token] section for token (shardqd
 * --hash-token). */
void test_hash_token(const char *token, char *out, size_t len);
typedef struct hresp {
	int status;
	char head[4096];
	char *body;
	size_t len;
} hresp;
int hc_connect(int port);
int hc_send_bytes(int fd, const char *p, size_t n); /* -1 if the connection broke */
int hc_send(int fd, const char *method, const char *path, const char *token, const char *body);
int hc_recv(int fd, hresp *r);

#endif

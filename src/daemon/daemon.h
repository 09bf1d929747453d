/* daemon.h - shardqd, the router as an HTTP service (docs/http.md).
 *
 * Threads: the main thread runs libevent's HTTP server (parsing, auth,
 * replies, connection limits); `threads` request threads each hold one
 * sq_client (one connection per shard) and run enqueue, results, reads;
 * one claimer thread holds its own sq_client and LISTEN connections and
 * merges every waiting claim into one sq_claim (one statement per shard)
 * per tick. Finished tasks go back to the main thread, which replies.
 *
 * Layers: each file calls only the files below it, never one above or
 * beside it (tests/check_layers.py holds the daemon's files to no cycle):
 *
 *   server.c              main, the HTTP wiring, routing, auth, the threads
 *   api.c    claimer.c    the endpoints; the claim coalescing
 *   metrics.c             the counters, /metrics, the page's rates
 *   task.c                a task's reply, its queues to and from the threads
 *   log.c                 the log (log.h)
 *
 * and all of them the library through include/shardq.h, buf.h, json.h,
 * clock.h and src/router_internal.h. */
#ifndef SQD_DAEMON_H
#define SQD_DAEMON_H

#include "buf.h"
#include "shardq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct evhttp_request;
struct event;
struct sqd_conn;

typedef enum sqd_route {
	R_NONE = 0,
	R_HEALTH,
	R_ENQUEUE,
	R_CLAIM,
	R_START,
	R_HEARTBEAT,
	R_COMPLETE,
	R_FAIL,
	R_RELEASE,
	R_CANCEL,
	R_GET_JOB,
	R_STATS,
	R_MAP,
	R_MOVES,
	R_METRICS,
	R_PAGE,
	R_OVERVIEW,
	R_TYPES,
	R_PAUSE,
	R_RESUME,
	R_RETRY,
	R_LIST,
	R_PURGE,
	R_RELEASE_GONE, /* internal: hand back what a client that went away was given */
	R_COUNT
} sqd_route;

/* One claim request, owned by the claimer thread while it waits. */
typedef struct sqd_claim {
	char worker[129];
	int ntypes;
	struct {
		const char *type; /* the config's own name (sq_config_type_lookup) */
		int32_t limit, got;
	} types[SQ_WORKER_MAX_TYPES];
	int start;       /* jobs come back running */
	double deadline; /* monotonic seconds: answer by then even if empty */
	int skipped;     /* the last tick was full for one of its types */
	int untried;     /* no tick has had it yet (it came within the window) */
	int fits;        /* (within a tick) it is in this tick's claim */
	int njobs;
	sq_buf jobs; /* the JSON of the jobs given, comma-separated */
} sqd_claim;

typedef struct sqd_task {
	struct sqd_task *next;
	struct evhttp_request *req; /* NULL for internal tasks */
	struct sqd_conn *conn;      /* its connection's tracker (main thread only) */
	sqd_route route;
	char *body;
	size_t len;
	int64_t id;          /* GET /v1/jobs/ID */
	int all;             /* ?all=1 */
	int exact;           /* ?exact=1 */
	char who[64];        /* the name of the request's token (its [token NAME]) */
	int scopes;          /* and its scopes (SQ_SCOPE_*) */
	char *query;         /* GET /v1/jobs: its query string */
	atomic_int gone;     /* the client's connection closed */
	struct event *watch; /* main thread: sees the client hang up while it waits */
	int fd;              /* its socket, while the connection lives */
	sqd_claim *claim;
	sq_job_ref *refs; /* jobs handed to this task's client (claims), or to release */
	size_t nrefs, refcap;
	/* the reply */
	int status;
	int retry_after; /* seconds; 0: no header */
	int text;        /* text/plain (metrics) rather than JSON */
	int html;        /* the page */
	sq_buf resp;
	double t0; /* when the request arrived (monotonic seconds) */
} sqd_task;

typedef struct sqd_queue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sqd_task *head, *tail;
	int n;
} sqd_queue;

/* Latency histogram: le buckets in seconds. */
#define SQD_NBUCKETS 14
extern const double sqd_buckets[SQD_NBUCKETS];

typedef struct sqd_hist {
	atomic_ullong count;
	atomic_ullong bucket[SQD_NBUCKETS]; /* not cumulative; summed when written */
	atomic_ullong sum_us;
} sqd_hist;

typedef struct sqd_metrics {
	atomic_ullong requests[R_COUNT];
	atomic_ullong errors[R_COUNT]; /* answered >= 400 */
	sqd_hist latency[R_COUNT];
	atomic_ullong jobs_enqueued, jobs_claimed, jobs_released_gone, jobs_released_extra;
	atomic_ullong results_ok, results_lost, results_other;
	atomic_ullong jobs_completed, jobs_failed; /* through complete and fail */
	atomic_ullong claim_statements; /* sq_claim calls (each one statement per shard) */
	atomic_ullong claim_requests;   /* claim requests those calls served */
	atomic_ullong claim_errors;
	atomic_ullong result_calls;    /* merged result calls made */
	atomic_ullong result_requests; /* result requests they served */
	atomic_ullong auth_refused;
	atomic_ullong conns_dropped; /* slow or over the limit */
	atomic_int threads_busy;
	atomic_int claims_waiting;
	atomic_int connections;
	atomic_int queue_len;
} sqd_metrics;

/* Rates for the page: per second, the last SQD_RATE_N seconds. */
#define SQD_RATE_N 120
enum { RATE_ENQUEUED, RATE_CLAIMED, RATE_COMPLETED, RATE_FAILED, RATE_KINDS };

typedef struct sqd_rates {
	pthread_mutex_t mu;
	double v[RATE_KINDS][SQD_RATE_N]; /* a ring; `at` is the next slot */
	int at, n;
	unsigned long long last[RATE_KINDS];
	double last_t;
} sqd_rates;

typedef struct sqd_token {
	char name[65];
	unsigned char hash[32];
	int scopes;
} sqd_token;

typedef struct sqd {
	const char *config_path;
	sq_config *cfg;
	char worker_id[160];
	int nthreads;
	pthread_t *threads;
	sq_client **clients;
	sqd_queue work;
	/* finished tasks, for the main thread */
	pthread_mutex_t done_mu;
	sqd_task *done_head, *done_tail;
	struct event *done_ev;
	/* the claimer */
	pthread_t claimer;
	int wake[2]; /* a pipe: new claims or stop */
	pthread_mutex_t claim_mu;
	sqd_task *claim_head, *claim_tail;
	sq_client *claim_client;
	/* the enqueue lanes: a request thread hands an enqueue's batch over and
	 * goes on; the lane's callback hands the task back (api.c) */
	sq_enqueuer *enq;
	int nlanes;
	/* a request thread's answer wait for the workers' starts, heartbeats
	 * and results: an eighth of the shortest lease, at least 1 s, at most
	 * answer_timeout (sqd_run_results) */
	double results_wait_s;
	atomic_int stopping;
	atomic_int inflight; /* tasks not yet answered */
	sqd_metrics m;
	sqd_rates rates;
} sqd;

/* the admin page (src/daemon/page.html, embedded at build time) */
extern const char sqd_page[];

/* task.c: writes {"error":{...}} as the task's reply. */
void sqd_error(sqd_task *t, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* task.c: appends one job's JSON. */
void sqd_put_job(sq_buf *b, const sq_config *cfg, const sq_job *j);
/* task.c: the task's jobs given, as a ref to release later */
void sqd_task_add_ref(sqd_task *t, int64_t id, int32_t attempt);
/* task.c: frees the task, its claim, body, refs and reply. */
void sqd_task_free(sqd_task *t);
/* task.c: queues a task for the request threads. */
void sqd_submit(sqd *d, sqd_task *t);
/* task.c: hands a finished task back to the main thread, which replies. */
void sqd_done(sqd *d, sqd_task *t);

/* api.c: runs a task on a request thread with its client; 1 when the task
 * was handed on (an enqueue, to d->enq), which then calls sqd_done for it
 * itself: the caller must not touch it again. */
int sqd_run(sqd *d, sq_client *c, sqd_task *t);
/* api.c: start/heartbeat/complete/fail/release requests of one kind, merged
 * into one call per worker name */
void sqd_run_results(sqd *d, sq_client *c, sqd_task **tasks, size_t ntasks);
/* api.c: parses a claim's body into t->claim; 0, or -1 with the error set. */
int sqd_claim_parse(sqd *d, sqd_task *t);

/* claimer.c */
/* Starts the claim thread on d->claim_client (opened by the caller). */
int sqd_claimer_start(sqd *d, sq_error *err);
void sqd_claimer_submit(sqd *d, sqd_task *t);
void sqd_claimer_wake(sqd *d);

/* metrics.c */
void sqd_rates_sample(sqd *d);
/* {"seconds":N,"enqueued":[...],...} */
void sqd_rates_json(sqd *d, sq_buf *out);
/* the per shard and type gauges (sq_stats_fast), on a request thread */
void sqd_metrics_write_shards(sqd *d, sq_client *c, sq_buf *out);
void sqd_observe(sqd *d, sqd_route r, int status, double seconds);
void sqd_metrics_write(sqd *d, sq_buf *out);

#endif

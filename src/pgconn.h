/* pgconn.h - one async libpq connection in pipeline mode, driven by libevent.
 *
 * A caller queues statements on a connection (sq_pgconn_push), then runs a
 * set of connections at once (sq_pgconn_run): each sends its pipeline and a
 * Sync, and the event loop collects results until every connection has seen
 * its Sync. Statements between Syncs form one implicit transaction, so a
 * pipeline is all-or-nothing on its shard.
 */
#ifndef SQ_PGCONN_H
#define SQ_PGCONN_H

#include "shardq.h"

#include <libpq-fe.h>

struct event_base;
struct event;

/* A named prepared statement; defined once, next to the code that uses it. */
typedef struct sq_stmt {
	const char *name;
	const char *sql;
} sq_stmt;

#define SQ_PIPE_MAX 32

typedef struct sq_pgconn {
	PGconn *conn;
	char *shard_id;
	char *addr; /* "host:port", for messages */
	char *dsn;
	char *options;
	int connect_timeout_s;
	const sq_stmt *prepared[64];
	int nprepared;
	uint64_t statements_sent;
	int sent_pid; /* the backend the last pipeline was sent to (0: none) */
	/* after a failed connect: no new try before connect_retry_at
	 * (monotonic seconds), backing off 0.25 s to 2 s */
	double connect_retry_at, connect_backoff;
	char connect_error[256];
	/* connect_wait_s > 0: a reconnect does not block for up to
	 * connect_timeout; the calls wait at most this long in all for it to
	 * get on, and fail at once while it is under way (see ensure_conn). The
	 * connection being made, how its last step ended, and when it began */
	double connect_wait_s;
	/* answer_wait_s > 0: a connection that is up but has not answered
	 * what was sent within this long is taken as lost (a host gone
	 * without a trace, a network cut that sends no reset): dropped, and
	 * what was sent counts as not answered (see sq_pgconn_set_answer_wait) */
	double answer_wait_s;
	PGconn *connecting;
	PostgresPollingStatusType connect_poll;
	double connect_started; /* of the attempt on the current socket */
	int connect_fd;         /* that socket */
	/* calls wait for this connect until then, in all (connect_wait_s
	 * from its start) */
	double connect_wait_until;
	/* the dsn names several hosts in a way only libpq's blocking connect
	 * takes (beside hostaddr, a socket directory among them): connects
	 * block (see sq_pgconn_set_connect_wait) */
	int multi_host;
	/* the dsn's one host is a name, or it names several hosts: a connect
	 * that does not block looks them up on a thread of its own first
	 * (lookup under way: resolving) */
	char *lookup_host, *lookup_ports; /* a list of hosts: their ports */
	struct sq_lookup *resolving;
	/* the addresses the lookup found (and the host once per address), of
	 * the connect under way: one that gets no answer within
	 * connect_timeout is left for the next, as libpq's blocking connect
	 * would (NULL: no lookup of ours) */
	char *try_hosts, *try_addrs, *try_ports;
	char connect_ip[64]; /* the address libpq is on, as last seen */

	/* the pipeline being built or run */
	const sq_stmt *q[SQ_PIPE_MAX];
	int qn;
	int qnparams[SQ_PIPE_MAX];
	const char *const *qvals[SQ_PIPE_MAX];
	unsigned char qbinary[SQ_PIPE_MAX];  /* the result in binary format */
	unsigned char qplanned[SQ_PIPE_MAX]; /* planned for its values (not prepared) */
	PGresult *res[SQ_PIPE_MAX];          /* results of the q[] in order */
	int nres;
	int expect;                           /* entries sent (prepares included) */
	int keep[SQ_PIPE_MAX * 2];            /* per entry sent: index into res, or -1 */
	const sq_stmt *prep[SQ_PIPE_MAX * 2]; /* per entry sent: the Prepare\'s stmt */
	const sq_stmt *inflight[SQ_PIPE_MAX]; /* prepares sent, not yet answered */
	int ninflight;
	unsigned char sync_after[SQ_PIPE_MAX]; /* a Sync (transaction end) follows q[i] */
	int txn_generic; /* the pipeline's open transaction has set plan_cache_mode to
			    force_generic_plan (sq_client_push_plans) */
	int txn_gated;   /* the pipeline's open transaction takes the gate shared
			  (sq_client_push_gate) */
	int syncs, syncs_seen;
	/* per Sync sent (a transaction's end): the entries (prepares
	 * included) before it, and the q[] index past its last statement. A
	 * transaction's statements count only once its Sync has come without
	 * an error: their results arrive before the commit, and a commit that
	 * fails (a deferred check) or never happens (the session killed, the
	 * server crashed while the results were flushed) undoes them. */
	int sync_entries[SQ_PIPE_MAX + 1];
	int sync_q[SQ_PIPE_MAX + 1];
	unsigned char sync_failed[SQ_PIPE_MAX + 1]; /* an error came at its commit */
	char commit_error[256];                     /* the first such error */
	int pending_null; /* a result came; the NULL that ends its entry is due */
	int skip_null;    /* a commit's error came; the NULL after it is due */
	int seen;         /* entries whose results were read */
	int done;
	int failed;         /* connection-level failure during the run */
	char fail_msg[256]; /* what it was (shard, address, cause) */
	struct event *ev;
	int want_write;
	void *run;        /* the run in progress */
	double answer_by; /* its answer is due by then (answer_wait_s > 0) */
} sq_pgconn;

/* For tests: called with each connection the library opens, once it is
 * up and before anything runs on it; role is "pipeline" for a client's
 * shard and meta connections, else what sq_connect_plain was given ("mover",
 * "vacuum", "listen", "map-listen"). NULL: none. Set it while no client or
 * worker is in use (it is not synchronised). */
typedef void (*sq_conn_hook)(const char *role, PGconn *conn, void *arg);
void sq_set_conn_hook(sq_conn_hook fn, void *arg);
void sq_conn_hook_call(const char *role, PGconn *conn);

/* Fills pc for a shard without connecting; sq_pgconn_connect_all or the
 * first call connects. Free with sq_pgconn_close(). */
SQ_MUST_CHECK sq_status sq_pgconn_init(sq_pgconn *pc, const char *shard_id, const char *dsn,
				       const char *options, int connect_timeout_s, sq_error *err);
/* Connects n connections (filled by sq_pgconn_init) at once, each waiting
 * at most connect_timeout for its server, so that n shards take as long
 * as the slowest, not the sum; a dsn whose several hosts libpq alone
 * takes (see sq_pgconn_set_connect_wait) connects on its own, blocking. st[i] and errs[i] say how each went (errs name the shard
 * and its address). */
void sq_pgconn_connect_all(sq_pgconn *pcs, int n, sq_status *st, sq_error *errs);
/* Connects (blocking, with connect_timeout). On failure, err names the shard
 * and its address. Free with sq_pgconn_close(). */
SQ_MUST_CHECK sq_status sq_pgconn_open(sq_pgconn *pc, const char *shard_id, const char *dsn,
				       const char *options, int connect_timeout_s, sq_error *err);
void sq_pgconn_close(sq_pgconn *pc);
/* From now on a lost connection is made again without blocking the
 * callers for more than wait_s in all per connect (0: blocking, up to
 * connect_timeout, the default). For a loop that serves
 * every shard, such as a worker's: one shard that does not answer must not
 * hold up the others. A host name is looked up on a thread of its own,
 * for up to connect_timeout, and the connect goes to the addresses found.
 * A host name with several addresses gets one connect_timeout for each
 * address that does not answer, then goes on to the next; a dsn that names
 * several hosts (host=a,b) is looked up host by host and taken the same
 * way, unless it has hostaddr or a socket directory (then it blocks:
 * only libpq's blocking connect goes on to the next host there). */
void sq_pgconn_set_connect_wait(sq_pgconn *pc, double wait_s);
/* How long sq_pgconn_run and sq_pgconn_exec wait for the answer to what
 * they sent before they drop the connection (0: for ever, the default).
 * Nothing is cancelled on the server: a statement that was still running
 * may have committed, as after any lost connection. */
void sq_pgconn_set_answer_wait(sq_pgconn *pc, double wait_s);
/* Whether libpq would look a name up to connect with this dsn (one host,
 * named, no hostaddr). */
int sq_dsn_names_host(const char *dsn);
/* Whether a connect is under way (its host name looked up, or the
 * connection being made). */
int sq_pgconn_connecting(const sq_pgconn *pc);
/* Takes a connect under way as far as it goes without waiting (for a loop
 * to call on every pass, so that a connect goes on between calls that use
 * the connection). Returns 1 while one is still under way. */
int sq_pgconn_advance(sq_pgconn *pc);

/* Makes pc's connection usable as a call would (waiting at most the
 * connect wait, sq_pgconn_set_connect_wait); SQ_OK once it is up,
 * SQ_ECONN while a connect is under way or after it failed. */
sq_status sq_pgconn_ensure(sq_pgconn *pc, sq_error *err);
/* Takes pc's connection, out of pipeline mode, for the caller to own; pc
 * makes a new one when asked again (NULL: none, or it cannot leave
 * pipeline mode, then closed). */
PGconn *sq_pgconn_detach(sq_pgconn *pc);

/* Queues one statement; vals must stay valid until sq_pgconn_run returns. */
void sq_pgconn_push(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals);
/* The same, with the result in binary format (the statement's column
 * types fixed, and read with PQgetlength). */
void sq_pgconn_push_binary(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals);
/* The same, sent whole and planned for these values each time, never
 * prepared: for a statement whose best index depends on its values (a
 * server's generic plan guesses them), run too rarely for planning to
 * cost (the job listings). */
void sq_pgconn_push_planned(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals);
/* Ends the transaction of the statements queued so far (a Sync): what
 * follows runs in a transaction of its own, whatever happened before. The
 * last transaction is ended by the run itself. */
void sq_pgconn_push_sync(sq_pgconn *pc);

/*
 * Sends every queued pipeline on conns[0..n) (entries may be NULL or have no
 * statements: skipped) and waits for all of them. Afterwards each pc->res[i]
 * holds the result of pc->q[i] (owned by pc until sq_pgconn_reset). Returns
 * SQ_OK when every connection answered; errors inside results are for the
 * caller to inspect (see sq_pgconn_result_error). A lost connection is
 * reported as SQ_ECONN naming the shard, and is reopened on the next run.
 */
SQ_MUST_CHECK sq_status sq_pgconn_run(struct event_base *base, sq_pgconn **conns, int n,
				      sq_error *err);

/*
 * Sends pc's queued pipeline as sq_pgconn_run would, and returns without
 * waiting: done(pc, err, arg) is called from base's loop once every result
 * is in, or the connection failed or gave no answer within its answer wait
 * (err says why; SQ_OK otherwise), or before sq_pgconn_start returns when
 * nothing could be sent. For a loop that runs each shard's round on its own
 * (a worker's): one shard's answer is read while another's is still due.
 * pc must not be used for anything else until done is called.
 */
typedef void (*sq_pgconn_done_fn)(sq_pgconn *pc, const sq_error *err, void *arg);
void sq_pgconn_start(struct event_base *base, sq_pgconn *pc, sq_pgconn_done_fn done, void *arg);
/* Whether a run of sq_pgconn_start is under way on pc. */
int sq_pgconn_running(const sq_pgconn *pc);
/* Ends such a run at once: the connection is dropped (made again by the
 * next call), and done is called with what had not been answered missing. */
void sq_pgconn_abandon(sq_pgconn *pc);

/* Frees results and clears the queue. */
void sq_pgconn_reset(sq_pgconn *pc);

/*
 * Turns the first failed result of pc into an sq_status and message:
 * SQ_EMOVING / SQ_EMOVED for the partition-marker errors, SQ_EDB otherwise.
 * Returns SQ_OK if every result succeeded.
 */
sq_status sq_pgconn_result_error(sq_pgconn *pc, sq_error *err);
/* The same for the results of q[from..to) only (one transaction's). */
sq_status sq_pgconn_range_error(sq_pgconn *pc, int from, int to, sq_error *err);

/* The SQLSTATE of the first statement of q[from..to) that failed on the
 * server, or NULL when none did (all succeeded, or results are missing
 * because the connection failed). */
const char *sq_pgconn_range_sqlstate(sq_pgconn *pc, int from, int to);

/* The DETAIL of statement q[i]'s error, or NULL (it succeeded, failed
 * without one, or has no result). */
const char *sq_pgconn_result_detail(sq_pgconn *pc, int i);

/* Runs one simple statement synchronously (outside any pipeline run), for
 * init and admin work. Returns the result (caller PQclear()s) or NULL with
 * err set. */
PGresult *sq_pgconn_exec(sq_pgconn *pc, const char *sql, int nparams, const char *const *vals,
			 sq_error *err);

/* A libpq notice processor that prints nothing: a notice, or the FATAL
 * of a server that ends an idle session, reaches the caller as an error
 * of its next call instead. */
void sq_pq_ignore_notice(void *arg, const char *msg);

#endif

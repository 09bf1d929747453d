/* watch.h - a bound on the blocking libpq calls of plain connections (the
 * maintainer's, the mover's). Such a call waits for its answer for as long
 * as the connection lives, and a shard whose host is cut off without a
 * reset, or stuck, keeps it open and silent: the call, and whatever waits
 * for it (a worker's stop waits for its maintainer), would wait for good.
 *
 * sq_watch_arm puts a connection under a watchdog thread for one call or
 * phase; when its wait runs out, or *stop is set, the watchdog shuts the
 * connection's socket down, and the blocked call returns at once with a
 * broken connection. sq_watch_disarm takes it off and says whether that
 * happened, so the caller reports why instead of libpq's "server closed
 * the connection unexpectedly". The connection is of no more use then. */
#ifndef SQ_WATCH_H
#define SQ_WATCH_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shardq.h"

enum { SQ_WATCH_NONE = 0, SQ_WATCH_WAIT = 1, SQ_WATCH_STOP = 2 };

typedef struct sq_watch {
	int fd;     /* a copy of the connection's socket while armed */
	double due; /* monotonic seconds; 0: no bound but the stop */
	const atomic_int *stop;
	int fired; /* SQ_WATCH_WAIT or SQ_WATCH_STOP, under the watchdog's lock */
	struct sq_watch *next;
	int armed;
} sq_watch;

/* Watches conn for wait_s seconds (<= 0: no bound) and for *stop (NULL:
 * none). A connection without a socket, or both bounds off, is not
 * watched (disarm then returns SQ_WATCH_NONE). Returns -1 if the watchdog
 * thread could not be started or the socket not copied (the call then
 * runs unbounded), else 0. Every arm is followed by one disarm before w
 * is armed again or goes out of scope. */
int sq_watch_arm(sq_watch *w, PGconn *conn, double wait_s, const atomic_int *stop);
/* Takes w off the watch; SQ_WATCH_WAIT or SQ_WATCH_STOP if it fired. */
int sq_watch_disarm(sq_watch *w);
/* One statement on conn under a watch (PQexecParams with nparams > 0,
 * else PQexec); *fired (when fired is not NULL) as sq_watch_disarm says.
 * The result as libpq gives it (when it fired, a broken connection's
 * error). */
PGresult *sq_watch_exec(PGconn *conn, const char *sql, int nparams, const char *const *vals,
			double wait_s, const atomic_int *stop, int *fired);

/* The answer wait of a plain connection whose statements run under
 * statement_timeout_ms: [connection] answer_timeout, else that timeout +
 * connect_timeout (a shard that is up has ended the statement by then);
 * 0 (no bound) when both are 0. */
double sq_plain_answer_wait_s(const sq_config *cfg, int64_t statement_timeout_ms);

#endif

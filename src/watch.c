/* watch.c - the watchdog of watch.h: one thread for the process, started
 * at the first arm, that shuts down the socket of a watched connection
 * whose wait ran out or whose stop was asked for. */
#include "watch.h"
#include "clock.h"
#include "config.h"
#include "pool.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* how often a stop flag is looked at while one is watched */
#define STOP_LOOK_S 0.05

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int started = -1; /* 0 running, -1 could not start */
static sq_watch *head;

static void fire(sq_watch *w, int why)
{
	/* the blocked call sees the connection end at once. w->fd is the
	 * watch's own copy of the socket, open until the disarm: libpq may
	 * close its own on seeing the connection end, and another file may
	 * take that number before the disarm */
	shutdown(w->fd, SHUT_RDWR);
	w->fired = why;
}

static void *watchdog(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		double now = sq_mono_s(), next = 0;
		for (sq_watch **p = &head; *p;) {
			sq_watch *w = *p;
			int why = w->stop && atomic_load(w->stop) ? SQ_WATCH_STOP
				  : w->due > 0 && now >= w->due   ? SQ_WATCH_WAIT
								  : SQ_WATCH_NONE;
			if (why) {
				fire(w, why);
				*p = w->next;
				continue;
			}
			double at = w->stop ? now + STOP_LOOK_S : w->due;
			if (at > 0 && (next == 0 || at < next))
				next = at;
			p = &w->next;
		}
		if (next == 0) {
			pthread_cond_wait(&cv, &mu);
		} else {
			/* the condition variable runs on CLOCK_MONOTONIC */
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			double left = next - sq_mono_s();
			if (left < 0.001)
				left = 0.001;
			ts.tv_sec += (time_t)floor(left);
			ts.tv_nsec += (long)((left - floor(left)) * 1e9);
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&cv, &mu, &ts);
		}
	}
	return NULL;
}

static void start(void)
{
	pthread_condattr_t ca;
	pthread_attr_t ta;
	pthread_t th;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	started = pthread_create(&th, &ta, watchdog, NULL) == 0 ? 0 : -1;
	pthread_attr_destroy(&ta);
}

int sq_watch_arm(sq_watch *w, PGconn *conn, double wait_s, const atomic_int *stop)
{
	int fd = conn ? PQsocket(conn) : -1;
	w->fd = -1;
	w->due = wait_s > 0 ? sq_mono_s() + wait_s : 0;
	w->stop = stop;
	w->fired = SQ_WATCH_NONE;
	w->next = NULL;
	w->armed = 0;
	if (fd < 0 || (!w->due && !stop))
		return 0;
	pthread_once(&once, start);
	/* close-on-exec: a worker spawns its jobs' processes */
	if (started != 0 || (w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return -1;
	pthread_mutex_lock(&mu);
	w->next = head;
	head = w;
	w->armed = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	return 0;
}

int sq_watch_disarm(sq_watch *w)
{
	int fired;
	if (!w->armed)
		return SQ_WATCH_NONE;
	pthread_mutex_lock(&mu);
	for (sq_watch **p = &head; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	fired = w->fired;
	w->armed = 0;
	pthread_mutex_unlock(&mu);
	close(w->fd);
	w->fd = -1;
	return fired;
}

PGresult *sq_watch_exec(PGconn *conn, const char *sql, int nparams, const char *const *vals,
			double wait_s, const atomic_int *stop, int *fired)
{
	sq_watch w;
	sq_watch_arm(&w, conn, wait_s, stop);
	PGresult *r = nparams > 0 ? PQexecParams(conn, sql, nparams, NULL, vals, NULL, NULL, 0)
				  : PQexec(conn, sql);
	int f = sq_watch_disarm(&w);
	if (fired)
		*fired = f;
	return r;
}

double sq_plain_answer_wait_s(const sq_config *cfg, int64_t statement_timeout_ms)
{
	if (cfg->answer_timeout_ms > 0)
		return (double)cfg->answer_timeout_ms / 1000.0;
	if (statement_timeout_ms > 0)
		return (double)(statement_timeout_ms + cfg->connect_timeout_ms) / 1000.0;
	return 0;
}

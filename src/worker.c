/* worker.c - the worker runtime: one loop thread does all database work
 * (claims, starts, heartbeats, completions, releases; each call batched per
 * shard, all shards at once), handlers run on a pool of threads. Claimed
 * jobs wait in a bounded local buffer in `starting` and turn `running` when
 * a slot frees; the buffer holds what the predicted prefetch asks for, and
 * never more than the capacity allows. */
#include "buf.h"
#include "client.h"
#include "clock.h"
#include "error.h"
#include "failpoint.h"
#include "jobrow.h"
#include "listener.h"
#include "maintain.h"
#include "metawatch.h"
#include "claim.h"
#include "fenced.h"
#include "pool.h"
#include "schedule.h"
#include "startq.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A job whose execution takes more than this many claim round trips is
 * "long": it is never claimed beyond free slots. */
#define LONG_JOB_RTTS 10.0
#define EWMA          0.2

typedef struct wtype {
	const sq_type_conf *conf;
	sq_handler fn;
	void *arg;
	int conc;
	sq_startq buffer; /* claimed, `starting`, in claim order */
	int running;
	int handed;     /* buffered jobs handed to the pool (sq_pool_hand) */
	int starts_out; /* buffered jobs whose start is in a round out */
	double exec_ms;
	int have_exec;
	int had_work;  /* the last claim gave jobs of this type */
	double *freed; /* when each free slot freed (a ring of conc entries) */
	int nfreed, freed_head;
	double idle_s, exec_s; /* slot time: waiting for a refill; running */
	sq_worker_type_stats st;
} wtype;

struct sq_worker {
	const sq_config *cfg;
	sq_client *c;
	sq_worker_opts opts;
	char id[128];
	wtype types[SQ_WORKER_MAX_TYPES];
	int ntypes;
	int conc_total;
	sq_pool pool;
	int pool_started;
	int wake[2];
	struct event_base *base;
	struct event *wake_ev, *timer_ev, *sig_ev[2];
	int wake_armed;       /* wake_ev is added (see listen_for_finished) */
	sq_listen_set listen; /* with opts.listen: wake-ups from enqueues */
	atomic_int stop_req, stop_now;
	int stopping, released;
	double grace_deadline;
	/* each shard's round (tick_state), one out at a time per shard; the
	 * shards' rounds go on on their own (inflight: how many are out).
	 * hold: no round begins (a step that needs every shard's connection
	 * waits for the ones out, quiet_steps) */
	struct tick_state *rounds;
	int inflight, hold;
	/* jobs the claims out asked for (of which to start at once), per type;
	 * results and starts of buffered jobs in rounds out: held for them */
	int reserved[SQ_WORKER_MAX_TYPES], reserved_start[SQ_WORKER_MAX_TYPES];
	int results_out;
	/* next_claim_at[s]: shard s's next claim (a poll, backing off by
	 * poll_delay_ms[s] while its polls find nothing). A NOTIFY marks its
	 * shard in woke[]: its next round claims at once, leaving the poll's
	 * schedule alone. */
	double next_claim_at[SQ_MAX_SHARDS], poll_delay_ms[SQ_MAX_SHARDS];
	unsigned char woke[SQ_MAX_SHARDS];
	/* a shard whose last claim failed in its round's one transaction gets
	 * its writes in a transaction of their own until a claim there works
	 * again: a claim that keeps failing does not hold its writes back */
	unsigned char split[SQ_MAX_SHARDS];
	double rtt_ms;
	int have_rtt;
	sq_task *running;  /* list through run_next */
	sq_task *pending;  /* finished, whose result is not yet written */
	int npending;      /* in that list */
	int local_started; /* jobs started on a free slot since the last tick */
	double next_report;
	uint64_t claims, db_errors;
	char last_error[256];
	pthread_mutex_t stats_mu;
	sq_worker_stats snap;
	sq_maintainer *maint;    /* history maintenance, every maintain_interval */
	sq_metawatch *metawatch; /* opts.meta_log's watch on the meta database */
	sq_sched *sched;         /* periodic jobs ([schedule NAME]); NULL: none */
};

static void note_errorf(sq_worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_error(sq_worker *w, const sq_error *e);

void sq_worker_opts_init(sq_worker_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->buffer = -1;
	o->poll_min_ms = 20;
	o->poll_max_ms = 1000;
	o->grace_ms = 30000;
}

const char *sq_worker_id(const sq_worker *w)
{
	return w->id;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	char buf[256];
	(void)what;
	(void)arg;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	sq_worker *w = arg;
	(void)sig;
	(void)what;
	if (atomic_load(&w->stop_req))
		atomic_store(&w->stop_now, 1);
	atomic_store(&w->stop_req, 1);
}

/* A NOTIFY on shard s woke this worker, or its LISTEN was answered
 * (sq_listen_set): the next tick claims there at once. */
static void on_woke(void *arg, int s)
{
	sq_worker *w = arg;
	w->woke[s] = 1;
}

static void on_listen_failed(void *arg, const sq_error *e)
{
	note_error(arg, e);
}

void sq_worker_stop(sq_worker *w, int at_once)
{
	char b = 1;
	if (at_once)
		atomic_store(&w->stop_now, 1);
	atomic_store(&w->stop_req, 1);
	ssize_t r = write(w->wake[1], &b, 1);
	(void)r;
}

static int predicted_prefetch(const sq_worker *w, const wtype *t);
static struct tick_state *rounds_new(sq_worker *w);

/* The worker's LISTEN connections, on every pass: what they register
 * (sq_listener, self) is, per type, what this worker takes when idle, its
 * slots and its prefetch; none when that does not fit (then every NOTIFY
 * wakes it). */
static void relisten(sq_worker *w, double now)
{
	char self[sizeof(w->listen.l[0].self)];
	size_t len = 0;
	if (!w->opts.listen)
		return;
	for (int t = 0; t < w->ntypes && len < sizeof(self); t++)
		len += (size_t)snprintf(self + len, sizeof(self) - len, "%s%08x:%d", t ? " " : "",
					sq_wake_type_hash(w->types[t].conf->name),
					w->types[t].conc + predicted_prefetch(w, &w->types[t]));
	if (len >= sizeof(self))
		len = 0;
	self[len] = '\0';
	sq_listen_set_tick(&w->listen, now, sq_client_answer_wait_of(w->c), self);
}

sq_status sq_worker_create(const sq_config *cfg, const sq_worker_opts *opts, sq_worker **out,
			   sq_error *err)
{
	sq_worker *w = calloc(1, sizeof(*w));
	sq_status st;
	*out = NULL;
	if (!w)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	w->cfg = cfg;
	if (opts)
		w->opts = *opts;
	else
		sq_worker_opts_init(&w->opts);
	if (w->opts.poll_min_ms <= 0)
		w->opts.poll_min_ms = 20;
	if (w->opts.poll_max_ms < w->opts.poll_min_ms)
		w->opts.poll_max_ms = w->opts.poll_min_ms;
	if (w->opts.worker_id && *w->opts.worker_id) {
		if (strlen(w->opts.worker_id) >= sizeof(w->id)) {
			free(w);
			return sq_err(err, SQ_EINVAL, "worker id is longer than %zu bytes",
				      sizeof(w->id) - 1);
		}
		if (!sq_utf8_valid(w->opts.worker_id)) {
			free(w);
			return sq_err(err, SQ_EINVAL, "the worker id is not valid UTF-8");
		}
		snprintf(w->id, sizeof(w->id), "%s", w->opts.worker_id);
	} else {
		char host[64] = "host";
		gethostname(host, sizeof(host) - 1);
		snprintf(w->id, sizeof(w->id), "%s-%d", host, (int)getpid());
	}
	w->opts.worker_id = NULL;
	pthread_mutex_init(&w->stats_mu, NULL);
	w->wake[0] = w->wake[1] = -1;
	if (pipe(w->wake) || fcntl(w->wake[0], F_SETFL, O_NONBLOCK) ||
	    fcntl(w->wake[1], F_SETFL, O_NONBLOCK)) {
		sq_worker_destroy(w);
		return sq_err(err, SQ_ENOMEM, "cannot make the wake-up pipe: %s", strerror(errno));
	}
	w->base = event_base_new();
	if (!w->base) {
		sq_worker_destroy(w);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	w->wake_ev = event_new(w->base, w->wake[0], EV_READ | EV_PERSIST, on_wake, w);
	w->timer_ev = evtimer_new(w->base, on_timer, w);
	event_add(w->wake_ev, NULL);
	w->wake_armed = 1;
	/* a shard that is down does not stop the worker: its writes and
	 * claims connect again on every tick until it is back, and a connect
	 * to a host that does not answer holds a tick up for 50 ms at most
	 * (the other shards' heartbeats must go out) */
	if ((st = sq_client_open(cfg, SQ_OPEN_ALLOW_DOWN, &w->c, err)) != SQ_OK) {
		sq_worker_destroy(w);
		return st;
	}
	sq_client_connect_wait(w->c, SQ_LOOP_CONNECT_WAIT_S);
	if (!(w->rounds = rounds_new(w))) {
		sq_worker_destroy(w);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	w->listen.woke = on_woke;
	w->listen.failed = on_listen_failed;
	w->listen.arg = w;
	if ((st = sq_listen_set_init(&w->listen, cfg, w->base, err)) != SQ_OK) {
		sq_worker_destroy(w);
		return st;
	}
	/* a shard whose connection is up answers within connect_timeout:
	 * listening when sq_worker_create returns */
	if (w->opts.listen)
		sq_listen_set_open(&w->listen, w->c, (double)cfg->connect_timeout_ms / 1000.0);
	w->maint = sq_maintainer_start(cfg, NULL, NULL);
	/* the loop never waits for the meta database (the map's version is
	 * polled on the LISTEN connection), so it cannot tell when it stops
	 * answering: a watch of its own asks it */
	if (w->opts.meta_log &&
	    !(w->metawatch = sq_metawatch_start(cfg, w->opts.meta_log, w->opts.meta_log_arg))) {
		sq_worker_destroy(w);
		return sq_err(err, SQ_ENOMEM, "cannot start the watch on the meta database");
	}
	w->sched = sq_sched_new(cfg, w->id);
	*out = w;
	return SQ_OK;
}

sq_status sq_worker_add(sq_worker *w, const char *type, int concurrency, sq_handler fn, void *arg,
			sq_error *err)
{
	const sq_type_conf *t = type ? sq_config_type(w->cfg, type) : NULL;
	if (!t)
		return sq_err(err, SQ_EINVAL, "unknown task type '%s'; add a [type %s] section",
			      type ? type : "(null)", type ? type : "");
	if (concurrency < 1 || concurrency > 1024)
		return sq_err(err, SQ_EINVAL, "concurrency of '%s' must be 1..1024, not %d", type,
			      concurrency);
	if (!fn)
		return sq_err(err, SQ_EINVAL, "type '%s': the handler is NULL", type);
	if (w->pool_started)
		return sq_err(err, SQ_ESTATE, "type '%s': add every handler before the worker runs",
			      type);
	for (int i = 0; i < w->ntypes; i++)
		if (w->types[i].conf == t)
			return sq_err(err, SQ_EINVAL, "type '%s' has a handler already", type);
	if (w->ntypes == SQ_WORKER_MAX_TYPES)
		return sq_err(err, SQ_EINVAL, "at most %d types per worker", SQ_WORKER_MAX_TYPES);
	wtype *wt = &w->types[w->ntypes++];
	memset(wt, 0, sizeof(*wt));
	wt->conf = t;
	wt->fn = fn;
	wt->arg = arg;
	wt->conc = concurrency;
	wt->freed = calloc((size_t)concurrency, sizeof(double));
	if (!wt->freed) {
		w->ntypes--;
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	snprintf(wt->st.type, sizeof(wt->st.type), "%s", t->name);
	wt->st.concurrency = concurrency;
	w->conc_total += concurrency;
	/* a shard that answers nothing does not hold the others' heartbeats
	 * up past their leases (docs/worker.md, "A shard that stops answering") */
	sq_client_answer_wait_for_lease(w->c, t);
	return SQ_OK;
}

/* The default buffer: what the prefetch may hold, never the amount held
 * (long jobs are never held beyond free slots). */
#define DEFAULT_BUFFER_MIN 1024

static int buffer_max(const sq_worker *w)
{
	if (w->opts.buffer >= 0)
		return w->opts.buffer;
	return w->conc_total > DEFAULT_BUFFER_MIN ? w->conc_total : DEFAULT_BUFFER_MIN;
}

static int capacity(const sq_worker *w)
{
	return w->conc_total + buffer_max(w);
}

/* Jobs to hold beyond free slots: enough to cover a claim round trip at
 * the observed execution time; none for long jobs. */
static int predicted_prefetch(const sq_worker *w, const wtype *t)
{
	int p = w->opts.min_prefetch;
	if (t->have_exec && w->have_rtt) {
		double rtt = w->rtt_ms > 0.05 ? w->rtt_ms : 0.05;
		double exec = t->exec_ms > 0.01 ? t->exec_ms : 0.01;
		if (exec <= LONG_JOB_RTTS * rtt) {
			/* each slot finishes rtt/exec jobs while a claim is out; keep
			 * twice that, plus a slot's worth for the start round trip */
			double want = t->conc * (2.0 * rtt / exec + 1.0);
			int q = (int)ceil(want);
			if (q > p)
				p = q;
		}
	}
	if (p > buffer_max(w))
		p = buffer_max(w);
	return p;
}

static void task_free(sq_task *k)
{
	k->magic = 0;
	sq_job_clear(&k->job);
	free(k->err);
	free(k);
}

/* The running list is doubly linked: a tick with 1,000 handler threads
 * takes back hundreds of finished tasks, and finding each by walking the
 * list costs a tenth of the worker's CPU (perf in bench/profile default). */
static void running_push(sq_worker *w, sq_task *k)
{
	k->run_prev = NULL;
	k->run_next = w->running;
	if (w->running)
		w->running->run_prev = k;
	w->running = k;
}

static void running_remove(sq_worker *w, sq_task *k)
{
	if (k->run_prev)
		k->run_prev->run_next = k->run_next;
	else if (w->running == k)
		w->running = k->run_next;
	else
		return; /* not in the list */
	if (k->run_next)
		k->run_next->run_prev = k->run_prev;
	k->run_prev = k->run_next = NULL;
}

static void begin_unstarted(sq_worker *w, sq_task *k, double now);

/* Finished tasks come back from the pool: their slot frees, and their
 * result waits in `pending` until the shards have it. A task whose lease
 * was found lost while it ran is discarded: another worker owns the job. */
static void take_finished(sq_worker *w)
{
	sq_task *started, *stale;
	sq_task *done = sq_pool_take_done(&w->pool, &started, &stale), *next;
	double now = sq_mono_s();
	/* handed jobs the pool started on the slot of a job of the same type
	 * that finished (in `done` now, or in a later take): running, with
	 * their start still to be written. First, so that a job both started
	 * and finished since the last take leaves the running list below. */
	for (sq_task *k = started; k; k = next) {
		next = k->run_next;
		w->types[k->type].handed--;
		begin_unstarted(w, k, now);
		running_push(w, k);
	}
	/* handed jobs past their deadline: back to the buffer, to start with
	 * a written start (which finds out whether the lease is still ours) */
	for (sq_task *k = stale; k; k = next) {
		next = k->next;
		w->types[k->type].handed--;
		sq_startq_unpop(&w->types[k->type].buffer, k);
	}
	for (sq_task *k = done; k; k = next) {
		wtype *t = &w->types[k->type];
		double ms = (k->finished - k->started) * 1000.0;
		next = k->next;
		running_remove(w, k);
		t->running--;
		t->exec_ms = t->have_exec ? (1 - EWMA) * t->exec_ms + EWMA * ms : ms;
		t->have_exec = 1;
		t->exec_s += k->finished - k->started;
		/* its slot frees, unless the pool gave it a handed job at once */
		if (!k->swapped && t->nfreed < t->conc)
			t->freed[(t->freed_head + t->nfreed++) % t->conc] = k->finished;
		/* its result counts unless a write of it answered lost, or it
		 * ended after its stop-by: another worker may run the job from
		 * then on (a write would be fenced, but a completion from
		 * `starting` could still match). check_leases may have marked a
		 * run that ended in time, between its end and this take. */
		int late = k->finished >= atomic_load(&k->stop_by);
		if (late && !k->answered_lost && !k->lost)
			note_errorf(w,
				    "job %lld: it ended after its lease ran out here (no heartbeat "
				    "got through in time); its result is discarded",
				    (long long)k->job.id);
		k->lost = k->answered_lost || late;
		if (k->lost) {
			t->st.lost++;
			if (k->inflight)
				k->orphan = 1; /* freed when its round answers */
			else
				task_free(k);
			continue;
		}
		k->retry_at = k->moving_since = 0;
		k->moving_tries = k->refused = k->looked = 0;
		k->next = w->pending;
		w->pending = k;
		w->npending++;
	}
}

/* Shutdown: every buffered job goes back to ready at once. */
static void release_buffered(sq_worker *w)
{
	size_t n = 0, i = 0;
	for (sq_task *k = sq_pool_unhand_all(&w->pool), *next; k; k = next) {
		next = k->next;
		w->types[k->type].handed--;
		sq_startq_push(&w->types[k->type].buffer, k);
	}
	for (int t = 0; t < w->ntypes; t++)
		n += (size_t)w->types[t].buffer.n;
	if (!n)
		return;
	sq_task **ks = malloc(n * sizeof(*ks));
	sq_job_ref *refs = malloc(n * sizeof(*refs));
	sq_status *out = malloc(n * sizeof(*out));
	sq_error err;
	if (ks && refs && out) {
		for (int t = 0; t < w->ntypes; t++)
			for (sq_task *k; (k = sq_startq_pop(&w->types[t].buffer)) != NULL; i++) {
				ks[i] = k;
				refs[i].id = k->job.id;
				refs[i].attempt = k->job.attempt;
			}
		if (sq_release(w->c, w->id, refs, n, out, &err) == SQ_OK)
			for (i = 0; i < n; i++)
				w->types[ks[i]->type].st.released += out[i] == SQ_OK;
		/* unreleased ones come back when their starting lease expires */
		for (i = 0; i < n; i++)
			task_free(ks[i]);
	}
	free(ks);
	free(refs);
	free(out);
}

/* A job starts running: to the pool, with its heartbeat due at hb_due
 * (half its lease: the execution lease after a start, the starting lease
 * when it was claimed straight to running). */
static void run_task(sq_worker *w, sq_task *k, double now, double hb_due)
{
	wtype *wt = &w->types[k->type];
	if (wt->nfreed) {
		/* the slot sat idle from its last job's end until now */
		double gap = now - wt->freed[wt->freed_head];
		wt->freed_head = (wt->freed_head + 1) % wt->conc;
		wt->nfreed--;
		if (gap > 0)
			wt->idle_s += gap;
	}
	k->hb_due = hb_due;
	k->retry_at = k->moving_since = 0;
	k->moving_tries = k->refused = 0;
	running_push(w, k);
	wt->running++;
	sq_pool_submit(&w->pool, k);
}

static double exec_hb(const wtype *wt, double now)
{
	return now + (double)wt->conf->execution_timeout_ms / 2000.0;
}

/*
 * When a run under a lease of lease_ms, set by a write sent at `from` (or
 * later), must have stopped: the shard's lease ends at the shard's now()
 * when the write ran plus lease_ms, never before from + lease_ms here (the
 * clocks run at the same rate); another worker's claim may take the job
 * from then on. A quarter of the lease (at most 15 s) is left for the run
 * to stop: a handler sees it in sq_job_lease_lost, and `shardq work
 * --exec` kills the command's processes. The heartbeat is due at half the
 * lease, so a quarter of it is left for the heartbeat to get through.
 */
static double lease_stop_by(double from, int64_t lease_ms)
{
	double lease = (double)lease_ms / 1000.0, margin = lease / 4;
	if (margin > 15.0)
		margin = 15.0;
	return from + lease - margin;
}

static void lease_set(sq_task *k, double from, int64_t lease_ms)
{
	atomic_store(&k->stop_by, lease_stop_by(from, lease_ms));
}

int sq_job_lease_lost(const sq_job *job)
{
	/* Only a job a worker passed to a handler has a task around it. Any
	 * other (one of sq_claim or sq_get_job, a copy) would be answered from
	 * whatever memory lies before it: a program error, answered -1 rather
	 * than at random (nonzero, so a run that asks stops). */
	sq_task *k = job ? (sq_task *)((char *)(uintptr_t)job - offsetof(sq_task, job)) : NULL;
	if (!k || k->magic != SQ_TASK_MAGIC)
		return -1;
	if (atomic_load(&k->gone))
		return 1;
	if (sq_mono_s() < atomic_load(&k->stop_by))
		return 0;
	atomic_store(&k->gone, 1);
	return 1;
}

/* Running jobs whose lease this worker can no longer vouch for: answered
 * lost (gone), or past stop_by with no heartbeat through (a shard down, a
 * loop held up). Their runs are told to stop, no more heartbeats go out
 * for them, and their results are discarded when they end. */
static void check_leases(sq_worker *w, double now)
{
	for (sq_task *k = w->running; k; k = k->run_next) {
		if (k->lost)
			continue;
		int gone = atomic_load(&k->gone);
		if (!gone && now < atomic_load(&k->stop_by))
			continue;
		atomic_store(&k->gone, 1);
		k->lost = 1;
		if (!gone)
			note_errorf(w,
				    "job %lld: its lease runs out with no %s through to its shard; "
				    "its run is told to stop and its result will be discarded (the "
				    "job comes back to a worker after the lease)",
				    (long long)k->job.id, k->unstarted ? "start" : "heartbeat");
	}
}

/* A buffered job starts on a free slot before its `running` is written.
 * Until then the starting lease covers the run, which is why only a job
 * with at least half of that lease left (local_until) starts this way. Its
 * start goes out as a heartbeat would, and is answered like one (lost: the
 * result is discarded), once the job has run START_WRITE_S, or when half
 * its starting lease is left (local_until: where a job claimed straight to
 * running heartbeats), whichever is first. A job that finishes before then
 * is completed or failed straight from `starting`, and its start is never
 * written: one update per job fewer, a non-HOT one that writes every index
 * of the row. */
#define START_WRITE_S 1.0
static double start_write_due(const sq_task *k, double now)
{
	double due = now + START_WRITE_S;
	return due < k->local_until ? due : k->local_until;
}

static void begin_unstarted(sq_worker *w, sq_task *k, double now)
{
	wtype *wt = &w->types[k->type];
	k->unstarted = 1;
	k->hb_due = start_write_due(k, now);
	k->retry_at = k->moving_since = 0;
	k->moving_tries = k->refused = 0;
	wt->running++;
	w->local_started++;
}

/*
 * Free slots take buffered jobs at once, without a round trip (the start
 * is written afterwards; see begin_unstarted); the other buffered jobs
 * that may start that way are handed to the pool, whose threads take them
 * the moment a job of their type finishes, even while this loop waits on
 * the shards. A handed job past its deadline comes back (take_finished)
 * and starts the old way, by a written start first.
 */
/* Type t's slots that nothing holds: not running, nor waiting for a start
 * written (starts_out), nor reserved by a claim out for the jobs it starts
 * at once (reserved_start): those come back `running`. */
static int free_slots(const sq_worker *w, int t)
{
	const wtype *wt = &w->types[t];
	return wt->conc - wt->running - wt->starts_out - w->reserved_start[t];
}

static void start_fresh(sq_worker *w, double now)
{
	if (w->stopping)
		return;
	for (int t = 0; t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		while (free_slots(w, t) > 0) {
			sq_task *k = sq_startq_take(&wt->buffer, now, 1, NULL, NULL);
			if (!k && wt->handed && (k = sq_pool_unhand_one(&w->pool, t)) != NULL) {
				wt->handed--;
				if (now >= k->local_until) {
					sq_startq_unpop(&wt->buffer, k);
					continue;
				}
			}
			if (!k)
				break;
			run_task(w, k, now, start_write_due(k, now));
			k->unstarted = 1;
			w->local_started++;
		}
		for (sq_task *k; (k = sq_startq_take(&wt->buffer, now, 1, NULL, NULL)) != NULL;) {
			wt->handed++;
			sq_pool_hand(&w->pool, k);
		}
	}
}

/* Jobs to hold beyond free slots, within the capacity left: see
 * predicted_prefetch. `start` gets how many may start at once. */
static int claim_limits(sq_worker *w, sq_claim_req *reqs, const int *promoting)
{
	int room = capacity(w), total = 0, npending = 0;
	int slots[SQ_WORKER_MAX_TYPES], extra[SQ_WORKER_MAX_TYPES];
	npending = w->npending;
	/* finished jobs whose result is not written yet still hold their row:
	 * the capacity is never exceeded, even while results are in flight;
	 * nor by the claims out, nor the starts out */
	room -= npending + w->results_out;
	for (int t = 0; t < w->ntypes; t++)
		room -= w->types[t].running + w->types[t].buffer.n + w->types[t].handed +
			w->types[t].starts_out + w->reserved[t];
	/* first every type's free slots (jobs that start at once), then the
	 * prefetch from what is left, beginning with a different type each
	 * time: one type's prefetch never starves another type's free slots */
	for (int t = 0; t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		int free_now = free_slots(w, t) - promoting[t];
		int pf = predicted_prefetch(w, wt);
		int buffered = wt->buffer.n + wt->handed - promoting[t] + w->reserved[t] -
			       w->reserved_start[t];
		wt->st.prefetch = pf;
		slots[t] = free_now > 0 ? free_now : 0;
		if (slots[t] > room)
			slots[t] = room;
		room -= slots[t];
		extra[t] = pf - (buffered > 0 ? buffered : 0);
		if (extra[t] < 0)
			extra[t] = 0;
	}
	for (int i = 0; i < w->ntypes; i++) {
		int t = (int)((w->claims + (uint64_t)i) % (uint64_t)w->ntypes);
		if (extra[t] > room)
			extra[t] = room;
		room -= extra[t];
	}
	for (int t = 0; t < w->ntypes; t++) {
		reqs[t].type = w->types[t].conf->name;
		reqs[t].limit = slots[t] + extra[t];
		reqs[t].start = slots[t];
		total += reqs[t].limit;
	}
	return total;
}

/* The worker retries failed database work on its own; the error is kept
 * for its figures, so an operator sees why it is not making progress (and
 * `shardq work -v` prints it). */
static void note_error(sq_worker *w, const sq_error *e)
{
	w->db_errors++;
	sq_utf8_clean(w->last_error, sizeof(w->last_error), e->msg, strlen(e->msg));
}

static void note_errorf(sq_worker *w, const char *fmt, ...)
{
	sq_error e;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	e.code = SQ_EDB;
	note_error(w, &e);
}

/* ---- one tick's writes --------------------------------------------------- */

enum { WB_COMPLETE, WB_FAIL, WB_HEARTBEAT, WB_START, WB_N };
static const sq_fenced_kind wb_kind[WB_N] = {SQ_FENCED_COMPLETE, SQ_FENCED_FAIL,
					     SQ_FENCED_HEARTBEAT, SQ_FENCED_START};
static const char *const wb_name[WB_N] = {"completion", "failure", "heartbeat", "start"};

/* A write that a shard refused on its own, found by isolate(): the marker
 * in out[] (no call answers SQ_EINVAL for a ref). */
#define WB_REFUSED SQ_EINVAL
/* A job's write refused this many times on its own is given up. */
#define MAX_REFUSALS 3
/* Seconds before a write that failed (not refused) is sent again. */
#define RETRY_S 0.1

/* The writes of one kind in a tick. */
typedef struct wbatch {
	sq_task **tasks;
	sq_job_ref *refs;
	sq_fail_req *fails; /* WB_FAIL: fails[i].ref == refs[i] */
	sq_status *out;
	size_t n;
} wbatch;

static int wbatch_alloc(wbatch *b, size_t cap)
{
	cap = cap ? cap : 1;
	b->n = 0;
	b->tasks = malloc(cap * sizeof(*b->tasks));
	b->refs = malloc(cap * sizeof(*b->refs));
	b->fails = malloc(cap * sizeof(*b->fails));
	b->out = malloc(cap * sizeof(*b->out));
	return b->tasks && b->refs && b->fails && b->out ? 0 : -1;
}

static void wbatch_free(wbatch *b)
{
	free(b->tasks);
	free(b->refs);
	free(b->fails);
	free(b->out);
}

static void wbatch_add(wbatch *b, int kind, sq_task *k)
{
	size_t i = b->n++;
	b->tasks[i] = k;
	b->refs[i].id = k->job.id;
	b->refs[i].attempt = k->job.attempt;
	if (kind == WB_FAIL) {
		b->fails[i].ref = b->refs[i];
		b->fails[i].error = k->err && k->err[0] ? k->err : "the handler failed";
		b->fails[i].permanent = k->result == SQ_RESULT_FAIL;
	}
	b->out[i] = SQ_EDB; /* not answered */
}

/* SQLSTATE classes of a failure that says nothing about the rows written:
 * the connection went, a serialization failure or deadlock, a resource
 * short, a lock or statement timeout, a shutdown. Anything else (bad data,
 * a constraint, a trigger's exception) is taken to be about a row. */
static int transient_state(const char *st)
{
	static const char *const cls[] = {"08", "25", "40", "53", "55", "57", "58", NULL};
	for (int i = 0; cls[i]; i++)
		if (!strncmp(st, cls[i], 2))
			return 1;
	return 0;
}

/* One group of refs of one kind on one shard, sent as a transaction of
 * its own while isolating. */
typedef struct igroup {
	int kind, shard, sent;
	size_t *ix; /* indices into the kind's batch */
	size_t n;
	int base, end; /* its statements in the shard's pipeline */
	sq_fenced_pending *p;
	sq_job_ref *refs;
	sq_fail_req *fails;
	sq_status *o;
} igroup;

/* A shard refused the tick's write transaction (a statement failed for a
 * reason about the rows, not the shard): every write of it is sent again
 * in smaller transactions, first one per kind, then halves of what still
 * fails, until the refused refs stand alone (marked WB_REFUSED); every
 * other write commits. log2(n) round trips for one bad ref among n; a
 * bounded number of rounds, so a shard that refuses everything costs a
 * bounded time and its writes are sent again on a later tick. */
#define ISO_PER_SHARD (SQ_PIPE_MAX / 3) /* three statements a group */
#define ISO_ROUNDS    32

static void iso_drop(igroup *g)
{
	free(g->refs);
	free(g->fails);
	free(g->o);
	g->refs = NULL;
	g->fails = NULL;
	g->o = NULL;
	g->p = NULL;
	g->sent = 0;
}

static int iso_push(sq_worker *w, wbatch *b, igroup *g)
{
	sq_client *c = w->c;
	wbatch *wb = &b[g->kind];
	g->refs = malloc(g->n * sizeof(*g->refs));
	g->o = malloc(g->n * sizeof(*g->o));
	g->fails = g->kind == WB_FAIL ? malloc(g->n * sizeof(*g->fails)) : NULL;
	if (!g->refs || !g->o || (g->kind == WB_FAIL && !g->fails)) {
		iso_drop(g);
		return -1;
	}
	for (size_t j = 0; j < g->n; j++) {
		g->refs[j] = wb->refs[g->ix[j]];
		if (g->fails)
			g->fails[j] = wb->fails[g->ix[j]];
	}
	g->base = c->shards[g->shard].qn;
	g->p = sq_fenced_push(c, wb_kind[g->kind], w->id, g->refs, g->fails, g->n);
	g->end = c->shards[g->shard].qn;
	if (!g->p) {
		iso_drop(g);
		return -1;
	}
	g->sent = 1;
	return 0;
}

static void isolate(sq_worker *w, wbatch *b, int shard)
{
	sq_client *c = w->c;
	sq_pgconn *pc = &c->shards[shard];
	size_t total = 0, ncur = 0, used = 0;
	for (int k = 0; k < WB_N; k++)
		total += b[k].n;
	igroup *cur = calloc(total + 1, sizeof(*cur)), *nxt = calloc(total + 1, sizeof(*nxt));
	size_t *ix = malloc((total + 1) * sizeof(*ix));
	if (!cur || !nxt || !ix)
		goto out; /* sent again next round */
	/* the round's writes that the map still sends to this shard (the
	 * others are not answered: sent again where it says now) */
	for (int k = 0; k < WB_N; k++) {
		igroup *g = &cur[ncur];
		g->kind = k;
		g->shard = shard;
		g->ix = ix + used;
		g->n = 0;
		for (size_t i = 0; i < b[k].n; i++)
			if (sq_shard_of_id(c, b[k].refs[i].id) == shard)
				g->ix[g->n++] = i;
		used += g->n;
		ncur += g->n > 0;
	}
	for (int round = 0; ncur && round < ISO_ROUNDS; round++) {
		int per = 0;
		size_t nnext = 0;
		sq_error err;
		sq_pgconn_reset(pc);
		for (size_t i = 0; i < ncur; i++)
			if (per < ISO_PER_SHARD && !iso_push(w, b, &cur[i]))
				per++;
		if (sq_pgconn_run(c->base, &pc, 1, &err) != SQ_OK)
			note_error(w, &err);
		for (size_t i = 0; i < ncur; i++) {
			igroup *g = &cur[i];
			wbatch *wb = &b[g->kind];
			sq_error e;
			if (!g->sent) { /* the shard's pipeline was full: next round */
				nxt[nnext++] = *g;
				continue;
			}
			sq_fenced_collect(c, g->p, g->o);
			g->p = NULL;
			const char *st = NULL;
			if (sq_pgconn_range_error(pc, g->base, g->end, &e) == SQ_OK) {
				for (size_t j = 0; j < g->n; j++)
					wb->out[g->ix[j]] = g->o[j];
			} else if (!(st = sq_pgconn_range_sqlstate(pc, g->base, g->end)) ||
				   transient_state(st)) {
				note_error(w, &e); /* about the shard: next tick */
			} else if (g->n > 1) {
				igroup *h = &nxt[nnext++], *h2 = &nxt[nnext++];
				memset(h, 0, sizeof(*h));
				h->kind = g->kind;
				h->shard = g->shard;
				h->ix = g->ix;
				h->n = g->n / 2;
				*h2 = *h;
				h2->ix = g->ix + h->n;
				h2->n = g->n - h->n;
			} else {
				sq_task *k = wb->tasks[g->ix[0]];
				wb->out[g->ix[0]] = WB_REFUSED;
				k->refused++;
				note_errorf(w, "job %lld: shard %s refused its %s (%d of %d): %s",
					    (long long)k->job.id, c->cfg->shards[g->shard].id,
					    wb_name[g->kind], k->refused, MAX_REFUSALS, e.msg);
			}
			iso_drop(g);
		}
		igroup *swap = cur;
		cur = nxt;
		nxt = swap;
		ncur = nnext;
		sq_pgconn_reset(pc);
	}
out:
	for (size_t i = 0; cur && i < ncur; i++)
		iso_drop(&cur[i]);
	free(cur);
	free(nxt);
	free(ix);
}

/* A write answered "moving" (its partition is frozen for a move) or
 * "moved": it waits, without holding the loop, and is sent again on a
 * later tick (20 ms, doubling to 0.5 s; 1 s once moving_wait has passed,
 * which is noted: a mover may be stuck). Other writes do not wait for it. */
#define MOVING_NOTED (1 << 20) /* moving_tries once the long wait is noted */

static void wait_moving(sq_worker *w, sq_task *k, double now)
{
	double waited, delay;
	if (!k->moving_since)
		k->moving_since = now;
	waited = now - k->moving_since;
	delay = 0.02 * (double)(1 << (k->moving_tries < 5 ? k->moving_tries : 5));
	if (delay > 0.5)
		delay = 0.5;
	if (waited >= (double)w->cfg->moving_wait_ms / 1000.0) {
		if (k->moving_tries < MOVING_NOTED) /* once per wait */
			note_errorf(w,
				    "job %lld: its partition %u is still moving after %.0fs; is a "
				    "mover stuck? see shardq moves",
				    (long long)k->job.id,
				    sq_partition_of_id(k->job.id) & (w->c->partitions - 1), waited);
		k->moving_tries = MOVING_NOTED;
		delay = 1.0;
	} else {
		k->moving_tries++;
	}
	k->retry_at = now + delay;
}

static void not_moving(sq_task *k)
{
	k->moving_since = 0;
	k->moving_tries = 0;
}

static int is_moving(sq_status st)
{
	return st == SQ_EMOVING || st == SQ_EMOVED;
}

/* The answer to a running job's heartbeat, or to the start of a job that
 * began on a free slot (unstarted): the lease is extended (or set), lost
 * (the result will be discarded), or the write waits. Returns 1 if its
 * partition was found moved. */
static int running_written(sq_worker *w, sq_task *k, sq_status st, double now)
{
	const char *what = k->unstarted ? "start" : "heartbeat";
	if (st == SQ_OK) {
		not_moving(k);
		k->unstarted = 0;
		k->hb_due = exec_hb(&w->types[k->type], now);
		lease_set(k, now, w->types[k->type].conf->execution_timeout_ms);
	} else if (st == SQ_ELOST) {
		/* its result will be discarded, its run told to stop */
		k->lost = k->answered_lost = 1;
		atomic_store(&k->gone, 1);
	} else if (is_moving(st)) {
		wait_moving(w, k, now);
		k->hb_due = k->retry_at;
		return st == SQ_EMOVED;
	} else if (st == WB_REFUSED && k->refused >= MAX_REFUSALS) {
		note_errorf(w,
			    "job %lld: its %s was refused %d times; no more are sent (its lease "
			    "runs out unless it finishes first)",
			    (long long)k->job.id, what, k->refused);
		k->hb_due = INFINITY;
	} else {
		not_moving(k);
		k->hb_due = now + RETRY_S;
	}
	return 0;
}

/* ---- one shard's round, phase by phase ----------------------------------- */

/* What one round carries from phase to phase: the writes and the claim
 * sent to one shard, from the send to the answer. Each shard has one
 * (w->rounds[s]), busy while it is out; the others go on meanwhile. */
typedef struct tick_state {
	sq_worker *w;
	int shard;
	int busy; /* sent, not answered yet */
	double now;
	wbatch b[WB_N];
	/* per type: buffered jobs whose start this round writes, for free slots */
	int promoting[SQ_WORKER_MAX_TYPES];
	sq_claim_req reqs[SQ_WORKER_MAX_TYPES];
	int woke_only; /* the claim answers a NOTIFY, not the shard's poll */
	int asking;    /* jobs the claim asks for; 0: no claim this round */
	int holding;   /* what it asks for is held for it (w->reserved) */
	sq_fenced_pending *p[WB_N];
	sq_claim_pending *pk;
	int wend;            /* the shard's statements before its claim */
	unsigned char split; /* its writes in a transaction of their own */
	sq_status sent;
	double t0, rtt_ms; /* when the pipeline was sent; the round trip */
	double at;         /* when the answer was read: jobs start from here */
	/* bad: the writes rolled back; refused: for a reason about the rows
	 * (isolated); claim_lost: the claim aborted by a write */
	unsigned char bad, refused;
	int claim_lost;
	sq_job *jobs; /* what the claim took */
	size_t nj;
	sq_status cst;
	sq_task *keep; /* results that wait for a later round (w->pending) */
	int moved;     /* a write found its partition moved: reload the map */
	sq_worker_tick tk;
} tick_state;

/* A round for each of w's shards, none out. */
static tick_state *rounds_new(sq_worker *w)
{
	tick_state *r = calloc((size_t)w->c->nshards, sizeof(*r));
	for (int s = 0; r && s < w->c->nshards; s++) {
		r[s].w = w;
		r[s].shard = s;
	}
	return r;
}

/* The shard a task's writes go to, by the map as it is now. */
static int task_shard(const sq_worker *w, const sq_task *k)
{
	return sq_shard_of_id(w->c, k->job.id);
}

static int on_round_shard(const sq_task *k, const void *arg)
{
	const tick_state *ts = arg;
	return task_shard(ts->w, k) == ts->shard;
}

/* Whether shard s may begin a round: none of its own is out, and no step
 * that needs every connection (w->hold) waits. */
static int shard_free(const sq_worker *w, int s)
{
	return !w->hold && !w->rounds[s].busy;
}

/* Whether shard s's claim is due at `now`: its poll, or a NOTIFY. */
static int claim_due(const sq_worker *w, int s, double now)
{
	return now >= w->next_claim_at[s] || w->woke[s];
}

/* What ts's claim asked for is no longer held for it. */
static void unhold(sq_worker *w, tick_state *ts)
{
	for (int t = 0; ts->holding && t < w->ntypes; t++) {
		w->reserved[t] -= ts->reqs[t].limit;
		w->reserved_start[t] -= ts->reqs[t].start;
	}
	ts->holding = 0;
}

/* A claim out for longer than LATE_RTTS claim round trips (at least
 * LATE_MIN_S) is late (its shard slow, vacuuming, or not answering): what
 * it asked for is no longer held for it, so that it holds no other shard's
 * claims back. Should it still answer, a job it claimed straight to
 * running for which no slot is free waits in the pool's queue. */
#define LATE_RTTS  4.0
#define LATE_MIN_S 0.05
static void unhold_late(sq_worker *w, double now)
{
	double late = fmax(LATE_MIN_S, LATE_RTTS * w->rtt_ms / 1000.0);
	for (int s = 0; s < w->c->nshards; s++)
		if (w->rounds[s].holding && now - w->rounds[s].t0 > late)
			unhold(w, &w->rounds[s]);
}

/* What shard s's claim asks for (ts->reqs; the total returned): its part
 * of what the worker can take, shared by recent yield with the other
 * shards that claim now or have a claim out (each at least one job while
 * there is room: a shard is never skipped for a share rounded down), and
 * never more than is left once the claims out are counted. */
static int round_claim_limits(sq_worker *w, tick_state *ts)
{
	sq_client *c = w->c;
	sq_claim_req net[SQ_WORKER_MAX_TYPES], gross[SQ_WORKER_MAX_TYPES];
	unsigned char among[SQ_MAX_SHARDS];
	int total = 0;
	unhold_late(w, ts->now);
	if (claim_limits(w, net, ts->promoting) <= 0)
		return 0;
	for (int s = 0; s < c->nshards; s++)
		among[s] = w->rounds[s].busy ? w->rounds[s].holding
					     : shard_free(w, s) && claim_due(w, s, ts->now);
	for (int t = 0; t < w->ntypes; t++) {
		gross[t] = net[t];
		gross[t].limit += w->reserved[t];
		gross[t].start += w->reserved_start[t];
	}
	sq_claim_share(c, gross, (size_t)w->ntypes, among, ts->shard, ts->reqs);
	for (int t = 0; t < w->ntypes; t++) {
		sq_claim_req *r = &ts->reqs[t];
		r->limit = r->limit < net[t].limit ? r->limit : net[t].limit;
		r->start = r->start < net[t].start ? r->start : net[t].start;
		r->start = r->start < r->limit ? r->start : r->limit;
		total += r->limit;
	}
	return total;
}

/* Phase 1: what is due now on the round's shard (results, heartbeats,
 * starts of buffered jobs for free slots, a claim), counted per kind of
 * write in want[]. Returns 0 when there is nothing to do. */
static int tick_count(sq_worker *w, tick_state *ts, int claiming, size_t want[WB_N])
{
	double now = ts->now;
	int s = ts->shard;
	memset(ts->b, 0, sizeof(ts->b));
	memset(ts->promoting, 0, sizeof(ts->promoting));
	memset(want, 0, WB_N * sizeof(*want));
	for (sq_task *k = w->pending; k; k = k->next)
		if (!k->inflight && k->retry_at <= now && task_shard(w, k) == s)
			want[k->result == SQ_RESULT_DONE ? WB_COMPLETE : WB_FAIL]++;
	for (sq_task *k = w->running; k; k = k->run_next)
		if (!k->lost && !k->inflight && now >= k->hb_due && task_shard(w, k) == s)
			want[k->unstarted ? WB_START : WB_HEARTBEAT]++;
	for (int t = 0; claiming && t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		int f = free_slots(w, t);
		int ready = f > 0 ? sq_startq_ready(&wt->buffer, now, on_round_shard, ts) : 0;
		ts->promoting[t] = f > 0 ? (f < ready ? f : ready) : 0;
		want[WB_START] += (size_t)ts->promoting[t];
	}
	ts->woke_only = claiming && now < w->next_claim_at[s] && w->woke[s];
	ts->asking = claiming && claim_due(w, s, now) ? round_claim_limits(w, ts) : 0;
	return want[WB_COMPLETE] || want[WB_FAIL] || want[WB_HEARTBEAT] || want[WB_START] ||
	       ts->asking;
}

/* The batch a pending result goes to. */
static int result_kind(const sq_task *k)
{
	return k->result == SQ_RESULT_DONE ? WB_COMPLETE : WB_FAIL;
}

static void batch_take(sq_worker *w, tick_state *ts, int kind, sq_task *k)
{
	wbatch_add(&ts->b[kind], kind, k);
	k->inflight = 1;
	(void)w;
}

/* Phase 2a: the writes counted in phase 1 go into their batches, and are
 * in flight until the round's answer: results due now leave `pending`,
 * buffered jobs to start leave the buffer. */
static void tick_gather(sq_worker *w, tick_state *ts)
{
	double now = ts->now;
	int s = ts->shard;
	for (sq_task **pp = &w->pending; *pp;) {
		sq_task *k = *pp;
		if (!k->inflight && k->retry_at <= now && task_shard(w, k) == s) {
			*pp = k->next;
			w->npending--;
			batch_take(w, ts, result_kind(k), k);
			w->results_out++;
		} else {
			pp = &k->next;
		}
	}
	for (sq_task *k = w->running; k; k = k->run_next)
		if (!k->lost && !k->inflight && now >= k->hb_due && task_shard(w, k) == s)
			batch_take(w, ts, k->unstarted ? WB_START : WB_HEARTBEAT, k);
	for (int t = 0; t < w->ntypes; t++)
		for (int i = 0; i < ts->promoting[t]; i++) {
			batch_take(w, ts, WB_START,
				   sq_startq_take(&w->types[t].buffer, now, 0, on_round_shard, ts));
			w->types[t].starts_out++;
		}
}

static void on_answered(sq_pgconn *pc, const sq_error *err, void *arg);

/* Phase 2b: the shard's pipeline is pushed (one transaction: the writes,
 * then the claim; one commit a round however many jobs, see
 * docs/worker.md; two on a split shard, see w->split) and sent. The round
 * is out until its answer (on_answered); the other shards' go on. */
static void tick_send(sq_worker *w, tick_state *ts)
{
	sq_client *c = w->c;
	int s = ts->shard;
	sq_pgconn *pc = &c->shards[s];
	sq_error err;
	/* tests: hold the loop where a lease would be extended (a shard that
	 * cannot be reached holds it like this) */
	if (ts->b[WB_HEARTBEAT].n || ts->b[WB_START].n)
		sq_failpoint("worker_lease_write");
	sq_pgconn_reset(pc);
	c->merge_txn = 1;
	for (int k = 0; k < WB_N; k++)
		ts->p[k] = ts->b[k].n ? sq_fenced_push(c, wb_kind[k], w->id, ts->b[k].refs,
						       k == WB_FAIL ? ts->b[k].fails : NULL,
						       ts->b[k].n)
				      : NULL;
	ts->wend = pc->qn;
	ts->split = w->split[s] && ts->wend;
	if (ts->split)
		sq_pgconn_push_sync(pc);
	ts->pk = NULL;
	if (ts->asking) {
		unsigned char only[SQ_MAX_SHARDS] = {0};
		only[s] = 1;
		ts->pk = sq_claim_push(c, w->id, ts->reqs, (size_t)w->ntypes, only, &err);
		w->woke[s] = 0;
		if (!ts->pk)
			note_error(w, &err);
		ts->holding = ts->pk != NULL;
		for (int t = 0; ts->holding && t < w->ntypes; t++) {
			w->reserved[t] += ts->reqs[t].limit;
			w->reserved_start[t] += ts->reqs[t].start;
		}
	}
	c->merge_txn = 0;
	ts->tk = (sq_worker_tick){0};
	ts->tk.claimed = ts->pk ? 0 : -1;
	ts->tk.started = w->local_started;
	ts->tk.shard = s;
	w->local_started = 0;
	ts->busy = 1;
	w->inflight++;
	ts->t0 = sq_mono_s();
	sq_pgconn_start(w->base, pc, on_answered, ts);
}

/* A shard that refused the round's writes for a reason about the rows:
 * they are isolated on it (see isolate). */
static void isolate(sq_worker *w, wbatch *b, int shard);

/*
 * Phase 3: which error hit what. The shard's writes and claim share one
 * transaction (unless split): if a statement failed, the others rolled
 * back, whatever they answered. A write that failed is noted here, and the
 * claim behind it, aborted, is not read; a claim that failed is noted by
 * its collect, and the writes before it are sent again, in a transaction
 * of their own until a claim on that shard works. A shard that refused its
 * writes for a reason about the rows has them isolated, so that the
 * others commit.
 */
static void tick_blame(sq_worker *w, tick_state *ts)
{
	sq_client *c = w->c;
	int s = ts->shard;
	sq_pgconn *pc = &c->shards[s];
	sq_error e;
	int wend = ts->wend, claimed = pc->qn > wend;
	int writes_ok = !wend || sq_pgconn_range_error(pc, 0, wend, &e) == SQ_OK;
	int claim_ok = claimed && sq_pgconn_range_error(pc, wend, pc->qn, NULL) == SQ_OK;
	ts->bad = ts->refused = 0;
	ts->claim_lost = 0;
	if (claimed && ts->sent == SQ_OK && (claim_ok || writes_ok || ts->split))
		w->split[s] = !claim_ok; /* unchanged when a write aborted it */
	if (writes_ok) {
		if (wend && claimed && !claim_ok && !ts->split)
			ts->bad = 1; /* rolled back with the claim */
	} else {
		const char *st = sq_pgconn_range_sqlstate(pc, 0, wend);
		ts->bad = 1;
		ts->refused = st && !transient_state(st);
		note_error(w, &e);
		if (ts->pk && !ts->split) {
			sq_claim_skip_shard(ts->pk, s); /* aborted by that write */
			ts->claim_lost = 1;
		}
	}
	for (int k = 0; k < WB_N; k++) {
		wbatch *b = &ts->b[k];
		if (ts->p[k])
			sq_fenced_collect(c, ts->p[k], b->out);
		for (size_t i = 0; ts->bad && i < b->n; i++)
			b->out[i] = SQ_EDB;
	}
	ts->jobs = NULL;
	ts->nj = 0;
	ts->cst = SQ_OK;
	if (ts->pk) {
		sq_error cerr;
		ts->cst = sq_claim_collect(c, ts->pk, &ts->jobs, &ts->nj, &cerr);
		if (ts->cst != SQ_OK)
			note_error(w, &cerr);
	}
	sq_pgconn_reset(pc);
	if (ts->refused)
		isolate(w, ts->b, s);
}

/* A write of a job that the shard did not take waits for a later round:
 * after its partition's move, or RETRY_S. */
static void retry_later(sq_worker *w, tick_state *ts, sq_task *k, sq_status st)
{
	if (is_moving(st)) {
		ts->moved |= st == SQ_EMOVED;
		wait_moving(w, k, ts->now);
	} else {
		not_moving(k);
		k->retry_at = ts->now + RETRY_S;
	}
}

/* A result the shard took, in the figures. */
static void result_counted(sq_worker *w, tick_state *ts, int kind, size_t i)
{
	sq_task *k = ts->b[kind].tasks[i];
	wtype *t = &w->types[k->type];
	if (kind == WB_COMPLETE) {
		t->st.done++, ts->tk.completed++;
		return;
	}
	ts->tk.failed++;
	if (ts->b[kind].fails[i].permanent || k->job.tries >= k->job.max_attempts)
		t->st.failed++;
	else
		t->st.retried++;
}

/* Phases 4 and 5: the answers to the completions (kind WB_COMPLETE) or the
 * failures (WB_FAIL). A result taken, or found no longer ours, is done
 * with; one refused MAX_REFUSALS times is dropped (the job comes back after
 * its lease); any other waits in ts->keep for a later round. */
static void settle_results(sq_worker *w, tick_state *ts, int kind)
{
	wbatch *b = &ts->b[kind];
	w->results_out -= (int)b->n;
	for (size_t i = 0; i < b->n; i++) {
		sq_task *k = b->tasks[i];
		sq_status st = b->out[i];
		k->inflight = 0;
		if (st == SQ_OK) {
			result_counted(w, ts, kind, i);
			task_free(k);
			continue;
		}
		if (st == SQ_ELOST || (st == SQ_ENOTFOUND && kind == WB_COMPLETE && k->looked)) {
			w->types[k->type].st.lost++, ts->tk.lost++;
			task_free(k);
			continue;
		}
		if (st == WB_REFUSED && k->refused >= MAX_REFUSALS) {
			note_errorf(w,
				    "job %lld: its %s was refused %d times and is dropped; the "
				    "job comes back after its lease",
				    (long long)k->job.id, wb_name[kind], k->refused);
			task_free(k);
			continue;
		}
		if (st == WB_REFUSED && kind == WB_FAIL) {
			/* perhaps it is the text: send a plain one next time */
			free(k->err);
			k->err = strdup("the worker could not store this job's error message (the "
					"shard refused it)");
		}
		if (st == SQ_ENOTFOUND && kind == WB_COMPLETE) {
			/* a rerun may have committed after the statement's snapshot:
			 * look again at once, with a fresh one; then it is final */
			k->looked = 1;
			k->retry_at = ts->now;
		} else {
			retry_later(w, ts, k, st);
		}
		k->next = ts->keep;
		ts->keep = k;
	}
}

/* The answer to the start of a buffered job (not one that began on a free
 * slot: that one is answered like a heartbeat): it runs, is lost, is
 * dropped, or goes back to the buffer for a later round. */
static void start_written(sq_worker *w, tick_state *ts, sq_task *k, sq_status st)
{
	wtype *wt = &w->types[k->type];
	wt->starts_out--;
	if (st == SQ_OK) {
		lease_set(k, ts->now, wt->conf->execution_timeout_ms);
		run_task(w, k, ts->at, exec_hb(wt, ts->now));
		ts->tk.started++;
	} else if (st == SQ_ELOST) {
		/* taken by another worker: its starting lease ran out here */
		wt->st.lost++;
		task_free(k);
	} else if (st == WB_REFUSED && k->refused >= MAX_REFUSALS) {
		note_errorf(w,
			    "job %lld: its start was refused %d times and is dropped; the "
			    "job comes back after its starting lease",
			    (long long)k->job.id, k->refused);
		task_free(k);
	} else {
		retry_later(w, ts, k, st);
		sq_startq_unpop(&wt->buffer, k); /* not taken: a later round tries again */
	}
}

/* The answer to a running job's heartbeat, or to the start of one that
 * began on a free slot; a job that ended lost while it was out is let go
 * now (take_finished left it). Returns 1 if its partition was found moved. */
static int running_answered(sq_worker *w, tick_state *ts, sq_task *k, sq_status st)
{
	k->inflight = 0;
	if (k->orphan) {
		task_free(k);
		return 0;
	}
	return running_written(w, k, st, ts->now);
}

/* Phase 6: the answers to the heartbeats and starts. The starts are taken
 * last to first, so that the ones put back keep their order at the
 * buffer's head. */
static void settle_running(sq_worker *w, tick_state *ts)
{
	wbatch *hb = &ts->b[WB_HEARTBEAT], *sb = &ts->b[WB_START];
	for (size_t i = 0; i < hb->n; i++)
		ts->moved |= running_answered(w, ts, hb->tasks[i], hb->out[i]);
	ts->at = sq_mono_s();
	for (size_t i = sb->n; i-- > 0;) {
		sq_task *k = sb->tasks[i];
		if (k->unstarted) { /* running already: answered like a heartbeat */
			ts->moved |= running_answered(w, ts, k, sb->out[i]);
		} else {
			k->inflight = 0;
			start_written(w, ts, k, sb->out[i]);
		}
	}
}

/* A claimed job as a task of this worker: running at once when it was
 * claimed straight to running, else buffered. 0, or -1 when it cannot be
 * held (its lease brings it back). */
static int adopt_job(sq_worker *w, tick_state *ts, sq_job *job)
{
	sq_task *k = calloc(1, sizeof(*k));
	int t = 0;
	while (t < w->ntypes && strcmp(w->types[t].conf->name, job->type))
		t++;
	if (!k || t == w->ntypes) {
		free(k);
		return -1;
	}
	wtype *wt = &w->types[t];
	/* half its starting lease, counted from before the claim was sent */
	double half_lease = ts->t0 + (double)wt->conf->starting_timeout_ms / 2000.0;
	k->job = *job;
	k->magic = SQ_TASK_MAGIC;
	k->type = t;
	k->fn = wt->fn;
	k->arg = wt->arg;
	lease_set(k, ts->t0, wt->conf->starting_timeout_ms);
	wt->had_work = 1;
	if (k->job.status == SQ_RUNNING) {
		/* claimed running with the starting lease: the first
		 * heartbeat, at half of it, turns it into the execution lease */
		run_task(w, k, ts->at, half_lease);
		ts->tk.started++;
	} else {
		/* starts on a free slot without a written start while at
		 * least half its starting lease is left */
		k->local_until = half_lease;
		sq_startq_push(&wt->buffer, k);
	}
	return 0;
}

/* Phase 7: the claim's jobs: running ones go to free slots at once, the
 * rest wait in the buffer. What the claim asked for is no longer held
 * for it. */
static void adopt_claimed(sq_worker *w, tick_state *ts)
{
	int others = 0;
	w->claims++;
	w->rtt_ms = w->have_rtt ? (1 - EWMA) * w->rtt_ms + EWMA * ts->rtt_ms : ts->rtt_ms;
	w->have_rtt = 1;
	unhold(w, ts);
	for (int t = 0; t < w->ntypes; t++)
		w->types[t].had_work = 0;
	for (size_t i = 0; i < ts->nj; i++) {
		if (adopt_job(w, ts, &ts->jobs[i]))
			sq_job_clear(&ts->jobs[i]);
		else
			ts->tk.claimed++;
	}
	free(ts->jobs);
	ts->jobs = NULL;
	for (int s = 0; s < w->c->nshards; s++)
		others |= w->rounds[s].busy && w->rounds[s].asking && s != ts->shard;
	/* a type with no work: its free slots are not waiting for anything
	 * (while no other shard's claim is out, which may bring some) */
	for (int t = 0; !others && t < w->ntypes; t++)
		if (!w->types[t].had_work && !w->types[t].buffer.n && !w->types[t].handed)
			w->types[t].nfreed = 0;
}

/* Phase 8: when the shard's next claim goes out, after this one. */
static void poll_backoff(sq_worker *w, const tick_state *ts)
{
	double now = ts->at;
	int s = ts->shard;
	int full_answer = ts->cst == SQ_OK && ts->pk && (int)ts->nj >= ts->asking;
	int failed = ts->cst != SQ_OK || !ts->pk || ts->claim_lost;
	if (ts->woke_only) {
		/* a full answer: more may be there; else the polls keep their
		 * schedule. A claim that failed, or that a failed write
		 * aborted, lost its wake-up (the shard's connection had died
		 * unseen, say): a poll after RETRY_S instead, backing off from
		 * there as after any failed claim */
		if (full_answer) {
			w->poll_delay_ms[s] = 0;
			w->next_claim_at[s] = now;
		} else if (failed && now + RETRY_S < w->next_claim_at[s]) {
			w->poll_delay_ms[s] = RETRY_S * 1000;
			w->next_claim_at[s] = now + RETRY_S;
		}
	} else if (failed || ts->nj == 0) {
		w->poll_delay_ms[s] = w->poll_delay_ms[s] ? fmin(w->poll_delay_ms[s] * 2,
								 (double)w->opts.poll_max_ms)
							  : (double)w->opts.poll_min_ms;
		w->next_claim_at[s] = now + w->poll_delay_ms[s] / 1000.0;
	} else {
		w->poll_delay_ms[s] = 0;
		/* a full answer: more may be there; a partial one: drained */
		w->next_claim_at[s] =
			full_answer ? now : now + (double)w->opts.poll_min_ms / 1000.0;
	}
}

static void round_free(tick_state *ts)
{
	for (int k = 0; k < WB_N; k++)
		wbatch_free(&ts->b[k]);
	memset(ts->b, 0, sizeof(ts->b));
}

/* The round's answer (or its failure): phases 3 to 8, then the shard may
 * begin its next round. A write that the shard cannot take now (its
 * partition moving, or moved: the map is reloaded) waits for a later round
 * on its own; a transaction the shard refuses is isolated. */
static void round_end(sq_worker *w, tick_state *ts)
{
	double t1 = sq_mono_s();
	ts->rtt_ms = (t1 - ts->t0) * 1000.0;
	ts->tk.send_us = (int64_t)(ts->t0 * 1e6);
	ts->tk.recv_us = (int64_t)(t1 * 1e6);
	ts->moved = 0;
	ts->keep = NULL;
	tick_blame(w, ts);
	settle_results(w, ts, WB_COMPLETE);
	settle_results(w, ts, WB_FAIL);
	for (sq_task *k = ts->keep, *next; k; k = next) {
		next = k->next;
		k->next = w->pending;
		w->pending = k;
		w->npending++;
	}
	settle_running(w, ts);
	/* "moved": the partition is on another shard now; the next round
	 * sends there */
	if (ts->moved && sq_client_refresh_map(w->c, NULL) != SQ_OK)
		w->c->map_checked_at = 0;
	if (ts->pk) {
		adopt_claimed(w, ts);
		poll_backoff(w, ts);
	} else {
		sq_jobs_free(ts->jobs, ts->nj);
		if (ts->asking) /* the claim could not be pushed */
			poll_backoff(w, ts);
	}
	ts->busy = 0;
	w->inflight--;
	round_free(ts);
	if (w->opts.on_tick)
		w->opts.on_tick(&ts->tk, w->opts.tick_arg);
}

static void on_answered(sq_pgconn *pc, const sq_error *err, void *arg)
{
	tick_state *ts = arg;
	(void)pc;
	ts->sent = err->code;
	if (err->code != SQ_OK)
		note_error(ts->w, err);
	round_end(ts->w, ts);
}

/* Shard s's next round, when it has anything to do: phases 1 and 2. */
static void round_begin(sq_worker *w, int s, double now, int claiming)
{
	tick_state *ts = &w->rounds[s];
	size_t want[WB_N];
	int ok = 1;
	ts->now = now;
	if (!tick_count(w, ts, claiming, want))
		return;
	for (int k = 0; k < WB_N && ok; k++)
		ok = !wbatch_alloc(&ts->b[k], want[k]);
	if (!ok) {
		round_free(ts);
		return;
	}
	tick_gather(w, ts);
	tick_send(w, ts);
}

/* Every shard that is free begins its round: one pipeline per shard, each
 * answered on its own (see docs/worker.md). The map is looked at first,
 * so that every write of this pass goes where one map says. */
static void rounds_begin(sq_worker *w, double now, int claiming)
{
	if (w->hold)
		return;
	sq_client_check_map(w->c);
	for (int s = 0; s < w->c->nshards; s++)
		if (shard_free(w, s))
			round_begin(w, s, now, claiming);
}

/* The worker stops with rounds out: each is given up (its connection
 * dropped), and settled as a failed round would be. */
static void rounds_abandon(sq_worker *w)
{
	for (int s = 0; w->rounds && s < w->c->nshards; s++)
		if (w->rounds[s].busy)
			sq_pgconn_abandon(&w->c->shards[s]);
}

/* Steps that use every shard's connection at once (the schedule's pass;
 * at shutdown, the release of the buffered jobs) wait until no round is
 * out; meanwhile none begins (w->hold). */
static void quiet_steps(sq_worker *w, double now)
{
	int held = 0;
	for (int t = 0; t < w->ntypes; t++)
		held += w->types[t].buffer.n + w->types[t].handed;
	/* a claim out when the stop came may have buffered more since */
	int release = w->stopping && (!w->released || held);
	int sched = !w->stopping && sq_sched_due(w->sched, now);
	w->hold = release || sched;
	if (!w->hold || w->inflight)
		return;
	if (release) {
		release_buffered(w);
		w->released = 1;
	}
	sq_error se;
	if (sched && sq_sched_tick(w->sched, w->c, &se) != SQ_OK)
		note_error(w, &se);
	w->hold = 0;
}

static void snapshot(sq_worker *w)
{
	sq_worker_stats s;
	double idle = 0, busy = 0;
	memset(&s, 0, sizeof(s));
	s.ntypes = w->ntypes;
	s.capacity = capacity(w);
	s.claims = w->claims;
	s.claim_rtt_ms = w->rtt_ms;
	for (int t = 0; t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		wt->st.running = wt->running;
		wt->st.buffered = wt->buffer.n + wt->handed;
		wt->st.exec_ms = wt->exec_ms;
		s.types[t] = wt->st;
		s.running += wt->running;
		s.buffered += wt->buffer.n + wt->handed;
		idle += wt->idle_s;
		busy += wt->idle_s + wt->exec_s;
	}
	s.slot_idle_ratio = busy > 0 ? idle / busy : 0;
	s.db_errors = w->db_errors;
	snprintf(s.last_error, sizeof(s.last_error), "%s", w->last_error);
	s.busy_seconds = busy;
	pthread_mutex_lock(&w->stats_mu);
	w->snap = s;
	pthread_mutex_unlock(&w->stats_mu);
}

void sq_worker_get_stats(sq_worker *w, sq_worker_stats *out)
{
	pthread_mutex_lock(&w->stats_mu);
	*out = w->snap;
	pthread_mutex_unlock(&w->stats_mu);
}

/* When the loop must look again: the next claim of a shard that may begin
 * a round, a write due on one (a shard whose round is out answers on its
 * own: its answer wakes the loop), a lease's end, the grace's, a report,
 * the scheduler's pass. */
static double next_wake(sq_worker *w, double now)
{
	double at = now + 1.0;
	int nshards = w->c->nshards;
	if (!w->stopping) {
		sq_claim_req reqs[SQ_WORKER_MAX_TYPES];
		int none[SQ_WORKER_MAX_TYPES] = {0};
		double late = fmax(LATE_MIN_S, LATE_RTTS * w->rtt_ms / 1000.0);
		unhold_late(w, now);
		for (int s = 0; s < nshards; s++) /* what a late claim holds frees */
			if (w->rounds[s].holding && w->rounds[s].t0 + late < at)
				at = w->rounds[s].t0 + late;
		int room = claim_limits(w, reqs, none) > 0;
		for (int s = 0; s < nshards && room; s++)
			if (shard_free(w, s)) {
				double due = w->woke[s] ? now : w->next_claim_at[s];
				at = due < at ? due : at;
			}
	}
	for (sq_task *k = w->running; k; k = k->run_next)
		if (!k->lost) {
			double by = atomic_load(&k->stop_by);
			if (!k->inflight && k->hb_due < at && shard_free(w, task_shard(w, k)))
				at = k->hb_due;
			at = by < at ? by : at;
		}
	/* results not yet written, and starts for free slots that wait (a
	 * moving partition, a failed write): when each may be sent again */
	for (sq_task *k = w->pending; k; k = k->next)
		if (!k->inflight && k->retry_at < at && shard_free(w, task_shard(w, k)))
			at = k->retry_at;
	for (int t = 0; !w->stopping && t < w->ntypes; t++)
		if (w->types[t].running + w->types[t].starts_out < w->types[t].conc)
			for (sq_task *k = w->types[t].buffer.head; k; k = k->next)
				if (k->retry_at < at && shard_free(w, task_shard(w, k)))
					at = k->retry_at;
	if (w->stopping && w->grace_deadline < at)
		at = w->grace_deadline;
	if (!w->stopping && sq_sched_next_at(w->sched) < at) /* a schedule's slot */
		at = sq_sched_next_at(w->sched);
	if (w->opts.report_ms > 0 && w->next_report < at)
		at = w->next_report;
	return at;
}

/* While every shard has a round out, a finished handler does not wake the
 * loop: its result waits for its shard's next round anyway, and the pool
 * hands its slot a buffered job itself. The loop then wakes for an
 * answer (or a timer) and takes every finished task at once, instead of
 * a pass over its lists per finished handler (with 1,024 no-op slots that
 * doubled the worker's CPU per job). A stop is seen at the next answer. */
static void listen_for_finished(sq_worker *w)
{
	int all_out = w->inflight == w->c->nshards;
	if (all_out && w->wake_armed) {
		event_del(w->wake_ev);
		w->wake_armed = 0;
	} else if (!all_out && !w->wake_armed) {
		event_add(w->wake_ev, NULL); /* what came meanwhile wakes it at once */
		w->wake_armed = 1;
	}
}

sq_status sq_worker_run(sq_worker *w, sq_error *err)
{
	if (!w->ntypes)
		return sq_err(err, SQ_EINVAL,
			      "the worker has no handler; add one with sq_worker_add");
	if (!w->pool_started) {
		if (sq_pool_start(&w->pool, w->conc_total, w->ntypes, w->wake[1]))
			return sq_err(err, SQ_ENOMEM, "cannot start %d handler threads",
				      w->conc_total);
		w->pool_started = 1;
	}
	if (w->opts.handle_signals) {
		w->sig_ev[0] = evsignal_new(w->base, SIGTERM, on_signal, w);
		w->sig_ev[1] = evsignal_new(w->base, SIGINT, on_signal, w);
		event_add(w->sig_ev[0], NULL);
		event_add(w->sig_ev[1], NULL);
	}
	w->next_report = sq_mono_s() + (double)w->opts.report_ms / 1000.0;
	for (;;) {
		double now = sq_mono_s();
		if (atomic_load(&w->stop_now))
			break;
		if (atomic_load(&w->stop_req) && !w->stopping) {
			w->stopping = 1;
			w->grace_deadline = now + (double)w->opts.grace_ms / 1000.0;
		}
		take_finished(w);
		start_fresh(w, now);
		check_leases(w, now);
		relisten(w, now);
		quiet_steps(w, now);
		rounds_begin(w, now, !w->stopping);
		take_finished(w);
		start_fresh(w, sq_mono_s());
		snapshot(w);
		if (w->opts.report_ms > 0 && now >= w->next_report) {
			w->next_report = now + (double)w->opts.report_ms / 1000.0;
			if (w->opts.report)
				w->opts.report(&w->snap, w->opts.report_arg);
		}
		if (w->stopping && w->released && !w->running && !w->pending && !w->inflight)
			break;
		if (w->stopping && now >= w->grace_deadline)
			break;

		listen_for_finished(w);
		double at = next_wake(w, sq_mono_s()), wait = at - sq_mono_s();
		/* a connect under way goes on between ticks */
		if (sq_client_advance_connects(w->c) +
				    (w->opts.listen ? sq_listen_set_connecting(&w->listen) : 0) >
			    0 &&
		    wait > SQ_LOOP_CONNECT_WAIT_S)
			wait = SQ_LOOP_CONNECT_WAIT_S;
		if (wait > 0) {
			struct timeval tv = {(time_t)wait,
					     (suseconds_t)((wait - floor(wait)) * 1e6)};
			evtimer_add(w->timer_ev, &tv);
			event_base_loop(w->base, EVLOOP_ONCE);
		} else {
			event_base_loop(w->base, EVLOOP_NONBLOCK);
		}
	}
	rounds_abandon(w);
	take_finished(w);
	snapshot(w);
	if (w->running || w->pending) {
		int left = 0;
		for (sq_task *k = w->running; k; k = k->run_next)
			left++;
		return sq_err(err, SQ_ESTATE,
			      "stopped with %d job(s) still running; their leases bring them back",
			      left);
	}
	return SQ_OK;
}

void sq_worker_destroy(sq_worker *w)
{
	if (!w)
		return;
	sq_maintainer_stop(w->maint);
	sq_metawatch_stop(w->metawatch);
	if (w->pool_started) {
		sq_task *started, *stale;
		/* handed jobs never started: taken back first, so no thread
		 * starts one while the pool stops */
		for (sq_task *k = sq_pool_unhand_all(&w->pool), *n; k; k = n) {
			n = k->next;
			task_free(k);
		}
		sq_pool_stop(&w->pool);
		/* every started job has finished: it is in `done` */
		for (sq_task *k = sq_pool_take_done(&w->pool, &started, &stale), *n; k; k = n) {
			n = k->next;
			task_free(k);
		}
		for (sq_task *k = stale, *n; k; k = n) {
			n = k->next;
			task_free(k);
		}
	}
	for (sq_task *k = w->pending, *n; k; k = n) {
		n = k->next;
		task_free(k);
	}
	for (int t = 0; t < w->ntypes; t++) {
		for (sq_task *k; (k = sq_startq_pop(&w->types[t].buffer)) != NULL;)
			task_free(k);
		free(w->types[t].freed);
	}
	sq_listen_set_free(&w->listen);
	for (int i = 0; i < 2; i++)
		if (w->sig_ev[i])
			event_free(w->sig_ev[i]);
	if (w->wake_ev)
		event_free(w->wake_ev);
	if (w->timer_ev)
		event_free(w->timer_ev);
	if (w->base)
		event_base_free(w->base);
	sq_sched_free(w->sched);
	free(w->rounds);
	sq_client_close(w->c);
	if (w->wake[0] >= 0)
		close(w->wake[0]);
	if (w->wake[1] >= 0)
		close(w->wake[1]);
	pthread_mutex_destroy(&w->stats_mu);
	free(w);
}

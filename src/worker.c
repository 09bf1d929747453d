/* worker.c - the worker runtime: one loop thread does all database work
 * (claims, starts, heartbeats, completions, releases; each call batched per
 * shard, all shards at once), handlers run on a pool of threads. Claimed
 * jobs wait in a bounded local buffer in `starting` and turn `running` when
 * a slot frees; the buffer holds what the predicted prefetch asks for, and
 * never more than the capacity allows. */
#include "client.h"
#include "error.h"
#include "jobrow.h"
#include "ops.h"
#include "pool.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
	sq_task *buf_head, *buf_tail; /* claimed, `starting`, in claim order */
	int buffered, running;
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
	PGconn *listen[SQ_MAX_SHARDS];
	struct event *listen_ev[SQ_MAX_SHARDS];
	atomic_int stop_req, stop_now;
	int stopping, released;
	double grace_deadline;
	double next_claim_at, poll_delay_ms;
	int woken;
	double rtt_ms;
	int have_rtt;
	sq_task *running; /* list through run_next */
	sq_task *pending; /* finished, whose result is not yet written */
	double next_report;
	uint64_t claims, db_errors;
	char last_error[256];
	pthread_mutex_t stats_mu;
	sq_worker_stats snap;
};

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

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
	sq_worker *w = arg;
	(void)what;
	for (int s = 0; s < w->c->nshards; s++) {
		PGconn *l = w->listen[s];
		PGnotify *n;
		if (!l || PQsocket(l) != fd)
			continue;
		if (!PQconsumeInput(l)) {
			/* the wake-up is lost; polling carries on */
			event_free(w->listen_ev[s]);
			w->listen_ev[s] = NULL;
			PQfinish(l);
			w->listen[s] = NULL;
			return;
		}
		while ((n = PQnotifies(l)) != NULL) {
			PQfreemem(n);
			w->woken = 1;
		}
	}
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

static sq_status open_listeners(sq_worker *w, sq_error *err)
{
	for (int s = 0; s < w->c->nshards; s++) {
		PGconn *l = PQconnectdb(w->cfg->shards[s].dsn);
		PGresult *r;
		if (PQstatus(l) != CONNECTION_OK) {
			sq_err(err, SQ_ECONN, "shard %s (%s): listen connection: %s",
			       w->cfg->shards[s].id, w->c->shards[s].addr, PQerrorMessage(l));
			PQfinish(l);
			return SQ_ECONN;
		}
		r = PQexec(l, "LISTEN shardq_jobs");
		PQclear(r);
		PQsetnonblocking(l, 1);
		w->listen[s] = l;
		w->listen_ev[s] =
			event_new(w->base, PQsocket(l), EV_READ | EV_PERSIST, on_listen, w);
		event_add(w->listen_ev[s], NULL);
	}
	return SQ_OK;
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
	if ((st = sq_client_open(cfg, 0, &w->c, err)) != SQ_OK) {
		sq_worker_destroy(w);
		return st;
	}
	if (w->opts.listen && (st = open_listeners(w, err)) != SQ_OK) {
		sq_worker_destroy(w);
		return st;
	}
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
	return SQ_OK;
}

static int capacity(const sq_worker *w)
{
	return w->conc_total + (w->opts.buffer >= 0 ? w->opts.buffer : w->conc_total);
}

static int buffer_max(const sq_worker *w)
{
	return w->opts.buffer >= 0 ? w->opts.buffer : w->conc_total;
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

static void buf_push(wtype *t, sq_task *k)
{
	k->next = NULL;
	if (t->buf_tail)
		t->buf_tail->next = k;
	else
		t->buf_head = k;
	t->buf_tail = k;
	t->buffered++;
}

static sq_task *buf_pop(wtype *t)
{
	sq_task *k = t->buf_head;
	if (!k)
		return NULL;
	t->buf_head = k->next;
	if (!t->buf_head)
		t->buf_tail = NULL;
	t->buffered--;
	return k;
}

static void task_free(sq_task *k)
{
	sq_job_clear(&k->job);
	free(k);
}

static void running_remove(sq_worker *w, sq_task *k)
{
	for (sq_task **p = &w->running; *p; p = &(*p)->run_next)
		if (*p == k) {
			*p = k->run_next;
			return;
		}
}

/* Finished tasks come back from the pool: their slot frees, and their
 * result waits in `pending` until the shards have it. A task whose lease
 * was found lost while it ran is discarded: another worker owns the job. */
static void take_finished(sq_worker *w)
{
	sq_task *done = sq_pool_take_done(&w->pool), *next;
	for (sq_task *k = done; k; k = next) {
		wtype *t = &w->types[k->type];
		double ms = (k->finished - k->started) * 1000.0;
		next = k->next;
		running_remove(w, k);
		t->running--;
		t->exec_ms = t->have_exec ? (1 - EWMA) * t->exec_ms + EWMA * ms : ms;
		t->have_exec = 1;
		t->exec_s += k->finished - k->started;
		if (t->nfreed < t->conc)
			t->freed[(t->freed_head + t->nfreed++) % t->conc] = k->finished;
		if (k->lost) {
			t->st.lost++;
			task_free(k);
			continue;
		}
		k->next = w->pending;
		w->pending = k;
	}
}

/* Shutdown: every buffered job goes back to ready at once. */
static void release_buffered(sq_worker *w)
{
	size_t n = 0, i = 0;
	for (int t = 0; t < w->ntypes; t++)
		n += (size_t)w->types[t].buffered;
	if (!n)
		return;
	sq_task **ks = malloc(n * sizeof(*ks));
	sq_job_ref *refs = malloc(n * sizeof(*refs));
	sq_status *out = malloc(n * sizeof(*out));
	sq_error err;
	if (ks && refs && out) {
		for (int t = 0; t < w->ntypes; t++)
			for (sq_task *k; (k = buf_pop(&w->types[t])) != NULL; i++) {
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

/* A job starts running: to the pool, with its heartbeat due at half its
 * lease. */
static void run_task(sq_worker *w, sq_task *k, double now)
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
	k->hb_due = now + (double)wt->conf->execution_timeout_ms / 2000.0;
	k->run_next = w->running;
	w->running = k;
	wt->running++;
	sq_pool_submit(&w->pool, k);
}

static void buf_unpop(wtype *t, sq_task *k)
{
	k->next = t->buf_head;
	t->buf_head = k;
	if (!t->buf_tail)
		t->buf_tail = k;
	t->buffered++;
}

/* Jobs to hold beyond free slots, within the capacity left: see
 * predicted_prefetch. `start` gets how many may start at once. */
static int claim_limits(sq_worker *w, sq_claim_req *reqs, const int *promoting)
{
	int room = capacity(w), total = 0, npending = 0;
	int slots[SQ_WORKER_MAX_TYPES], extra[SQ_WORKER_MAX_TYPES];
	for (sq_task *k = w->pending; k; k = k->next)
		npending++;
	/* finished jobs whose result is not written yet still hold their row:
	 * the capacity is never exceeded, even while results are in flight */
	room -= npending;
	for (int t = 0; t < w->ntypes; t++)
		room -= w->types[t].running + w->types[t].buffered;
	/* first every type's free slots (jobs that start at once), then the
	 * prefetch from what is left, beginning with a different type each
	 * time: one type's prefetch never starves another type's free slots */
	for (int t = 0; t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		int free_now = wt->conc - wt->running - promoting[t];
		int pf = predicted_prefetch(w, wt);
		int buffered = wt->buffered - promoting[t];
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
 * for its figures, so an operator sees why it is not making progress. */
static void note_error(sq_worker *w, const sq_error *e)
{
	w->db_errors++;
	snprintf(w->last_error, sizeof(w->last_error), "%s", e->msg);
}

/* Marks the refs whose shard's write transaction failed with that error. */
static void undo_failed_txn(sq_client *c, const sq_status *terr, const sq_job_ref *refs,
			    sq_status *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sq_status e = terr[sq_shard_of_id(c, refs[i].id)];
		if (e != SQ_OK)
			out[i] = e;
	}
}

static void undo_failed_txn_fail(sq_client *c, const sq_status *terr, const sq_fail_req *reqs,
				 sq_status *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sq_status e = terr[sq_shard_of_id(c, reqs[i].ref.id)];
		if (e != SQ_OK)
			out[i] = e;
	}
}

/* Results that the shards could not take in the pipeline (a moved
 * partition, a completion to look at again) go through the plain calls,
 * which refresh the map and retry. Returns how many were answered. */
static void settle_complete(sq_worker *w, sq_task **ks, size_t n, sq_status *out)
{
	sq_job_ref *refs = malloc(n * sizeof(*refs));
	sq_status *o2 = malloc(n * sizeof(*o2));
	size_t m = 0;
	sq_error err;
	if (!refs || !o2)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (out[i] == SQ_ENOTFOUND || out[i] == SQ_EMOVED || out[i] == SQ_EMOVING) {
			refs[m].id = ks[i]->job.id;
			refs[m].attempt = ks[i]->job.attempt;
			m++;
		}
	if (m && sq_complete(w->c, w->id, refs, m, o2, &err) == SQ_OK)
		for (size_t i = 0, j = 0; i < n; i++)
			if (out[i] == SQ_ENOTFOUND || out[i] == SQ_EMOVED || out[i] == SQ_EMOVING)
				out[i] = o2[j++];
out:
	free(refs);
	free(o2);
}

/* One tick of database work, in one pipeline per shard (each part its own
 * transaction): completions, failures, heartbeats, starts of buffered jobs
 * for free slots, and the claim. */
static void tick(sq_worker *w, double now, int claiming)
{
	size_t np = 0, nc = 0, nf = 0, nh = 0, ns = 0;
	for (sq_task *k = w->pending; k; k = k->next)
		np++;
	for (sq_task *k = w->running; k; k = k->run_next)
		nh += !k->lost && now >= k->hb_due;
	int promoting[SQ_WORKER_MAX_TYPES] = {0};
	for (int t = 0; t < w->ntypes; t++) {
		wtype *wt = &w->types[t];
		int f = wt->conc - wt->running;
		promoting[t] = claiming ? (f < wt->buffered ? (f > 0 ? f : 0) : wt->buffered) : 0;
		ns += (size_t)promoting[t];
	}
	sq_claim_req reqs[SQ_WORKER_MAX_TYPES];
	int asking = claiming && now >= w->next_claim_at ? claim_limits(w, reqs, promoting) : 0;
	if (!np && !nh && !ns && !asking)
		return;

	size_t cap = np + nh + ns + 1;
	sq_task **tc = malloc(cap * sizeof(*tc)), **tf = malloc(cap * sizeof(*tf));
	sq_task **th = malloc(cap * sizeof(*th)), **ts = malloc(cap * sizeof(*ts));
	sq_job_ref *rc = malloc(cap * sizeof(*rc)), *rh = malloc(cap * sizeof(*rh));
	sq_job_ref *rs = malloc(cap * sizeof(*rs));
	sq_fail_req *rf = malloc(cap * sizeof(*rf));
	sq_status *oc = malloc(cap * sizeof(*oc)), *of = malloc(cap * sizeof(*of));
	sq_status *oh = malloc(cap * sizeof(*oh)), *os = malloc(cap * sizeof(*os));
	if (!tc || !tf || !th || !ts || !rc || !rh || !rs || !rf || !oc || !of || !oh || !os)
		goto out;
	for (sq_task *k = w->pending; k; k = k->next) {
		if (k->result == SQ_RESULT_DONE) {
			tc[nc] = k;
			rc[nc].id = k->job.id;
			rc[nc].attempt = k->job.attempt;
			nc++;
		} else {
			tf[nf] = k;
			rf[nf].ref.id = k->job.id;
			rf[nf].ref.attempt = k->job.attempt;
			rf[nf].error = k->err[0] ? k->err : "the handler failed";
			rf[nf].permanent = k->result == SQ_RESULT_FAIL;
			nf++;
		}
	}
	nh = 0;
	for (sq_task *k = w->running; k; k = k->run_next)
		if (!k->lost && now >= k->hb_due) {
			th[nh] = k;
			rh[nh].id = k->job.id;
			rh[nh].attempt = k->job.attempt;
			nh++;
		}

	ns = 0;
	for (int t = 0; t < w->ntypes; t++)
		for (int i = 0; i < promoting[t]; i++) {
			sq_task *k = buf_pop(&w->types[t]);
			ts[ns] = k;
			rs[ns].id = k->job.id;
			rs[ns].attempt = k->job.attempt;
			ns++;
		}

	sq_client_reset(w->c);
	sq_client_check_map(w->c);
	/* the writes share one transaction per shard (one commit), the claim
	 * has its own: two commits a tick, however many jobs */
	w->c->merge_txn = 1;
	sq_fenced_pending *pc =
		nc ? sq_fenced_push(w->c, SQ_FENCED_COMPLETE, w->id, rc, NULL, nc) : NULL;
	sq_fenced_pending *pf =
		nf ? sq_fenced_push(w->c, SQ_FENCED_FAIL, w->id, NULL, rf, nf) : NULL;
	sq_fenced_pending *ph =
		nh ? sq_fenced_push(w->c, SQ_FENCED_HEARTBEAT, w->id, rh, NULL, nh) : NULL;
	sq_fenced_pending *ps =
		ns ? sq_fenced_push(w->c, SQ_FENCED_START, w->id, rs, NULL, ns) : NULL;
	w->c->merge_txn = 0;
	int wend[SQ_MAX_SHARDS];
	for (int s = 0; s < w->c->nshards; s++)
		wend[s] = w->c->shards[s].qn;
	sq_client_sync_all(w->c);
	sq_error err;
	sq_claim_pending *pk =
		asking ? sq_claim_push(w->c, w->id, reqs, (size_t)w->ntypes, &err) : NULL;
	double t0 = sq_mono_s();
	sq_status sent = sq_client_send(w->c, &err);
	double t1 = sq_mono_s(), rtt = (t1 - t0) * 1000.0;
	sq_worker_tick tk = {(int64_t)(t0 * 1e6), (int64_t)(t1 * 1e6), asking ? 0 : -1, 0, 0, 0, 0};
	if (sent != SQ_OK)
		note_error(w, &err);
	/* the writes of a shard share one transaction: a statement that failed
	 * (a partition found moving, say) rolled back the others on that shard,
	 * whatever they answered; they count as not done */
	sq_status terr[SQ_MAX_SHARDS];
	for (int s = 0; s < w->c->nshards; s++)
		terr[s] =
			wend[s] ? sq_pgconn_range_error(&w->c->shards[s], 0, wend[s], NULL) : SQ_OK;

	/* completions and failures: written, lost, or pending for a later tick */
	for (size_t i = 0; i < nc; i++)
		oc[i] = SQ_EDB;
	if (pc)
		sq_fenced_collect(w->c, pc, oc);
	if (pf)
		sq_fenced_collect(w->c, pf, of);
	else
		for (size_t i = 0; i < nf; i++)
			of[i] = SQ_EDB;
	if (ph)
		sq_fenced_collect(w->c, ph, oh);
	else
		for (size_t i = 0; i < nh; i++)
			oh[i] = SQ_EDB;
	if (ps)
		sq_fenced_collect(w->c, ps, os);
	else
		for (size_t i = 0; i < ns; i++)
			os[i] = SQ_EDB;
	undo_failed_txn(w->c, terr, rc, oc, nc);
	undo_failed_txn_fail(w->c, terr, rf, of, nf);
	undo_failed_txn(w->c, terr, rh, oh, nh);
	undo_failed_txn(w->c, terr, rs, os, ns);
	sq_job *jobs = NULL;
	size_t nj = 0;
	sq_status cst = SQ_OK;
	if (pk) {
		sq_error cerr;
		cst = sq_claim_collect(w->c, pk, &jobs, &nj, &cerr);
		if (cst != SQ_OK)
			note_error(w, &cerr);
	}
	for (int s = 0; s < w->c->nshards; s++)
		if (terr[s] != SQ_OK && terr[s] != SQ_EMOVED && terr[s] != SQ_EMOVING) {
			sq_error e2;
			(void)sq_pgconn_range_error(&w->c->shards[s], 0, wend[s], &e2);
			note_error(w, &e2);
			break;
		}
	sq_client_reset(w->c);

	/* the rare answers that need the plain calls (moved partitions, a
	 * completion to look at again) */
	settle_complete(w, tc, nc, oc);
	for (size_t i = 0; i < nf; i++)
		if (of[i] == SQ_EMOVED || of[i] == SQ_EMOVING) {
			sq_status o1;
			if (sq_fail(w->c, w->id, &rf[i], 1, &o1, &err) == SQ_OK)
				of[i] = o1;
		}
	for (size_t i = 0; i < ns; i++)
		if (os[i] == SQ_EMOVED || os[i] == SQ_EMOVING) {
			sq_status o1;
			if (sq_start(w->c, w->id, &rs[i], 1, &o1, &err) == SQ_OK)
				os[i] = o1;
		}
	for (size_t i = 0; i < nh; i++)
		if (oh[i] == SQ_EMOVED || oh[i] == SQ_EMOVING) {
			sq_status o1;
			if (sq_heartbeat(w->c, w->id, &rh[i], 1, &o1, &err) == SQ_OK)
				oh[i] = o1;
		}

	sq_task *keep = NULL;
	for (size_t i = 0; i < nc; i++) {
		wtype *t = &w->types[tc[i]->type];
		if (oc[i] == SQ_OK || oc[i] == SQ_ELOST) {
			if (oc[i] == SQ_OK)
				t->st.done++, tk.completed++;
			else
				t->st.lost++, tk.lost++;
			task_free(tc[i]);
		} else {
			tc[i]->next = keep;
			keep = tc[i];
		}
	}
	for (size_t i = 0; i < nf; i++) {
		wtype *t = &w->types[tf[i]->type];
		if (of[i] == SQ_OK || of[i] == SQ_ELOST) {
			if (of[i] == SQ_ELOST) {
				t->st.lost++;
				tk.lost++;
			} else {
				tk.failed++;
				if (rf[i].permanent || tf[i]->job.tries >= tf[i]->job.max_attempts)
					t->st.failed++;
				else
					t->st.retried++;
			}
			task_free(tf[i]);
		} else {
			tf[i]->next = keep;
			keep = tf[i];
		}
	}
	w->pending = keep;
	for (size_t i = 0; i < nh; i++) {
		const sq_type_conf *tc2 = w->types[th[i]->type].conf;
		if (oh[i] == SQ_OK)
			th[i]->hb_due = now + (double)tc2->execution_timeout_ms / 2000.0;
		else if (oh[i] == SQ_ELOST)
			th[i]->lost = 1; /* its result will be discarded */
	}
	double at = sq_mono_s();
	for (size_t i = ns; i-- > 0;) {
		wtype *wt = &w->types[ts[i]->type];
		if (os[i] == SQ_OK) {
			run_task(w, ts[i], at);
			tk.started++;
		} else if (os[i] == SQ_ELOST) {
			/* taken by another worker: its starting lease ran out here */
			wt->st.lost++;
			task_free(ts[i]);
		} else {
			buf_unpop(wt, ts[i]); /* not answered: try again next tick */
		}
	}

	/* the claim: running jobs go to free slots at once, the rest wait */
	if (asking) {
		w->claims++;
		w->rtt_ms = w->have_rtt ? (1 - EWMA) * w->rtt_ms + EWMA * rtt : rtt;
		w->have_rtt = 1;
		for (int t = 0; t < w->ntypes; t++)
			w->types[t].had_work = 0;
		for (size_t i = 0; i < nj; i++) {
			sq_task *k = calloc(1, sizeof(*k));
			int t = 0;
			while (t < w->ntypes && strcmp(w->types[t].conf->name, jobs[i].type))
				t++;
			if (!k || t == w->ntypes) {
				/* cannot hold it: its lease brings it back */
				free(k);
				sq_job_clear(&jobs[i]);
				continue;
			}
			k->job = jobs[i];
			k->type = t;
			k->fn = w->types[t].fn;
			k->arg = w->types[t].arg;
			w->types[t].had_work = 1;
			if (k->job.status == SQ_RUNNING)
				run_task(w, k, at), tk.started++;
			else
				buf_push(&w->types[t], k);
			tk.claimed++;
		}
		free(jobs);
		/* a type with no work: its free slots are not waiting for anything */
		for (int t = 0; t < w->ntypes; t++)
			if (!w->types[t].had_work && !w->types[t].buffered)
				w->types[t].nfreed = 0;
		if (cst != SQ_OK || nj == 0) {
			w->poll_delay_ms = w->poll_delay_ms ? fmin(w->poll_delay_ms * 2,
								   (double)w->opts.poll_max_ms)
							    : (double)w->opts.poll_min_ms;
			w->next_claim_at = now + w->poll_delay_ms / 1000.0;
		} else {
			w->poll_delay_ms = 0;
			/* a full answer: more may be there; a partial one: drained */
			w->next_claim_at = (int)nj >= asking
						   ? now
						   : now + (double)w->opts.poll_min_ms / 1000.0;
		}
	}
	if (w->opts.on_tick)
		w->opts.on_tick(&tk, w->opts.tick_arg);
out:
	free(tc);
	free(tf);
	free(th);
	free(ts);
	free(rc);
	free(rh);
	free(rs);
	free(rf);
	free(oc);
	free(of);
	free(oh);
	free(os);
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
		wt->st.buffered = wt->buffered;
		wt->st.exec_ms = wt->exec_ms;
		s.types[t] = wt->st;
		s.running += wt->running;
		s.buffered += wt->buffered;
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

static double next_wake(sq_worker *w, double now)
{
	double at = now + 1.0;
	if (!w->stopping) {
		sq_claim_req reqs[SQ_WORKER_MAX_TYPES];
		int none[SQ_WORKER_MAX_TYPES] = {0};
		if (claim_limits(w, reqs, none) > 0 && w->next_claim_at < at)
			at = w->next_claim_at;
	}
	for (sq_task *k = w->running; k; k = k->run_next)
		if (!k->lost && k->hb_due < at)
			at = k->hb_due;
	if (w->pending && now + 0.1 < at)
		at = now + 0.1; /* results not yet written: try again soon */
	if (w->stopping && w->grace_deadline < at)
		at = w->grace_deadline;
	if (w->opts.report_ms > 0 && w->next_report < at)
		at = w->next_report;
	return at;
}

sq_status sq_worker_run(sq_worker *w, sq_error *err)
{
	if (!w->ntypes)
		return sq_err(err, SQ_EINVAL,
			      "the worker has no handler; add one with sq_worker_add");
	if (!w->pool_started) {
		if (sq_pool_start(&w->pool, w->conc_total, w->wake[1]))
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
		if (w->stopping && !w->released) {
			release_buffered(w);
			w->released = 1;
		}
		if (w->woken && !w->stopping) {
			w->woken = 0;
			w->next_claim_at = now;
			w->poll_delay_ms = 0;
		}
		tick(w, now, !w->stopping);
		snapshot(w);
		if (w->opts.report_ms > 0 && now >= w->next_report) {
			w->next_report = now + (double)w->opts.report_ms / 1000.0;
			if (w->opts.report)
				w->opts.report(&w->snap, w->opts.report_arg);
		}
		if (w->stopping && !w->running && !w->pending)
			break;
		if (w->stopping && now >= w->grace_deadline)
			break;

		double at = next_wake(w, sq_mono_s()), wait = at - sq_mono_s();
		if (wait > 0) {
			struct timeval tv = {(time_t)wait,
					     (suseconds_t)((wait - floor(wait)) * 1e6)};
			evtimer_add(w->timer_ev, &tv);
			event_base_loop(w->base, EVLOOP_ONCE);
		} else {
			event_base_loop(w->base, EVLOOP_NONBLOCK);
		}
	}
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
	if (w->pool_started) {
		sq_pool_stop(&w->pool);
		for (sq_task *k = sq_pool_take_done(&w->pool), *n; k; k = n) {
			n = k->next;
			task_free(k);
		}
	}
	for (sq_task *k = w->pending, *n; k; k = n) {
		n = k->next;
		task_free(k);
	}
	for (int t = 0; t < w->ntypes; t++) {
		for (sq_task *k; (k = buf_pop(&w->types[t])) != NULL;)
			task_free(k);
		free(w->types[t].freed);
	}
	for (int s = 0; s < SQ_MAX_SHARDS; s++) {
		if (w->listen_ev[s])
			event_free(w->listen_ev[s]);
		if (w->listen[s])
			PQfinish(w->listen[s]);
	}
	for (int i = 0; i < 2; i++)
		if (w->sig_ev[i])
			event_free(w->sig_ev[i]);
	if (w->wake_ev)
		event_free(w->wake_ev);
	if (w->timer_ev)
		event_free(w->timer_ev);
	if (w->base)
		event_base_free(w->base);
	sq_client_close(w->c);
	if (w->wake[0] >= 0)
		close(w->wake[0]);
	if (w->wake[1] >= 0)
		close(w->wake[1]);
	pthread_mutex_destroy(&w->stats_mu);
	free(w);
}

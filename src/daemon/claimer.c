/* claimer.c - claim coalescing: every claim waiting in the daemon goes into
 * one sq_claim per tick (one statement per shard, all shards at once), and
 * the jobs are dealt back to the waiting clients in turn, none beyond what
 * it asked for (docs/http.md).
 *
 * A tick runs claim_window after claims arrived or a shard sent NOTIFY
 * shardq_jobs (an enqueue), and every claim_poll while claims wait; the
 * news of the window, and of a tick under way, share the next tick.
 * A claim that got nothing waits until its wait_ms runs out. Jobs the
 * statement returned beyond what the clients can take (a client went away
 * meanwhile) are released at once. */
#include "daemon.h"
#include "clock.h"
#include "log.h"
#include "router_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct claimer {
	sqd *d;
	sqd_task *head, *tail; /* waiting claims, in order of arrival */
	int n;
	sq_listener **listen; /* per shard */
	double *listen_retry;
	/* what a pass polls: the wake pipe (shard -1), the LISTEN sockets */
	struct pollfd *pf;
	int *pf_shard;
	int npf;
	double last_log;
	int failing; /* the last claim failed: its recovery is logged */
} claimer;

static claimer C;

void sqd_claimer_wake(sqd *d)
{
	char b = 1;
	ssize_t r = write(d->wake[1], &b, 1);
	(void)r;
}

void sqd_claimer_submit(sqd *d, sqd_task *t)
{
	atomic_fetch_add(&d->m.claims_waiting, 1);
	pthread_mutex_lock(&d->claim_mu);
	t->next = NULL;
	if (d->claim_tail)
		d->claim_tail->next = t;
	else
		d->claim_head = t;
	d->claim_tail = t;
	pthread_mutex_unlock(&d->claim_mu);
	sqd_claimer_wake(d);
}

/* Connects shard s's LISTEN connection, or goes on connecting it, waiting
 * at most wait_s for the server (the loop's: SQ_LOOP_CONNECT_WAIT_S, see
 * sq_listener); after a failure, again in 5 s. */
static void listen_open(int s, double wait_s)
{
	sq_error e;
	sq_listener *l = C.listen[s];
	if (sq_listener_connect_within(l, "shardq_jobs", wait_s, &e) != SQ_OK &&
	    !sq_listener_connecting(l))
		C.listen_retry[s] = sq_mono_s() + 5;
}

/* Answers a claim: its jobs, or [] */
static void answer(sqd *d, sqd_task *t)
{
	sqd_claim *cl = t->claim;
	sq_buf_reset(&t->resp);
	sq_buf_puts(&t->resp, "{\"jobs\":[");
	if (cl->jobs.len)
		sq_buf_append(&t->resp, cl->jobs.data, cl->jobs.len);
	sq_buf_puts(&t->resp, "]}");
	t->status = 200;
	atomic_fetch_sub(&d->m.claims_waiting, 1);
	atomic_fetch_add(&d->m.claim_requests, 1);
	sqd_done(d, t);
}

static void answer_error(sqd *d, sqd_task *t, const char *code, const char *msg)
{
	t->retry_after = 1;
	sqd_error(t, 503, code, "%s; try again in a moment", msg);
	atomic_fetch_sub(&d->m.claims_waiting, 1);
	atomic_fetch_add(&d->m.claim_requests, 1);
	sqd_done(d, t);
}

/* Removes t (whose predecessor is prev) from the waiting list. */
static void unlink_task(sqd_task *prev, sqd_task *t)
{
	if (prev)
		prev->next = t->next;
	else
		C.head = t->next;
	if (C.tail == t)
		C.tail = prev;
	C.n--;
	t->next = NULL;
}

/* Answers (with what they have: nothing) the claims of clients that went
 * away. */
static void drop_gone(sqd *d)
{
	sqd_task *prev = NULL, *next;
	for (sqd_task *t = C.head; t; t = next) {
		next = t->next;
		if (atomic_load(&t->gone)) {
			unlink_task(prev, t);
			answer(d, t);
			continue;
		}
		prev = t;
	}
}

/* A tick's merged claim: one request per type, the sum of the waiting
 * claims' limits. */
typedef struct merged {
	sq_claim_req reqs[SQ_MAX_TYPES];
	const char *type[SQ_MAX_TYPES]; /* each request's type, as the claims name it */
	int n;
} merged;

/* Whether claim cl fits in m: a type's request takes at most 100,000 jobs
 * a tick. */
static int fits_in(const merged *m, const sqd_claim *cl)
{
	for (int k = 0; k < cl->ntypes; k++)
		for (int r = 0; r < m->n; r++)
			if (m->type[r] == cl->types[k].type &&
			    m->reqs[r].limit + cl->types[k].limit > 100000)
				return 0;
	return 1;
}

static void add_claim(merged *m, const sqd_claim *cl)
{
	for (int k = 0; k < cl->ntypes; k++) {
		int r = 0;
		while (r < m->n && m->type[r] != cl->types[k].type)
			r++;
		if (r == m->n) {
			m->type[r] = cl->types[k].type;
			m->reqs[r].type = m->type[r];
			m->reqs[r].limit = m->reqs[r].start = 0;
			m->n++;
		}
		m->reqs[r].limit += cl->types[k].limit;
		if (cl->start)
			m->reqs[r].start += cl->types[k].limit;
	}
}

/* Sums the waiting claims by type into m. The claims the last tick had no
 * room for come first, so that each is in this one; one that does not fit
 * is marked skipped, and until its next tick it is not answered even with
 * its wait over (expire_waits). */
static void merge_claims(merged *m)
{
	m->n = 0;
	for (int pass = 0; pass < 2; pass++)
		for (sqd_task *t = C.head; t; t = t->next) {
			sqd_claim *cl = t->claim;
			if (cl->skipped != !pass)
				continue;
			cl->fits = fits_in(m, cl);
			if (cl->fits)
				add_claim(m, cl);
		}
	for (sqd_task *t = C.head; t; t = t->next) {
		t->claim->skipped = !t->claim->fits;
		t->claim->untried &= !t->claim->fits;
	}
}

/* Whether waiting claim t can take job j: one of j's type with room,
 * that asked to start if j is running and not if it is starting. *slot:
 * the claim's entry of j's type. */
static int can_take(sqd_task *t, const sq_job *j, int *slot)
{
	sqd_claim *cl = t->claim;
	if (atomic_load(&t->gone) || cl->start != (j->status == SQ_RUNNING))
		return 0;
	for (int k = 0; k < cl->ntypes; k++)
		if (!strcmp(cl->types[k].type, j->type) && cl->types[k].got < cl->types[k].limit) {
			*slot = k;
			return 1;
		}
	return 0;
}

/* The waiting claim that takes job j: the claims take turns, from the one
 * after `last` (the claim that took the previous job; NULL: from the first
 * to arrive), so that a tick with fewer jobs than asked for answers as
 * many clients as it can at once, each with part of its limit, instead of
 * filling the first to arrive while the others wait for later ticks. NULL
 * if none can take it. */
static sqd_task *taker_of(const sq_job *j, sqd_task *last, int *slot)
{
	if (!C.head)
		return NULL;
	sqd_task *from = last && last->next ? last->next : C.head, *t = from;
	do {
		if (can_take(t, j, slot))
			return t;
		t = t->next ? t->next : C.head;
	} while (t != from);
	return NULL;
}

/* Releases at once the jobs the claim took that no client could take (one
 * went away meanwhile): else they would wait for their lease. */
static void release_extra(sqd *d, sq_client *c, const sq_job_ref *extra, size_t nextra)
{
	sq_status *out = calloc(nextra, sizeof(*out));
	sq_error err;
	if (out && sq_unclaim(c, d->worker_id, extra, nextra, out, &err) != SQ_OK)
		sqd_log("releasing %zu jobs no client could take: %s (their lease brings "
			"them back)",
			nextra, err.msg);
	atomic_fetch_add(&d->m.jobs_released_extra, nextra);
	free(out);
}

/* Deals the jobs out in the claim's order to the waiting claims in turn
 * (taker_of), and releases those none could take. */
static void deal(sqd *d, sq_client *c, const sq_job *jobs, size_t njobs)
{
	sq_job_ref *extra = njobs ? calloc(njobs, sizeof(*extra)) : NULL;
	size_t nextra = 0;
	sqd_task *last = NULL;
	for (size_t i = 0; i < njobs; i++) {
		const sq_job *j = &jobs[i];
		int slot = -1;
		sqd_task *to = taker_of(j, last, &slot);
		if (!to) {
			if (extra)
				extra[nextra++] = (sq_job_ref){j->id, j->attempt};
			continue;
		}
		sqd_claim *cl = to->claim;
		cl->types[slot].got++;
		if (cl->njobs++)
			sq_buf_putc(&cl->jobs, ',');
		sqd_put_job(&cl->jobs, d->cfg, j);
		sqd_task_add_ref(to, j->id, j->attempt);
		last = to;
	}
	if (nextra)
		release_extra(d, c, extra, nextra);
	free(extra);
}

/* Answers the claims that got jobs, and after a failed claim those whose
 * wait is over. */
static void answer_dealt(sqd *d, sq_status st, const sq_error *err)
{
	double now = sq_mono_s();
	sqd_task *prev = NULL, *next;
	for (sqd_task *t = C.head; t; t = next) {
		next = t->next;
		if (t->claim->njobs) {
			unlink_task(prev, t);
			answer(d, t);
		} else if (st != SQ_OK && now >= t->claim->deadline) {
			unlink_task(prev, t);
			answer_error(d, t, st == SQ_EMOVING ? "moving" : "unavailable", err->msg);
		} else {
			prev = t;
		}
	}
}

/* One tick: one sq_claim for every waiting claim. */
static void tick(sqd *d, sq_client *c)
{
	merged m;
	drop_gone(d);
	merge_claims(&m);
	if (!m.n)
		return;
	sq_job *jobs = NULL;
	size_t njobs = 0;
	sq_error err;
	sq_status st = sq_claim(c, d->worker_id, m.reqs, (size_t)m.n, &jobs, &njobs, &err);
	atomic_fetch_add(&d->m.claim_statements, 1);
	atomic_fetch_add(&d->m.jobs_claimed, njobs);
	if (st != SQ_OK) {
		atomic_fetch_add(&d->m.claim_errors, 1);
		double now = sq_mono_s();
		if (now - C.last_log > 5) { /* one line per 5 s while a shard fails */
			sqd_log("claim: %s", err.msg);
			C.last_log = now;
		}
		C.failing = 1;
	} else if (C.failing) { /* the end of an outage is said too */
		sqd_log("claim: every shard answers again");
		C.failing = 0;
	}
	deal(d, c, jobs, njobs);
	sq_jobs_free(jobs, njobs);
	SQ_ROUTER_FAILPOINT("sqd_dealt");
	answer_dealt(d, st, &err);
}

/* Moves the claims that arrived since the last pass to the waiting list;
 * 1 if there were any. */
static int take_arrivals(sqd *d)
{
	pthread_mutex_lock(&d->claim_mu);
	sqd_task *arrived = d->claim_head;
	d->claim_head = d->claim_tail = NULL;
	pthread_mutex_unlock(&d->claim_mu);
	int fresh = arrived != NULL;
	while (arrived) {
		sqd_task *next = arrived->next;
		arrived->next = NULL;
		arrived->claim->untried = 1;
		if (C.tail)
			C.tail->next = arrived;
		else
			C.head = arrived;
		C.tail = arrived;
		C.n++;
		arrived = next;
	}
	return fresh;
}

/* Stopping: every waiting claim is answered with what it has (nothing). */
static void answer_all(sqd *d)
{
	while (C.head) {
		sqd_task *t = C.head;
		unlink_task(NULL, t);
		answer(d, t);
	}
}

/* Answers the claims whose wait ran out (not one no tick has tried yet,
 * nor one the last tick skipped: the next tick takes it) or whose client
 * went away; returns the earliest deadline of the others, or `until` if
 * none is earlier. */
static double expire_waits(sqd *d, double now, double until)
{
	sqd_task *prev = NULL, *next;
	for (sqd_task *t = C.head; t; t = next) {
		next = t->next;
		int waits = t->claim->skipped || t->claim->untried;
		if ((now >= t->claim->deadline && !waits) || atomic_load(&t->gone)) {
			unlink_task(prev, t);
			answer(d, t);
			continue;
		}
		if (t->claim->deadline < until && !waits)
			until = t->claim->deadline;
		prev = t;
	}
	return until;
}

static void poll_add(int fd, int shard)
{
	C.pf[C.npf].fd = fd;
	C.pf[C.npf].events = POLLIN;
	C.pf_shard[C.npf++] = shard;
}

/* Shard s's LISTEN connection for this pass: probed, made again once the
 * shard's claim connection is up, a connect under way taken on (none of
 * it blocks this thread: a shard that does not answer would hold every
 * claim up), its socket polled. Returns whether a connect is under way;
 * *probe_at is lowered to when it must be probed. */
static int tend_listener(sq_client *c, int s, double now, double *probe_at)
{
	sq_listener *l = C.listen[s];
	char why[256];
	double next_at;
	if (sq_listener_check(l, now, sq_client_answer_wait_of(c), &next_at, why, sizeof(why)) <
	    0) {
		/* it died unseen: made again once s answers */
		sq_listener_drop(l);
		C.listen_retry[s] = now + 1;
		sqd_log("claimer: %s", why);
	}
	if (next_at < *probe_at)
		*probe_at = next_at;
	if (sq_listener_socket(l) < 0 &&
	    (sq_listener_connecting(l) || (now >= C.listen_retry[s] && sq_client_shard_up(c, s))))
		listen_open(s, SQ_LOOP_CONNECT_WAIT_S);
	if (sq_listener_socket(l) >= 0)
		poll_add(sq_listener_socket(l), s);
	return sq_listener_pending(l);
}

/* How long to poll (ms): until the first deadline or the next poll `wake`,
 * a LISTEN connection's probe, and while a connect is under way (`going`)
 * at most SQ_LOOP_CONNECT_WAIT_S, for it goes on between claims. */
static int poll_timeout(double now, double wake, double probe_at, int going)
{
	int timeout;
	if (C.head) {
		double ms = (wake - now) * 1000;
		timeout = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms + 1;
	} else {
		timeout = 5000; /* to retry broken LISTEN connections */
	}
	if (probe_at < INFINITY) {
		double ms = (probe_at - now) * 1000;
		if (ms < timeout)
			timeout = ms < 0 ? 0 : (int)ms + 1;
	}
	if (going && timeout > SQ_LOOP_CONNECT_WAIT_S * 1000)
		timeout = (int)(SQ_LOOP_CONNECT_WAIT_S * 1000);
	return timeout;
}

/* Shard s's LISTEN socket was readable: 1 when a NOTIFY came, or the
 * LISTEN was answered (what was enqueued before it woke nobody): either
 * way, claim at once. */
static int read_listener(int s)
{
	int listening;
	char why[256];
	int n = sq_listener_read(C.listen[s], &listening, why, sizeof(why));
	if (n < 0) {
		sq_listener_drop(C.listen[s]);
		/* a LISTEN the server refused: logged, and not tried again at
		 * once */
		C.listen_retry[s] = sq_mono_s() + (n == -2 ? 5 : 1);
		if (n == -2)
			sqd_log("claimer: %s", why);
		return 0;
	}
	return n > 0 || listening;
}

/* Waits for a claim, a NOTIFY, a deadline or the next poll; returns 1 when
 * a shard said there is work to claim. */
static int wait_for_news(sqd *d, sq_client *c, double now, double wake)
{
	C.npf = 0;
	poll_add(d->wake[0], -1);
	int going = 0;
	/* the map's and the paused types' poll, also while no claim waits */
	double probe_at = now + sq_client_tend(c);
	for (int s = 0; s < sq_config_shard_count(d->cfg); s++)
		going += tend_listener(c, s, now, &probe_at);
	going += sq_client_advance_connects(c);
	int r = poll(C.pf, (nfds_t)C.npf, poll_timeout(now, wake, probe_at, going > 0));
	if (r < 0 && errno != EINTR)
		sqd_log("claimer: poll: %s", strerror(errno));
	int notified = 0;
	for (int i = 0; r > 0 && i < C.npf; i++) {
		if (!(C.pf[i].revents & (POLLIN | POLLERR | POLLHUP)))
			continue;
		if (C.pf_shard[i] >= 0) {
			notified |= read_listener(C.pf_shard[i]);
			continue;
		}
		char buf[256];
		while (read(d->wake[0], buf, sizeof(buf)) > 0) {
		}
	}
	return notified;
}

static void *claimer_main(void *arg)
{
	sqd *d = arg;
	sq_client *c = d->claim_client;
	const sq_daemon_conf *dc = sq_config_daemon(d->cfg);
	double window = (double)dc->claim_window_ms / 1000.0;
	double next_poll = 0, asked = INFINITY; /* asked: the tick news asked for */
	for (;;) {
		int stopping = atomic_load(&d->stopping);
		if (take_arrivals(d) && asked == INFINITY)
			asked = sq_mono_s() + window;
		if (stopping)
			answer_all(d);
		if (stopping == 2)
			break;
		double now = sq_mono_s();
		if (C.head && (now >= asked || now >= next_poll)) {
			tick(d, c);
			now = sq_mono_s();
			next_poll = now + (double)dc->claim_poll_ms / 1000.0;
			asked = INFINITY;
		}
		double wake = expire_waits(d, now, asked < next_poll ? asked : next_poll);
		if (wait_for_news(d, c, now, wake) && asked == INFINITY)
			asked = sq_mono_s() + window;
	}
	for (int s = 0; s < sq_config_shard_count(d->cfg); s++)
		sq_listener_destroy(C.listen[s]);
	free(C.listen);
	free(C.listen_retry);
	free(C.pf);
	free(C.pf_shard);
	return NULL;
}

int sqd_claimer_start(sqd *d, sq_error *err)
{
	C.d = d;
	if (pipe(d->wake)) {
		snprintf(err->msg, sizeof(err->msg), "pipe: %s", strerror(errno));
		return -1;
	}
	fcntl(d->wake[0], F_SETFL, O_NONBLOCK);
	fcntl(d->wake[1], F_SETFL, O_NONBLOCK);
	fcntl(d->wake[0], F_SETFD, FD_CLOEXEC);
	fcntl(d->wake[1], F_SETFD, FD_CLOEXEC);
	/* the claimer serves every waiting worker: a shard that does not
	 * answer must not hold the others' claims up for connect_timeout */
	sq_client_connect_wait(d->claim_client, SQ_LOOP_CONNECT_WAIT_S);
	/* a shard down at the start is listened to once it is back (the loop) */
	int ns = sq_config_shard_count(d->cfg);
	C.listen = calloc((size_t)ns, sizeof(*C.listen));
	C.listen_retry = calloc((size_t)ns, sizeof(*C.listen_retry));
	C.pf = calloc((size_t)ns + 1, sizeof(*C.pf));
	C.pf_shard = calloc((size_t)ns + 1, sizeof(*C.pf_shard));
	if (!C.listen || !C.listen_retry || !C.pf || !C.pf_shard) {
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		return -1;
	}
	for (int s = 0; s < ns; s++) {
		if (!(C.listen[s] = sq_listener_create(d->cfg, s, err)))
			return -1;
		/* a shard whose connection is up answers within connect_timeout */
		if (sq_client_shard_up(d->claim_client, s))
			listen_open(s, sq_config_connect_timeout_s(d->cfg));
	}
	if (pthread_create(&d->claimer, NULL, claimer_main, d)) {
		snprintf(err->msg, sizeof(err->msg), "cannot start the claim thread");
		return -1;
	}
	return 0;
}

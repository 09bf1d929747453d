/* claimer.c - claim coalescing: every claim waiting in the daemon goes into
 * one sq_claim per tick (one statement per shard, all shards at once), and
 * the jobs are dealt back to the clients in their order of arrival, none
 * beyond what it asked for (docs/http.md).
 *
 * A tick runs when claims arrived since the last one, when a shard sent
 * NOTIFY shardq_jobs (an enqueue), or every claim_poll while claims wait.
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
	double last_log;
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

/* One tick: one sq_claim for every waiting claim. */
static void tick(sqd *d, sq_client *c)
{
	sq_claim_req reqs[SQ_MAX_TYPES];
	const char *tc[SQ_MAX_TYPES]; /* each request's type, as the claims name it */
	int nreqs = 0;
	/* drop the claims of clients that went away */
	sqd_task *prev = NULL, *t, *next;
	for (t = C.head; t; t = next) {
		next = t->next;
		if (atomic_load(&t->gone)) {
			unlink_task(prev, t);
			answer(d, t);
			continue;
		}
		prev = t;
	}
	/* sum the rest by type, up to 100,000 jobs of a type a tick. The
	 * claims the last tick had no room for come first, so that each is in
	 * the next tick; until then none is answered, even with its wait over
	 * (claimer_main) */
	for (int pass = 0; pass < 2; pass++)
		for (t = C.head; t; t = t->next) {
			sqd_claim *cl = t->claim;
			if (cl->skipped != !pass)
				continue;
			int fits = 1;
			for (int k = 0; k < cl->ntypes && fits; k++)
				for (int r = 0; r < nreqs; r++)
					if (tc[r] == cl->types[k].type &&
					    reqs[r].limit + cl->types[k].limit > 100000)
						fits = 0;
			cl->fits = fits;
			if (!fits)
				continue;
			for (int k = 0; k < cl->ntypes; k++) {
				int r = 0;
				while (r < nreqs && tc[r] != cl->types[k].type)
					r++;
				if (r == nreqs) {
					tc[r] = cl->types[k].type;
					reqs[r].type = tc[r];
					reqs[r].limit = reqs[r].start = 0;
					nreqs++;
				}
				reqs[r].limit += cl->types[k].limit;
				if (cl->start)
					reqs[r].start += cl->types[k].limit;
			}
		}
	for (t = C.head; t; t = t->next)
		t->claim->skipped = !t->claim->fits;
	if (!nreqs)
		return;
	sq_job *jobs = NULL;
	size_t njobs = 0;
	sq_error err;
	sq_status st = sq_claim(c, d->worker_id, reqs, (size_t)nreqs, &jobs, &njobs, &err);
	atomic_fetch_add(&d->m.claim_statements, 1);
	atomic_fetch_add(&d->m.jobs_claimed, njobs);
	if (st != SQ_OK) {
		atomic_fetch_add(&d->m.claim_errors, 1);
		double now = sq_mono_s();
		if (now - C.last_log > 5) {
			sqd_log("claim: %s", err.msg);
			C.last_log = now;
		}
	}
	/* deal the jobs out in the claim's order, to the clients in order of
	 * arrival: a running job to a client that asked to start, a starting
	 * one to a client that did not */
	sq_job_ref *extra = NULL;
	size_t nextra = 0;
	if (njobs)
		extra = calloc(njobs, sizeof(*extra));
	for (size_t i = 0; i < njobs; i++) {
		const sq_job *j = &jobs[i];
		int want_start = j->status == SQ_RUNNING;
		sqd_task *to = NULL;
		int slot = -1;
		for (t = C.head; t && !to; t = t->next) {
			sqd_claim *cl = t->claim;
			if (atomic_load(&t->gone) || cl->start != want_start)
				continue;
			for (int k = 0; k < cl->ntypes; k++)
				if (!strcmp(cl->types[k].type, j->type) &&
				    cl->types[k].got < cl->types[k].limit) {
					to = t;
					slot = k;
					break;
				}
		}
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
	}
	sq_jobs_free(jobs, njobs);
	if (nextra) {
		sq_status *out = calloc(nextra, sizeof(*out));
		sq_error e2;
		if (out && sq_unclaim(c, d->worker_id, extra, nextra, out, &e2) != SQ_OK)
			sqd_log("releasing %zu jobs no client could take: %s (their lease brings "
				"them back)",
				nextra, e2.msg);
		atomic_fetch_add(&d->m.jobs_released_extra, nextra);
		free(out);
	}
	free(extra);
	SQ_ROUTER_FAILPOINT("sqd_dealt");
	/* answer the claims that got jobs, and on a failure those that cannot
	 * wait */
	double now = sq_mono_s();
	prev = NULL;
	for (t = C.head; t; t = next) {
		next = t->next;
		if (t->claim->njobs) {
			unlink_task(prev, t);
			answer(d, t);
		} else if (st != SQ_OK && now >= t->claim->deadline) {
			unlink_task(prev, t);
			answer_error(d, t, st == SQ_EMOVING ? "moving" : "unavailable", err.msg);
		} else {
			prev = t;
		}
	}
}

static void *claimer_main(void *arg)
{
	sqd *d = arg;
	sq_client *c = d->claim_client;
	int ns = sq_config_shard_count(d->cfg);
	double next_poll = 0;
	struct pollfd *pf = calloc((size_t)ns + 1, sizeof(*pf));
	int *pf_shard = calloc((size_t)ns + 1, sizeof(int));
	if (!pf || !pf_shard)
		abort();
	for (;;) {
		int stopping = atomic_load(&d->stopping);
		/* take the new arrivals */
		pthread_mutex_lock(&d->claim_mu);
		sqd_task *arrived = d->claim_head;
		d->claim_head = d->claim_tail = NULL;
		pthread_mutex_unlock(&d->claim_mu);
		int fresh = arrived != NULL;
		while (arrived) {
			sqd_task *next = arrived->next;
			arrived->next = NULL;
			if (C.tail)
				C.tail->next = arrived;
			else
				C.head = arrived;
			C.tail = arrived;
			C.n++;
			arrived = next;
		}
		if (stopping) {
			/* answer everything with what it has (nothing) */
			while (C.head) {
				sqd_task *t = C.head;
				unlink_task(NULL, t);
				answer(d, t);
			}
			if (stopping == 2)
				break;
		}
		double now = sq_mono_s();
		if (C.head && (fresh || now >= next_poll)) {
			tick(d, c);
			now = sq_mono_s();
			next_poll = now + sq_config_daemon(d->cfg)->claim_poll_ms / 1000.0;
		}
		/* answer the waits that ran out */
		double wake = next_poll;
		sqd_task *prev = NULL, *next;
		for (sqd_task *t = C.head; t; t = next) {
			next = t->next;
			if ((now >= t->claim->deadline && !t->claim->skipped) ||
			    atomic_load(&t->gone)) {
				unlink_task(prev, t);
				answer(d, t);
				continue;
			}
			if (t->claim->deadline < wake && !t->claim->skipped)
				wake = t->claim->deadline;
			prev = t;
		}
		/* wait for a claim, a NOTIFY, a deadline or the next poll */
		int npf = 0;
		pf[npf].fd = d->wake[0];
		pf[npf].events = POLLIN;
		pf_shard[npf++] = -1;
		/* LISTEN again once the shard's claim connection is up; a connect
		 * under way goes on (neither blocks this thread: a shard that does
		 * not answer would hold every claim up) */
		int listen_going = 0;
		double probe_at = INFINITY;
		for (int s = 0; s < ns; s++) {
			sq_listener *l = C.listen[s];
			char why[256];
			double next_at;
			if (sq_listener_check(l, now, sq_client_answer_wait_of(c), &next_at, why,
					      sizeof(why)) < 0) {
				/* it died unseen: made again once s answers */
				sq_listener_drop(l);
				C.listen_retry[s] = now + 1;
				sqd_log("claimer: %s", why);
			}
			if (next_at < probe_at)
				probe_at = next_at;
			if (sq_listener_socket(l) < 0 &&
			    (sq_listener_connecting(l) ||
			     (now >= C.listen_retry[s] && sq_client_shard_up(c, s))))
				listen_open(s, SQ_LOOP_CONNECT_WAIT_S);
			listen_going += sq_listener_pending(l);
			if (sq_listener_socket(l) >= 0) {
				pf[npf].fd = sq_listener_socket(l);
				pf[npf].events = POLLIN;
				pf_shard[npf++] = s;
			}
		}
		int timeout = -1;
		if (C.head) {
			double ms = (wake - now) * 1000;
			timeout = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms + 1;
		} else {
			timeout = 5000; /* to retry broken LISTEN connections */
		}
		if (probe_at < INFINITY) { /* a LISTEN connection's probe */
			double ms = (probe_at - now) * 1000;
			if (timeout < 0 || ms < timeout)
				timeout = ms < 0 ? 0 : (int)ms + 1;
		}
		/* a connect under way goes on between claims */
		if (sq_client_advance_connects(c) + listen_going > 0 &&
		    (timeout < 0 || timeout > SQ_LOOP_CONNECT_WAIT_S * 1000))
			timeout = (int)(SQ_LOOP_CONNECT_WAIT_S * 1000);
		int r = poll(pf, (nfds_t)npf, timeout);
		if (r < 0 && errno != EINTR)
			sqd_log("claimer: poll: %s", strerror(errno));
		int notified = 0;
		for (int i = 0; r > 0 && i < npf; i++) {
			if (!(pf[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if (pf_shard[i] < 0) {
				char buf[256];
				while (read(d->wake[0], buf, sizeof(buf)) > 0) {
				}
				continue;
			}
			int s = pf_shard[i], listening;
			char why[256];
			int n = sq_listener_read(C.listen[s], &listening, why, sizeof(why));
			if (n < 0) {
				sq_listener_drop(C.listen[s]);
				/* a LISTEN the server refused: logged, and not
				 * tried again at once */
				C.listen_retry[s] = sq_mono_s() + (n == -2 ? 5 : 1);
				if (n == -2)
					sqd_log("claimer: %s", why);
				continue;
			}
			/* listening from now on: what was enqueued before it
			 * woke nobody, so claim at once */
			if (n > 0 || listening)
				notified = 1;
		}
		if (notified)
			next_poll = 0; /* claim at once */
	}
	for (int s = 0; s < ns; s++)
		sq_listener_destroy(C.listen[s]);
	free(C.listen);
	free(C.listen_retry);
	free(pf);
	free(pf_shard);
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
	if (!C.listen || !C.listen_retry) {
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

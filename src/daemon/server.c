/* server.c - shardqd's main thread: the HTTP server, connection limits,
 * auth, routing, the request threads and the process (docs/http.md). */
#include "daemon.h"
#include "clock.h"
#include "framing.h"
#include "json.h"
#include "log.h"
#include "router_internal.h"

#include <errno.h>
#include <netdb.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- small things ------------------------------------------------------- */

/* A line of the library's threads (maintenance, the meta watch). */
static void lib_log(const char *line, void *arg)
{
	(void)arg;
	sqd_log("%s", line);
}

static void sha256(const void *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;
	EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

/* ---- connections: a deadline for every request -------------------------- */

/*
 * libevent's own timeouts are inactivity timeouts: a client that sends one
 * byte every few seconds would hold a connection for ever. So every
 * connection also gets a deadline: a whole request must arrive within
 * request_timeout of the accept or of the previous reply. A sweep shuts the
 * socket of a connection past it; libevent then sees the end of the stream
 * and frees the connection.
 *
 * libevent does not say when it frees a connection that never delivered a
 * request, so a connection is known by its socket number and its peer's
 * address, both read once just after the accept: a sweep shuts a socket
 * only while it still has that peer, never a number the kernel gave to
 * another connection since (a shard's, say).
 */
typedef struct sqd_conn {
	struct sqd_conn *prev, *next;
	struct bufferevent *bev; /* until the socket is known */
	int fd;                  /* -1: not known yet */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	struct evhttp_connection *evcon; /* once a request came */
	sqd_task *task;                  /* the request being answered */
	double deadline;                 /* while idle */
	int closed;                      /* libevent freed the connection */
	int over;                        /* beyond max_connections: answered 503, shut */
	int shut;                        /* we shut its socket */
	/* the framing of its requests, followed as they are read (see "a
	 * malformed chunked body" below) */
	struct evbuffer *in;             /* the socket's input, while in_cb is set */
	struct evbuffer_cb_entry *in_cb; /* NULL once not followed */
	uint64_t in_end;                 /* bytes read from the socket so far */
	struct event *bad_ev;            /* answers a malformed chunked body */
	int cutting, answering;
	sqd_framing fr;
} sqd_conn;

static struct {
	sqd *d;
	struct event_base *base;
	struct evhttp *http;
	sqd_conn *conns;
	int nconns;
	sqd_conn **by_fd; /* the live tracker of each socket number */
	int by_fd_len;
	sqd_token *tokens;
	int ntokens;
	struct event *sweep_ev, *sig_term, *sig_int, *sig_hup;
	int stop_asked;
} S;

static void conn_unlink(sqd_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		S.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	S.nconns--;
	if (c->fd >= 0 && c->fd < S.by_fd_len && S.by_fd[c->fd] == c)
		S.by_fd[c->fd] = NULL;
	if (c->task) {
		c->task->conn = NULL;
		c->task = NULL;
	}
	if (c->evcon && !c->closed)
		evhttp_connection_set_closecb(c->evcon, NULL, NULL);
	if (c->in_cb && !c->closed)
		evbuffer_remove_cb_entry(c->in, c->in_cb);
	if (c->bad_ev)
		event_free(c->bad_ev);
	if (c->bev)
		bufferevent_decref(c->bev);
	free(c);
}

static void unfollow(sqd_conn *c)
{
	if (c->in_cb)
		evbuffer_remove_cb_entry(c->in, c->in_cb);
	c->in_cb = NULL;
}

static void on_conn_closed(struct evhttp_connection *evcon, void *arg);

/* Just after the accept (libevent sets the socket after asking us for the
 * bufferevent): the socket number and the peer. */
static void on_conn_known(evutil_socket_t unused, short what, void *arg)
{
	sqd_conn *c = arg;
	int fd = (int)bufferevent_getfd(c->bev);
	/* libevent's connection is the argument of its bufferevent's callbacks
	 * (NULL once it freed it): known from here on, before any request, so
	 * that its end is always told (on_conn_closed) */
	void *evcon = NULL;
	bufferevent_getcb(c->bev, NULL, NULL, NULL, &evcon);
	c->peer_len = sizeof(c->peer);
	if (fd < 0 || !evcon || getpeername(fd, (struct sockaddr *)&c->peer, &c->peer_len)) {
		unfollow(c); /* the bufferevent lives until our reference goes */
		bufferevent_decref(c->bev);
		c->bev = NULL;
		c->closed = 1; /* gone already */
		return;
	}
	bufferevent_decref(c->bev);
	c->bev = NULL;
	c->evcon = evcon;
	evhttp_connection_set_closecb(evcon, on_conn_closed, c);
	if (fd >= S.by_fd_len) {
		int n = fd * 2 + 64;
		sqd_conn **v = realloc(S.by_fd, (size_t)n * sizeof(*v));
		if (!v)
			return;
		memset(v + S.by_fd_len, 0, (size_t)(n - S.by_fd_len) * sizeof(*v));
		S.by_fd = v;
		S.by_fd_len = n;
	}
	sqd_conn *old = S.by_fd[fd];
	if (old && old != c)
		conn_unlink(old); /* the kernel reused its number: it is gone */
	S.by_fd[fd] = c;
	c->fd = fd;
}

/* ---- connections: a malformed chunked body ------------------------------- */

/*
 * libevent 2.1 reads a chunked body it cannot parse as one too long: it
 * answers 413 itself, in HTML, before any callback of ours. So the bytes of
 * each connection are followed as they are read (framing.c, through a
 * callback on the socket's input buffer, which runs before libevent reads
 * them). Where a chunked body turns out malformed, everything from the bad
 * line on is taken out of the input, and what came before is left to
 * libevent: earlier requests pipelined on the connection, the request's head
 * and its good chunks. libevent reads the next request only once the reply
 * to the one before is written to the socket, so when it has read the input
 * down to the bad line, every earlier reply is out: then (bad_chunk) the
 * 400 goes, and the connection is freed. The 400 never overtakes a reply.
 */

static void on_bad_chunk(evutil_socket_t unused, short what, void *arg);

/* Feeds the n bytes just added at the end of in to c's framing. */
static void follow(sqd_conn *c, struct evbuffer *in, size_t n)
{
	struct evbuffer_ptr at;
	if (evbuffer_ptr_set(in, &at, evbuffer_get_length(in) - n, EVBUFFER_PTR_SET)) {
		c->fr.verdict = SQD_FRAMING_OFF;
		return;
	}
	while (n && c->fr.verdict == SQD_FRAMING_OK) {
		struct evbuffer_iovec v;
		if (evbuffer_peek(in, (ev_ssize_t)n, &at, &v, 1) < 1 || !v.iov_len) {
			c->fr.verdict = SQD_FRAMING_OFF;
			return;
		}
		size_t k = v.iov_len < n ? v.iov_len : n;
		sqd_framing_feed(&c->fr, v.iov_base, k);
		n -= k;
		if (n && evbuffer_ptr_set(in, &at, k, EVBUFFER_PTR_ADD))
			c->fr.verdict = SQD_FRAMING_OFF;
	}
}

/* Takes out of in everything from the malformed chunk's line on. */
static void cut(sqd_conn *c, struct evbuffer *in)
{
	size_t len = evbuffer_get_length(in);
	uint64_t start = c->in_end - len; /* where in begins, in the connection's bytes */
	size_t keep = c->fr.bad_at > start ? (size_t)(c->fr.bad_at - start) : 0;
	if (keep >= len)
		return;
	c->cutting = 1;
	struct evbuffer *head = keep ? evbuffer_new() : NULL;
	if (head)
		evbuffer_remove_buffer(in, head, keep);
	evbuffer_drain(in, evbuffer_get_length(in));
	if (head) {
		evbuffer_prepend_buffer(in, head);
		evbuffer_free(head);
	}
	c->cutting = 0;
}

/* The socket's input changed: bytes read, or libevent read some. */
static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	sqd_conn *c = arg;
	if (c->cutting)
		return;
	if (info->n_added) {
		c->in_end += info->n_added;
		if (c->fr.verdict == SQD_FRAMING_OK)
			follow(c, in, info->n_added);
		if (c->fr.verdict == SQD_FRAMING_OFF) {
			unfollow(c); /* libevent alone judges this connection */
			return;
		}
		if (c->fr.verdict == SQD_FRAMING_BAD)
			cut(c, in);
	}
	if (c->fr.verdict != SQD_FRAMING_BAD || c->answering || evbuffer_get_length(in))
		return;
	/* libevent has read all before the bad line: every earlier reply is
	 * written; answer after its read, not inside it */
	c->answering = 1;
	c->bad_ev = event_new(S.base, -1, 0, on_bad_chunk, c);
	if (c->bad_ev)
		event_active(c->bad_ev, EV_TIMEOUT, 0);
}

/* The 400 for a malformed chunked body, written to the socket (it takes so
 * small a reply at once, unless the client has left earlier replies unread:
 * then the connection just closes), and the connection freed. */
static void on_bad_chunk(evutil_socket_t unused, short what, void *arg)
{
	sqd_conn *c = arg;
	if (c->closed)
		return;
	if (!c->evcon) { /* on_conn_known has not run yet */
		struct timeval soon = {0, 1000};
		event_add(c->bad_ev, &soon);
		return;
	}
	struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
	int fd = bev ? (int)bufferevent_getfd(bev) : -1;
	char msg[512];
	snprintf(msg, sizeof(msg),
		 "the chunked body is malformed: %s; send a valid chunked body or a "
		 "Content-Length",
		 c->fr.why);
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_puts(&b, "{\"error\":{\"code\":\"bad_request\",\"message\":");
	sq_json_put_string(&b, msg);
	sq_buf_puts(&b, "}}");
	char head[256];
	int hn = snprintf(head, sizeof(head),
			  "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			  b.len);
	struct iovec iov[2] = {{head, (size_t)hn}, {b.data, b.len}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = b.oom ? 1 : 2};
	if (fd >= 0 && !b.oom)
		while (sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR)
			;
	sq_buf_free(&b);
	evhttp_connection_free(c->evcon); /* on_conn_closed: c->closed */
}

static struct bufferevent *on_new_conn(struct event_base *base, void *arg)
{
	sqd *d = arg;
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	sqd_conn *c = calloc(1, sizeof(*c));
	if (!bev || !c) {
		free(c);
		return bev;
	}
	/* held until on_conn_known, in the next turn of the loop */
	bufferevent_incref(bev);
	c->bev = bev;
	c->fd = -1;
	sqd_framing_init(&c->fr);
	c->in = bufferevent_get_input(bev);
	c->in_cb = evbuffer_add_cb(c->in, on_input, c);
	c->deadline = sq_mono_s() + sq_config_daemon(d->cfg)->request_timeout_ms / 1000.0;
	if (S.nconns >= sq_config_daemon(d->cfg)->max_connections || atomic_load(&d->stopping)) {
		/* its request, if it comes within a second, gets 503 and the
		 * connection closes; else the sweep shuts it */
		c->over = 1;
		c->deadline = sq_mono_s() + 1;
	}
	c->next = S.conns;
	if (S.conns)
		S.conns->prev = c;
	S.conns = c;
	S.nconns++;
	atomic_store(&d->m.connections, S.nconns);
	struct timeval now = {0, 0};
	event_base_once(base, -1, EV_TIMEOUT, on_conn_known, c, &now);
	return bev;
}

static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	sqd_conn *c = arg;
	unfollow(c); /* its input is freed next */
	c->closed = 1;
	if (c->task) {
		atomic_store(&c->task->gone, 1);
		if (c->task->watch) {
			event_free(c->task->watch);
			c->task->watch = NULL;
		}
		c->task->fd = -1;
		c->task->conn = NULL;
		c->task = NULL;
	}
}

static sqd_conn *conn_of(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	int fd = bev ? (int)bufferevent_getfd(bev) : -1;
	sqd_conn *c = fd >= 0 && fd < S.by_fd_len ? S.by_fd[fd] : NULL;
	if (!c || c->closed)
		return NULL;
	if (!c->evcon) {
		c->evcon = evcon;
		evhttp_connection_set_closecb(evcon, on_conn_closed, c);
	}
	return c;
}

/* Whether socket fd is still the connection c was accepted as. */
static int same_peer(const sqd_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (c->fd < 0 || getpeername(c->fd, (struct sockaddr *)&ss, &len))
		return 0;
	return len == c->peer_len && !memcmp(&ss, &c->peer, len);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
	sqd *d = arg;
	double now = sq_mono_s();
	if (now - d->rates.last_t >= 1)
		sqd_rates_sample(d);
	sqd_conn *next;
	for (sqd_conn *c = S.conns; c; c = next) {
		next = c->next;
		if (c->closed) {
			conn_unlink(c);
			continue;
		}
		if (c->task || c->fd < 0 || now < c->deadline)
			continue;
		if (c->shut || !same_peer(c)) {
			/* libevent has let it go (a connection that had a request
			 * says so by its close callback) */
			if (!c->evcon || !same_peer(c))
				conn_unlink(c);
			continue;
		}
		shutdown(c->fd, SHUT_RDWR);
		c->shut = 1;
		atomic_fetch_add(&d->m.conns_dropped, 1);
	}
	atomic_store(&d->m.connections, S.nconns);
}

/* ---- replies -------------------------------------------------------------- */

static const char *reason_of(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "";
	}
}

/* libevent reads nothing from a connection while its request is being
 * answered, so it cannot tell that the client hung up. A waiting claim's
 * socket is watched here: the end of the stream marks the claim gone, so
 * the claimer skips it and what it was already given goes back. */
static int peer_gone(int fd)
{
	char b;
	if (fd < 0)
		return 1;
	ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void on_client_readable(evutil_socket_t fd, short what, void *arg)
{
	sqd_task *t = arg;
	if (peer_gone((int)fd)) {
		atomic_store(&t->gone, 1);
		sqd_claimer_wake(S.d);
	}
	/* else: the client sent its next request early; it is read after
	 * this reply, and the watch ends here */
}

static void watch_client(sqd_task *t)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(t->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	t->fd = bev ? (int)bufferevent_getfd(bev) : -1;
	if (t->fd < 0)
		return;
	t->watch = event_new(S.base, t->fd, EV_READ, on_client_readable, t);
	if (t->watch)
		event_add(t->watch, NULL);
}

/* Sends the task's reply (main thread) and frees it. */
static void reply(sqd *d, sqd_task *t)
{
	struct evhttp_request *req = t->req;
	sqd_conn *c = t->conn;
	if (t->watch) {
		event_free(t->watch);
		t->watch = NULL;
	}
	if (c) {
		c->task = NULL;
		if (!c->over)
			c->deadline =
				sq_mono_s() + sq_config_daemon(d->cfg)->request_timeout_ms / 1000.0;
	}
	if (t->resp.oom) {
		/* a cut answer would read as a whole one */
		static const char oom[] =
			"{\"error\":{\"code\":\"internal\",\"message\":\"the daemon ran out of "
			"memory while writing the answer; what the request asked for may have "
			"been done\"}}";
		sq_buf_free(&t->resp);
		sq_buf_init(&t->resp);
		sq_buf_append(&t->resp, oom, sizeof(oom) - 1);
		t->status = 500;
		t->text = t->html = 0;
	}
	sqd_observe(d, t->route, t->status, sq_mono_s() - t->t0);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type",
			  t->text   ? "text/plain; version=0.0.4; charset=utf-8"
			  : t->html ? "text/html; charset=utf-8"
				    : "application/json");
	if (t->html) {
		/* no script, style or frame from anywhere else */
		evhttp_add_header(h, "Content-Security-Policy",
				  "default-src 'none'; script-src 'unsafe-inline'; style-src "
				  "'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
				  "frame-ancestors 'none'");
		evhttp_add_header(h, "Cache-Control", "no-store");
	}
	if (t->status == 401)
		evhttp_add_header(h, "WWW-Authenticate", "Bearer realm=\"shardqd\"");
	if (t->retry_after > 0) {
		char v[16];
		snprintf(v, sizeof(v), "%d", t->retry_after);
		evhttp_add_header(h, "Retry-After", v);
	}
	if (atomic_load(&d->stopping) || (c && c->over))
		evhttp_add_header(h, "Connection", "close");
	struct evbuffer *out = evbuffer_new();
	if (out && t->resp.len)
		evbuffer_add(out, t->resp.data, t->resp.len);
	evhttp_send_reply(req, t->status, reason_of(t->status), out);
	if (out)
		evbuffer_free(out);
	sqd_task_free(t);
	atomic_fetch_sub(&d->inflight, 1);
}

static void maybe_exit(sqd *d);

/* 1 if the query string has `name=1` (not `smallname=1`, not `name=10`). */
static int query_flag(const char *query, const char *name)
{
	struct evkeyvalq kv;
	if (!query || evhttp_parse_query_str(query, &kv))
		return 0;
	const char *v = evhttp_find_header(&kv, name);
	int on = v && !strcmp(v, "1");
	evhttp_clear_headers(&kv);
	return on;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	sqd *d = arg;
	pthread_mutex_lock(&d->done_mu);
	sqd_task *t = d->done_head;
	d->done_head = d->done_tail = NULL;
	pthread_mutex_unlock(&d->done_mu);
	while (t) {
		sqd_task *next = t->next;
		if (!t->req) { /* internal */
			sqd_task_free(t);
			atomic_fetch_sub(&d->inflight, 1);
		} else {
			int gone = atomic_load(&t->gone) ||
				   !evhttp_request_get_connection(t->req) ||
				   (t->nrefs && peer_gone(t->fd));
			if (gone && t->nrefs) {
				/* the client went away: what it was given goes back now,
				 * not after its lease */
				sqd_task *r = calloc(1, sizeof(*r));
				if (r) {
					r->route = R_RELEASE_GONE;
					r->refs = t->refs;
					r->nrefs = t->nrefs;
					t->refs = NULL;
					t->nrefs = 0;
					r->t0 = sq_mono_s();
					atomic_fetch_add(&d->inflight, 1);
					sqd_submit(d, r);
				}
				/* a client that only half-closed its end can still read:
				 * it must not be handed what was just given back */
				sq_buf_reset(&t->resp);
				sq_buf_puts(&t->resp, "{\"jobs\":[]}");
			}
			reply(d, t);
		}
		t = next;
	}
	maybe_exit(d);
}

/* ---- request threads ---------------------------------------------------- */

typedef struct thread_arg {
	sqd *d;
	int i;
} thread_arg;

static thread_arg targs[64];

/* The requests that need a shard whose connection is being made again
 * wait at most this long for it in all, counted from the connect's start;
 * then they get 503 (`still connecting`) at once. Long enough for a
 * reconnect to a server that answers (a few round trips, with TLS and
 * SCRAM, on a loaded machine); a host that never answers holds the thread,
 * and the other shards' requests, for this once per connect instead of
 * for connect_timeout. */
#define SQD_REQUEST_CONNECT_WAIT_S 1.0

/* Between requests, a request thread whose client has a connect under way
 * takes it on this often (sq_client_advance_connects), so that it is up
 * when the next request needs that shard. */
static void wait_for_work(sqd *d, sq_client *c, int *connecting)
{
	while (!d->work.head && !(atomic_load(&d->stopping) == 2)) {
		if (!*connecting) {
			pthread_cond_wait(&d->work.cv, &d->work.mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)(SQ_LOOP_CONNECT_WAIT_S * 1e9);
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		if (pthread_cond_timedwait(&d->work.cv, &d->work.mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&d->work.mu);
			*connecting = sq_client_advance_connects(c) > 0;
			pthread_mutex_lock(&d->work.mu);
		}
	}
}

static void *request_thread(void *arg)
{
	thread_arg *a = arg;
	sqd *d = a->d;
	sq_client *c = d->clients[a->i];
	int connecting = 0;
	for (;;) {
		pthread_mutex_lock(&d->work.mu);
		wait_for_work(d, c, &connecting);
		sqd_task *t = d->work.head;
		if (!t) {
			pthread_mutex_unlock(&d->work.mu);
			return NULL;
		}
		d->work.head = t->next;
		if (!d->work.head)
			d->work.tail = NULL;
		d->work.n--;
		/* results of one kind waiting behind it go with it */
		sqd_task *batch[64];
		size_t nb = 0;
		batch[nb++] = t;
		if (t->route >= R_START && t->route <= R_RELEASE) {
			sqd_task *prev = NULL, *q = d->work.head, *next;
			for (; q && nb < 64; q = next) {
				next = q->next;
				if (q->route != t->route) {
					prev = q;
					continue;
				}
				if (prev)
					prev->next = next;
				else
					d->work.head = next;
				if (d->work.tail == q)
					d->work.tail = prev;
				d->work.n--;
				batch[nb++] = q;
			}
		}
		atomic_store(&d->m.queue_len, d->work.n);
		pthread_mutex_unlock(&d->work.mu);
		atomic_fetch_add(&d->m.threads_busy, 1);
		int handed = 0; /* t went to the enqueue lanes, which answer it */
		if (nb > 1 || (t->route >= R_START && t->route <= R_RELEASE))
			sqd_run_results(d, c, batch, nb);
		else
			handed = sqd_run(d, c, t);
		atomic_fetch_sub(&d->m.threads_busy, 1);
		connecting = sq_client_advance_connects(c) > 0;
		for (size_t k = 0; k < nb && !handed; k++)
			sqd_done(d, batch[k]);
	}
}

/* ---- routing and auth ----------------------------------------------------- */

typedef struct route_def {
	const char *path;
	enum evhttp_cmd_type method;
	sqd_route route;
	int scopes; /* any of these; 0: no token needed */
} route_def;

#define W SQ_SCOPE_WORKER
#define P SQ_SCOPE_PRODUCER
#define A SQ_SCOPE_ADMIN
static const route_def routes[] = {
	{"/healthz", EVHTTP_REQ_GET, R_HEALTH, 0},
	{"/v1/jobs", EVHTTP_REQ_POST, R_ENQUEUE, P},
	{"/v1/jobs", EVHTTP_REQ_GET, R_LIST, A},
	{"/v1/claim", EVHTTP_REQ_POST, R_CLAIM, W},
	{"/v1/jobs/start", EVHTTP_REQ_POST, R_START, W},
	{"/v1/jobs/heartbeat", EVHTTP_REQ_POST, R_HEARTBEAT, W},
	{"/v1/jobs/complete", EVHTTP_REQ_POST, R_COMPLETE, W},
	{"/v1/jobs/fail", EVHTTP_REQ_POST, R_FAIL, W},
	{"/v1/jobs/release", EVHTTP_REQ_POST, R_RELEASE, W},
	{"/v1/jobs/cancel", EVHTTP_REQ_POST, R_CANCEL, P | A},
	{"/v1/jobs/retry", EVHTTP_REQ_POST, R_RETRY, A},
	{"/v1/jobs/purge", EVHTTP_REQ_POST, R_PURGE, A},
	{"/v1/stats", EVHTTP_REQ_GET, R_STATS, A},
	{"/v1/map", EVHTTP_REQ_GET, R_MAP, A},
	{"/v1/moves", EVHTTP_REQ_GET, R_MOVES, A},
	{"/v1/types", EVHTTP_REQ_GET, R_TYPES, A},
	{"/v1/types/pause", EVHTTP_REQ_POST, R_PAUSE, A},
	{"/v1/types/resume", EVHTTP_REQ_POST, R_RESUME, A},
	{"/metrics", EVHTTP_REQ_GET, R_METRICS, A},
	{"/v1/admin/overview", EVHTTP_REQ_GET, R_OVERVIEW, A},
	{"/", EVHTTP_REQ_GET, R_PAGE, 0},
};
#undef W
#undef P
#undef A

static const char *scope_names(int scopes, char *buf, size_t len)
{
	buf[0] = '\0';
	const char *names[] = {"worker", "producer", "admin"};
	for (int i = 0; i < 3; i++)
		if (scopes & (1 << i))
			snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? " or " : "",
				 names[i]);
	return buf;
}

/* 0 when the request's token has one of `scopes`; else the error is set. */
static int authorize(sqd *d, struct evhttp_request *req, sqd_task *t, int scopes)
{
	const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	char want[64];
	if (!h || strncasecmp(h, "Bearer ", 7) || !h[7]) {
		atomic_fetch_add(&d->m.auth_refused, 1);
		sqd_error(t, 401, "unauthorized",
			  "%s; send the header Authorization: Bearer TOKEN with a token of "
			  "scope %s",
			  h ? "the Authorization header is not 'Bearer TOKEN'"
			    : "no Authorization header",
			  scope_names(scopes, want, sizeof(want)));
		return -1;
	}
	const char *tok = h + 7;
	while (*tok == ' ')
		tok++;
	unsigned char hash[32];
	sha256(tok, strlen(tok), hash);
	const sqd_token *found = NULL;
	for (int i = 0; i < S.ntokens; i++)
		if (!CRYPTO_memcmp(hash, S.tokens[i].hash, 32))
			found = &S.tokens[i];
	if (!found) {
		atomic_fetch_add(&d->m.auth_refused, 1);
		sqd_error(t, 401, "unauthorized",
			  "the bearer token is not known to this daemon (tokens are the [token "
			  "NAME] sections of its config)");
		return -1;
	}
	if (!(found->scopes & scopes)) {
		atomic_fetch_add(&d->m.auth_refused, 1);
		sqd_error(t, 403, "forbidden", "token '%s' lacks the scope this needs: %s",
			  found->name, scope_names(scopes, want, sizeof(want)));
		return -1;
	}
	snprintf(t->who, sizeof(t->who), "%s", found->name); /* for the log of an action */
	t->scopes = found->scopes;
	return 0;
}

/* Loads the tokens of cfg; their hashes are all the daemon keeps. */
static int load_tokens(const sq_config *cfg)
{
	int n = sq_config_token_count(cfg);
	sqd_token *v = calloc((size_t)n + 1, sizeof(*v));
	if (!v)
		return -1;
	for (int i = 0; i < n; i++) {
		const sq_token_conf *tc = sq_config_token(cfg, i);
		snprintf(v[i].name, sizeof(v[i].name), "%s", tc->name);
		for (int k = 0; k < 32; k++)
			sscanf(tc->hash + 7 + 2 * k, "%2hhx", &v[i].hash[k]);
		v[i].scopes = tc->scopes;
	}
	free(S.tokens);
	S.tokens = v;
	S.ntokens = n;
	return 0;
}

/* A task for request req, in flight and tied to its connection; NULL
 * (answered 500) out of memory. A request libevent refuses itself, over
 * max_body or max_headers or malformed, never reaches here: libevent
 * answers it, 413 or 400; nor does a malformed chunked body (on_bad_chunk
 * answers it). */
static sqd_task *new_task(sqd *d, struct evhttp_request *req)
{
	sqd_task *t = calloc(1, sizeof(*t));
	if (!t) {
		evhttp_send_error(req, 500, "out of memory");
		return NULL;
	}
	t->req = req;
	t->fd = -1;
	t->t0 = sq_mono_s();
	t->status = 200;
	atomic_fetch_add(&d->inflight, 1);
	t->conn = conn_of(req);
	if (t->conn)
		t->conn->task = t;
	return t;
}

/* 405 for a path that takes other methods, with those in the Allow header
 * (RFC 9110); the routes take GET or POST. */
static void method_not_allowed(struct evhttp_request *req, sqd_task *t, const char *path)
{
	char allow[64] = "";
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(path, routes[i].path)) {
			size_t at = strlen(allow);
			snprintf(allow + at, sizeof(allow) - at, "%s%s", at ? ", " : "",
				 routes[i].method == EVHTTP_REQ_GET ? "GET" : "POST");
		}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	sqd_error(t, 405, "method_not_allowed", "%s does not take this method", path);
}

/* GET /v1/jobs/ID: the route, with t->id set; NULL with the error set. */
static const route_def *job_route(struct evhttp_request *req, sqd_task *t, const char *path)
{
	static const route_def get_job = {"/v1/jobs/{id}", EVHTTP_REQ_GET, R_GET_JOB,
					  SQ_SCOPE_WORKER | SQ_SCOPE_PRODUCER | SQ_SCOPE_ADMIN};
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET");
		sqd_error(t, 405, "method_not_allowed", "/v1/jobs/ID takes GET only");
		return NULL;
	}
	char *end;
	errno = 0;
	long long id = strtoll(path + 9, &end, 10);
	if (*end || end == path + 9 || errno || id <= 0) {
		sqd_error(t, 404, "not_found",
			  "'%s' is not a job; GET /v1/jobs/ID takes a job id (a positive integer)",
			  path + 9);
		return NULL;
	}
	t->id = id;
	return &get_job;
}

/* The route of req's path and method; NULL with the error set (404, 405). */
static const route_def *route_of(struct evhttp_request *req, sqd_task *t, const char *path)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	const route_def *rd = NULL;
	int path_known = 0;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(path, routes[i].path)) {
			path_known = 1;
			if (routes[i].method == cmd)
				rd = &routes[i];
		}
	if (rd)
		return rd;
	if (path_known)
		method_not_allowed(req, t, path);
	else if (!strncmp(path, "/v1/jobs/", 9))
		return job_route(req, t, path);
	else
		sqd_error(t, 404, "not_found",
			  "no endpoint %s; the API is under /v1 (docs/http.md)", path);
	return NULL;
}

/* Whether the daemon takes t now: 503 while it stops or when its
 * connection is beyond max_connections (but /healthz answers), and the
 * route's scopes; -1 with the error set. */
static int admit(sqd *d, struct evhttp_request *req, sqd_task *t, const route_def *rd)
{
	if (atomic_load(&d->stopping) && t->route != R_HEALTH) {
		t->retry_after = 1;
		sqd_error(t, 503, "unavailable", "the daemon is shutting down; try another one");
		return -1;
	}
	if (t->conn && t->conn->over && t->route != R_HEALTH) {
		t->retry_after = 1;
		sqd_error(t, 503, "unavailable",
			  "the daemon has max_connections (%d) open; try again in a moment, or "
			  "reuse a keep-alive connection",
			  sq_config_daemon(d->cfg)->max_connections);
		return -1;
	}
	return rd->scopes ? authorize(d, req, t, rd->scopes) : 0;
}

/* The request's body into t, NUL-terminated; -1 with the error set. */
static int read_body(struct evhttp_request *req, sqd_task *t)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	t->body = malloc(n + 1);
	if (!t->body) {
		sqd_error(t, 500, "internal", "out of memory");
		return -1;
	}
	evbuffer_remove(in, t->body, n);
	t->body[n] = '\0';
	t->len = n;
	return 0;
}

/* The admin page: it holds no data, so without an admin token it is still
 * sent, with 401, and asks for one; what it shows comes from
 * /v1/admin/overview, which needs the token. */
static void answer_page(sqd *d, struct evhttp_request *req, sqd_task *t)
{
	sqd_task probe = {0};
	t->html = 1;
	t->status = authorize(d, req, &probe, SQ_SCOPE_ADMIN) ? probe.status : 200;
	sq_buf_free(&probe.resp);
	sq_buf_puts(&t->resp, sqd_page);
	reply(d, t);
}

/* Where an admitted task goes: answered here (health, the page), to the
 * claimer (claims), or to the request threads. */
static void dispatch(sqd *d, struct evhttp_request *req, sqd_task *t)
{
	switch (t->route) {
	case R_HEALTH:
		sq_buf_puts(&t->resp, "{\"ok\":true}");
		reply(d, t);
		return;
	case R_PAGE: answer_page(d, req, t); return;
	case R_CLAIM:
		if (sqd_claim_parse(d, t)) {
			reply(d, t);
			return;
		}
		watch_client(t);
		sqd_claimer_submit(d, t);
		return;
	default: sqd_submit(d, t);
	}
}

static void on_request(struct evhttp_request *req, void *arg)
{
	sqd *d = arg;
	sqd_task *t = new_task(d, req);
	if (!t)
		return;
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *path = evhttp_uri_get_path(u);
	const char *query = evhttp_uri_get_query(u);
	const route_def *rd = route_of(req, t, path ? path : "/");
	if (!rd) {
		reply(d, t);
		return;
	}
	t->route = rd->route;
	atomic_fetch_add(&d->m.requests[t->route], 1);
	if (admit(d, req, t, rd) || read_body(req, t)) {
		reply(d, t);
		return;
	}
	t->all = query_flag(query, "all");
	t->exact = query_flag(query, "exact");
	t->query = query && t->route == R_LIST ? strdup(query) : NULL;
	dispatch(d, req, t);
}

/* ---- the process ---------------------------------------------------------- */

static void maybe_exit(sqd *d)
{
	/* the last replies are still in their connections' buffers: the loop
	 * writes them in its next turns */
	struct timeval flush = {0, 200000};
	if (S.stop_asked && atomic_load(&d->inflight) == 0)
		event_base_loopexit(S.base, &flush);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	sqd *d = arg;
	if (sig == SIGHUP) {
		sq_config *nc;
		sq_error err;
		if (sq_config_load(d->config_path, &nc, &err) != SQ_OK) {
			sqd_log("SIGHUP: tokens not reloaded, the config has errors: %s", err.msg);
			return;
		}
		if (load_tokens(nc))
			sqd_log("SIGHUP: tokens not reloaded: out of memory");
		else
			sqd_log("SIGHUP: %d tokens loaded from %s", sq_config_token_count(nc),
				d->config_path);
		sq_config_free(nc);
		return;
	}
	if (S.stop_asked) {
		sqd_log("second signal: exiting at once");
		exit(1);
	}
	S.stop_asked = 1;
	atomic_store(&d->stopping, 1);
	sqd_log("stopping: answering the requests in hand, then exiting");
	sqd_claimer_wake(d);
	maybe_exit(d);
}

/* A failed pass of the periodic jobs' scheduler (it retries by itself). */
static void on_sched_error(const sq_error *e, void *arg)
{
	(void)arg;
	sqd_log("schedules: %s", e->msg);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: shardqd -c FILE\n"
		   "       shardqd --hash-token < TOKEN_FILE\n"
		   "\n"
		   "Serves the shardq cluster of FILE over HTTP (docs/http.md): enqueue, claim\n"
		   "(many clients' claims merged into one statement per shard), results,\n"
		   "stats and /metrics. Runs in the foreground; logs one line per problem on\n"
		   "stderr. SIGHUP reloads the [token NAME] sections; SIGTERM or SIGINT stop\n"
		   "gracefully (a second one: at once).\n"
		   "\n"
		   "  -c, --config FILE  the cluster's config, with its [daemon] and [token]\n"
		   "                     sections (conf/shardq.ini documents every key)\n"
		   "  --hash-token       read a token on stdin, print the line to put in a\n"
		   "                     [token NAME] section: hash = sha256:HEX\n"
		   "  --version          the version of shardqd\n"
		   "  -h, --help         this text\n");
}

static int hash_token(void)
{
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, stdin);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n == 0) {
		fprintf(stderr, "shardqd: --hash-token: no token on stdin\n");
		return 2;
	}
	if (n < 16)
		fprintf(stderr,
			"shardqd: warning: a token of %zu bytes is easy to guess; use 32 "
			"random bytes (for example: openssl rand -hex 32)\n",
			n);
	unsigned char h[32];
	sha256(buf, n, h);
	printf("hash = sha256:");
	for (int i = 0; i < 32; i++)
		printf("%02x", h[i]);
	printf("\n");
	return 0;
}

typedef struct opener {
	const sq_config *cfg;
	sq_client *c;
	sq_status st;
	sq_error err;
	pthread_t th;
} opener;

static void *open_one(void *arg)
{
	opener *o = arg;
	o->st = sq_client_open(o->cfg, SQ_OPEN_ALLOW_DOWN, &o->c, &o->err);
	return NULL;
}

/* A lane's client, as a request thread's: a shard connected again holds
 * an enqueue up for SQD_REQUEST_CONNECT_WAIT_S at most. */
static void lane_setup(sq_client *c, void *arg)
{
	(void)arg;
	sq_client_connect_wait(c, SQD_REQUEST_CONNECT_WAIT_S);
}

/* The enqueue lanes ([daemon] enqueue_in_flight), each with its own
 * connections, opened on a thread of their own beside the clients'
 * openers, with the shards that cannot be reached left to later as the
 * request threads' are. */
typedef struct lanes_opener {
	sqd *d;
	sq_status st;
	sq_error err;
	pthread_t th;
} lanes_opener;

static void *open_lanes(void *arg)
{
	lanes_opener *lo = arg;
	sqd *d = lo->d;
	d->nlanes = sq_config_daemon(d->cfg)->enqueue_in_flight;
	lo->st = sq_enqueuer_open_setup(d->cfg, d->nlanes, SQ_OPEN_ALLOW_DOWN, lane_setup, NULL,
					&d->enq, &lo->err);
	return NULL;
}

/* The request threads' clients, the claimer's and the scheduler's (when
 * there are schedules), opened all at once: a shard that never answers
 * costs the start one connect_timeout, not one per client. Logs the shards
 * that cannot be reached. */
static int open_clients(sqd *d, sq_client **sched_client, sq_error *err)
{
	int sched = sq_config_runs_schedules(d->cfg);
	int n = d->nthreads + 1 + sched;
	opener *o = calloc((size_t)n, sizeof(*o));
	if (!o) {
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		return -1;
	}
	int started = 0;
	for (; started < n; started++) {
		o[started].cfg = d->cfg;
		if (pthread_create(&o[started].th, NULL, open_one, &o[started]))
			break;
	}
	lanes_opener lo = {d, SQ_OK, {0}, 0};
	int lanes_thread = pthread_create(&lo.th, NULL, open_lanes, &lo) == 0;
	if (!lanes_thread)
		open_lanes(&lo);
	int failed = -1;
	for (int i = 0; i < n; i++) {
		if (i < started) {
			pthread_join(o[i].th, NULL);
		} else {
			o[i].st = o[i].err.code = SQ_ENOMEM;
			snprintf(o[i].err.msg, sizeof(o[i].err.msg),
				 "cannot start a thread to connect");
		}
		if (o[i].st != SQ_OK && failed < 0)
			failed = i;
	}
	if (lanes_thread)
		pthread_join(lo.th, NULL);
	if (failed >= 0 || lo.st != SQ_OK) {
		*err = failed >= 0 ? o[failed].err : lo.err;
		for (int i = 0; i < n; i++)
			sq_client_close(o[i].c);
		sq_enqueuer_close(d->enq);
		d->enq = NULL;
		free(o);
		return -1;
	}
	for (int i = 0; i < d->nthreads; i++) {
		d->clients[i] = o[i].c;
		/* a shard connected again holds a request up for at most this,
		 * not connect_timeout: the thread serves the other shards'
		 * requests meanwhile */
		sq_client_connect_wait(d->clients[i], SQD_REQUEST_CONNECT_WAIT_S);
	}
	d->claim_client = o[d->nthreads].c;
	/* the claimer serves every waiting worker: a shard that answers
	 * nothing holds its claims up for an eighth of the shortest lease at
	 * most, and so the workers' starts, heartbeats and results on a
	 * request thread (sqd_run_results). The rest of a request thread's
	 * work keeps answer_timeout: an enqueue of a big batch, an admin's
	 * read may rightly take longer (docs/http.md, "A shard that stops
	 * answering") */
	d->results_wait_s = sq_client_answer_wait_of(d->clients[0]);
	sq_client_answer_wait_for_leases(d->claim_client);
	d->results_wait_s = sq_config_lease_answer_wait(d->cfg, d->results_wait_s);
	*sched_client = sched ? o[d->nthreads + 1].c : NULL;
	free(o);
	char down[sizeof(err->msg)];
	if (sq_client_down_shards(d->clients[0], down, sizeof(down)) > 0)
		sqd_log("starting without the shards that cannot be reached (their jobs get "
			"503 until they are back):\n%s",
			down);
	return 0;
}

/* The command line: 0 with *config set to go on; else the exit code of
 * what it asked for (--help, --version, --hash-token) or 2 on a mistake. */
static int parse_args(int argc, char **argv, const char **config, int *exit_code)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			*exit_code = 0;
			return -1;
		} else if (!strcmp(argv[i], "--version")) {
			printf("shardqd %s\n", SHARDQ_VERSION);
			*exit_code = 0;
			return -1;
		} else if (!strcmp(argv[i], "--hash-token")) {
			*exit_code = hash_token();
			return -1;
		} else if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) &&
			   i + 1 < argc) {
			*config = argv[++i];
		} else if (!strncmp(argv[i], "--config=", 9)) {
			*config = argv[i] + 9;
		} else {
			fprintf(stderr, "shardqd: unknown argument '%s' (see --help)\n", argv[i]);
			*exit_code = 2;
			return -1;
		}
	}
	if (!*config) {
		fprintf(stderr, "shardqd: no config; run shardqd -c FILE (see --help)\n");
		*exit_code = 2;
		return -1;
	}
	return 0;
}

/* Loads the config and the daemon's worker name: [daemon] worker_id, or
 * one of this host and process. */
static int load_config(sqd *d, const char *config)
{
	sq_error err;
	d->config_path = config;
	if (sq_config_load(config, &d->cfg, &err) != SQ_OK) {
		fprintf(stderr, "shardqd: %s\n", err.msg);
		return -1;
	}
	const sq_daemon_conf *dc = sq_config_daemon(d->cfg);
	if (sq_config_token_count(d->cfg) == 0)
		sqd_log("warning: no [token NAME] section in %s: every request but /healthz will "
			"be refused (401)",
			config);
	if (dc->worker_id) {
		snprintf(d->worker_id, sizeof(d->worker_id), "%s", dc->worker_id);
	} else {
		char host[128] = "host";
		gethostname(host, sizeof(host) - 1);
		snprintf(d->worker_id, sizeof(d->worker_id), "shardqd-%s-%d", host, (int)getpid());
	}
	return 0;
}

/* The event loop, the HTTP server, the tokens, and the request threads'
 * places and locks. */
static int init_state(sqd *d)
{
	evthread_use_pthreads();
	S.d = d;
	S.base = event_base_new();
	S.http = evhttp_new(S.base);
	d->nthreads = sq_config_daemon(d->cfg)->threads;
	d->threads = calloc((size_t)d->nthreads, sizeof(pthread_t));
	d->clients = calloc((size_t)d->nthreads, sizeof(sq_client *));
	if (!S.base || !S.http || load_tokens(d->cfg) || !d->threads || !d->clients) {
		fprintf(stderr, "shardqd: out of memory\n");
		return -1;
	}
	pthread_mutex_init(&d->work.mu, NULL);
	pthread_cond_init(&d->work.cv, NULL);
	pthread_mutex_init(&d->done_mu, NULL);
	pthread_mutex_init(&d->claim_mu, NULL);
	pthread_mutex_init(&d->rates.mu, NULL);
	return 0;
}

/* The clients, then the scheduler's thread (when there are schedules),
 * the claimer and the request threads. A shard that is down does not keep
 * the daemon from starting: its calls answer 503 until it is back, the
 * others are served. */
static int start_threads(sqd *d, sq_sched_thread **sched)
{
	sq_error err;
	sq_client *sched_client;
	if (open_clients(d, &sched_client, &err) != 0) {
		fprintf(stderr, "shardqd: %s\n", err.msg);
		return -1;
	}
	*sched = sq_sched_thread_start(d->cfg, d->worker_id, sched_client, on_sched_error, NULL);
	if (sched_client && !*sched) {
		fprintf(stderr, "shardqd: cannot start the scheduler's thread\n");
		return -1;
	}
	if (sqd_claimer_start(d, &err) != 0) {
		fprintf(stderr, "shardqd: %s\n", err.msg);
		return -1;
	}
	d->done_ev = event_new(S.base, -1, EV_PERSIST, on_done, d);
	for (int i = 0; i < d->nthreads; i++) {
		targs[i].d = d;
		targs[i].i = i;
		pthread_create(&d->threads[i], NULL, request_thread, &targs[i]);
	}
	return 0;
}

/* [daemon] listen as the host to bind (brackets of [::1] taken off) and
 * the port. */
static void split_listen(const char *listen, char *host, size_t len, const char **bind_host,
			 int *port)
{
	snprintf(host, len, "%s", listen);
	char *colon = strrchr(host, ':');
	*colon = '\0';
	*port = atoi(colon + 1);
	*bind_host = host;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:8080 */
		host[strlen(host) - 1] = '\0';
		*bind_host = host + 1;
	}
}

/* Whether the host resolves: one that does not is named as such (the
 * bind would only say "Success"). */
static int check_host(const char *listen, const char *bind_host, int port)
{
	struct addrinfo hints, *ai = NULL;
	char portstr[16];
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(portstr, sizeof(portstr), "%d", port);
	int gai = getaddrinfo(bind_host[0] ? bind_host : NULL, portstr, &hints, &ai);
	if (gai) {
		fprintf(stderr,
			"shardqd: cannot listen on %s: the host '%s' does not resolve (%s); set "
			"[daemon] listen to an address of this machine, for example "
			"127.0.0.1:8080\n",
			listen, bind_host, gai_strerror(gai));
		return -1;
	}
	freeaddrinfo(ai);
	return 0;
}

/* Says on stdout where the daemon listens (the port the kernel chose for
 * port 0): the tests and scripts wait for this line. */
static void announce(sqd *d, struct evhttp_bound_socket *bs, const char *bind_host)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	evutil_socket_t fd = evhttp_bound_socket_get_fd(bs);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		return;
	int p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
					 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	printf("shardqd: listening on http://%s:%d (%d shards, %d request threads, worker id %s)\n",
	       bind_host, p, sq_config_shard_count(d->cfg), d->nthreads, d->worker_id);
	fflush(stdout);
}

/* The HTTP server's callbacks and limits, and its socket. */
static int start_http(sqd *d)
{
	const sq_daemon_conf *dc = sq_config_daemon(d->cfg);
	evhttp_set_bevcb(S.http, on_new_conn, d);
	evhttp_set_gencb(S.http, on_request, d);
	evhttp_set_allowed_methods(S.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						   EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
						   EVHTTP_REQ_PATCH);
	evhttp_set_max_body_size(S.http, dc->max_body);
	evhttp_set_max_headers_size(S.http, dc->max_headers);
	evhttp_set_timeout(S.http, (int)((dc->request_timeout_ms + 999) / 1000));
	char host[256];
	const char *bind_host;
	int port;
	split_listen(dc->listen, host, sizeof(host), &bind_host, &port);
	if (check_host(dc->listen, bind_host, port))
		return -1;
	errno = 0;
	struct evhttp_bound_socket *bs =
		evhttp_bind_socket_with_handle(S.http, bind_host, (ev_uint16_t)port);
	if (!bs) {
		fprintf(stderr,
			"shardqd: cannot listen on %s: %s; set [daemon] listen to a free "
			"HOST:PORT of this machine\n",
			dc->listen, errno ? strerror(errno) : "the address cannot be bound");
		return -1;
	}
	announce(d, bs, bind_host);
	return 0;
}

/* The connections' sweep (every 250 ms) and the signals. */
static void add_events(sqd *d)
{
	struct timeval tv = {0, 250000};
	S.sweep_ev = event_new(S.base, -1, EV_PERSIST, on_sweep, d);
	event_add(S.sweep_ev, &tv);
	S.sig_term = evsignal_new(S.base, SIGTERM, on_signal, d);
	S.sig_int = evsignal_new(S.base, SIGINT, on_signal, d);
	S.sig_hup = evsignal_new(S.base, SIGHUP, on_signal, d);
	event_add(S.sig_term, NULL);
	event_add(S.sig_int, NULL);
	event_add(S.sig_hup, NULL);
}

/* After the loop: the threads end, the connections close, all is freed. */
static void stop_all(sqd *d, sq_sched_thread *sched)
{
	atomic_store(&d->stopping, 2);
	pthread_mutex_lock(&d->work.mu);
	pthread_cond_broadcast(&d->work.cv);
	pthread_mutex_unlock(&d->work.mu);
	for (int i = 0; i < d->nthreads; i++)
		pthread_join(d->threads[i], NULL);
	sqd_claimer_wake(d);
	pthread_join(d->claimer, NULL);
	sq_sched_thread_stop(sched);
	while (S.conns)
		conn_unlink(S.conns);
	evhttp_free(S.http);
	free(S.by_fd);
	for (int i = 0; i < d->nthreads; i++)
		sq_client_close(d->clients[i]);
	sq_client_close(d->claim_client);
	sq_enqueuer_close(d->enq);
	event_free(d->done_ev);
	event_free(S.sweep_ev);
	event_free(S.sig_term);
	event_free(S.sig_int);
	event_free(S.sig_hup);
	event_base_free(S.base);
	free(d->threads);
	free(d->clients);
	free(S.tokens);
	close(d->wake[0]);
	close(d->wake[1]);
	sq_config_free(d->cfg);
}

int main(int argc, char **argv)
{
	static sqd D;
	sqd *d = &D;
	const char *config = NULL;
	int code;
	if (parse_args(argc, argv, &config, &code))
		return code;
	signal(SIGPIPE, SIG_IGN);
	if (load_config(d, config))
		return 2;
	sq_sched_thread *sched;
	if (init_state(d) || start_threads(d, &sched) || start_http(d))
		return 1;
	add_events(d);
	sq_maintainer *maint = sq_maintainer_start(d->cfg, lib_log, NULL);
	sq_metawatch *watch = sq_metawatch_start(d->cfg, lib_log, NULL);
	event_base_dispatch(S.base);
	sq_metawatch_stop(watch);
	sq_maintainer_stop(maint);
	stop_all(d, sched);
	sqd_log("stopped");
	return 0;
}

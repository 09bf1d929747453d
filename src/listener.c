/* listener.c - a loop's LISTEN connection to one shard, its probes and
 * its worker registration, and whether a NOTIFY is this listener's
 * wake-up; a worker's set of them, in its libevent loop (see listener.h). */
#include "listener.h"
#include "client.h"
#include "error.h"
#include "clock.h"

#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <event2/event.h>

sq_status sq_listener_init(sq_listener *l, const sq_config *cfg, int shard, sq_error *err)
{
	memset(l, 0, sizeof(*l));
	return sq_shard_conn_init(&l->pc, cfg, shard, "listen", err);
}

sq_status sq_listener_connect(sq_listener *l, const char *channel, sq_error *err)
{
	if (l->conn)
		return SQ_OK;
	sq_status st = sq_pgconn_ensure(&l->pc, err);
	if (st != SQ_OK)
		return st;
	PGconn *c = sq_pgconn_detach(&l->pc);
	if (!c)
		return sq_err(err, SQ_ECONN,
			      "shard %s (%s): listen connection: cannot leave "
			      "pipeline mode",
			      l->pc.shard_id, l->pc.addr);
	sq_conn_hook_call("listen", c);
	char sql[128];
	snprintf(sql, sizeof(sql), "LISTEN %s", channel);
	/* a few bytes on a new connection: sent at once */
	int sent =
		PQsetnonblocking(c, 0) == 0 && PQsendQuery(c, sql) && PQsetnonblocking(c, 1) == 0;
	if (!sent) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(c));
		msg[strcspn(msg, "\n")] = '\0';
		PQfinish(c);
		return sq_err(err, SQ_ECONN, "shard %s (%s): LISTEN failed: %s", l->pc.shard_id,
			      l->pc.addr, msg);
	}
	l->conn = c;
	l->heard_at = l->asked_at = sq_mono_s();
	return SQ_OK;
}

int sq_listener_check(sq_listener *l, double now, double answer_wait_s, double *next_at, char *why,
		      size_t whylen)
{
	/* nothing waits for it: no need to give up sooner than this */
	double wait = answer_wait_s > SQ_LISTEN_PROBE_S ? answer_wait_s : SQ_LISTEN_PROBE_S;
	*next_at = INFINITY;
	if (!l->conn)
		return 0;
	if (l->asked_at > 0) {
		struct pollfd p = {PQsocket(l->conn), POLLIN, 0};
		if (now - l->asked_at < wait) {
			*next_at = l->asked_at + wait;
			return 0;
		}
		if (poll(&p, 1, 0) > 0) { /* the answer came: read it first */
			*next_at = now;
			return 0;
		}
		snprintf(why, whylen,
			 "shard %s (%s): the LISTEN connection got no answer within %.1fs (its "
			 "host gone or cut off?); it is made again",
			 l->pc.shard_id, l->pc.addr, wait);
		return -1;
	}
	/* a worker's listener registers every SQ_LISTEN_PROBE_S, heard from
	 * or not: its row stays fresh and its list of the others current */
	int reg = l->self[0] && l->listen_ok && !l->unregistered;
	double last = reg && l->probed_at < l->heard_at ? l->probed_at : l->heard_at;
	if (now - last < SQ_LISTEN_PROBE_S) {
		*next_at = last + SQ_LISTEN_PROBE_S;
		return 0;
	}
	char sql[sizeof(l->self) + 512];
	if (reg)
		snprintf(sql, sizeof(sql),
			 "WITH me AS (INSERT INTO shardq.listeners AS l (pid, types, seen)"
			 " VALUES (pg_backend_pid(), '%s', now()) ON CONFLICT (pid) DO UPDATE"
			 " SET types = EXCLUDED.types, seen = EXCLUDED.seen),"
			 " gone AS (DELETE FROM shardq.listeners"
			 " WHERE seen < now() - interval '%d seconds')"
			 " SELECT pid, types FROM shardq.listeners"
			 " WHERE seen >= now() - interval '%d seconds'",
			 l->self, SQ_LISTENER_STALE_S, SQ_LISTENER_STALE_S);
	else
		sql[0] = '\0';
	if (!PQsendQuery(l->conn, sql) || PQflush(l->conn) < 0) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(l->conn));
		msg[strcspn(msg, "\n")] = '\0';
		snprintf(why, whylen, "shard %s (%s): the LISTEN connection is lost: %s",
			 l->pc.shard_id, l->pc.addr, msg);
		return -1;
	}
	l->asked_at = now;
	l->probed_at = now;
	*next_at = now + wait;
	return 0;
}

uint32_t sq_wake_type_hash(const char *type)
{
	return (uint32_t)XXH3_64bits(type, strlen(type));
}

/* The registration's answer: the shard's listeners (pid, "HASH:ROOM ...").
 * Kept as it was when it cannot be stored (out of memory). */
static void take_members(sq_listener *l, const PGresult *r)
{
	int n = PQntuples(r), ne = 0;
	for (int i = 0; i < n; i++)
		for (const char *p = PQgetvalue(r, i, 1); *p; p++)
			ne += *p == ':';
	if (n + 1 > l->capmembers) {
		void *m = realloc(l->members, (size_t)(n + 1) * sizeof(*l->members));
		if (!m)
			return;
		l->members = m;
		l->capmembers = n + 1;
	}
	if (ne > l->capentries) {
		void *e = realloc(l->entries, (size_t)ne * sizeof(*l->entries));
		if (!e)
			return;
		l->entries = e;
		l->capentries = ne;
	}
	int e = 0;
	for (int i = 0; i < n; i++) {
		l->members[i].pid = atoi(PQgetvalue(r, i, 0));
		l->members[i].first = e;
		const char *p = PQgetvalue(r, i, 1);
		char *end;
		while (*p && e < ne) {
			unsigned long h = strtoul(p, &end, 16);
			if (end == p || *end != ':')
				break;
			long room = strtol(end + 1, &end, 10);
			l->entries[e].hash = (uint32_t)h;
			l->entries[e].room = room > 0 && room < INT_MAX ? (int)room : 0;
			e++;
			p = end;
			while (*p == ' ')
				p++;
		}
	}
	l->members[n].first = e;
	l->nmembers = n;
}

/* Whether a NOTIFY is this listener's wake-up. Its payload, from
 * sq_enqueue, is "TOKEN HASH:COUNT ...": a token new for every batch and,
 * per task type in it, the type's hash and its number of jobs. For each
 * type, the listeners that run it are ranked by a score of the token and
 * their pid (rendezvous hashing: every worker computes the same order, and
 * each batch picks another), and the first ones claim until their rooms
 * add up to SQ_WAKE_ROOMS times the count, at least SQ_WAKE_MIN of them. So
 * with many worker processes a batch wakes a few claims on its shard
 * instead of one per process, each of which would read past the rows the
 * others just locked (docs/worker.md, "Which workers a NOTIFY wakes").
 * Counted as a wake-up whenever the choice cannot be made here: no list,
 * no payload (an older producer, more types than it names), or this
 * listener not in the list yet. A list that still names a worker that has
 * gone can leave a batch to the polls (at most poll_max_ms later), never
 * lose it; a full answer makes the woken workers claim again at once. */
static int wake_is_ours(const sq_listener *l, const char *payload)
{
	if (!l->self[0] || l->unregistered || l->nmembers == 0 || !payload)
		return 1;
	const char *sp = strchr(payload, ' ');
	if (!sp || sp == payload)
		return 1;
	size_t toklen = (size_t)(sp - payload);
	int me = PQbackendPID(l->conn), mi = -1;
	for (int i = 0; i < l->nmembers && mi < 0; i++)
		if (l->members[i].pid == me)
			mi = i;
	if (mi < 0)
		return 1;
	uint64_t mine = XXH3_64bits_withSeed(payload, toklen, (uint64_t)(uint32_t)me);
	const char *p = sp;
	while (*p == ' ')
		p++;
	while (*p) {
		char *end;
		unsigned long h = strtoul(p, &end, 16);
		if (end == p || *end != ':')
			return 1;
		long count = strtol(end + 1, &end, 10);
		if (count > INT_MAX) /* a payload not from sq_enqueue */
			count = INT_MAX;
		p = end;
		while (*p == ' ')
			p++;
		int runs = 0;
		for (int e = l->members[mi].first; e < l->members[mi + 1].first; e++)
			runs |= l->entries[e].hash == (uint32_t)h;
		if (!runs)
			continue;
		long above_room = 0;
		int above = 0;
		for (int i = 0; i < l->nmembers; i++) {
			if (i == mi)
				continue;
			int room = -1;
			for (int e = l->members[i].first; e < l->members[i + 1].first; e++)
				if (l->entries[e].hash == (uint32_t)h)
					room = l->entries[e].room;
			if (room < 0 ||
			    XXH3_64bits_withSeed(payload, toklen,
						 (uint64_t)(uint32_t)l->members[i].pid) <= mine)
				continue;
			above++;
			above_room += room;
		}
		if (above < SQ_WAKE_MIN || above_room < (long)SQ_WAKE_ROOMS * count)
			return 1;
	}
	return 0;
}

int sq_listener_read(sq_listener *l, int *listening, char *why, size_t whylen)
{
	int n = 0, refused = 0;
	*listening = 0;
	if (!l->conn)
		return -1;
	if (!PQconsumeInput(l->conn))
		return -1;
	l->heard_at = sq_mono_s();
	/* the LISTEN's answer (until it is taken, libpq reads no NOTIFY), or
	 * a probe's */
	PGresult *r;
	while (!PQisBusy(l->conn) && (r = PQgetResult(l->conn)) != NULL) {
		ExecStatusType rs = PQresultStatus(r);
		if (rs == PGRES_COMMAND_OK) {
			*listening = 1;
			l->listen_ok = 1;
		} else if (rs == PGRES_EMPTY_QUERY) {
			/* a probe's answer */
		} else if (rs == PGRES_TUPLES_OK) {
			take_members(l, r); /* a registration's answer */
		} else if (l->listen_ok) {
			/* a registration the shard refused (schema 7: no table;
			 * a role without the right to write it): every NOTIFY
			 * wakes this listener, as one that never registered,
			 * and its probes are empty queries again */
			l->unregistered = 1;
			l->nmembers = 0;
		} else if (!refused) {
			refused = 1;
			snprintf(why, whylen, "shard %s (%s): LISTEN refused: %s", l->pc.shard_id,
				 l->pc.addr, PQresultErrorMessage(r));
			why[strcspn(why, "\n")] = '\0';
		}
		PQclear(r);
	}
	/* the LISTEN or the probe is answered once the connection is idle
	 * again (its ReadyForQuery read, not only its result) */
	if (!PQisBusy(l->conn))
		l->asked_at = 0;
	PGnotify *nt;
	while ((nt = PQnotifies(l->conn)) != NULL) {
		n += wake_is_ours(l, nt->extra);
		PQfreemem(nt);
	}
	return refused ? -2 : n;
}

void sq_listener_drop(sq_listener *l)
{
	if (l->conn)
		PQfinish(l->conn);
	l->conn = NULL;
	/* the next connection has another pid, and registers anew */
	l->listen_ok = l->unregistered = 0;
	l->nmembers = 0;
	l->probed_at = 0;
}

void sq_listener_free(sq_listener *l)
{
	sq_listener_drop(l);
	free(l->members);
	free(l->entries);
	l->members = NULL;
	l->entries = NULL;
	l->capmembers = l->capentries = 0;
	sq_pgconn_close(&l->pc);
}

/* ---- a worker's LISTEN connections, in its libevent loop ---------------- */

static void listen_lost(sq_listen_set *ls, int s)
{
	event_free(ls->ev[s]);
	ls->ev[s] = NULL;
	sq_listener_drop(&ls->l[s]);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	sq_listen_set *ls = arg;
	(void)what;
	for (int s = 0; s < ls->nshards; s++) {
		sq_listener *l = &ls->l[s];
		int listening;
		if (!l->conn || PQsocket(l->conn) != fd)
			continue;
		char why[256];
		int n = sq_listener_read(l, &listening, why, sizeof(why));
		if (n < 0) {
			/* the wake-up is lost; polling carries on, and the loop
			 * listens again once the shard can be reached (a LISTEN
			 * the server refused: after SQ_RELISTEN_S, not at once) */
			listen_lost(ls, s);
			ls->relisten_at[s] = n == -2 ? sq_mono_s() + SQ_RELISTEN_S : 0;
			if (n == -2) {
				sq_error e;
				sq_err(&e, SQ_EDB, "%s", why);
				ls->failed(ls->arg, &e);
			}
			return;
		}
		/* listening from now on: the wake-ups before it were missed, so
		 * the shard is claimed from at once */
		if (n > 0 || listening)
			ls->woke(ls->arg, s);
	}
}

/* Connects shard s's LISTEN connection, or goes on connecting it, waiting
 * at most wait_s for the server (the loop's: SQ_LOOP_CONNECT_WAIT_S, see
 * sq_listener); on failure, says why in err. */
static sq_status listen_open(sq_listen_set *ls, int s, double wait_s, sq_error *err)
{
	sq_listener *l = &ls->l[s];
	sq_pgconn_set_connect_wait(&l->pc, wait_s);
	sq_status st = sq_listener_connect(l, "shardq_jobs", err);
	sq_pgconn_set_connect_wait(&l->pc, SQ_LOOP_CONNECT_WAIT_S);
	if (st != SQ_OK) {
		sq_err_prefix(err, "listen connection");
		return st;
	}
	ls->ev[s] = event_new(ls->base, PQsocket(l->conn), EV_READ | EV_PERSIST, on_read, ls);
	if (!ls->ev[s]) {
		sq_listener_drop(l);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	event_add(ls->ev[s], NULL);
	return SQ_OK;
}

sq_status sq_listen_set_init(sq_listen_set *ls, const sq_config *cfg, struct event_base *base,
			     sq_error *err)
{
	ls->base = base;
	ls->nshards = cfg->nshards;
	for (int s = 0; s < cfg->nshards; s++) {
		sq_status st = sq_listener_init(&ls->l[s], cfg, s, err);
		if (st != SQ_OK)
			return st;
	}
	return SQ_OK;
}

void sq_listen_set_open(sq_listen_set *ls, const sq_client *c, double wait_s)
{
	for (int s = 0; s < ls->nshards; s++) {
		sq_error e;
		/* a shard whose connection is up answers within wait_s:
		 * listening when this returns */
		if (c->shards[s].conn)
			(void)listen_open(ls, s, wait_s, &e);
	}
}

/* It does not wait for the loop's own connection to the shard: an idle
 * worker whose polls are far apart makes that one only when it claims. */
void sq_listen_set_tick(sq_listen_set *ls, double now, double answer_wait_s, const char *self)
{
	size_t len = strlen(self);
	for (int s = 0; s < ls->nshards; s++) {
		sq_listener *l = &ls->l[s];
		memcpy(l->self, self, len + 1);
		char why[256];
		double next_at; /* unused: the loop comes back every second */
		if (sq_listener_check(l, now, answer_wait_s, &next_at, why, sizeof(why)) < 0) {
			/* it died unseen: made again below */
			sq_error e;
			listen_lost(ls, s);
			sq_err(&e, SQ_ECONN, "%s", why);
			ls->failed(ls->arg, &e);
		}
		if (l->conn || (!sq_pgconn_connecting(&l->pc) && now < ls->relisten_at[s]))
			continue;
		sq_error e;
		if (listen_open(ls, s, SQ_LOOP_CONNECT_WAIT_S, &e) != SQ_OK &&
		    !sq_pgconn_connecting(&l->pc)) {
			ls->relisten_at[s] = now + SQ_RELISTEN_S;
			ls->failed(ls->arg, &e);
		}
	}
}

int sq_listen_set_connecting(sq_listen_set *ls)
{
	int n = 0;
	for (int s = 0; s < ls->nshards; s++) {
		sq_listener *l = &ls->l[s];
		/* a connect that ended: its LISTEN is sent on the next pass */
		n += sq_pgconn_advance(&l->pc) + (!l->conn && l->pc.conn != NULL);
	}
	return n;
}

void sq_listen_set_free(sq_listen_set *ls)
{
	for (int s = 0; s < SQ_MAX_SHARDS; s++) {
		if (ls->ev[s])
			event_free(ls->ev[s]);
		ls->ev[s] = NULL;
		sq_listener_free(&ls->l[s]);
	}
}

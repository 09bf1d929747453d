/* pgconn.c - async libpq connections in pipeline mode on libevent: one
 * pipeline per shard per round, all shards in flight at once. */
#include "pgconn.h"
#include "clock.h"
#include "error.h"
#include "failpoint.h"
#include "pool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static sq_conn_hook conn_hook;
static void *conn_hook_arg;

void sq_set_conn_hook(sq_conn_hook fn, void *arg)
{
	conn_hook = fn;
	conn_hook_arg = arg;
}

void sq_conn_hook_call(const char *role, PGconn *conn)
{
	if (conn_hook)
		conn_hook(role, conn, conn_hook_arg);
}

void sq_pq_ignore_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* Whether a connection is no use: broken, or closed by the server while
 * idle (a restart, pg_terminate_backend, an idle-session timeout). A
 * closed one is readable (its FATAL message, then EOF) while libpq still
 * says OK. Between calls nothing is due on a connection of ours (no
 * LISTEN, every result read), so anything to read means the server is
 * ending the session: it is replaced before a statement is sent on it,
 * instead of failing the call. One poll() that finds nothing, normally. */
static int conn_gone(PGconn *c)
{
	if (PQstatus(c) != CONNECTION_OK || PQsocket(c) < 0)
		return 1;
	struct pollfd p = {PQsocket(c), POLLIN, 0};
	return poll(&p, 1, 0) > 0;
}

/* A connection to replace before a call: none, or gone. One that is gone
 * inside a transaction (BEGIN sent by an earlier call) is not replaced
 * silently, since the next statement would run outside it: libpq is made
 * to see the end (CONNECTION_BAD), the call fails as it did before, and
 * the one after it connects again. */
static int needs_connect(sq_pgconn *pc)
{
	if (!pc->conn)
		return 1;
	if (!conn_gone(pc->conn))
		return 0;
	if (PQtransactionStatus(pc->conn) != PQTRANS_IDLE && PQstatus(pc->conn) == CONNECTION_OK) {
		(void)PQconsumeInput(pc->conn);
		return 0;
	}
	return 1;
}

/* First line of libpq's message, without the "connection to server ..."
 * preamble that repeats the address we print anyway. */
static void short_pq_error(const char *m, char *out, size_t outlen)
{
	const char *p = strstr(m, " failed: ");
	size_t n;
	if (p && !strncmp(m, "connection to server", 20))
		m = p + 9;
	n = strcspn(m, "\n");
	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, m, n);
	out[n] = '\0';
}

/* A host that libpq would look up by name: not a socket directory, not an
 * address, and no hostaddr beside it. */
static int host_is_name(const char *host, const char *hostaddr)
{
	unsigned char a[sizeof(struct in6_addr)];
	if (!host || !*host || (hostaddr && *hostaddr) || strchr(host, ','))
		return 0;
	if (host[0] == '/' || host[0] == '@')
		return 0;
	return inet_pton(AF_INET, host, a) != 1 && inet_pton(AF_INET6, host, a) != 1;
}

static int count_items(const char *list)
{
	int n = 1;
	for (; *list; list++)
		n += *list == ',';
	return n;
}

/* A list of hosts (host=a,b) that the connect without blocking can take:
 * no hostaddr, no socket directory, and one port or one per host. */
static int hosts_to_look_up(const char *host, const char *hostaddr, const char *port)
{
	if (!host || !*host || (hostaddr && *hostaddr))
		return 0;
	for (const char *h = host; *h;) {
		if (*h == '/' || *h == '@' || *h == ',')
			return 0;
		h += strcspn(h, ",");
		h += *h == ',';
	}
	return !port || !strchr(port, ',') || count_items(port) == count_items(host);
}

/* "host:port" of a dsn, for messages; *multi_host: it names more than one
 * host (host=a,b) in a way the connect without blocking does not take
 * (hosts_to_look_up): libpq's blocking connect then gives each its own
 * connect_timeout and goes on to the next. *lookup_host: its host, or its
 * list of hosts, when they are to be looked up (malloc'd; else NULL), and
 * *lookup_ports the list's ports (NULL: the dsn's, or none). */
static char *dsn_addr(const char *dsn, int *multi_host, char **lookup_host, char **lookup_ports)
{
	char *errmsg = NULL, buf[300];
	const char *host = NULL, *port = NULL, *hostaddr = NULL;
	PQconninfoOption *opts = PQconninfoParse(dsn, &errmsg), *o;
	*multi_host = 0;
	*lookup_host = *lookup_ports = NULL;
	if (!opts) {
		PQfreemem(errmsg);
		return strdup("?");
	}
	for (o = opts; o->keyword; o++) {
		if (!strcmp(o->keyword, "host") && o->val)
			host = o->val;
		else if (!strcmp(o->keyword, "hostaddr") && o->val)
			hostaddr = o->val;
		else if (!strcmp(o->keyword, "port") && o->val)
			port = o->val;
	}
	*multi_host = (host && strchr(host, ',')) || (hostaddr && strchr(hostaddr, ','));
	if (!*multi_host && host_is_name(host, hostaddr)) {
		*lookup_host = strdup(host);
	} else if (*multi_host && hosts_to_look_up(host, hostaddr, port)) {
		/* several hosts, looked up here too, each address in turn */
		*multi_host = 0;
		*lookup_host = strdup(host);
		*lookup_ports = port && *port ? strdup(port) : NULL;
	}
	snprintf(buf, sizeof(buf), "%s:%s",
		 host       ? host
		 : hostaddr ? hostaddr
			    : "localhost",
		 port ? port : "5432");
	PQconninfoFree(opts);
	return strdup(buf);
}

static const char *const connect_kw[] = {"dbname", "options", "connect_timeout", NULL};
/* The same, with the host's addresses found by a lookup of our own. */
static const char *const connect_kw_addr[] = {
	"dbname", "options", "connect_timeout", "host", "hostaddr", "port", NULL};

/*
 * A host name looked up on a thread of its own, so that a name server
 * that is slow or gone holds up no loop (libpq looks names up inside
 * PQconnectStart, blocking). The connection and the thread each hold a
 * reference; the last to let go frees it, so a connect given up does not
 * wait for the lookup. The thread writes a byte to fd[1] when done, which
 * is what a connect under way polls meanwhile.
 */
#define SQ_LOOKUP_MAX 16
typedef struct sq_lookup {
	pthread_mutex_t mu;
	int refs, done;
	int fd[2];
	char *host;                      /* a host, or a list of them */
	char *ports;                     /* NULL, one port, or one per host */
	char hosts[SQ_LOOKUP_MAX * 256]; /* host repeated, one per address */
	char addrs[SQ_LOOKUP_MAX * 48];  /* its addresses, in the resolver's order */
	char aports[SQ_LOOKUP_MAX * 8];  /* the port of each ("": ports is NULL) */
	char err[200];
} sq_lookup;

static void lookup_release(sq_lookup *l)
{
	pthread_mutex_lock(&l->mu);
	int left = --l->refs;
	pthread_mutex_unlock(&l->mu);
	if (left > 0)
		return;
	close(l->fd[0]);
	close(l->fd[1]);
	pthread_mutex_destroy(&l->mu);
	free(l->host);
	free(l->ports);
	free(l);
}

/* The lists a lookup builds: each address, with its host and port. */
typedef struct addr_lists {
	char hosts[sizeof(((sq_lookup *)0)->hosts)];
	char addrs[sizeof(((sq_lookup *)0)->addrs)];
	char ports[sizeof(((sq_lookup *)0)->aports)];
	size_t ha, aa, pa;
	int n;
} addr_lists;

/* Adds one address (with its host and port) to the lists; 0 when full. */
static int add_addr(addr_lists *o, const char *host, const char *ip, const char *port)
{
	const char *sep = o->n ? "," : "";
	int w1 = snprintf(o->addrs + o->aa, sizeof(o->addrs) - o->aa, "%s%s", sep, ip);
	int w2 = snprintf(o->hosts + o->ha, sizeof(o->hosts) - o->ha, "%s%s", sep, host);
	int w3 = port ? snprintf(o->ports + o->pa, sizeof(o->ports) - o->pa, "%s%s", sep, port) : 0;
	if (o->n >= SQ_LOOKUP_MAX || w1 < 0 || w2 < 0 || w3 < 0 ||
	    o->aa + (size_t)w1 >= sizeof(o->addrs) || o->ha + (size_t)w2 >= sizeof(o->hosts) ||
	    o->pa + (size_t)w3 >= sizeof(o->ports)) {
		o->addrs[o->aa] = o->hosts[o->ha] = o->ports[o->pa] = '\0';
		return 0;
	}
	o->aa += (size_t)w1;
	o->ha += (size_t)w2;
	o->pa += (size_t)w3;
	o->n++;
	return 1;
}

/* Looks one host up into the lists; a message in err when it cannot. */
static void look_up_one(const char *host, const char *port, int most, addr_lists *o, char *err,
			size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	const char *fake = sq_test_lookup(host);
	char ip[INET6_ADDRSTRLEN];
	int before = o->n;
	if (fake) {
		for (const char *p = fake; *p && o->n - before < most;) {
			size_t k = strcspn(p, ",");
			snprintf(ip, sizeof(ip), "%.*s", (int)k, p);
			if (!add_addr(o, host, ip, port))
				return;
			p += k + (p[k] == ',');
		}
		return;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "could not translate host name \"%s\" to address: %s", host,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return;
	}
	for (struct addrinfo *ai = res; ai && o->n - before < most; ai = ai->ai_next) {
		const void *src =
			ai->ai_family == AF_INET
				? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
			: ai->ai_family == AF_INET6
				? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
				: NULL;
		if (!src || !inet_ntop(ai->ai_family, src, ip, sizeof(ip)))
			continue;
		if (!add_addr(o, host, ip, port))
			break;
	}
	freeaddrinfo(res);
	if (o->n == before)
		snprintf(err, errlen, "host name \"%s\" has no address", host);
}

/* The item i of a list "a,b,c", into out (the last one when the list is
 * shorter: a single port applies to every host). */
static void list_item(const char *list, int i, char *out, size_t len)
{
	const char *p = list;
	for (int k = 0; k < i && strchr(p, ','); k++)
		p = strchr(p, ',') + 1;
	snprintf(out, len, "%.*s", (int)strcspn(p, ","), p);
}

static void *lookup_main(void *arg)
{
	sq_lookup *l = arg;
	addr_lists *o = calloc(1, sizeof(*o));
	char err[sizeof(l->err)] = "", first[sizeof(l->err)] = "";
	sq_failpoint("lookup"); /* a slow name server, for the tests */
	if (!o) {
		snprintf(first, sizeof(first), "out of memory");
	} else {
		/* each host of the list in turn; one that cannot be looked up is
		 * passed over, as libpq passes over a host it cannot reach */
		/* each host gets its share of the addresses kept, so that a host
		 * with many does not crowd out the hosts after it */
		int nhosts = count_items(l->host), most = SQ_LOOKUP_MAX / nhosts;
		for (int i = 0; i < nhosts; i++) {
			char host[256], port[16];
			list_item(l->host, i, host, sizeof(host));
			if (l->ports)
				list_item(l->ports, i, port, sizeof(port));
			err[0] = '\0';
			look_up_one(host, l->ports ? port : NULL, most > 0 ? most : 1, o, err,
				    sizeof(err));
			if (err[0] && !first[0])
				memcpy(first, err, sizeof(first));
		}
	}
	pthread_mutex_lock(&l->mu);
	if (o && o->n > 0) {
		memcpy(l->hosts, o->hosts, sizeof(l->hosts));
		memcpy(l->addrs, o->addrs, sizeof(l->addrs));
		memcpy(l->aports, o->ports, sizeof(l->aports));
	} else if (first[0]) {
		memcpy(l->err, first, sizeof(l->err));
	} else {
		snprintf(l->err, sizeof(l->err), "host name \"%s\" has no address", l->host);
	}
	l->done = 1;
	pthread_mutex_unlock(&l->mu);
	free(o);
	if (write(l->fd[1], "x", 1) < 0) {
		/* the pipe is ours and empty: cannot fail */
	}
	lookup_release(l);
	return NULL;
}

/* Starts the lookup of pc's host. */
static sq_status lookup_start(sq_pgconn *pc, sq_error *err)
{
	sq_lookup *l = calloc(1, sizeof(*l));
	if (!l || !(l->host = strdup(pc->lookup_host)) ||
	    (pc->lookup_ports && !(l->ports = strdup(pc->lookup_ports)))) {
		if (l)
			free(l->host);
		free(l);
		return sq_err(err, SQ_ENOMEM, "shard %s (%s): out of memory", pc->shard_id,
			      pc->addr);
	}
	if (pipe(l->fd)) {
		int e = errno;
		free(l->host);
		free(l->ports);
		free(l);
		return sq_err(err, SQ_ECONN, "shard %s (%s): cannot look up its host: pipe: %s",
			      pc->shard_id, pc->addr, strerror(e));
	}
	fcntl(l->fd[0], F_SETFD, FD_CLOEXEC);
	fcntl(l->fd[1], F_SETFD, FD_CLOEXEC);
	pthread_mutex_init(&l->mu, NULL);
	l->refs = 2;
	pthread_attr_t at;
	pthread_t th;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&th, &at, lookup_main, l);
	pthread_attr_destroy(&at);
	if (rc) {
		l->refs = 1;
		lookup_release(l);
		return sq_err(err, SQ_ECONN, "shard %s (%s): cannot look up its host: %s",
			      pc->shard_id, pc->addr, strerror(rc));
	}
	pc->resolving = l;
	return SQ_OK;
}

/* Lets go of a lookup under way (its thread ends on its own). */
static void lookup_abandon(sq_pgconn *pc)
{
	if (pc->resolving)
		lookup_release(pc->resolving);
	pc->resolving = NULL;
}

static sq_status unreachable(sq_pgconn *pc, const char *why, sq_error *err)
{
	char msg[512];
	short_pq_error(why, msg, sizeof(msg));
	return sq_err(err, SQ_ECONN, "shard %s (%s): %s; is it running, and is the dsn right?",
		      pc->shard_id, pc->addr, msg);
}

/* A connection that is up becomes pc's, in pipeline mode. */
static sq_status take_conn(sq_pgconn *pc, PGconn *conn, sq_error *err)
{
	char msg[512];
	PQsetNoticeProcessor(conn, sq_pq_ignore_notice, NULL);
	sq_conn_hook_call("pipeline", conn);
	if (PQsetnonblocking(conn, 1) || !PQenterPipelineMode(conn)) {
		short_pq_error(PQerrorMessage(conn), msg, sizeof(msg));
		PQfinish(conn);
		return sq_err(err, SQ_ECONN, "shard %s (%s): cannot enter pipeline mode: %s",
			      pc->shard_id, pc->addr, msg);
	}
	pc->conn = conn;
	pc->nprepared = 0;
	return SQ_OK;
}

/* A connection to pc's shard: made (blocking, up to connect_timeout), or
 * only started (PQconnectStartParams; see connect_step). */
static sq_status open_conn(sq_pgconn *pc, int blocking, PGconn **out, sq_error *err)
{
	char timeout[16];
	const char *vals[] = {pc->dsn, pc->options, timeout, NULL, NULL, NULL, NULL};
	int addr = !blocking && pc->try_addrs;
	snprintf(timeout, sizeof(timeout), "%d", pc->connect_timeout_s);
	if (addr) { /* its host's addresses, looked up already (host stays, for TLS) */
		vals[3] = pc->try_hosts;
		vals[4] = pc->try_addrs;
		vals[5] = pc->try_ports; /* NULL or "": the dsn's */
	}
	PGconn *conn = blocking ? PQconnectdbParams(connect_kw, vals, 1)
		       : addr   ? PQconnectStartParams(connect_kw_addr, vals, 1)
				: PQconnectStartParams(connect_kw, vals, 1);
	if (!conn)
		return sq_err(err, SQ_ENOMEM, "shard %s (%s): out of memory", pc->shard_id,
			      pc->addr);
	if (blocking ? PQstatus(conn) != CONNECTION_OK : PQstatus(conn) == CONNECTION_BAD) {
		sq_status st = unreachable(pc, PQerrorMessage(conn), err);
		PQfinish(conn);
		return st;
	}
	*out = conn;
	return SQ_OK;
}

static sq_status connect_now(sq_pgconn *pc, sq_error *err)
{
	PGconn *conn;
	sq_status st = open_conn(pc, 1, &conn, err);
	return st != SQ_OK ? st : take_conn(pc, conn, err);
}

static void try_free(sq_pgconn *pc)
{
	free(pc->try_hosts);
	free(pc->try_addrs);
	free(pc->try_ports);
	pc->try_hosts = pc->try_addrs = pc->try_ports = NULL;
	pc->connect_ip[0] = '\0';
}

static void connect_abandon(sq_pgconn *pc)
{
	if (pc->connecting)
		PQfinish(pc->connecting);
	pc->connecting = NULL;
	lookup_abandon(pc);
	try_free(pc);
}

int sq_dsn_names_host(const char *dsn)
{
	int multi;
	char *name = NULL, *ports = NULL, *addr = dsn_addr(dsn, &multi, &name, &ports);
	int named = name != NULL;
	free(name);
	free(ports);
	free(addr);
	return named;
}

int sq_pgconn_connecting(const sq_pgconn *pc)
{
	return pc->connecting != NULL || pc->resolving != NULL;
}

/* Starts the connection (once its host is looked up) without waiting. */
static sq_status connect_open(sq_pgconn *pc, double now, sq_error *err)
{
	PGconn *conn;
	try_free(pc);
	if (pc->resolving) {
		pc->try_hosts = strdup(pc->resolving->hosts);
		pc->try_addrs = strdup(pc->resolving->addrs);
		pc->try_ports = strdup(pc->resolving->aports);
		if (!pc->try_hosts || !pc->try_addrs || !pc->try_ports) {
			try_free(pc);
			lookup_abandon(pc);
			return sq_err(err, SQ_ENOMEM, "shard %s (%s): out of memory", pc->shard_id,
				      pc->addr);
		}
	}
	lookup_abandon(pc);
	sq_status st = open_conn(pc, 0, &conn, err);
	if (st != SQ_OK) {
		try_free(pc);
		return st;
	}
	pc->connecting = conn;
	pc->connect_poll = PGRES_POLLING_WRITING; /* as libpq asks: wait to write first */
	pc->connect_started = now;
	pc->connect_fd = PQsocket(conn);
	return SQ_OK;
}

/* Steps past one item of each list (they go in step). */
static void lists_next(const char **a, const char **h, const char **p)
{
	size_t k = strcspn(*a, ","), kh = strcspn(*h, ","), kp = strcspn(*p, ",");
	*a += k + ((*a)[k] == ',');
	*h += kh + ((*h)[kh] == ',');
	*p += kp + ((*p)[kp] == ',');
}

/* The address libpq's connect is on got no answer within connect_timeout:
 * the connect starts again on the addresses the lookup found after it
 * (and after any copy of it right behind), as libpq's blocking connect
 * would go on to them (1); 0: none is left; -1: the new start failed (err
 * says why). An address not found in the lists (written another way)
 * counts as the first, so that the connect always moves on. */
static int next_address(sq_pgconn *pc, double now, sq_error *err)
{
	const char *ip = pc->connecting ? PQhostaddr(pc->connecting) : NULL;
	const char *port = pc->connecting ? PQport(pc->connecting) : NULL;
	if (!pc->try_addrs || !ip || !*ip)
		return 0;
	const char *a = pc->try_addrs, *h = pc->try_hosts, *p = pc->try_ports;
	int found = 0;
	while (*a) {
		size_t k = strcspn(a, ","), kp = strcspn(p, ",");
		int same = strlen(ip) == k && !strncmp(a, ip, k) &&
			   (!*p || (port && strlen(port) == kp && !strncmp(p, port, kp)));
		if (found && !same)
			break;
		found |= same;
		lists_next(&a, &h, &p);
	}
	if (!found) {
		a = pc->try_addrs, h = pc->try_hosts, p = pc->try_ports;
		lists_next(&a, &h, &p);
	}
	if (!*a || !*h)
		return 0;
	char *na = strdup(a), *nh = strdup(h), *np = strdup(p);
	if (!na || !nh || !np) {
		free(na);
		free(nh);
		free(np);
		return 0;
	}
	try_free(pc);
	pc->try_addrs = na;
	pc->try_hosts = nh;
	pc->try_ports = np;
	PQfinish(pc->connecting);
	pc->connecting = NULL;
	PGconn *conn;
	if (open_conn(pc, 0, &conn, err) != SQ_OK)
		return -1;
	pc->connecting = conn;
	pc->connect_poll = PGRES_POLLING_WRITING;
	pc->connect_started = now;
	pc->connect_fd = PQsocket(conn);
	return 1;
}

/* Starts a connect without waiting for it: a host name is looked up
 * first, on a thread of its own (see sq_lookup). */
static sq_status connect_begin(sq_pgconn *pc, double now, sq_error *err)
{
	if (!pc->lookup_host)
		return connect_open(pc, now, err);
	sq_status st = lookup_start(pc, err);
	if (st != SQ_OK)
		return st;
	pc->connect_started = now;
	pc->connect_fd = pc->resolving->fd[0];
	return SQ_OK;
}

/* What the connect under way waits for: its lookup's end, or on its
 * socket, as libpq asked. */
static struct pollfd connect_pollfd(const sq_pgconn *pc)
{
	if (pc->resolving)
		return (struct pollfd){pc->resolving->fd[0], POLLIN, 0};
	return (struct pollfd){PQsocket(pc->connecting),
			       pc->connect_poll == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
}

/* The lookup has ended: the connection is started on the addresses found,
 * or the connect fails as libpq's own lookup would. */
static sq_status lookup_done(sq_pgconn *pc, double now, int *done, sq_error *err)
{
	sq_lookup *l = pc->resolving;
	pthread_mutex_lock(&l->mu);
	*done = l->done;
	pthread_mutex_unlock(&l->mu);
	if (!*done)
		return SQ_OK;
	if (l->err[0]) {
		sq_status st = unreachable(pc, l->err, err);
		lookup_abandon(pc);
		return st;
	}
	return connect_open(pc, now, err);
}

/* libpq counts connect_timeout 1 as 2 (its minimum); so does this */
static double connect_limit_s(const sq_pgconn *pc)
{
	return pc->connect_timeout_s < 2 ? 2.0 : (double)pc->connect_timeout_s;
}

/*
 * Takes the connection under way as far as it goes, waiting at most wait_s
 * for the server: SQ_OK once it is up; SQ_ECONN with `*under_way` set while
 * it still waits on the server (the caller's part for this shard fails now,
 * and the next call or sq_pgconn_advance goes on from here); SQ_ECONN when
 * it failed or got no answer within connect_timeout (libpq leaves that
 * limit to whoever polls; counted again from each new socket, as libpq
 * counts it per address). What the socket has for it is always taken
 * before the limit is checked, so a slow caller never drops a connection
 * that is ready.
 */
static sq_status connect_step(sq_pgconn *pc, double wait_s, int *under_way, sq_error *err)
{
	double now = sq_mono_s(), until = now + wait_s;
	*under_way = 0;
	for (;;) {
		if (pc->resolving) {
			int done;
			sq_status st = lookup_done(pc, now, &done, err);
			if (st != SQ_OK)
				return st;
			if (done)
				continue;
		} else if (pc->connect_poll == PGRES_POLLING_OK) {
			PGconn *conn = pc->connecting;
			pc->connecting = NULL;
			connect_abandon(pc); /* the lists of addresses */
			return take_conn(pc, conn, err);
		} else if (pc->connect_poll == PGRES_POLLING_FAILED) {
			sq_status st = unreachable(pc, PQerrorMessage(pc->connecting), err);
			connect_abandon(pc);
			return st;
		}
		struct pollfd p = connect_pollfd(pc);
		/* the address and port libpq is on, as "ip port" */
		char at[sizeof(pc->connect_ip)] = "";
		if (!pc->resolving) {
			const char *ip = PQhostaddr(pc->connecting), *port = PQport(pc->connecting);
			if (ip && *ip)
				snprintf(at, sizeof(at), "%s %s", ip, port ? port : "");
		}
		/* libpq went on to another address */
		if (p.fd != pc->connect_fd || (at[0] && strcmp(at, pc->connect_ip))) {
			pc->connect_fd = p.fd;
			pc->connect_started = now;
			memcpy(pc->connect_ip, at, sizeof(at));
		}
		/* the lookup of several hosts: one connect_timeout per host */
		double give_up =
			pc->connect_started +
			connect_limit_s(pc) * (pc->resolving ? count_items(pc->lookup_host) : 1);
		double wait = (until < give_up ? until : give_up) - now;
		int r = p.fd < 0 ? 1 : poll(&p, 1, wait > 0 ? (int)ceil(wait * 1000) : 0);
		now = sq_mono_s();
		if (r > 0) {
			if (!pc->resolving)
				pc->connect_poll = PQconnectPoll(pc->connecting);
			continue;
		}
		const char *what = pc->resolving ? "looking up its host name" : "connecting";
		if (now >= give_up && !pc->resolving) {
			int next = next_address(pc, now, err);
			if (next > 0)
				continue;
			if (next < 0) {
				connect_abandon(pc);
				return err->code;
			}
		}
		if (now >= give_up) {
			int lookup = pc->resolving != NULL;
			connect_abandon(pc);
			return sq_err(
				err, SQ_ECONN,
				"shard %s (%s): no answer %swithin connect_timeout (%.0fs); is "
				"%s, and is the dsn right?",
				pc->shard_id, pc->addr, lookup ? "from the name lookup " : "",
				connect_limit_s(pc),
				lookup ? "the name server reachable" : "it running");
		}
		if (now >= until) {
			*under_way = 1;
			return sq_err(err, SQ_ECONN,
				      "shard %s (%s): still %s (%.1fs so far, at most "
				      "connect_timeout, %.0fs)",
				      pc->shard_id, pc->addr, what, now - pc->connect_started,
				      connect_limit_s(pc));
		}
	}
}

/* After a connect's end (st) or while it is under way: a failure starts or
 * doubles the backoff and is kept for the messages in between; success
 * ends it. */
static sq_status connect_settle(sq_pgconn *pc, sq_status st, int under_way, const sq_error *e,
				sq_error *err)
{
	if (st == SQ_OK) {
		pc->connect_backoff = pc->connect_retry_at = 0;
		return SQ_OK;
	}
	if (!under_way) {
		double now = sq_mono_s();
		pc->connect_backoff =
			pc->connect_backoff > 0 ? fmin(pc->connect_backoff * 2, 2.0) : 0.25;
		pc->connect_retry_at = now + pc->connect_backoff;
		/* kept without the "shard ID (ADDR): " the message repeats it in */
		char prefix[200];
		int pl =
			snprintf(prefix, sizeof(prefix), "shard %s (%s): ", pc->shard_id, pc->addr);
		const char *why = e->msg;
		if (pl > 0 && (size_t)pl < sizeof(prefix) && !strncmp(why, prefix, (size_t)pl))
			why += pl;
		snprintf(pc->connect_error, sizeof(pc->connect_error), "%s", why);
	}
	if (err)
		*err = *e;
	return e->code;
}

/* Makes pc's connection usable for a call, replacing one that is gone
 * (needs_connect). A shard that could not be reached is not tried again
 * on every call: a connect may block up to connect_timeout (a host that
 * does not answer), and a worker's loop would spend its ticks there
 * instead of on the other shards. After a failed connect, the next try
 * waits 0.25 s, doubling to 2 s; until then the call fails at once. With
 * connect_wait_s set, a connect does not block either: the calls wait for
 * it at most that long in all, counted from its start (a server that
 * answers is connected by then; one that does not costs the wait once, not
 * once per call), and fail while it is under way. */
static sq_status ensure_conn(sq_pgconn *pc, sq_error *err)
{
	sq_error e;
	sq_status st;
	int under_way = 0;
	double now = sq_mono_s();
	if (sq_pgconn_connecting(pc)) {
		double wait = pc->connect_wait_until - now;
		st = connect_step(pc, wait > 0 ? wait : 0, &under_way, &e);
	} else {
		if (!needs_connect(pc))
			return SQ_OK;
		if (pc->conn) {
			PQfinish(pc->conn);
			pc->conn = NULL;
		}
		if (now < pc->connect_retry_at)
			return sq_err(
				err, SQ_ECONN,
				"shard %s (%s): cannot be reached (tried %.1fs ago: %s); tried "
				"again in %.1fs",
				pc->shard_id, pc->addr,
				now - (pc->connect_retry_at - pc->connect_backoff),
				pc->connect_error, pc->connect_retry_at - now);
		if (pc->connect_wait_s > 0 && !pc->multi_host) {
			pc->connect_wait_until = now + pc->connect_wait_s;
			st = connect_begin(pc, now, &e);
			if (st == SQ_OK)
				st = connect_step(pc, pc->connect_wait_s, &under_way, &e);
		} else {
			st = connect_now(pc, &e);
		}
	}
	return connect_settle(pc, st, under_way, &e, err);
}

sq_status sq_pgconn_ensure(sq_pgconn *pc, sq_error *err)
{
	return ensure_conn(pc, err);
}

PGconn *sq_pgconn_detach(sq_pgconn *pc)
{
	PGconn *conn = pc->conn;
	pc->conn = NULL;
	pc->nprepared = 0;
	if (conn && !PQexitPipelineMode(conn)) {
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

int sq_pgconn_advance(sq_pgconn *pc)
{
	sq_error e;
	int under_way = 0;
	if (!sq_pgconn_connecting(pc))
		return 0;
	sq_status st = connect_step(pc, 0, &under_way, &e);
	connect_settle(pc, st, under_way, &e, NULL);
	return under_way;
}

void sq_pgconn_set_connect_wait(sq_pgconn *pc, double wait_s)
{
	pc->connect_wait_s = wait_s;
}

void sq_pgconn_set_answer_wait(sq_pgconn *pc, double wait_s)
{
	pc->answer_wait_s = wait_s;
}

sq_status sq_pgconn_init(sq_pgconn *pc, const char *shard_id, const char *dsn, const char *options,
			 int connect_timeout_s, sq_error *err)
{
	memset(pc, 0, sizeof(*pc));
	pc->shard_id = strdup(shard_id);
	pc->dsn = strdup(dsn);
	pc->options = strdup(options ? options : "");
	pc->addr = dsn_addr(dsn, &pc->multi_host, &pc->lookup_host, &pc->lookup_ports);
	pc->connect_timeout_s = connect_timeout_s;
	if (!pc->shard_id || !pc->dsn || !pc->options || !pc->addr)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	return SQ_OK;
}

sq_status sq_pgconn_open(sq_pgconn *pc, const char *shard_id, const char *dsn, const char *options,
			 int connect_timeout_s, sq_error *err)
{
	sq_status st = sq_pgconn_init(pc, shard_id, dsn, options, connect_timeout_s, err);
	return st != SQ_OK ? st : connect_now(pc, err);
}

void sq_pgconn_connect_all(sq_pgconn *pcs, int n, sq_status *st, sq_error *errs)
{
	struct pollfd *fds = calloc((size_t)n + 1, sizeof(*fds));
	int left = 0;
	double now = sq_mono_s();
	/* a dsn with several hosts keeps the blocking connect (see
	 * sq_pgconn_set_connect_wait); the others are started, all at once */
	for (int i = 0; i < n; i++) {
		if (pcs[i].multi_host || !fds) {
			st[i] = connect_now(&pcs[i], &errs[i]);
			st[i] = connect_settle(&pcs[i], st[i], 0, &errs[i], NULL);
			continue;
		}
		st[i] = connect_begin(&pcs[i], now, &errs[i]);
		if (st[i] != SQ_OK)
			st[i] = connect_settle(&pcs[i], st[i], 0, &errs[i], NULL);
		left += st[i] == SQ_OK && sq_pgconn_connecting(&pcs[i]);
	}
	while (left > 0) {
		int k = 0;
		for (int i = 0; i < n; i++) {
			sq_pgconn *pc = &pcs[i];
			if (!sq_pgconn_connecting(pc))
				continue;
			int under_way;
			st[i] = connect_step(pc, 0, &under_way, &errs[i]);
			if (!under_way) {
				/* a failure is kept, and backed off from, as a
				 * call's would be */
				st[i] = connect_settle(pc, st[i], 0, &errs[i], NULL);
				left--;
				continue;
			}
			fds[k++] = connect_pollfd(pc);
		}
		/* connect_step checks each one's connect_timeout; 50 ms at most
		 * between the checks */
		if (k > 0)
			(void)poll(fds, (nfds_t)k, 50);
	}
	free(fds);
}

void sq_pgconn_reset(sq_pgconn *pc)
{
	if (pc->run)
		abort(); /* a programming error: its run of sq_pgconn_start is out */
	for (int i = 0; i < pc->nres; i++)
		PQclear(pc->res[i]);
	pc->nres = 0;
	pc->qn = 0;
	pc->expect = pc->seen = pc->done = pc->failed = 0;
	pc->syncs = pc->syncs_seen = 0;
	pc->txn_generic = pc->txn_gated = 0;
	memset(pc->sync_after, 0, sizeof(pc->sync_after));
}

void sq_pgconn_close(sq_pgconn *pc)
{
	if (!pc)
		return;
	sq_pgconn_reset(pc);
	if (pc->ev)
		event_free(pc->ev);
	if (pc->conn)
		PQfinish(pc->conn);
	connect_abandon(pc);
	free(pc->shard_id);
	free(pc->dsn);
	free(pc->options);
	free(pc->addr);
	free(pc->lookup_host);
	free(pc->lookup_ports);
	memset(pc, 0, sizeof(*pc));
}

void sq_pgconn_push(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals)
{
	if (pc->qn >= SQ_PIPE_MAX)
		abort(); /* a programming error: pipelines are short and fixed */
	pc->q[pc->qn] = st;
	pc->qnparams[pc->qn] = nparams;
	pc->qvals[pc->qn] = vals;
	pc->sync_after[pc->qn] = 0;
	pc->qbinary[pc->qn] = 0;
	pc->qplanned[pc->qn] = 0;
	pc->qn++;
}

void sq_pgconn_push_planned(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals)
{
	sq_pgconn_push(pc, st, nparams, vals);
	pc->qplanned[pc->qn - 1] = 1;
}

void sq_pgconn_push_binary(sq_pgconn *pc, const sq_stmt *st, int nparams, const char *const *vals)
{
	sq_pgconn_push(pc, st, nparams, vals);
	pc->qbinary[pc->qn - 1] = 1;
}

void sq_pgconn_push_sync(sq_pgconn *pc)
{
	if (pc->qn > 0)
		pc->sync_after[pc->qn - 1] = 1;
	pc->txn_generic = 0; /* SET LOCAL ends with the transaction */
	pc->txn_gated = 0;   /* and so does an xact lock */
}

/* Prepared on the server, or its Prepare already sent in this pipeline. */
static int is_prepared(sq_pgconn *pc, const sq_stmt *st)
{
	for (int i = 0; i < pc->nprepared; i++)
		if (pc->prepared[i] == st)
			return 1;
	for (int i = 0; i < pc->ninflight; i++)
		if (pc->inflight[i] == st)
			return 1;
	return 0;
}

static void conn_failed(sq_pgconn *pc, sq_error *err, const char *what)
{
	char msg[512];
	sq_error e;
	short_pq_error(pc->conn ? PQerrorMessage(pc->conn) : "not connected", msg, sizeof(msg));
	pc->failed = 1;
	pc->done = 1;
	sq_err(&e, SQ_ECONN, "shard %s (%s): %s: %s", pc->shard_id, pc->addr, what, msg);
	snprintf(pc->fail_msg, sizeof(pc->fail_msg), "%s", e.msg);
	if (err && err->code == SQ_OK)
		*err = e;
}

/* A Sync was sent after q[0..q_end). */
static void sync_sent(sq_pgconn *pc, int q_end)
{
	pc->sync_entries[pc->syncs] = pc->expect;
	pc->sync_q[pc->syncs] = q_end;
	pc->syncs++;
}

static int send_pipeline(sq_pgconn *pc, sq_error *err)
{
	pc->expect = pc->seen = pc->nres = 0;
	pc->syncs = pc->syncs_seen = 0;
	pc->pending_null = pc->skip_null = 0;
	pc->ninflight = 0;
	pc->commit_error[0] = '\0';
	memset(pc->sync_failed, 0, sizeof(pc->sync_failed));
	for (int i = 0; i < pc->qn; i++) {
		const sq_stmt *st = pc->q[i];
		if (pc->qplanned[i]) { /* the unnamed statement: planned for these values */
			if (!PQsendQueryParams(pc->conn, st->sql, pc->qnparams[i], NULL,
					       pc->qvals[i], NULL, NULL, pc->qbinary[i])) {
				conn_failed(pc, err, "cannot send");
				return -1;
			}
		} else if (!is_prepared(pc, st)) {
			if (!PQsendPrepare(pc->conn, st->name, st->sql, 0, NULL)) {
				conn_failed(pc, err, "cannot send");
				return -1;
			}
			/* recorded as prepared only when the server says so: a Prepare
			 * skipped after an earlier error in the pipeline is not */
			if (pc->ninflight < SQ_PIPE_MAX)
				pc->inflight[pc->ninflight++] = st;
			pc->prep[pc->expect] = st;
			pc->keep[pc->expect++] = -1;
		}
		if (!pc->qplanned[i] &&
		    !PQsendQueryPrepared(pc->conn, st->name, pc->qnparams[i], pc->qvals[i], NULL,
					 NULL, pc->qbinary[i])) {
			conn_failed(pc, err, "cannot send");
			return -1;
		}
		pc->keep[pc->expect++] = i;
		pc->statements_sent++;
		if (pc->sync_after[i] && i < pc->qn - 1) {
			if (!PQpipelineSync(pc->conn)) {
				conn_failed(pc, err, "cannot send");
				return -1;
			}
			sync_sent(pc, i + 1);
		}
	}
	if (!PQpipelineSync(pc->conn)) {
		conn_failed(pc, err, "cannot send");
		return -1;
	}
	sync_sent(pc, pc->qn);
	return 0;
}

/* An error at the commit of the transaction that ends at the next Sync. Its
 * NULL follows; it is not an entry's, so it must not count as one. */
static void commit_failed(sq_pgconn *pc, const PGresult *r)
{
	const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
	pc->sync_failed[pc->syncs_seen] = 1;
	pc->pending_null = 0;
	pc->skip_null = 1;
	if (!pc->commit_error[0])
		snprintf(pc->commit_error, sizeof(pc->commit_error), "%s",
			 msg ? msg : PQresultErrorMessage(r));
}

/* Reads whatever results are complete. Sets pc->done at the last Sync. */
static void read_results(sq_pgconn *pc, sq_error *err)
{
	if (!PQconsumeInput(pc->conn)) {
		conn_failed(pc, err, "connection lost");
		return;
	}
	while (!pc->done && !PQisBusy(pc->conn)) {
		PGresult *r = PQgetResult(pc->conn);
		if (!r) {
			/* a NULL ends one entry's results; one after a Sync result (if
			 * libpq gives any) is not an entry's and is skipped */
			if (pc->skip_null) {
				pc->skip_null = 0;
			} else if (pc->pending_null) {
				pc->pending_null = 0;
				pc->seen++;
			} else if (pc->seen >= pc->expect) {
				break;
			}
			continue;
		}
		ExecStatusType s = PQresultStatus(r);
		if (s == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			if (++pc->syncs_seen == pc->syncs) {
				pc->done = 1;
				break;
			}
			continue;
		}
		pc->pending_null = 1;
		if (pc->syncs_seen < pc->syncs && pc->seen >= pc->sync_entries[pc->syncs_seen]) {
			/* every statement before the Sync has answered: this is
			 * the commit's own error, and the transaction is undone */
			commit_failed(pc, r);
			PQclear(r);
			continue;
		}
		if (pc->seen < pc->expect && pc->keep[pc->seen] >= 0 && pc->nres < SQ_PIPE_MAX &&
		    pc->nres == pc->keep[pc->seen]) {
			pc->res[pc->nres++] = r;
		} else {
			/* a Prepare's result: only a success makes it prepared; a
			 * failed or skipped one shows up again as the failure of the
			 * statement that used it, and is sent again next time */
			if (pc->seen < pc->expect && pc->keep[pc->seen] < 0 &&
			    s == PGRES_COMMAND_OK && pc->nprepared < 64)
				pc->prepared[pc->nprepared++] = pc->prep[pc->seen];
			PQclear(r);
		}
	}
}

static void on_event(evutil_socket_t fd, short what, void *arg);

/* A run: sq_pgconn_run's (on its stack, the loop broken when it ends), or
 * one of sq_pgconn_start (allocated, `done` called when it ends). */
typedef struct run_ctx {
	struct event_base *base;
	sq_error *err;
	int pending;
	sq_pgconn **conns;
	int n;
	struct event *answer_ev; /* the first answer_by to come */
	sq_pgconn_done_fn done;  /* sq_pgconn_start's; NULL: sq_pgconn_run's */
	void *arg;
	sq_pgconn *one[1]; /* sq_pgconn_start's conns */
	sq_error own_err;  /* and its err */
} run_ctx;

static void run_settled(run_ctx *rc);

/* A connection that answered nothing for answer_wait_s: taken as lost, as a
 * reset would have told (its host is gone without a trace, or cut off by
 * the network); dropped after the run and made again by the next. */
static void answer_lost(sq_pgconn *pc, sq_error *err)
{
	sq_error e;
	sq_err(&e, SQ_ECONN,
	       "shard %s (%s): no answer within %.1fs (its host gone or cut off?); the "
	       "connection is made again",
	       pc->shard_id, pc->addr, pc->answer_wait_s);
	snprintf(pc->fail_msg, sizeof(pc->fail_msg), "%s", e.msg);
	if (err && err->code == SQ_OK)
		*err = e;
}

/* Arms rc's answer timer for the first answer still due; none: no timer. */
static void arm_answer(run_ctx *rc)
{
	double first = INFINITY, now = sq_mono_s();
	for (int i = 0; i < rc->n; i++) {
		const sq_pgconn *pc = rc->conns[i];
		if (pc && pc->run == rc && !pc->done && pc->answer_wait_s > 0 &&
		    pc->answer_by < first)
			first = pc->answer_by;
	}
	if (first == INFINITY)
		return;
	long long us = first > now ? (long long)ceil((first - now) * 1e6) : 0;
	struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
	evtimer_add(rc->answer_ev, &tv);
}

static void on_answer_due(evutil_socket_t fd, short what, void *arg)
{
	run_ctx *rc = arg;
	double now = sq_mono_s();
	(void)fd;
	(void)what;
	for (int i = 0; i < rc->n; i++) {
		sq_pgconn *pc = rc->conns[i];
		if (!pc || pc->run != rc || pc->done || pc->answer_wait_s <= 0 ||
		    now < pc->answer_by)
			continue;
		pc->failed = pc->done = 1;
		answer_lost(pc, rc->err);
		if (pc->ev) {
			event_free(pc->ev);
			pc->ev = NULL;
		}
		if (--rc->pending == 0) {
			run_settled(rc);
			return;
		}
	}
	arm_answer(rc);
}

/* Watches the connection for the run: persistent, so that a result that
 * comes in many reads costs no epoll_ctl per read; made again only when
 * the wish to write changes (a send that did not fit the socket). */
static void arm(sq_pgconn *pc, run_ctx *rc)
{
	short flags = EV_READ | EV_PERSIST | (pc->want_write ? EV_WRITE : 0);
	if (pc->ev && event_get_events(pc->ev) == flags)
		return;
	if (pc->ev)
		event_free(pc->ev);
	pc->ev = event_new(rc->base, PQsocket(pc->conn), flags, on_event, pc);
	event_add(pc->ev, NULL);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
	sq_pgconn *pc = arg;
	run_ctx *rc = pc->run;
	(void)fd;
	if (what & EV_WRITE) {
		int f = PQflush(pc->conn);
		if (f < 0)
			conn_failed(pc, rc->err, "cannot send");
		pc->want_write = f == 1;
	}
	if (!pc->done && (what & EV_READ))
		read_results(pc, rc->err);
	if (pc->done) {
		event_free(pc->ev);
		pc->ev = NULL;
		if (--rc->pending == 0)
			run_settled(rc);
		return;
	}
	arm(pc, rc);
}

/* Sends pc's pipeline for run rc. Returns 1 when it is under way (rc waits
 * for it), 0 when it failed at once (pc done and failed, err set). */
static int run_begin(sq_pgconn *pc, run_ctx *rc)
{
	sq_error cerr;
	pc->done = pc->failed = 0;
	pc->sent_pid = 0;
	pc->fail_msg[0] = '\0';
	if (ensure_conn(pc, &cerr) != SQ_OK) {
		pc->failed = pc->done = 1;
		snprintf(pc->fail_msg, sizeof(pc->fail_msg), "%s", cerr.msg);
		if (rc->err->code == SQ_OK)
			*rc->err = cerr;
		return 0;
	}
	pc->sent_pid = PQbackendPID(pc->conn);
	if (send_pipeline(pc, rc->err))
		return 0;
	int f = PQflush(pc->conn);
	if (f < 0) {
		conn_failed(pc, rc->err, "cannot send");
		return 0;
	}
	pc->want_write = f == 1;
	rc->pending++;
	pc->run = rc;
	if (pc->ev) { /* a run's event ends with it; never an older one */
		event_free(pc->ev);
		pc->ev = NULL;
	}
	arm(pc, rc);
	return 1;
}

/* Starts rc's answer timer, counted from now, when a connection under way
 * has an answer wait. */
static void run_answer_timer(run_ctx *rc)
{
	int answer_wait = 0;
	double now = sq_mono_s();
	for (int i = 0; i < rc->n; i++)
		if (rc->conns[i] && rc->conns[i]->run == rc && rc->conns[i]->answer_wait_s > 0) {
			rc->conns[i]->answer_by = now + rc->conns[i]->answer_wait_s;
			answer_wait = 1;
		}
	if (!answer_wait)
		return;
	rc->answer_ev = evtimer_new(rc->base, on_answer_due, rc);
	if (rc->answer_ev)
		arm_answer(rc);
}

/* The end of rc on every connection: a broken one is dropped, and made
 * again by the next run. */
static void run_end(run_ctx *rc)
{
	if (rc->answer_ev)
		event_free(rc->answer_ev);
	rc->answer_ev = NULL;
	for (int i = 0; i < rc->n; i++) {
		sq_pgconn *pc = rc->conns[i];
		if (pc && pc->run == rc)
			pc->run = NULL;
		if (pc && pc->failed && pc->conn) {
			PQfinish(pc->conn);
			pc->conn = NULL;
		}
	}
}

/* Every connection of rc has answered (or failed): sq_pgconn_run's loop
 * stops; sq_pgconn_start's run ends and says so. */
static void run_settled(run_ctx *rc)
{
	if (!rc->done) {
		event_base_loopbreak(rc->base);
		return;
	}
	run_end(rc);
	sq_pgconn_done_fn done = rc->done;
	sq_pgconn *pc = rc->one[0];
	void *arg = rc->arg;
	sq_error err = rc->own_err;
	free(rc);
	done(pc, &err, arg);
}

sq_status sq_pgconn_run(struct event_base *base, sq_pgconn **conns, int n, sq_error *err)
{
	run_ctx rc = {base, err, 0, conns, n, NULL, NULL, NULL, {NULL}, {SQ_OK, ""}};
	sq_error local;
	if (!err)
		err = &local;
	err->code = SQ_OK;
	err->msg[0] = '\0';
	rc.err = err;
	for (int i = 0; i < n; i++)
		if (conns[i] && conns[i]->qn > 0)
			(void)run_begin(conns[i], &rc);
	/* counted from here: a connect above (several hosts) may have blocked
	 * after the first ones were sent */
	if (rc.pending)
		run_answer_timer(&rc);
	if (rc.pending)
		event_base_dispatch(base);
	run_end(&rc);
	return err->code;
}

void sq_pgconn_start(struct event_base *base, sq_pgconn *pc, sq_pgconn_done_fn done, void *arg)
{
	run_ctx *rc = calloc(1, sizeof(*rc));
	if (!rc) {
		sq_error e;
		pc->failed = pc->done = 1;
		snprintf(pc->fail_msg, sizeof(pc->fail_msg), "shard %s: out of memory",
			 pc->shard_id);
		sq_err(&e, SQ_ENOMEM, "%s", pc->fail_msg);
		done(pc, &e, arg);
		return;
	}
	rc->base = base;
	rc->err = &rc->own_err;
	rc->one[0] = pc;
	rc->conns = rc->one;
	rc->n = 1;
	rc->done = done;
	rc->arg = arg;
	if (pc->qn > 0 && run_begin(pc, rc)) {
		run_answer_timer(rc);
		return;
	}
	run_settled(rc);
}

int sq_pgconn_running(const sq_pgconn *pc)
{
	return pc->run != NULL;
}

void sq_pgconn_abandon(sq_pgconn *pc)
{
	run_ctx *rc = pc->run;
	if (!rc || !rc->done)
		return;
	if (pc->ev) {
		event_free(pc->ev);
		pc->ev = NULL;
	}
	if (!pc->done)
		conn_failed(pc, rc->err, "abandoned (the worker stopped)");
	pc->failed = pc->done = 1;
	run_settled(rc);
}

sq_status sq_pgconn_result_error(sq_pgconn *pc, sq_error *err)
{
	return sq_pgconn_range_error(pc, 0, pc->qn, err);
}

/* Whether the transactions of q[from..to) ended as their results say: each
 * one's Sync came, and no error with it. A result read before its commit
 * is not yet true; a lost connection leaves it in doubt. */
static sq_status range_committed(sq_pgconn *pc, int from, int to, sq_error *err)
{
	int k = 0;
	if (from >= to)
		return SQ_OK; /* no statement: no transaction to confirm */
	while (k < pc->syncs && pc->sync_q[k] <= from)
		k++;
	for (; k < pc->syncs && (k == 0 || pc->sync_q[k - 1] < to); k++) {
		if (k >= pc->syncs_seen) {
			if (pc->fail_msg[0])
				return sq_err(err, SQ_EDB, "%s (before its commit was confirmed)",
					      pc->fail_msg);
			return sq_err(err, SQ_EDB,
				      "shard %s (%s): no answer to the commit of statement %s",
				      pc->shard_id, pc->addr, pc->q[to - 1]->name);
		}
		if (pc->sync_failed[k])
			return sq_err(
				err, SQ_EDB,
				"shard %s (%s): the transaction of statement %s failed at its "
				"commit: %s",
				pc->shard_id, pc->addr, pc->q[to - 1]->name, pc->commit_error);
	}
	return SQ_OK;
}

sq_status sq_pgconn_range_error(sq_pgconn *pc, int from, int to, sq_error *err)
{
	int aborted = 0;
	for (int i = from; i < to && i < pc->nres; i++) {
		PGresult *r = pc->res[i];
		ExecStatusType s = PQresultStatus(r);
		if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
			continue;
		if (s == PGRES_PIPELINE_ABORTED) {
			aborted = 1;
			continue; /* the cause is another result */
		}
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		if (!msg)
			msg = PQresultErrorMessage(r);
		if (state && !strcmp(state, "26000"))
			pc->nprepared = 0; /* the server lost a statement: prepare all again */
		if (state && !strcmp(state, "SQM01"))
			return sq_err(err, SQ_EMOVING, "shard %s: %s; retry shortly", pc->shard_id,
				      msg);
		if (state && !strcmp(state, "SQM02"))
			return sq_err(err, SQ_EMOVED, "shard %s: %s; refresh the partition map",
				      pc->shard_id, msg);
		return sq_err(err, SQ_EDB, "shard %s (%s): statement %s failed: %s", pc->shard_id,
			      pc->addr, pc->q[i]->name, msg);
	}
	if (aborted)
		return sq_err(err, SQ_EDB,
			      "shard %s (%s): pipeline aborted (a statement could not be "
			      "prepared; is the shard's schema up to date? run shardq init)",
			      pc->shard_id, pc->addr);
	if (pc->nres < to && pc->failed && pc->fail_msg[0]) /* why, as the run saw it */
		return sq_err(err, SQ_EDB, "%s", pc->fail_msg);
	if (pc->nres < to)
		return sq_err(err, SQ_EDB, "shard %s (%s): %d of %d results missing", pc->shard_id,
			      pc->addr, to - pc->nres, to - from);
	return range_committed(pc, from, to, err);
}

const char *sq_pgconn_result_detail(sq_pgconn *pc, int i)
{
	if (i < 0 || i >= pc->nres || PQresultStatus(pc->res[i]) != PGRES_FATAL_ERROR)
		return NULL;
	return PQresultErrorField(pc->res[i], PG_DIAG_MESSAGE_DETAIL);
}

const char *sq_pgconn_range_sqlstate(sq_pgconn *pc, int from, int to)
{
	for (int i = from; i < to && i < pc->nres; i++)
		if (PQresultStatus(pc->res[i]) == PGRES_FATAL_ERROR) {
			const char *st = PQresultErrorField(pc->res[i], PG_DIAG_SQLSTATE);
			return st ? st : "XX000";
		}
	return NULL;
}

/* PQexec with a wait for the answer of pc->answer_wait_s at most, the
 * send included (pc->conn is nonblocking): *lost set when it did not come
 * (the connection is then of no more use). The last result, or the first
 * error, as PQexec gives; a COPY's result ends it, as in PQexec. */
static PGresult *exec_within(sq_pgconn *pc, const char *sql, int nparams, const char *const *vals,
			     int *lost)
{
	PGresult *keep = NULL, *r;
	double by = sq_mono_s() + pc->answer_wait_s;
	int sent = nparams ? PQsendQueryParams(pc->conn, sql, nparams, NULL, vals, NULL, NULL, 0)
			   : PQsendQuery(pc->conn, sql);
	if (!sent)
		return NULL;
	for (;;) {
		int unsent = PQflush(pc->conn);
		if (unsent < 0)
			return PQgetResult(pc->conn);
		while (!unsent && !PQisBusy(pc->conn)) {
			if (!(r = PQgetResult(pc->conn)))
				return keep;
			ExecStatusType rs = PQresultStatus(r);
			if (rs == PGRES_COPY_IN || rs == PGRES_COPY_OUT || rs == PGRES_COPY_BOTH) {
				PQclear(keep);
				return r;
			}
			if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
				PQclear(r);
				continue;
			}
			PQclear(keep);
			keep = r;
		}
		double left = by - sq_mono_s();
		struct pollfd p = {PQsocket(pc->conn), POLLIN | (unsent ? POLLOUT : 0), 0};
		if (left <= 0 || poll(&p, 1, (int)ceil(left * 1000)) == 0) {
			if (sq_mono_s() < by)
				continue;
			PQclear(keep);
			*lost = 1;
			return NULL;
		}
		if (!PQconsumeInput(pc->conn)) {
			/* the connection broke: PQgetResult says why */
			PGresult *e = PQgetResult(pc->conn);
			PQclear(keep);
			return e;
		}
	}
}

PGresult *sq_pgconn_exec(sq_pgconn *pc, const char *sql, int nparams, const char *const *vals,
			 sq_error *err)
{
	PGresult *r;
	ExecStatusType s;
	char msg[512];
	if (ensure_conn(pc, err) != SQ_OK)
		return NULL;
	PQexitPipelineMode(pc->conn);
	if (pc->answer_wait_s > 0) {
		int lost = 0;
		PQsetnonblocking(pc->conn, 1);
		r = exec_within(pc, sql, nparams, vals, &lost);
		if (lost) {
			PQfinish(pc->conn);
			pc->conn = NULL;
			pc->nprepared = 0;
			answer_lost(pc, NULL);
			/* this one statement's error: whatever err held before */
			sq_err(err, SQ_ECONN, "%s", pc->fail_msg);
			return NULL;
		}
	} else {
		PQsetnonblocking(pc->conn, 0);
		r = nparams ? PQexecParams(pc->conn, sql, nparams, NULL, vals, NULL, NULL, 0)
			    : PQexec(pc->conn, sql);
	}
	PQsetnonblocking(pc->conn, 1);
	PQenterPipelineMode(pc->conn);
	s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
		return r;
	if (r) {
		const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		snprintf(msg, sizeof(msg), "%s", m ? m : PQresultErrorMessage(r));
		PQclear(r);
	} else {
		short_pq_error(PQerrorMessage(pc->conn), msg, sizeof(msg));
	}
	sq_err(err, PQstatus(pc->conn) == CONNECTION_OK ? SQ_EDB : SQ_ECONN, "shard %s (%s): %s",
	       pc->shard_id, pc->addr, msg);
	return NULL;
}

/* testdb.c - per-suite databases on the local shards, and small helpers. */
#define _GNU_SOURCE /* memmem */
#include "testdb.h"
#include "client.h"
#include "support.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

int testdb_ports(int *ports, int max)
{
	const char *env = getenv("SHARDQ_TEST_PORTS");
	char buf[256];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", env && *env ? env : "55431,55432,55433,55434");
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max;
	     t = strtok_r(NULL, ",", &save))
		ports[n++] = atoi(t);
	return n;
}

static PGconn *connect_db(int port, const char *db)
{
	char dsn[256];
	snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d dbname=%s user=postgres", port, db);
	PGconn *c = PQconnectdb(dsn);
	if (PQstatus(c) != CONNECTION_OK)
		ck_abort_msg(
			"cannot connect to the test shard on port %d (%s): %s; start the shards "
			"with scripts/shards start",
			port, db, PQerrorMessage(c));
	return c;
}

static void exec_or_die(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		ck_abort_msg("%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
}

/* testdb_scalar's connections, one per shard of the open testdb, kept
 * between calls: tests poll the shards often, and a new backend per poll
 * (a fork on the server) loads a busy machine for nothing. */
static struct {
	pthread_mutex_t mu;
	PGconn *c[16];
	char db[64];
} scalar_conns = {PTHREAD_MUTEX_INITIALIZER, {NULL}, ""};

static void scalar_conns_close(void)
{
	for (int i = 0; i < 16; i++)
		if (scalar_conns.c[i]) {
			PQfinish(scalar_conns.c[i]);
			scalar_conns.c[i] = NULL;
		}
	scalar_conns.db[0] = '\0';
}

char *testdb_ini(testdb *t, const double *weights, const char *extra_cluster)
{
	size_t cap = 4096 + strlen(t->extra) + (extra_cluster ? strlen(extra_cluster) : 0);
	char *ini = malloc(cap);
	int k = snprintf(ini, cap, "[cluster]\npartitions = %u\n%s\n", t->partitions,
			 extra_cluster ? extra_cluster : "");
	for (int i = 0; i < t->nshards; i++)
		k += snprintf(ini + k, cap - (size_t)k,
			      "[shard s%d]\ndsn = host=127.0.0.1 port=%d dbname=%s user=postgres\n"
			      "weight = %g\n\n",
			      i + 1, t->ports[i], t->db, weights ? weights[i] : 1.0);
	snprintf(ini + k, cap - (size_t)k, "%s", t->extra);
	return ini;
}

char *testdb_name(char *out, size_t len, const char *db)
{
	const char *part = getenv("SHARDQ_TEST_PART");
	int k, n;
	if (part && sscanf(part, "%d/%d", &k, &n) == 2 && n > 1)
		snprintf(out, len, "%s_p%d", db, k);
	else
		snprintf(out, len, "%s", db);
	return out;
}

/* ---- the database pool ------------------------------------------------------
 * A case's database is not dropped and made again for the next case:
 * CREATE DATABASE copies template1 (some 300 files) and DROP DATABASE scans
 * shared_buffers, 0.2-0.5 s a shard each, a fifth of the suites' time here.
 * A closed case's database goes into the suite run's pool instead (renamed
 * sqtpool_<runner pid>_<oid>); the next open takes one from the pool and
 * empties it (every schema dropped, pg_stat_statements reset for it), which
 * leaves it as a new database would be. run_suite drops the pool at the end. */

static long pool_owner(void)
{
	const char *run = getenv("SQT_RUNNER_PID");
	return run && *run ? atol(run) : (long)getpid();
}

void testdb_pool_begin(void)
{
	char pid[32];
	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	setenv("SQT_RUNNER_PID", pid, 1);
}

/* Ends every session on database db but this one's (waiting up to 5 s
 * for each to go); 1 once none is left. */
static int end_sessions(PGconn *c, const char *db)
{
	const char *params[1] = {db};
	PGresult *r =
		PQexecParams(c,
			     "SELECT count(*) FILTER (WHERE NOT pg_terminate_backend(pid, 5000)) "
			     "FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			     1, NULL, params, NULL, NULL, 0);
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && atoi(PQgetvalue(r, 0, 0)) == 0;
	PQclear(r);
	return ok;
}

/* Renames database from to `to` once no session holds it (a process a case
 * started may still be on its way out); 1 on success. */
static int rename_db(PGconn *c, const char *from, const char *to)
{
	char sql[256];
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" RENAME TO \"%s\"", from, to);
	for (int tries = 0; tries < 20; tries++) {
		end_sessions(c, from);
		PGresult *r = PQexec(c, sql);
		int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
		if (ok)
			return 1;
		usleep(50 * 1000);
	}
	return 0;
}

static int db_exists(PGconn *c, const char *db)
{
	const char *params[1] = {db};
	PGresult *r = PQexecParams(c, "SELECT 1 FROM pg_database WHERE datname = $1", 1, NULL,
				   params, NULL, NULL, 0);
	int yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	PQclear(r);
	return yes;
}

static void drop_db(PGconn *c, const char *db)
{
	char sql[160];
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", db);
	exec_or_die(c, sql);
}

/* The pool's databases on one shard (a result of datname rows). */
static PGresult *pool_list(PGconn *c)
{
	char pattern[64];
	snprintf(pattern, sizeof(pattern), "sqtpool\\_%ld\\_%%", pool_owner());
	const char *params[1] = {pattern};
	return PQexecParams(c, "SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY 1",
			    1, NULL, params, NULL, NULL, 0);
}

/* Database db on the shard c is connected to, empty: one from the pool
 * renamed (1), else a new one (0). A database of that name left by a
 * case that failed is dropped first. */
static int take_db(PGconn *c, const char *db)
{
	if (db_exists(c, db))
		drop_db(c, db);
	PGresult *r = pool_list(c);
	int taken = 0;
	for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r) && !taken; i++)
		taken = rename_db(c, PQgetvalue(r, i, 0), db);
	PQclear(r);
	if (!taken) {
		char sql[160];
		snprintf(sql, sizeof(sql), "CREATE DATABASE \"%s\"", db);
		exec_or_die(c, sql);
	}
	return taken;
}

/* A pooled database made as a new one is: its schemas dropped (the
 * extension with public), public and the extension made again, its
 * statement counts reset. */
static void empty_db(PGconn *c, const char *db)
{
	char sql[160];
	exec_or_die(c, "SET client_min_messages = warning"); /* no "drop cascades" notes */
	exec_or_die(c, "DO $$DECLARE s name; BEGIN "
		       "FOR s IN SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
		       "AND nspname <> 'information_schema' LOOP "
		       "EXECUTE format('DROP SCHEMA %I CASCADE', s); END LOOP; END$$");
	exec_or_die(c, "CREATE SCHEMA public");
	snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" RESET ALL", db);
	exec_or_die(c, sql);
	exec_or_die(c, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
	exec_or_die(c, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database "
		       "WHERE datname = current_database()), 0)");
}

/* Database db on one shard back into the pool (dropped if it cannot be). */
static void give_back(PGconn *c, const char *db)
{
	const char *params[1] = {db};
	PGresult *r = PQexecParams(c, "SELECT oid FROM pg_database WHERE datname = $1", 1, NULL,
				   params, NULL, NULL, 0);
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		char to[64];
		snprintf(to, sizeof(to), "sqtpool_%ld_%s", pool_owner(), PQgetvalue(r, 0, 0));
		if (!rename_db(c, db, to))
			drop_db(c, db);
	}
	PQclear(r);
}

/* Sessions on the shards' postgres databases, one a shard, kept by the
 * process that made them for its opens and closes (a new backend is a
 * fork on the server, 25 ms of its CPU here). A forked child starts its
 * own: the parent's stay its parent's (kept reachable, never used). */
static struct {
	pid_t pid;
	int port[16];
	PGconn *c[16], *inherited[16];
} admin;

/* The session on the postgres database of the shard on port, or NULL
 * when it does not answer (a shard a test stopped). */
static PGconn *admin_conn(int port)
{
	if (admin.pid != getpid()) {
		memcpy(admin.inherited, admin.c, sizeof(admin.c));
		memset(admin.c, 0, sizeof(admin.c));
		admin.pid = getpid();
	}
	int k = 0;
	while (k < 16 && admin.c[k] && admin.port[k] != port)
		k++;
	if (k == 16)
		ck_abort_msg("more than 16 test shards");
	if (admin.c[k] && PQstatus(admin.c[k]) == CONNECTION_OK)
		return admin.c[k];
	if (admin.c[k])
		PQfinish(admin.c[k]); /* the shard was restarted */
	char dsn[128];
	snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d dbname=postgres user=postgres", port);
	admin.port[k] = port;
	admin.c[k] = PQconnectdb(dsn);
	if (PQstatus(admin.c[k]) == CONNECTION_OK)
		return admin.c[k];
	PQfinish(admin.c[k]);
	admin.c[k] = NULL;
	return NULL;
}

/* The same, failing the test when the shard does not answer. */
static PGconn *admin_or_die(int port)
{
	PGconn *c = admin_conn(port);
	if (!c)
		connect_db(port, "postgres"); /* fails, saying why */
	return c;
}

/* fn(session on its postgres database, db) on the first n test shards
 * that answer (a shard a test stopped is skipped); n < 0: all of them. */
static void on_shards(int n, void (*fn)(PGconn *, const char *), const char *db)
{
	int ports[16], have = testdb_ports(ports, 16);
	for (int i = 0; i < have && (n < 0 || i < n); i++) {
		PGconn *c = admin_conn(ports[i]);
		if (c)
			fn(c, db);
	}
}

static void on_every_shard(void (*fn)(PGconn *, const char *), const char *db)
{
	on_shards(-1, fn, db);
}

static void drop_pool(PGconn *c, const char *unused)
{
	(void)unused;
	PGresult *r = pool_list(c);
	for (int k = 0; PQresultStatus(r) == PGRES_TUPLES_OK && k < PQntuples(r); k++)
		drop_db(c, PQgetvalue(r, k, 0));
	PQclear(r);
}

void testdb_pool_end(void)
{
	on_every_shard(drop_pool, NULL);
}

/* ---- opening and closing -------------------------------------------------- */

void testdb_open_w(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra,
		   const double *weights)
{
	sq_error err;
	int have = testdb_ports(t->ports, 16);
	memset(t->db, 0, sizeof(t->db));
	testdb_name(t->db, sizeof(t->db), db);
	db = t->db;
	ck_assert_msg(have >= nshards, "need %d shards, SHARDQ_TEST_PORTS has %d", nshards, have);
	t->nshards = nshards;
	t->partitions = partitions;
	t->extra = strdup(extra ? extra : "");
	pthread_mutex_lock(&scalar_conns.mu);
	scalar_conns_close();
	pthread_mutex_unlock(&scalar_conns.mu);
	pthread_mutex_lock(&scalar_conns.mu);
	for (int i = 0; i < nshards; i++) {
		int pooled = take_db(admin_or_die(t->ports[i]), db);
		PGconn *c = connect_db(t->ports[i], db);
		if (pooled)
			empty_db(c, db);
		else
			exec_or_die(c, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
		exec_or_die(c, "RESET client_min_messages");
		scalar_conns.c[i] = c; /* testdb_scalar's from now on */
	}
	snprintf(scalar_conns.db, sizeof(scalar_conns.db), "%s", db);
	pthread_mutex_unlock(&scalar_conns.mu);
	t->ini = testdb_ini(t, weights, NULL);
	if (sq_config_parse(t->ini, db, &t->cfg, &err) != SQ_OK)
		ck_abort_msg("test config: %s", err.msg);
	if (sq_client_open(t->cfg, 1, &t->client, &err) != SQ_OK)
		ck_abort_msg("open: %s", err.msg);
	/* the migrations' DDL under any load: no deadline for their answers
	 * (the server's statement_timeout still bounds each statement) */
	double wait = sq_client_answer_wait_of(t->client);
	sq_client_answer_wait(t->client, 0);
	int created;
	if (sq_init(t->client, &created, &err) != SQ_OK)
		ck_abort_msg("init: %s", err.msg);
	sq_client_answer_wait(t->client, wait);
	ck_assert_int_eq(created, 1);
}

void testdb_open(testdb *t, const char *db, int nshards, unsigned partitions, const char *extra)
{
	testdb_open_w(t, db, nshards, partitions, extra, NULL);
}

sq_client *testdb_client(testdb *t)
{
	sq_client *c;
	sq_error err;
	if (sq_client_open(t->cfg, 0, &c, &err) != SQ_OK)
		ck_abort_msg("open: %s", err.msg);
	return c;
}

void testdb_release(testdb *t)
{
	pthread_mutex_lock(&scalar_conns.mu);
	scalar_conns_close();
	pthread_mutex_unlock(&scalar_conns.mu);
	sq_client_close(t->client);
	sq_config_free(t->cfg);
	free(t->ini);
	free(t->extra);
	memset(t, 0, sizeof(*t));
}

void testdb_drop(const char *db)
{
	on_every_shard(drop_db, db);
}

void testdb_close(testdb *t)
{
	char db[sizeof(t->db)];
	int n = t->nshards;
	memcpy(db, t->db, sizeof(db));
	testdb_release(t);
	/* the database goes into the pool on each of its shards: not left
	 * behind, since the shards'
	 * autovacuum launcher visits every database each naptime, and a
	 * suite's worth of leftovers kept a third of this machine busy */
	if (db[0])
		on_shards(n, give_back, db);
}

PGconn *testdb_pg(testdb *t, int shard)
{
	return connect_db(t->ports[shard], t->db);
}

long long testdb_scalar(testdb *t, int shard, const char *sql)
{
	long long v = -1;
	pthread_mutex_lock(&scalar_conns.mu);
	if (strcmp(scalar_conns.db, t->db)) {
		scalar_conns_close();
		snprintf(scalar_conns.db, sizeof(scalar_conns.db), "%s", t->db);
	}
	PGconn **c = &scalar_conns.c[shard];
	PGresult *r = NULL;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!*c || PQstatus(*c) != CONNECTION_OK) {
			if (*c)
				PQfinish(*c);
			*c = testdb_pg(t, shard);
		}
		r = PQexec(*c, sql);
		if (PQresultStatus(r) == PGRES_TUPLES_OK || PQstatus(*c) == CONNECTION_OK)
			break;
		PQclear(r); /* the connection broke (a test ended its session): again */
		r = NULL;
	}
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(*c));
		PQclear(r);
		pthread_mutex_unlock(&scalar_conns.mu);
		ck_abort_msg("%s: %s", sql, msg);
	}
	if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
		v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	pthread_mutex_unlock(&scalar_conns.mu);
	return v;
}

long long testdb_sum(testdb *t, const char *sql)
{
	long long s = 0;
	for (int i = 0; i < t->nshards; i++)
		s += testdb_scalar(t, i, sql);
	return s;
}

char *testdb_live_report(testdb *t, char *buf, size_t len)
{
	size_t k = 0;
	buf[0] = '\0';
	for (int s = 0; s < t->nshards && k + 1 < len; s++) {
		PGconn *c = testdb_pg(t, s);
		PGresult *r = PQexec(c, "SELECT task, status, count(*), "
					"coalesce(max(worker), '-') FROM shardq.jobs WHERE "
					"status IN ('ready','starting','running') GROUP BY 1, 2 "
					"ORDER BY 1, 2");
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			k += (size_t)snprintf(buf + k, len - k, "s%d: %s", s + 1,
					      PQerrorMessage(c));
		} else {
			for (int i = 0; i < PQntuples(r) && k + 1 < len; i++)
				k += (size_t)snprintf(buf + k, len - k,
						      "  s%d %s %s %s (a worker: %s)\n", s + 1,
						      PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
						      PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
		}
		PQclear(r);
		PQfinish(c);
	}
	if (k == 0)
		snprintf(buf, len, "  (no live rows)\n");
	return buf;
}

static char tmpdir[512];

const char *testdb_tmpdir(void)
{
	if (!tmpdir[0]) {
		const char *base = getenv("TMPDIR");
		snprintf(tmpdir, sizeof(tmpdir), "%s/sqt-%d-XXXXXX", base && *base ? base : "/tmp",
			 (int)getpid());
		if (!mkdtemp(tmpdir))
			ck_abort_msg("mkdtemp %s failed", tmpdir);
	}
	return tmpdir;
}

char *testdb_path(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", testdb_tmpdir(), name);
	return out;
}

void testdb_tmpdir_remove(void)
{
	if (!tmpdir[0])
		return;
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char p[1024];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(tmpdir);
	tmpdir[0] = '\0';
}

double testdb_stall_s(void)
{
	const char *e = getenv("SHARDQ_TEST_STALL");
	double v = e ? atof(e) : 0;
	return v > 0 ? v : 90;
}

static int env_has(const char *env, size_t len, const char *want)
{
	size_t wl = strlen(want);
	int prefix = wl && want[wl - 1] == '*';
	for (size_t i = 0; i < len; i += strlen(env + i) + 1)
		if (prefix ? !strncmp(env + i, want, wl - 1) : !strcmp(env + i, want))
			return 1;
	return 0;
}

static void read_small(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t k = fd < 0 ? -1 : read(fd, out, len - 1);
	if (fd >= 0)
		close(fd);
	out[k > 0 ? k : 0] = '\0';
	for (ssize_t i = 0; i < k - 1; i++)
		if (!out[i])
			out[i] = ' ';
}

int testdb_procs(const char *want, testdb_proc *v, int max)
{
	static char env[1 << 18];
	int found = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		char *end, path[300];
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		size_t len = 0;
		ssize_t r;
		while (len < sizeof(env) - 1 &&
		       (r = read(fd, env + len, sizeof(env) - 1 - len)) > 0)
			len += (size_t)r;
		close(fd);
		env[len] = '\0';
		if (!env_has(env, len, want))
			continue;
		if (found < max) {
			testdb_proc *p = &v[found];
			char stat[512];
			p->pid = (int)pid;
			p->ppid = 0;
			snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
			read_small(path, stat, sizeof(stat));
			char *paren = strrchr(stat, ')'), st;
			if (paren)
				sscanf(paren + 1, " %c %d", &st, &p->ppid);
			snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
			read_small(path, p->cmd, sizeof(p->cmd));
		}
		found++;
	}
	closedir(d);
	return found;
}

void testdb_procs_describe(const testdb_proc *v, int n, char *out, size_t len)
{
	size_t at = 0;
	out[0] = '\0';
	for (int i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "  pid %d (parent %d): %s\n", v[i].pid,
				       v[i].ppid, v[i].cmd);
}

/* ---- a proxy in front of one shard (testdb.h) ------------------------------ */

typedef struct proxy_pair {
	int c, s, seen;
} proxy_pair;

static void write_all(int fd, const char *p, ssize_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, (size_t)n);
		if (w <= 0)
			return;
		p += w, n -= w;
	}
}

static void *proxy_main(void *arg)
{
	testdb_proxy *px = arg;
	proxy_pair v[32];
	int n = 0;
	static _Thread_local char buf[1 << 16]; /* one per proxy */
	while (!atomic_load(&px->stop)) {
		struct pollfd fds[1 + 2 * 32];
		int k = 0, hole = atomic_load(&px->hole), freeze = atomic_load(&px->freeze);
		atomic_store(&px->freeze_seen, freeze);
		if (freeze) { /* stuck: what it holds stays open, nothing passes */
			usleep(20000);
			continue;
		}
		if (atomic_load(&px->zombie)) { /* what it holds dies unseen */
			for (int i = 0; i < n; i++) {
				if (v[i].c >= 0 && px->nzombies < 64)
					px->zombies[px->nzombies++] = v[i].c;
				else if (v[i].c >= 0)
					close(v[i].c);
				close(v[i].s);
			}
			n = 0;
			atomic_store(&px->zombie, 0);
		}
		if (hole) { /* gone: what it held is cut, what comes waits */
			for (int i = 0; i < n; i++) {
				if (v[i].c >= 0)
					close(v[i].c);
				close(v[i].s);
			}
			n = 0;
		}
		atomic_store(&px->hole_seen, hole);
		int live = n;
		fds[k++] = (struct pollfd){hole ? -1 : px->lfd, POLLIN, 0};
		for (int i = 0; i < live; i++) {
			fds[k++] = (struct pollfd){v[i].c, POLLIN, 0};
			fds[k++] = (struct pollfd){v[i].s, POLLIN, 0};
		}
		if (poll(fds, (nfds_t)k, 50) <= 0)
			continue;
		for (int i = 0; i < live; i++) {
			struct pollfd *fc = &fds[1 + 2 * i], *fs = &fds[2 + 2 * i];
			ssize_t r;
			if (v[i].c >= 0 && fc->revents) {
				r = read(v[i].c, buf, sizeof(buf));
				if (r <= 0) {
					close(v[i].c);
					close(v[i].s);
					v[i].c = v[i].s = -1;
					continue;
				}
				if (atomic_load(&px->armed) &&
				    memmem(buf, (size_t)r, "sq_enqueue", 10))
					v[i].seen = 1;
				write_all(v[i].s, buf, r);
			}
			if (v[i].s >= 0 && fs->revents) {
				r = read(v[i].s, buf, sizeof(buf));
				if (r <= 0) {
					if (v[i].c >= 0)
						close(v[i].c);
					close(v[i].s);
					v[i].c = v[i].s = -1;
				} else if (v[i].c >= 0 && v[i].seen && atomic_load(&px->armed)) {
					shutdown(v[i].c, SHUT_RDWR);
					close(v[i].c);
					v[i].c = -1;
					atomic_store(&px->armed, 0);
					atomic_fetch_add(&px->cuts, 1);
				} else if (v[i].c >= 0) {
					write_all(v[i].c, buf, r);
				}
			}
		}
		if ((fds[0].revents & POLLIN) && n < 32) {
			struct sockaddr_in sa = {.sin_family = AF_INET,
						 .sin_port = htons((uint16_t)px->target)};
			int c = accept(px->lfd, NULL, NULL), s = socket(AF_INET, SOCK_STREAM, 0);
			sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			if (c >= 0 && s >= 0 && !atomic_load(&px->refuse) &&
			    !connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
				v[n++] = (proxy_pair){c, s, 0};
			} else {
				if (c >= 0)
					close(c);
				if (s >= 0)
					close(s);
			}
		}
		int w = 0;
		for (int i = 0; i < n; i++)
			if (v[i].s >= 0)
				v[w++] = v[i];
		n = w;
	}
	for (int i = 0; i < n; i++) {
		if (v[i].c >= 0)
			close(v[i].c);
		close(v[i].s);
	}
	return NULL;
}

void testdb_proxy_start(testdb_proxy *px, int target)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
	socklen_t len = sizeof(sa);
	memset(px, 0, sizeof(*px));
	px->target = target;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	px->lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(px->lfd, 0);
	ck_assert_int_eq(bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(px->lfd, 16), 0);
	ck_assert_int_eq(getsockname(px->lfd, (struct sockaddr *)&sa, &len), 0);
	px->port = ntohs(sa.sin_port);
	ck_assert_int_eq(pthread_create(&px->th, NULL, proxy_main, px), 0);
}

void testdb_proxy_hole(testdb_proxy *px, int on)
{
	atomic_store(&px->hole, on);
	while (atomic_load(&px->hole_seen) != on)
		usleep(1000);
}

void testdb_proxy_freeze(testdb_proxy *px, int on)
{
	atomic_store(&px->freeze, on);
	while (atomic_load(&px->freeze_seen) != on)
		usleep(1000);
}

void testdb_proxy_zombie(testdb_proxy *px)
{
	atomic_store(&px->zombie, 1);
	while (atomic_load(&px->zombie))
		usleep(1000);
}

void testdb_proxy_stop(testdb_proxy *px)
{
	atomic_store(&px->stop, 1);
	pthread_join(px->th, NULL);
	close(px->lfd);
	for (int i = 0; i < px->nzombies; i++)
		close(px->zombies[i]);
}

static void *hole_main(void *arg)
{
	testdb_hole *h = arg;
	while (!atomic_load(&h->stop)) {
		int n = atomic_load(&h->n);
		if (atomic_load(&h->cut)) {
			for (int i = 0; i < n; i++)
				close(h->fds[i]);
			atomic_store(&h->n, n = 0);
			atomic_store(&h->cut, 0);
		}
		struct pollfd p = {h->lfd, POLLIN, 0};
		if (poll(&p, 1, 20) <= 0)
			continue;
		int fd = accept(h->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		atomic_fetch_add(&h->took, 1);
		if (n < (int)(sizeof(h->fds) / sizeof(h->fds[0]))) {
			h->fds[n] = fd;
			atomic_store(&h->n, n + 1);
		} else {
			close(fd);
		}
	}
	for (int i = 0; i < atomic_load(&h->n); i++)
		close(h->fds[i]);
	return NULL;
}

void testdb_hole_start(testdb_hole *h, int backlog)
{
	memset(h, 0, sizeof(*h));
	h->lfd = testdb_black_hole(backlog, &h->port);
	ck_assert_int_eq(pthread_create(&h->th, NULL, hole_main, h), 0);
}

void testdb_hole_stop(testdb_hole *h)
{
	atomic_store(&h->stop, 1);
	pthread_join(h->th, NULL);
	close(h->lfd);
}

static char fp_go[600], fp_env[700];

static void *call_main(void *arg)
{
	testdb_call *c = arg;
	c->fn(c->arg);
	atomic_store(&c->done, 1);
	return NULL;
}

void testdb_call_start(testdb_call *c, void (*fn)(void *arg), void *arg)
{
	c->fn = fn;
	c->arg = arg;
	atomic_store(&c->done, 0);
	ck_assert_int_eq(pthread_create(&c->th, NULL, call_main, c), 0);
}

double testdb_call_wait(testdb_call *c, const char *what)
{
	double since = test_now_s();
	while (!atomic_load(&c->done)) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%s: not returned after %.0fs", what, testdb_stall_s());
		usleep(20000);
	}
	pthread_join(c->th, NULL);
	return test_now_s() - since;
}

double testdb_call_within(void (*fn)(void *arg), void *arg, const char *what)
{
	testdb_call c;
	testdb_call_start(&c, fn, arg);
	return testdb_call_wait(&c, what);
}

const char *testdb_failpoint_hold(const char *name)
{
	char reached[640];
	testdb_path(fp_go, sizeof(fp_go), "failpoint-go");
	snprintf(reached, sizeof(reached), "%s.reached", fp_go);
	unlink(fp_go);
	unlink(reached);
	snprintf(fp_env, sizeof(fp_env), "%s:%s", name, fp_go);
	setenv("SHARDQ_FAILPOINT_WAIT", fp_env, 1);
	snprintf(fp_env, sizeof(fp_env), "SHARDQ_FAILPOINT_WAIT=%s:%s", name, fp_go);
	return fp_env;
}

void testdb_failpoint_await(const char *what)
{
	char reached[640];
	snprintf(reached, sizeof(reached), "%s.reached", fp_go);
	double since = test_now_s();
	while (access(reached, F_OK) != 0) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%s: not at its failpoint (%s) after %.0fs", what, fp_env,
			      testdb_stall_s());
		usleep(10000);
	}
}

void testdb_failpoint_go(void)
{
	int fd = open(fp_go, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	unsetenv("SHARDQ_FAILPOINT_WAIT");
}

char *testdb_ini_sub(const char *ini, const char *from, const char *to)
{
	const char *at = strstr(ini, from);
	ck_assert_msg(at != NULL, "no '%s' in the config", from);
	char *out = malloc(strlen(ini) - strlen(from) + strlen(to) + 1);
	ck_assert_ptr_nonnull(out);
	sprintf(out, "%.*s%s%s", (int)(at - ini), ini, to, at + strlen(from));
	return out;
}

char *testdb_ini_via(const char *ini, int port, int via)
{
	char from[64], to[64];
	snprintf(from, sizeof(from), "port=%d ", port);
	snprintf(to, sizeof(to), "port=%d ", via);
	return testdb_ini_sub(ini, from, to);
}

int testdb_black_hole(int backlog, int *port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, backlog), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

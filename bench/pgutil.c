/* pgutil.c - blocking libpq helpers with messages that name the server. */
#include "pgutil.h"
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void first_line(const char *m, char *out, size_t outlen)
{
	size_t n = strcspn(m, "\n");
	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, m, n);
	out[n] = '\0';
}

static void quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

PGconn *pg_connect(const char *host, int port, const char *db, char *err, size_t errlen)
{
	char dsn[512], msg[400];
	snprintf(dsn, sizeof(dsn),
		 "host=%s port=%d dbname=%s user=postgres connect_timeout=10 "
		 "application_name=shardq-bench",
		 host, port, db);
	PGconn *c = PQconnectdb(dsn);
	if (PQstatus(c) != CONNECTION_OK) {
		first_line(PQerrorMessage(c), msg, sizeof(msg));
		snprintf(err, errlen,
			 "cannot connect to %s:%d database %s: %s; are the shards running "
			 "(bench/run starts them; scripts/shards status)?",
			 host, port, db, msg);
		PQfinish(c);
		return NULL;
	}
	/* NOTICEs (DROP DATABASE IF EXISTS ...) are not for the reader */
	PQsetNoticeProcessor(c, quiet_notice, NULL);
	return c;
}

PGresult *pg_query(PGconn *c, const char *sql, int nparams, const char *const *vals, char *err,
		   size_t errlen)
{
	char msg[400];
	PGresult *r =
		nparams ? PQexecParams(c, sql, nparams, NULL, vals, NULL, NULL, 0) : PQexec(c, sql);
	ExecStatusType s = PQresultStatus(r);
	if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
		return r;
	first_line(PQerrorMessage(c), msg, sizeof(msg));
	snprintf(err, errlen, "%s:%s: %.120s%s: %s", PQhost(c), PQport(c), sql,
		 strlen(sql) > 120 ? "..." : "", msg);
	PQclear(r);
	return NULL;
}

int pg_exec(PGconn *c, const char *sql, char *err, size_t errlen)
{
	PGresult *r = pg_query(c, sql, 0, NULL, err, errlen);
	if (!r)
		return -1;
	PQclear(r);
	return 0;
}

long long pg_scalar(PGconn *c, const char *sql, char *err, size_t errlen)
{
	PGresult *r = pg_query(c, sql, 0, NULL, err, errlen);
	long long v = -1;
	if (!r)
		return -1;
	if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

int pg_drop_database(const char *host, int port, const char *db, char *err, size_t errlen)
{
	char sql[256];
	PGconn *c = pg_connect(host, port, "postgres", err, errlen);
	int rc;
	if (!c)
		return -1;
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", db);
	rc = pg_exec(c, sql, err, errlen);
	PQfinish(c);
	return rc;
}

int pg_fresh_database(const char *host, int port, const char *db, char *err, size_t errlen)
{
	char sql[256];
	PGconn *c = pg_connect(host, port, "postgres", err, errlen);
	if (!c)
		return -1;
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", db);
	if (pg_exec(c, sql, err, errlen)) {
		PQfinish(c);
		return -1;
	}
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", db);
	if (pg_exec(c, sql, err, errlen)) {
		PQfinish(c);
		return -1;
	}
	PQfinish(c);
	if (!(c = pg_connect(host, port, db, err, errlen)))
		return -1;
	/* statement figures for the profile; harmless if not preloaded */
	PGresult *r = PQexec(c, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
	PQclear(r);
	PQfinish(c);
	return 0;
}

int pg_postmaster_pid(PGconn *c)
{
	char err[256];
	long long be = pg_scalar(c, "SELECT pg_backend_pid()", err, sizeof(err));
	if (be <= 0)
		return -1;
	return cpu_parent_of((int)be);
}

int pg_checkpoint(const char *host, int port, char *err, size_t errlen)
{
	PGconn *c = pg_connect(host, port, "postgres", err, errlen);
	int rc;
	if (!c)
		return -1;
	rc = pg_exec(c, "CHECKPOINT", err, errlen);
	PQfinish(c);
	return rc;
}

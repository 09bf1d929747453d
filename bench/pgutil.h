/* pgutil.h - small blocking libpq helpers for the harness (set-up, preload,
 * baselines, accounting); the queue itself is driven through libshardq. */
#ifndef BENCH_PGUTIL_H
#define BENCH_PGUTIL_H

#include <libpq-fe.h>
#include <stddef.h>

/* Connects as user postgres; NULL with a message naming the server. */
PGconn *pg_connect(const char *host, int port, const char *db, char *err, size_t errlen);
/* Runs a statement; 0, or -1 with the server's message. */
int pg_exec(PGconn *c, const char *sql, char *err, size_t errlen);
/* Runs a query; the result, or NULL with a message. PQclear() it. */
PGresult *pg_query(PGconn *c, const char *sql, int nparams, const char *const *vals, char *err,
		   size_t errlen);
/* One number from a query; -1 on error. */
long long pg_scalar(PGconn *c, const char *sql, char *err, size_t errlen);
/* Drops (forcing connections out) and creates the database, with
 * pg_stat_statements in it; 0 or -1. */
int pg_fresh_database(const char *host, int port, const char *db, char *err, size_t errlen);
/* Drops the database if it exists; 0 or -1. */
int pg_drop_database(const char *host, int port, const char *db, char *err, size_t errlen);
/* The server's postmaster pid, from a backend's parent in /proc; -1 when the
 * server is not on this machine (or not readable). */
int pg_postmaster_pid(PGconn *c);
/* CHECKPOINT, so a phase does not inherit the last one's dirty pages. */
int pg_checkpoint(const char *host, int port, char *err, size_t errlen);

#endif

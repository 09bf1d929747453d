/* daemon.h - shardqd in front of the bench shards, for a phase whose
 * workers (or producers) go through HTTP: the bench writes its config (the
 * cluster's, plus [daemon] and one token with every scope), starts it, reads
 * its port from its "listening on" line, scrapes GET /metrics at the end,
 * and stops it with SIGTERM. */
#ifndef BENCH_DAEMON_H
#define BENCH_DAEMON_H

#include "result.h"
#include "scenario.h"

#include <sys/types.h>

typedef struct bench_daemon {
	pid_t pid; /* 0: not running */
	int port;
	int out_fd;      /* its stdout (the "listening on" line) */
	char token[72];  /* the bearer token (hex) */
	char path[1024]; /* the binary */
	double cpu0;     /* its CPU when the phase's measurement began */
} bench_daemon;

/* The shardqd binary: $SHARDQ_BENCH_SHARDQD, else the one built with the
 * bench (the build's shardqd target), else shardqd next to the build dir of
 * this program. */
const char *daemon_binary(char *out, size_t outlen);

/* Writes OUT_DIR/shardqd.ini from the library config (lib_config) and the
 * scenario's [daemon] keys, starts shardqd (its stderr appended to
 * OUT_DIR/shardqd.log) and waits for its port. 0, or -1 with a message. */
int daemon_start(bench_daemon *d, const scenario *sc, const char *lib_config, const char *out_dir,
		 char *err, size_t errlen);

/* utime + stime of the running daemon, in seconds; -1 if unreadable. */
double daemon_cpu_s(const bench_daemon *d);

/* GET /metrics into st (the counters this bench reports). 0 or -1. */
int daemon_scrape(const bench_daemon *d, daemon_stats *st, char *err, size_t errlen);

/* SIGTERM, then waits up to wait_s (SIGKILL after). 0 if it exited 0. */
int daemon_stop(bench_daemon *d, double wait_s, char *err, size_t errlen);

#endif

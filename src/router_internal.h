/* router_internal.h - INTERNAL: the library's calls that shardqd (the HTTP
 * router, src/daemon/) needs beyond include/shardq.h, and nothing else. It
 * is not installed and makes no promise to any other program: each call is
 * here because the router holds connections, threads and settings that a
 * user of the public API never sees (the line above each says why).
 *
 * shardqd therefore links the static archive (shardq_static):
 * libshardq.so exports include/shardq.h alone
 * (tests/check_exports.sh), and these calls are hidden in it.
 *
 * It includes shardq.h only. The calls are declared here again, not by
 * including their modules' headers, so that shardqd sees none of the
 * library's structs; config.h includes this header, so every library file
 * that also includes a call's own header has the compiler check that the
 * two declarations agree. docs/architecture.md, "Layers". */
#ifndef SQ_ROUTER_INTERNAL_H
#define SQ_ROUTER_INTERNAL_H

#include "shardq.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the config: the [daemon] and [token NAME] sections ----------------- */

/* The sections only shardqd reads: config.c parses them into these. */
#define SQ_SCOPE_WORKER   1
#define SQ_SCOPE_PRODUCER 2
#define SQ_SCOPE_ADMIN    4

/* [token NAME]: a bearer token of shardqd, kept as its hash. */
typedef struct sq_token_conf {
	char *name;
	char *hash;        /* "sha256:" and 64 hex digits */
	char *scopes_text; /* as written */
	int scopes;        /* SQ_SCOPE_* bits */
	int line;
} sq_token_conf;

/* [daemon]: shardqd's own settings (docs/http.md). */
typedef struct sq_daemon_conf {
	char *listen;                  /* HOST:PORT */
	int threads;                   /* request threads, each one connection per shard */
	int64_t max_body, max_headers; /* bytes */
	int64_t request_timeout_ms;
	int64_t claim_wait_max_ms;
	int64_t claim_poll_ms;
	int64_t claim_window_ms; /* news (a claim, a NOTIFY) to the tick it asks for */
	int enqueue_in_flight;   /* enqueue requests under way at once (sq_enqueuer lanes) */
	int max_connections;
	char *worker_id; /* NULL: shardqd-HOST-PID */
} sq_daemon_conf;

/* Most [type] sections a config holds: the claimer sizes a tick's merged
 * requests by it (the public sq_claim takes up to this many). */
#define SQ_MAX_TYPES 256

/* The public config is opaque; these read what the router needs of it.
 * Each only reads cfg; what they return lives as long as cfg. */
const sq_daemon_conf *sq_config_daemon(const sq_config *cfg);
int sq_config_token_count(const sq_config *cfg);
const sq_token_conf *sq_config_token(const sq_config *cfg, int i);
/* /v1/map and /v1/stats show each shard's weight. */
double sq_config_shard_weight(const sq_config *cfg, int i);
/* Whether this process runs the periodic jobs ([scheduler] enabled and a
 * [schedule NAME] section): shardqd opens a client for them only then. */
int sq_config_runs_schedules(const sq_config *cfg);
/* [connection] connect_timeout, in seconds: the claimer's first LISTEN
 * connects may take that long, as a client's first connects do. */
double sq_config_connect_timeout_s(const sq_config *cfg);
/* The configured type's name as the config holds it (the same pointer for
 * every lookup, so a claim's types compare by pointer), or NULL when no
 * [type] section is named `name`: a claim names only configured types. */
const char *sq_config_type_lookup(const sq_config *cfg, const char *name);

/* ---- a client's connections ---------------------------------------------- */

/* A loop that serves every shard (a worker's, shardqd's claimer): a shard
 * or meta database that must be connected again holds the calls up for at
 * most SQ_LOOP_CONNECT_WAIT_S per connect, not connect_timeout. The public
 * client waits connect_timeout; the router serves many clients' requests
 * on one client and must not. */
#define SQ_LOOP_CONNECT_WAIT_S 0.05
void sq_client_connect_wait(sq_client *c, double wait_s);
/* How long each of c's connections waits for an answer before it is taken
 * as lost. The router lowers it around the workers' starts, heartbeats
 * and results (their leases wait on them), which no public call does. */
void sq_client_answer_wait(sq_client *c, double wait_s);
double sq_client_answer_wait_of(const sq_client *c);
/* Lowers c's answer wait for the leases of every type of its config (an
 * eighth of the shortest lease, see client.h's
 * sq_client_answer_wait_for_lease): the claimer serves every worker. */
void sq_client_answer_wait_for_leases(sq_client *c);
/* The same rule as a value: wait_s (0: none) lowered for every type. */
double sq_config_lease_answer_wait(const sq_config *cfg, double wait_s);
/* sq_enqueuer_open, with setup(c, arg) run on each lane's client once it
 * is open: shardqd gives its enqueue lanes its request threads' connect
 * wait, so that a shard connected again holds an enqueue up for that long
 * at most, not connect_timeout. */
SQ_MUST_CHECK sq_status sq_enqueuer_open_setup(const sq_config *cfg, int in_flight, unsigned flags,
					       void (*setup)(sq_client *c, void *arg), void *arg,
					       sq_enqueuer **out, sq_error *err);
/* Goes on with the connects under way without blocking (the router's
 * threads do so between requests); returns how many are still under way. */
int sq_client_advance_connects(sq_client *c);
/* The shards a client opened with SQ_OPEN_ALLOW_DOWN could not reach, one
 * line each, into out; returns how many: logged at the start. */
int sq_client_down_shards(const sq_client *c, char *out, size_t len);
/* Whether c's connection to shard s is up: the claimer makes a shard's
 * LISTEN connection only then (a shard that is down would hold it up). */
int sq_client_shard_up(const sq_client *c, int s);

/* ---- the claimer's LISTEN connections (NOTIFY shardq_jobs) -------------- */

/* A LISTEN connection of a loop to one shard, connected without holding
 * the loop up (client.h, sq_listener). The public API has no NOTIFY: the
 * claimer hears of enqueues through these. */
typedef struct sq_listener sq_listener;
/* A listener for shard `shard` of cfg, not connected yet; NULL with err
 * set on failure. Freed by sq_listener_destroy. */
sq_listener *sq_listener_create(const sq_config *cfg, int shard, sq_error *err);
void sq_listener_destroy(sq_listener *l);
/* sq_listener_connect (client.h) waiting at most wait_s for the server on
 * this call, SQ_LOOP_CONNECT_WAIT_S on the later ones. */
sq_status sq_listener_connect_within(sq_listener *l, const char *channel, double wait_s,
				     sq_error *err);
/* A connect is under way (its host being looked up or its handshake). */
int sq_listener_connecting(const sq_listener *l);
/* The loop must come back soon: a connect under way, or one made whose
 * LISTEN is not sent yet. */
int sq_listener_pending(const sq_listener *l);
/* The LISTEN connection's socket, to poll for reading; -1: none. */
int sq_listener_socket(const sq_listener *l);
/* See client.h: reads the NOTIFYs (-1: broken, -2: LISTEN refused). */
int sq_listener_read(sq_listener *l, int *listening, char *why, size_t whylen);
/* See client.h: probes a silent connection; -1 when it died unseen. */
int sq_listener_check(sq_listener *l, double now, double answer_wait_s, double *next_at, char *why,
		      size_t whylen);
/* Closes the LISTEN connection (not the connect state). */
void sq_listener_drop(sq_listener *l);

/* ---- the threads shardqd runs beside its own ---------------------------- */

/* The periodic sq_maintain of [cluster] maintain_interval (maintain.h):
 * a long-running process runs it, a user's program calls sq_maintain. */
typedef struct sq_maintainer sq_maintainer;
typedef void (*sq_maintainer_log)(const char *line, void *arg);
sq_maintainer *sq_maintainer_start(const sq_config *cfg, sq_maintainer_log log, void *log_arg);
void sq_maintainer_stop(sq_maintainer *m);

/* The watch on the meta database (metawatch.h): shardqd logs when it stops
 * answering and when it answers again. */
typedef struct sq_metawatch sq_metawatch;
typedef void (*sq_metawatch_log)(const char *line, void *arg);
sq_metawatch *sq_metawatch_start(const sq_config *cfg, sq_metawatch_log log, void *log_arg);
void sq_metawatch_stop(sq_metawatch *m);

/* The periodic jobs' scheduler on its own thread and client
 * (schedule.h): a long-running process runs it. */
typedef struct sq_sched_thread sq_sched_thread;
sq_sched_thread *sq_sched_thread_start(const sq_config *cfg, const char *who, sq_client *c,
				       void (*on_error)(const sq_error *e, void *arg), void *arg);
void sq_sched_thread_stop(sq_sched_thread *t);

/* ---- tests --------------------------------------------------------------- */

/* A named crash point (failpoint.h), only in a build with
 * -DSHARDQ_FAILPOINTS=ON: the HTTP tests stop the claimer between its
 * claim and its answers. */
#ifdef SHARDQ_FAILPOINTS
void sq_failpoint(const char *name);
#define SQ_ROUTER_FAILPOINT(name) sq_failpoint(name)
#else
#define SQ_ROUTER_FAILPOINT(name) ((void)0)
#endif

#endif

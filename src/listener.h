/* listener.h - a loop's LISTEN connection to one shard (a worker's,
 * shardqd's claimer): connected without holding the loop up, probed so
 * that one that died unseen is found, and, for a worker, registered so
 * that a NOTIFY wakes only the few workers its batch needs; and a worker's
 * set of them, one per shard, kept up in its libevent loop. */
#ifndef SQ_LISTENER_H
#define SQ_LISTENER_H

#include "config.h"
#include "pgconn.h"

#include <stdint.h>

/* A LISTEN connection of a loop (a worker's, shardqd's claimer) to one
 * shard. Nothing about it holds the loop up: it is connected as the
 * loop's own shard connections are (SQ_LOOP_CONNECT_WAIT_S at most per
 * call, the rest between calls, a host name looked up on a thread), and
 * its LISTEN is sent without waiting for the answer. A shard whose host
 * vanished cuts a LISTEN connection (seen on its socket) before the loop
 * finds its own connection gone, so a blocking connect here would hold
 * the loop up for connect_timeout. */
typedef struct sq_listener {
	sq_pgconn pc;    /* the connect under way, its backoff and last error */
	PGconn *conn;    /* NULL: none; else the LISTEN is sent */
	double heard_at; /* when conn last had something to read, or was made */
	double asked_at; /* when the LISTEN or a probe was sent that has had no
			  * answer yet; 0: none */
	/* A worker's listener (self[0] set, by its owner: "HASH:ROOM ..." per
	 * task type, see sq_wake_type_hash) registers in shardq.listeners
	 * with every probe and reads the others' rows back (members); a
	 * NOTIFY then counts as a wake-up only when its payload ranks this
	 * listener among the few its batch needs (sq_listener_read). Without
	 * self (shardqd's claimer), without the table (a shard at schema 7:
	 * unregistered = 1) or before the first list, every NOTIFY counts. */
	char self[256];
	int listen_ok;    /* the LISTEN was answered on this connection */
	int unregistered; /* the registration failed on this connection */
	/* members[i]: a registered listener's backend pid, and its first
	 * entry; members[nmembers].first ends the last one's entries */
	struct sq_listener_member {
		int pid, first;
	} * members;
	/* entries: per member and task type, the type's hash and its room */
	struct sq_listener_entry {
		uint32_t hash;
		int room;
	} * entries;
	int nmembers, capmembers, capentries;
	double probed_at; /* when the last probe was sent; 0: never */
} sq_listener;
/* A LISTEN connection gets a probe this long after it was last heard from
 * (a worker's: after its last probe, heard from or not). The probe is an
 * empty query, or a worker's registration (see self), and shows the
 * connection still answers. */
#define SQ_LISTEN_PROBE_S 5.0
/* A registration nobody renewed for this long is a worker that has gone. */
#define SQ_LISTENER_STALE_S 15
/* A NOTIFY wakes, per task type in its batch, the first listeners by rank
 * until their rooms add up to SQ_WAKE_ROOMS times the type's jobs, and at
 * least SQ_WAKE_MIN of them. */
#define SQ_WAKE_ROOMS 2
#define SQ_WAKE_MIN   1
/* The 32-bit hash of a task type's name, in NOTIFY payloads and
 * registrations. */
uint32_t sq_wake_type_hash(const char *type);
SQ_MUST_CHECK sq_status sq_listener_init(sq_listener *l, const sq_config *cfg, int shard,
					 sq_error *err);
/* Connects, or goes on connecting, and sends LISTEN `channel`: SQ_OK once
 * sent (l->conn set: poll its socket for reading), SQ_ECONN while the
 * connect is under way (sq_pgconn_connecting(&l->pc)) or after it failed
 * (then tried again after a backoff, as shard connections are). */
sq_status sq_listener_connect(sq_listener *l, const char *channel, sq_error *err);
/* Reads what l->conn has, after its socket was readable: the number of
 * NOTIFYs, with *listening set when the LISTEN's answer was among it (the
 * wake-ups before it were missed); -1 when the connection broke, -2 when
 * the server refused the LISTEN (a standby: why says so; try again after a
 * while, not at once). On -1 and -2 the caller drops the connection
 * (sq_listener_drop, after taking its socket out of any event loop);
 * sq_listener_connect makes a new one. */
int sq_listener_read(sq_listener *l, int *listening, char *why, size_t whylen);
/* For a loop's every pass: a LISTEN connection that died without a word
 * (its host cut off by the network, a firewall or NAT that dropped it
 * while idle) never says so, and its wake-ups are lost for good. So one
 * silent for SQ_LISTEN_PROBE_S is sent an empty query (which also keeps
 * a NAT's state alive), and one whose LISTEN or probe has had no answer
 * for answer_wait_s (at least SQ_LISTEN_PROBE_S) returns -1, why saying so: the caller drops it, as
 * after a read's -1. Else 0, and *next_at (monotonic) is when this should
 * be called again, at the latest. */
int sq_listener_check(sq_listener *l, double now, double answer_wait_s, double *next_at, char *why,
		      size_t whylen);
/* Closes l->conn (not the connect state). */
void sq_listener_drop(sq_listener *l);
void sq_listener_free(sq_listener *l);

/* ---- a worker's LISTEN connections, in its libevent loop ---------------- */

struct event;
struct event_base;
struct sq_client;

/* One LISTEN connection per shard, its socket read by the loop of `base`.
 * A shard without one (down at the start, or the connection broke or died
 * unseen) gets one again from then on, at most every SQ_RELISTEN_S after a
 * connect that failed or a LISTEN the server refused. */
typedef struct sq_listen_set {
	sq_listener l[SQ_MAX_SHARDS];
	struct event *ev[SQ_MAX_SHARDS];
	double relisten_at[SQ_MAX_SHARDS]; /* the next connect, once none is under way */
	int nshards;
	struct event_base *base;
	/* called on the loop: shard s's NOTIFY was a wake-up of this
	 * listener, or its LISTEN was answered (the wake-ups before it were
	 * missed); failed: an error to note (polling carries on) */
	void (*woke)(void *arg, int s);
	void (*failed)(void *arg, const sq_error *e);
	void *arg;
} sq_listen_set;
#define SQ_RELISTEN_S 2.0

/* Sets up ls (zeroed by the caller, who also sets woke, failed and arg)
 * for every shard of cfg; nothing is connected yet. On failure too, ls is
 * freed by sq_listen_set_free. */
SQ_MUST_CHECK sq_status sq_listen_set_init(sq_listen_set *ls, const sq_config *cfg,
					   struct event_base *base, sq_error *err);
/* At the start: connects every shard whose connection in c is up, waiting
 * at most wait_s for each (a connect still under way goes on in
 * sq_listen_set_tick); a shard that is down is listened to once it is
 * back. */
void sq_listen_set_open(sq_listen_set *ls, const struct sq_client *c, double wait_s);
/* For the loop's every pass: every listener registers `self` (see
 * sq_listener), one that died unseen is dropped (sq_listener_check, with
 * answer_wait_s), and a shard without one gets one again (see above); the
 * shard is claimed from once its LISTEN is answered. */
void sq_listen_set_tick(sq_listen_set *ls, double now, double answer_wait_s, const char *self);
/* Connects under way (the loop comes back within SQ_LOOP_CONNECT_WAIT_S
 * while any is); a connect that ended has its LISTEN sent on the next
 * sq_listen_set_tick. */
int sq_listen_set_connecting(sq_listen_set *ls);
/* Takes the sockets out of the loop and frees every listener. */
void sq_listen_set_free(sq_listen_set *ls);

#endif

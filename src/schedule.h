/* schedule.h - periodic jobs ([schedule NAME]): a schedule's slots and the
 * scheduler pass that turns due slots into jobs, once per slot across any
 * number of schedulers (docs/operations.md, "Periodic jobs"). The cron
 * parser and the slot arithmetic it builds on are in cron.h. */
#ifndef SQ_SCHEDULE_H
#define SQ_SCHEDULE_H

#include "cron.h"
#include "shardq.h"

#include <stddef.h>
#include <stdint.h>

struct sq_schedule_conf;
/* A schedule's slots, by its cron (in its zone) or its `every` (slots at
 * multiples of the interval since the epoch). */
int64_t sq_schedule_next(const struct sq_schedule_conf *s, int64_t t);
int64_t sq_schedule_prev(const struct sq_schedule_conf *s, int64_t t);

/* ---- the scheduler, as the worker runtime and shardqd run it ------------ */

typedef struct sq_sched sq_sched;

/* A scheduler for cfg's schedules, named `who` in the meta rows; NULL when
 * there is nothing to schedule ([scheduler] enabled = false, or no
 * [schedule] sections). */
sq_sched *sq_sched_new(const sq_config *cfg, const char *who);
/* A pass comes this long after a slot's start, so that the slot is due
 * by the wall clock when it runs. */
#define SQ_SCHED_SLOT_MARGIN_S 0.005
/* Runs a pass when it is due (monotonic clock): [scheduler] interval after
 * the last one, or as a schedule's next slot begins if that comes first;
 * SQ_OK otherwise. A NULL sched does nothing. */
sq_status sq_sched_tick(sq_sched *s, sq_client *c, sq_error *err);
/* Whether sq_sched_tick would run a pass now (0 for a NULL sched). */
int sq_sched_due(const sq_sched *s, double now);
/* When it will (monotonic seconds; HUGE_VAL for a NULL sched): a loop
 * that runs the passes wakes then. */
double sq_sched_next_at(const sq_sched *s);
void sq_sched_free(sq_sched *s);

/* A thread of its own with its own client c (shardqd; opened by the
 * caller, with the others, so a shard that never answers costs the start
 * one connect_timeout; closed by sq_sched_thread_stop): a pass every
 * interval until stopped. A shard or meta database connected again holds
 * a pass up for at most SQ_SCHED_CONNECT_WAIT_S, not connect_timeout: the
 * other schedules' slots are enqueued meanwhile, and a stop waits no
 * longer. Its passes come as sq_sched_tick's do. on_error is called with
 * each failed pass (on that thread). NULL
 * when there is nothing to schedule or on failure; c is then the
 * caller's still. */
#define SQ_SCHED_CONNECT_WAIT_S 1.0
/* sq_sched_thread_stop lets a pass under way end by itself for this long
 * (a pass cut between its claim and its enqueue leaves the slot pending
 * for claim_lease); then it gives the pass's connections up (a shard or
 * meta database that stopped answering would hold it to the answer
 * wait). */
#define SQ_SCHED_STOP_GRACE_S 5.0
typedef struct sq_sched_thread sq_sched_thread;
sq_sched_thread *sq_sched_thread_start(const sq_config *cfg, const char *who, sq_client *c,
				       void (*on_error)(const sq_error *e, void *arg), void *arg);
void sq_sched_thread_stop(sq_sched_thread *t);

#endif

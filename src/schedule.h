/* schedule.h - periodic jobs ([schedule NAME]): the cron parser and the slot
 * arithmetic (pure functions, for the unit tests), and the scheduler pass
 * that turns due slots into jobs, once per slot across any number of
 * schedulers (docs/operations.md, "Periodic jobs"). */
#ifndef SQ_SCHEDULE_H
#define SQ_SCHEDULE_H

#include "shardq.h"

#include <stddef.h>
#include <stdint.h>

/* A parsed 5-field cron expression: minute hour day-of-month month
 * day-of-week, one bit per allowed value. */
typedef struct sq_cron {
	uint64_t minute; /* bits 0..59 */
	uint32_t hour;   /* bits 0..23 */
	uint32_t dom;    /* bits 1..31 */
	uint16_t month;  /* bits 1..12 */
	uint8_t dow;     /* bits 0..6, Sunday 0 (7 is read as 0) */
	/* a day field written with a leading star (as "*" or a star with a step) does not
	 * restrict; when both day fields restrict, a day matches either */
	int dom_any, dow_any;
} sq_cron;

/* Parses "*\/5 * * * *", lists, ranges, steps, month and weekday names
 * (jan..dec, sun..sat) and @hourly, @daily (@midnight), @weekly, @monthly,
 * @yearly (@annually). Returns 0, or -1 with a message in why. */
int sq_cron_parse(const char *text, sq_cron *out, char *why, size_t whylen);

/* Whether a time zone name is known to the system's tz database ("UTC",
 * or a file under $TZDIR or /usr/share/zoneinfo). */
int sq_tz_valid(const char *tz);

/* The UTC offset in seconds of zone tz (NULL or "UTC": 0) at unix time t. */
int64_t sq_tz_offset(const char *tz, int64_t t);

/*
 * Slots of a cron expression in a zone, in unix seconds. A slot is the
 * first instant at which the zone's wall clock reads a matching minute or
 * later: a minute skipped when the clocks go forward runs at the moment of
 * the jump; a minute that occurs twice when they go back runs once, at its
 * first occurrence. sq_cron_next: the first slot > t; sq_cron_prev: the
 * last slot <= t. INT64_MIN when there is none within 10 years.
 */
int64_t sq_cron_next(const sq_cron *c, const char *tz, int64_t t);
int64_t sq_cron_prev(const sq_cron *c, const char *tz, int64_t t);

/* The same over wall-clock seconds (no zone): the first matching minute
 * start > w, the last <= w. */
int64_t sq_cron_next_wall(const sq_cron *c, int64_t w);
int64_t sq_cron_prev_wall(const sq_cron *c, int64_t w);

struct sq_schedule_conf;
/* A schedule's slots, by its cron (in its zone) or its `every` (slots at
 * multiples of the interval since the epoch). */
int64_t sq_schedule_next(const struct sq_schedule_conf *s, int64_t t);
int64_t sq_schedule_prev(const struct sq_schedule_conf *s, int64_t t);

/* Expands a key template: {slot} is the slot as UTC ISO-8601
 * (2026-11-23T06:55:00Z), {epoch} its unix seconds, {name} the schedule's
 * name. Returns the length written (NUL-terminated, cut at len - 1), or -1
 * with why set when the template names another placeholder. */
int sq_schedule_key(const char *tmpl, const char *name, int64_t slot, char *out, size_t len,
		    const char **why);

/* ---- the scheduler, as the worker runtime and shardqd run it ------------ */

typedef struct sq_sched sq_sched;

/* A scheduler for cfg's schedules, named `who` in the meta rows; NULL when
 * there is nothing to schedule ([scheduler] enabled = false, or no
 * [schedule] sections). */
sq_sched *sq_sched_new(const sq_config *cfg, const char *who);
/* Runs a pass when [scheduler] interval has passed since the last one
 * (monotonic clock); SQ_OK otherwise. A NULL sched does nothing. */
sq_status sq_sched_tick(sq_sched *s, sq_client *c, sq_error *err);
void sq_sched_free(sq_sched *s);

/* A thread of its own with its own client c (shardqd; opened by the
 * caller, with the others, so a shard that never answers costs the start
 * one connect_timeout; closed by sq_sched_thread_stop): a pass every
 * interval until stopped. A shard or meta database connected again holds
 * a pass up for at most SQ_SCHED_CONNECT_WAIT_S, not connect_timeout: the
 * other schedules' slots are enqueued meanwhile, and a stop waits no
 * longer. on_error is called with each failed pass (on that thread). NULL
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

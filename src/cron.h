/* cron.h - the cron parser, slot arithmetic in a time zone, and a
 * schedule's key template (src/cron.c): pure functions, a leaf of the
 * library that config.c (checking [schedule] sections) and the scheduler
 * (schedule.h) build on. */
#ifndef SQ_CRON_H
#define SQ_CRON_H

#include <stddef.h>
#include <stdint.h>

/* What the slot searches return when no slot is found. */
#define SQ_CRON_NONE INT64_MIN

/* a / b rounded towards minus infinity (b > 0): the calendar's and the
 * slots' division of times before the epoch. */
static inline int64_t sq_floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return q - ((a % b != 0) && ((a < 0) != (b < 0)));
}

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
 * last slot <= t. SQ_CRON_NONE when there is none within 10 years.
 */
int64_t sq_cron_next(const sq_cron *c, const char *tz, int64_t t);
int64_t sq_cron_prev(const sq_cron *c, const char *tz, int64_t t);

/* The same over wall-clock seconds (no zone): the first matching minute
 * start > w, the last <= w. */
int64_t sq_cron_next_wall(const sq_cron *c, int64_t w);
int64_t sq_cron_prev_wall(const sq_cron *c, int64_t w);

/* Expands a key template: {slot} is the slot as UTC ISO-8601
 * (2026-11-23T06:55:00Z), {epoch} its unix seconds, {name} the schedule's
 * name. Returns the length written (NUL-terminated, cut at len - 1), or -1
 * with why set when the template names another placeholder. */
int sq_schedule_key(const char *tmpl, const char *name, int64_t slot, char *out, size_t len,
		    const char **why);

#endif

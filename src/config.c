/* config.c - INI configuration: one table of keys, a line reader of our own
 * (lines of any length), then one validation pass that reports every bad
 * key with its file and line. */
#include "config.h"
#include "buf.h"
#include "cron.h"
#include "error.h"
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum { K_INT, K_DURATION, K_DOUBLE, K_STRING, K_BOOL, K_ENUM, K_SIZE, K_RATE } key_kind;

/* [cluster], [connection], [daemon] and [scheduler] are single sections
 * (their keys share parse_ctx.key_line); [shard ID], [type NAME],
 * [token NAME] and [schedule NAME] repeat. */
typedef enum {
	SEC_CLUSTER,
	SEC_CONNECTION,
	SEC_DAEMON,
	SEC_SCHEDULER,
	SEC_SHARD,
	SEC_TYPE,
	SEC_TOKEN,
	SEC_SCHEDULE
} sec_kind;

typedef struct key_def {
	sec_kind sec;
	const char *name;
	key_kind kind;
	const char *def;            /* default, as it would be written in the file */
	double min, max;            /* bounds for numbers and durations (ms) */
	const char *const *choices; /* for K_ENUM, NULL-terminated */
} key_def;

static const char *const backoff_names[] = {"constant", "linear", "exponential", NULL};
static const char *const dedup_names[] = {"ignore", "replace", "merge", "rerun", NULL};
static const char *const missed_names[] = {"once", "skip", NULL};

#define DAY_MS (86400.0 * 1000)
/* Every key the config knows; conf/shardq.ini documents each one. */
static const key_def keys[] = {
	{SEC_CLUSTER, "partitions", K_INT, "16384", 1, SQ_MAX_PARTITIONS, NULL},
	{SEC_CLUSTER, "meta_shard", K_STRING, NULL, 0, 0, NULL},
	{SEC_CLUSTER, "meta_dsn", K_STRING, NULL, 0, 0, NULL},
	{SEC_CLUSTER, "notify", K_BOOL, "true", 0, 0, NULL},
	{SEC_CLUSTER, "maintain_interval", K_DURATION, "1h", 0, 7 * DAY_MS, NULL},
	{SEC_CONNECTION, "connect_timeout", K_DURATION, "5s", 1000, 600000, NULL},
	{SEC_CONNECTION, "statement_timeout", K_DURATION, "30s", 0, DAY_MS, NULL},
	{SEC_CONNECTION, "answer_timeout", K_DURATION, "0", 0, DAY_MS, NULL},
	{SEC_CONNECTION, "idle_in_transaction_session_timeout", K_DURATION, "60s", 0, DAY_MS, NULL},
	{SEC_CONNECTION, "application_name", K_STRING, "shardq", 0, 0, NULL},
	{SEC_CONNECTION, "map_poll", K_DURATION, "1s", 0, 3600000, NULL},
	{SEC_CONNECTION, "moving_wait", K_DURATION, "30s", 0, 3600000, NULL},
	{SEC_CONNECTION, "move_statement_timeout", K_DURATION, "1h", 0, DAY_MS, NULL},
	{SEC_DAEMON, "listen", K_STRING, "127.0.0.1:8080", 0, 0, NULL},
	{SEC_DAEMON, "threads", K_INT, "4", 1, 64, NULL},
	{SEC_DAEMON, "max_body", K_SIZE, "8MB", 1024, 1024.0 * 1024 * 1024, NULL},
	{SEC_DAEMON, "max_headers", K_SIZE, "16KB", 1024, 1024.0 * 1024, NULL},
	{SEC_DAEMON, "request_timeout", K_DURATION, "30s", 1000, 3600000, NULL},
	{SEC_DAEMON, "claim_wait_max", K_DURATION, "20s", 0, 600000, NULL},
	{SEC_DAEMON, "claim_poll", K_DURATION, "200ms", 10, 10000, NULL},
	{SEC_DAEMON, "claim_window", K_DURATION, "1ms", 0, 1000, NULL},
	{SEC_DAEMON, "enqueue_in_flight", K_INT, "4", 1, 64, NULL},
	{SEC_DAEMON, "max_connections", K_INT, "1024", 1, 100000, NULL},
	{SEC_DAEMON, "worker_id", K_STRING, NULL, 0, 0, NULL},
	{SEC_TOKEN, "hash", K_STRING, NULL, 0, 0, NULL},
	{SEC_TOKEN, "scopes", K_STRING, NULL, 0, 0, NULL},
	{SEC_SHARD, "dsn", K_STRING, NULL, 0, 0, NULL},
	{SEC_SHARD, "weight", K_DOUBLE, "1", 0, 1e6, NULL},
	{SEC_TYPE, "starting_timeout", K_DURATION, "30s", 100, DAY_MS, NULL},
	{SEC_TYPE, "execution_timeout", K_DURATION, "5m", 100, 30 * DAY_MS, NULL},
	{SEC_TYPE, "max_attempts", K_INT, "5", 1, SQ_MAX_ATTEMPTS, NULL},
	{SEC_TYPE, "backoff", K_ENUM, "exponential", 0, 0, backoff_names},
	{SEC_TYPE, "backoff_base", K_DURATION, "1s", 0, 30 * DAY_MS, NULL},
	{SEC_TYPE, "backoff_cap", K_DURATION, "1h", 0, 30 * DAY_MS, NULL},
	{SEC_TYPE, "backoff_jitter", K_DOUBLE, "0.1", 0, 1, NULL},
	{SEC_TYPE, "dedup", K_ENUM, "ignore", 0, 0, dedup_names},
	{SEC_TYPE, "priority", K_INT, "0", SQ_MIN_PRIORITY, SQ_MAX_PRIORITY, NULL},
	{SEC_TYPE, "delay_tolerance", K_DURATION, "0", 0, SQ_MAX_DELAY_TOLERANCE_MS, NULL},
	{SEC_TYPE, "history", K_BOOL, "false", 0, 0, NULL},
	{SEC_SCHEDULER, "enabled", K_BOOL, "true", 0, 0, NULL},
	{SEC_SCHEDULER, "interval", K_DURATION, "1s", 100, 3600000, NULL},
	{SEC_SCHEDULER, "claim_lease", K_DURATION, "1m", 1000, DAY_MS, NULL},
	{SEC_SCHEDULE, "cron", K_STRING, NULL, 0, 0, NULL},
	{SEC_SCHEDULE, "every", K_DURATION, NULL, 1000, 366 * DAY_MS, NULL},
	{SEC_SCHEDULE, "timezone", K_STRING, NULL, 0, 0, NULL},
	{SEC_SCHEDULE, "type", K_STRING, NULL, 0, 0, NULL},
	{SEC_SCHEDULE, "key", K_STRING, NULL, 0, 0, NULL},
	{SEC_SCHEDULE, "params", K_STRING, NULL, 0, 0, NULL},
	{SEC_SCHEDULE, "missed", K_ENUM, "once", 0, 0, missed_names},
	{SEC_SCHEDULE, "max_lateness", K_DURATION, "1m", 0, 366 * DAY_MS, NULL},
	{SEC_TYPE, "rate", K_RATE, "0", 0, 1e6, NULL},
	{SEC_TYPE, "burst", K_DOUBLE, "0", 0, 1e7, NULL},
	{SEC_TYPE, "max_running", K_INT, "0", 0, 10000000, NULL},
	{SEC_TYPE, "history_retention", K_DURATION, "7d", 1, SQ_MAX_HISTORY_RETENTION_DAYS *DAY_MS,
	 NULL},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static size_t key_index(sec_kind sec, const char *name)
{
	size_t i = 0;
	while (i < NKEYS && (keys[i].sec != sec || strcmp(keys[i].name, name)))
		i++;
	return i;
}

typedef struct parse_ctx {
	sq_config *cfg;
	const char *name;
	int line; /* the line being read */
	sq_buf errors;
	int nerrors;
	/* the line each key was set on (0: not set), to refuse a second one:
	 * [cluster] and [connection] share key_line; [shard]/[type] by index */
	int key_line[NKEYS];
	int *shard_key_line;                            /* SQ_MAX_SHARDS * NKEYS */
	int *type_key_line;                             /* SQ_MAX_TYPES * NKEYS */
	int *token_key_line;                            /* SQ_MAX_TOKENS * NKEYS */
	int *schedule_key_line;                         /* SQ_MAX_SCHEDULES * NKEYS */
	int cluster_line, connection_line, daemon_line; /* where those sections began */
	int scheduler_line;
	/* the section being read */
	char *section; /* its name, for messages; NULL before the first */
	sec_kind sec;
	int idx;           /* shard or type index; -1: its keys are not read */
	int unknown;       /* an unknown section: its keys are reported */
	int unknown_quiet; /* ... and none of them has been yet */
	int oom;           /* an allocation failed: the load fails with SQ_ENOMEM */
} parse_ctx;

static void bad(parse_ctx *x, const char *sec, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void bad(parse_ctx *x, const char *sec, const char *key, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (x->nerrors++)
		sq_buf_putc(&x->errors, '\n');
	if (key)
		sq_buf_printf(&x->errors, "%s:%d: [%s] %s: %s", x->name, x->line, sec, key, msg);
	else
		sq_buf_printf(&x->errors, "%s:%d: [%s]: %s", x->name, x->line, sec, msg);
}

int64_t sq_parse_duration_ms(const char *s)
{
	static const struct {
		const char *unit;
		double ms;
	} units[] = {{"ms", 1}, {"s", 1e3}, {"m", 6e4}, {"min", 6e4}, {"h", 3.6e6}, {"d", 8.64e7}};
	const char *p = s, *unit;
	size_t nd = 0, nf = 0;
	double v, ms;
	/* digits[.digits] or .digits: no sign, exponent, hex, inf or nan */
	while (*p >= '0' && *p <= '9')
		p++, nd++;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			nf++;
	if (nd + nf == 0)
		return -1;
	v = strtod(s, NULL);
	unit = p;
	while (*unit == ' ')
		unit++;
	if (!*unit && unit == p)
		return v == 0 ? 0 : -1; /* a bare number: only 0 needs no unit */
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].unit))
			continue;
		/* compared as a double, before any conversion to an integer */
		ms = v * units[i].ms;
		if (!isfinite(ms) || ms > (double)SQ_MAX_DURATION_MS)
			return -2;
		return (int64_t)ms;
	}
	return -1;
}

static int valid_ident(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.' && *s != ':')
			return 0;
	return 1;
}

int64_t sq_parse_size(const char *s)
{
	static const struct {
		const char *unit;
		int64_t mult;
	} units[] = {{"", 1},
		     {"B", 1},
		     {"KB", 1024},
		     {"MB", 1024 * 1024},
		     {"GB", INT64_C(1024) * 1024 * 1024}};
	char *end;
	errno = 0;
	long long n = strtoll(s, &end, 10);
	if (end == s || errno || n < 0 || !isdigit((unsigned char)*s))
		return -1;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit))
			return n > INT64_MAX / units[i].mult ? -1 : n * units[i].mult;
	return -1;
}

/* Where a key's value is stored, by section and key name. */
static void *slot(sq_config *cfg, sec_kind sec, int idx, const char *name)
{
	sq_shard_conf *sh = sec == SEC_SHARD ? &cfg->shards[idx] : NULL;
	sq_type_conf *t = sec == SEC_TYPE ? &cfg->types[idx] : NULL;
	sq_token_conf *tok = sec == SEC_TOKEN ? &cfg->tokens[idx] : NULL;
	sq_schedule_conf *sc = sec == SEC_SCHEDULE ? &cfg->schedules[idx] : NULL;
	static const struct {
		sec_kind sec;
		const char *name;
		size_t off;
	} map[] = {
#define F(S, N, T, M) {S, N, offsetof(T, M)}
		F(SEC_CLUSTER, "partitions", sq_config, partitions),
		F(SEC_CLUSTER, "meta_shard", sq_config, meta_shard),
		F(SEC_CLUSTER, "meta_dsn", sq_config, meta_dsn),
		F(SEC_CLUSTER, "notify", sq_config, notify),
		F(SEC_CLUSTER, "maintain_interval", sq_config, maintain_interval_ms),
		F(SEC_CONNECTION, "connect_timeout", sq_config, connect_timeout_ms),
		F(SEC_CONNECTION, "statement_timeout", sq_config, statement_timeout_ms),
		F(SEC_CONNECTION, "answer_timeout", sq_config, answer_timeout_ms),
		F(SEC_CONNECTION, "idle_in_transaction_session_timeout", sq_config,
		  idle_in_tx_timeout_ms),
		F(SEC_CONNECTION, "application_name", sq_config, application_name),
		F(SEC_CONNECTION, "map_poll", sq_config, map_poll_ms),
		F(SEC_CONNECTION, "moving_wait", sq_config, moving_wait_ms),
		F(SEC_CONNECTION, "move_statement_timeout", sq_config, move_statement_timeout_ms),
		F(SEC_DAEMON, "listen", sq_config, daemon.listen),
		F(SEC_DAEMON, "threads", sq_config, daemon.threads),
		F(SEC_DAEMON, "max_body", sq_config, daemon.max_body),
		F(SEC_DAEMON, "max_headers", sq_config, daemon.max_headers),
		F(SEC_DAEMON, "request_timeout", sq_config, daemon.request_timeout_ms),
		F(SEC_DAEMON, "claim_wait_max", sq_config, daemon.claim_wait_max_ms),
		F(SEC_DAEMON, "claim_poll", sq_config, daemon.claim_poll_ms),
		F(SEC_DAEMON, "claim_window", sq_config, daemon.claim_window_ms),
		F(SEC_DAEMON, "enqueue_in_flight", sq_config, daemon.enqueue_in_flight),
		F(SEC_DAEMON, "max_connections", sq_config, daemon.max_connections),
		F(SEC_DAEMON, "worker_id", sq_config, daemon.worker_id),
		F(SEC_TOKEN, "hash", sq_token_conf, hash),
		F(SEC_TOKEN, "scopes", sq_token_conf, scopes_text),
		F(SEC_SHARD, "dsn", sq_shard_conf, dsn),
		F(SEC_SHARD, "weight", sq_shard_conf, weight),
		F(SEC_TYPE, "starting_timeout", sq_type_conf, starting_timeout_ms),
		F(SEC_TYPE, "execution_timeout", sq_type_conf, execution_timeout_ms),
		F(SEC_TYPE, "max_attempts", sq_type_conf, max_attempts),
		F(SEC_TYPE, "backoff", sq_type_conf, backoff),
		F(SEC_TYPE, "backoff_base", sq_type_conf, backoff_base_ms),
		F(SEC_TYPE, "backoff_cap", sq_type_conf, backoff_cap_ms),
		F(SEC_TYPE, "backoff_jitter", sq_type_conf, backoff_jitter),
		F(SEC_TYPE, "dedup", sq_type_conf, dedup),
		F(SEC_TYPE, "priority", sq_type_conf, priority),
		F(SEC_TYPE, "delay_tolerance", sq_type_conf, delay_tolerance_ms),
		F(SEC_TYPE, "history", sq_type_conf, history),
		F(SEC_SCHEDULER, "enabled", sq_config, scheduler.enabled),
		F(SEC_SCHEDULER, "interval", sq_config, scheduler.interval_ms),
		F(SEC_SCHEDULER, "claim_lease", sq_config, scheduler.claim_lease_ms),
		F(SEC_SCHEDULE, "cron", sq_schedule_conf, cron_text),
		F(SEC_SCHEDULE, "every", sq_schedule_conf, every_ms),
		F(SEC_SCHEDULE, "timezone", sq_schedule_conf, timezone),
		F(SEC_SCHEDULE, "type", sq_schedule_conf, type),
		F(SEC_SCHEDULE, "key", sq_schedule_conf, key),
		F(SEC_SCHEDULE, "params", sq_schedule_conf, params),
		F(SEC_SCHEDULE, "missed", sq_schedule_conf, missed),
		F(SEC_SCHEDULE, "max_lateness", sq_schedule_conf, max_lateness_ms),
		F(SEC_TYPE, "rate", sq_type_conf, rate_per_s),
		F(SEC_TYPE, "burst", sq_type_conf, burst),
		F(SEC_TYPE, "max_running", sq_type_conf, max_running),
		F(SEC_TYPE, "history_retention", sq_type_conf, history_retention_ms),
#undef F
	};
	char *base = sh    ? (char *)sh
		     : t   ? (char *)t
		     : tok ? (char *)tok
		     : sc  ? (char *)sc
			   : (char *)cfg;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].sec == sec && !strcmp(map[i].name, name))
			return base + map[i].off;
	return NULL;
}

/* store()'s readers, one per kind of key: each parses v, checks k's bounds
 * and writes dst; returns an error text (in why when it has figures) or
 * NULL. Integers are int32 (partitions: uint32). */
static const char *store_int(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	char *end;
	long long n;
	errno = 0;
	n = strtoll(v, &end, 10);
	if (end == v || *end || errno)
		return "expected an integer";
	if (n < k->min || n > k->max) {
		snprintf(why, whylen, "%lld is out of range [%.0f, %.0f]", n, k->min, k->max);
		return why;
	}
	if (!strcmp(k->name, "partitions"))
		*(uint32_t *)dst = (uint32_t)n;
	else
		*(int32_t *)dst = (int32_t)n;
	return NULL;
}

/* int64 milliseconds */
static const char *store_duration(const key_def *k, void *dst, const char *v, char *why,
				  size_t whylen)
{
	int64_t ms = sq_parse_duration_ms(v);
	if (ms == -1)
		return "expected a duration such as 500ms, 30s, 5m, 1h or 2d";
	if (ms < 0 || ms < k->min || ms > k->max) {
		snprintf(why, whylen, "%s is out of range [%.0fms, %.0fms]", v, k->min, k->max);
		return why;
	}
	*(int64_t *)dst = ms;
	return NULL;
}

/* int64 bytes */
static const char *store_size(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	int64_t n = sq_parse_size(v);
	if (n < 0)
		return "expected a size such as 65536, 64KB or 8MB";
	if (n < k->min || n > k->max) {
		snprintf(why, whylen, "%s is out of range [%.0f, %.0f] bytes", v, k->min, k->max);
		return why;
	}
	*(int64_t *)dst = n;
	return NULL;
}

static const char *store_double(const key_def *k, void *dst, const char *v, char *why,
				size_t whylen)
{
	char *end;
	double d;
	errno = 0;
	d = strtod(v, &end);
	if (end == v || *end || errno || !isfinite(d))
		return "expected a number";
	if (d < k->min || d > k->max) {
		snprintf(why, whylen, "%g is out of range [%g, %g]", d, k->min, k->max);
		return why;
	}
	*(double *)dst = d;
	return NULL;
}

/* "100/s", "6000/m", "10/h", or 0 (no limit): a double of jobs per second */
static const char *store_rate(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	char *end;
	double d;
	errno = 0;
	d = strtod(v, &end);
	if (end == v || errno || !isfinite(d) || d < 0)
		return "expected a rate such as 100/s, 600/m or 10/h (0: no limit)";
	if (*end == '/' && (!strcmp(end + 1, "s") || !strcmp(end + 1, "sec")))
		;
	else if (*end == '/' && (!strcmp(end + 1, "m") || !strcmp(end + 1, "min")))
		d /= 60;
	else if (*end == '/' && !strcmp(end + 1, "h"))
		d /= 3600;
	else if (*end || d != 0)
		return "expected a rate such as 100/s, 600/m or 10/h (0: no limit)";
	if (d > k->max) {
		snprintf(why, whylen, "%s is above %.0f/s", v, k->max);
		return why;
	}
	*(double *)dst = d;
	return NULL;
}

/* a copy that replaces (and frees) the one stored before */
static const char *store_string(void *dst, const char *v)
{
	char *s = strdup(v);
	if (!s)
		return "out of memory";
	free(*(char **)dst);
	*(char **)dst = s;
	return NULL;
}

static const char *store_bool(void *dst, const char *v)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"))
		*(int *)dst = 1;
	else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "0"))
		*(int *)dst = 0;
	else
		return "expected true or false";
	return NULL;
}

/* the index of v among k's choices */
static const char *store_enum(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	for (int i = 0; k->choices[i]; i++)
		if (!strcmp(v, k->choices[i])) {
			*(int *)dst = i;
			return NULL;
		}
	snprintf(why, whylen, "'%s' is not one of", v);
	for (int i = 0; k->choices[i]; i++)
		snprintf(why + strlen(why), whylen - strlen(why), "%s %s", i ? "," : "",
			 k->choices[i]);
	return why;
}

/* Stores one value; returns an error text or NULL. Integers are int32 except
 * durations and sizes (int64 ms, bytes). */
static const char *store(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	switch (k->kind) {
	case K_INT: return store_int(k, dst, v, why, whylen);
	case K_DURATION: return store_duration(k, dst, v, why, whylen);
	case K_SIZE: return store_size(k, dst, v, why, whylen);
	case K_DOUBLE: return store_double(k, dst, v, why, whylen);
	case K_RATE: return store_rate(k, dst, v, why, whylen);
	case K_STRING: return store_string(dst, v);
	case K_BOOL: return store_bool(dst, v);
	case K_ENUM: return store_enum(k, dst, v, why, whylen);
	}
	return "unknown key kind";
}

/* The section's defaults. They are valid by construction, so a default
 * that fails to store has failed for want of memory. */
static void apply_defaults(parse_ctx *x, sec_kind sec, int idx)
{
	char why[128];
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].sec != sec || !keys[i].def)
			continue;
		if (store(&keys[i], slot(x->cfg, sec, idx, keys[i].name), keys[i].def, why,
			  sizeof(why)))
			x->oom = 1;
	}
}

/* Before a new section or at the end: an unknown section whose keys were
 * all fine otherwise (or that had none) is still reported, once. */
static void end_section(parse_ctx *x)
{
	if (x->unknown && x->unknown_quiet) {
		bad(x, x->section, NULL,
		    "unknown section; expected [cluster], [connection], [daemon], [scheduler], "
		    "[shard ID], [type NAME], [token NAME] or [schedule NAME]");
	}
	x->unknown = x->unknown_quiet = 0;
}

/* [cluster], [connection], [daemon] or [scheduler]: each at most once;
 * *first is the line where it began (0: not yet). */
static void single_begin(parse_ctx *x, const char *name, sec_kind sec, int *first)
{
	x->sec = sec;
	if (*first) {
		bad(x, name, NULL,
		    "the section appears a second time (first at line %d); put its keys "
		    "in one section",
		    *first);
		return;
	}
	*first = x->line;
	x->idx = 0;
}

/* What the header checks of a repeated section ([shard ID], [type NAME],
 * [token NAME], [schedule NAME]) say of it. */
typedef struct named_kind {
	sec_kind sec;
	size_t word_len;    /* of "shard " and the like */
	const char *what;   /* "shard": "shard s1 appears a second time" */
	const char *ident;  /* "shard id": "shard id must be 1-32 letters" */
	int maxlen;         /* of the name */
	const char *plural; /* "shards": "too many shards" */
	int max;            /* sections of the kind */
} named_kind;

enum { NAMED_SHARD, NAMED_TYPE, NAMED_TOKEN, NAMED_SCHEDULE };
static const named_kind named_kinds[] = {
	[NAMED_SHARD] = {SEC_SHARD, 6, "shard", "shard id", 32, "shards", SQ_MAX_SHARDS},
	[NAMED_TYPE] = {SEC_TYPE, 5, "type", "type name", SQ_MAX_TYPE_LEN, "task types",
			SQ_MAX_TYPES},
	[NAMED_TOKEN] = {SEC_TOKEN, 6, "token", "token name", 64, "tokens", SQ_MAX_TOKENS},
	[NAMED_SCHEDULE] = {SEC_SCHEDULE, 9, "schedule", "schedule name", 64, "schedules",
			    SQ_MAX_SCHEDULES},
};

/* The section's name in its header, or NULL when it is not a valid one
 * (reported). */
static const char *named_arg(parse_ctx *x, const char *name, const named_kind *k)
{
	const char *arg = name + k->word_len;
	while (*arg == ' ')
		arg++;
	x->sec = k->sec;
	if (!valid_ident(arg, (size_t)k->maxlen)) {
		bad(x, name, NULL, "%s must be 1-%d letters, digits, '_', '-', '.' or ':'",
		    k->ident, k->maxlen);
		return NULL;
	}
	return arg;
}

/* Whether a section named arg may begin as the n-th of its kind: not seen
 * before (first: the line of the earlier one, 0 if none) and within the
 * kind's maximum; reported otherwise. */
static int named_room(parse_ctx *x, const char *name, const named_kind *k, const char *arg,
		      int first, int n)
{
	if (first) {
		bad(x, name, NULL,
		    "%s %s appears a second time (first at line %d); put all its keys in one "
		    "section",
		    k->what, arg, first);
		return 0;
	}
	if (n == k->max) {
		bad(x, name, NULL, "too many %s (at most %d)", k->plural, k->max);
		return 0;
	}
	return 1;
}

/* A copy of a section's name; NULL when memory ran out, which fails the
 * load with SQ_ENOMEM (the section is not added). */
static char *named_dup(parse_ctx *x, const char *arg)
{
	char *s = strdup(arg);
	if (!s)
		x->oom = 1;
	return s;
}

/* A "[shard ID]" header. */
static void shard_begin(parse_ctx *x, const char *name)
{
	sq_config *cfg = x->cfg;
	const char *arg = named_arg(x, name, &named_kinds[NAMED_SHARD]);
	if (!arg)
		return;
	int i = sq_config_shard_index(cfg, arg);
	if (!named_room(x, name, &named_kinds[NAMED_SHARD], arg, i >= 0 ? cfg->shards[i].line : 0,
			cfg->nshards))
		return;
	sq_shard_conf *sh = &cfg->shards[cfg->nshards];
	if (!(sh->id = named_dup(x, arg)))
		return;
	sh->line = x->line;
	apply_defaults(x, SEC_SHARD, cfg->nshards);
	x->idx = cfg->nshards++;
}

/* A "[type NAME]" header. */
static void type_begin(parse_ctx *x, const char *name)
{
	sq_config *cfg = x->cfg;
	const char *arg = named_arg(x, name, &named_kinds[NAMED_TYPE]);
	if (!arg)
		return;
	const sq_type_conf *old = sq_config_type(cfg, arg);
	if (!named_room(x, name, &named_kinds[NAMED_TYPE], arg, old ? old->line : 0, cfg->ntypes))
		return;
	sq_type_conf *t = &cfg->types[cfg->ntypes];
	if (!(t->name = named_dup(x, arg)))
		return;
	t->line = x->line;
	apply_defaults(x, SEC_TYPE, cfg->ntypes);
	x->idx = cfg->ntypes++;
}

/* A "[token NAME]" header. */
static void token_begin(parse_ctx *x, const char *name)
{
	sq_config *cfg = x->cfg;
	const char *arg = named_arg(x, name, &named_kinds[NAMED_TOKEN]);
	int first = 0;
	if (!arg)
		return;
	for (int i = 0; i < cfg->ntokens && !first; i++)
		if (!strcmp(cfg->tokens[i].name, arg))
			first = cfg->tokens[i].line;
	if (!named_room(x, name, &named_kinds[NAMED_TOKEN], arg, first, cfg->ntokens))
		return;
	sq_token_conf *t = &cfg->tokens[cfg->ntokens];
	if (!(t->name = named_dup(x, arg)))
		return;
	t->line = x->line;
	x->idx = cfg->ntokens++;
}

/* A "[schedule NAME]" header. */
static void schedule_begin(parse_ctx *x, const char *name)
{
	sq_config *cfg = x->cfg;
	const char *arg = named_arg(x, name, &named_kinds[NAMED_SCHEDULE]);
	int first = 0;
	if (!arg)
		return;
	for (int i = 0; i < cfg->nschedules && !first; i++)
		if (!strcmp(cfg->schedules[i].name, arg))
			first = cfg->schedules[i].line;
	if (!named_room(x, name, &named_kinds[NAMED_SCHEDULE], arg, first, cfg->nschedules))
		return;
	sq_schedule_conf *s = &cfg->schedules[cfg->nschedules];
	if (!(s->name = named_dup(x, arg)))
		return;
	s->line = x->line;
	apply_defaults(x, SEC_SCHEDULE, cfg->nschedules);
	x->idx = cfg->nschedules++;
}

/* A "[name]" header: [cluster], [connection], [daemon] and [scheduler] at
 * most once, [shard ID], [type NAME], [token NAME] and [schedule NAME] once
 * per name; any other is an unknown section, reported with its keys. */
static void section_begin(parse_ctx *x, const char *name)
{
	free(x->section);
	x->section = strdup(name ? name : "");
	x->idx = -1;
	if (!x->section) {
		x->oom = 1;
		return;
	}
	if (!strcmp(name, "cluster"))
		single_begin(x, name, SEC_CLUSTER, &x->cluster_line);
	else if (!strcmp(name, "connection"))
		single_begin(x, name, SEC_CONNECTION, &x->connection_line);
	else if (!strcmp(name, "daemon"))
		single_begin(x, name, SEC_DAEMON, &x->daemon_line);
	else if (!strcmp(name, "scheduler"))
		single_begin(x, name, SEC_SCHEDULER, &x->scheduler_line);
	else if (!strncmp(name, "shard ", 6))
		shard_begin(x, name);
	else if (!strncmp(name, "type ", 5))
		type_begin(x, name);
	else if (!strncmp(name, "token ", 6))
		token_begin(x, name);
	else if (!strncmp(name, "schedule ", 9))
		schedule_begin(x, name);
	else
		x->unknown = x->unknown_quiet = 1;
}

static void on_key(parse_ctx *x, const char *name, const char *value)
{
	char why[256];
	int *lines;
	if (!x->section) {
		bad(x, "-", name,
		    "a key before any section; put it under [cluster], [connection], [shard ID] "
		    "or [type NAME]");
		return;
	}
	if (x->unknown) {
		x->unknown_quiet = 0;
		bad(x, x->section, name,
		    "unknown section; expected [cluster], [connection], [daemon], [scheduler], "
		    "[shard ID], [type NAME], [token NAME] or [schedule NAME]");
		return;
	}
	if (x->idx < 0)
		return; /* its header was reported */
	lines = x->sec == SEC_SHARD      ? x->shard_key_line + (size_t)x->idx * NKEYS
		: x->sec == SEC_TYPE     ? x->type_key_line + (size_t)x->idx * NKEYS
		: x->sec == SEC_TOKEN    ? x->token_key_line + (size_t)x->idx * NKEYS
		: x->sec == SEC_SCHEDULE ? x->schedule_key_line + (size_t)x->idx * NKEYS
					 : x->key_line;
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].sec != x->sec || strcmp(keys[i].name, name))
			continue;
		if (lines[i]) {
			bad(x, x->section, name, "set a second time (first at line %d)", lines[i]);
			return;
		}
		lines[i] = x->line;
		size_t vl = strlen(value);
		char *unq = NULL;
		if (x->sec == SEC_SCHEDULE && keys[i].kind == K_STRING && vl >= 2 &&
		    value[0] == '"' && value[vl - 1] == '"') {
			if (!(unq = strdup(value + 1))) {
				x->oom = 1;
				return;
			}
			unq[vl - 2] = '\0'; /* cron = "0 * * * *": the quotes go */
			value = unq;
		}
		const char *e = store(&keys[i], slot(x->cfg, x->sec, x->idx, name), value, why,
				      sizeof(why));
		if (e)
			bad(x, x->section, name, "%s", e);
		free(unq);
		return;
	}
	if (x->sec == SEC_CONNECTION && !strcmp(name, "pool_size")) {
		bad(x, x->section, name,
		    "no longer a key: it was never used (a client holds one connection per "
		    "shard; shardqd's [daemon] threads sets its connections); delete the line");
		return;
	}
	bad(x, x->section, name, "unknown key (see conf/shardq.ini for the keys of this section)");
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static char *trim(char *s)
{
	size_t n;
	while (is_space(*s))
		s++;
	n = strlen(s);
	while (n && is_space(s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* Cuts an inline comment: ';' after a space or tab, as inih does. */
static void cut_comment(char *s)
{
	for (char *p = s; *p; p++)
		if (*p == ';' && p > s && (p[-1] == ' ' || p[-1] == '\t')) {
			*p = '\0';
			return;
		}
}

/* One line: blank, a comment (';' or '#' first), "[section]", or
 * "key = value" ("key: value" too). */
static void parse_line(parse_ctx *x, char *l)
{
	char *eq;
	l = trim(l);
	if (!*l || *l == ';' || *l == '#')
		return;
	if (*l == '[') {
		char *end = strchr(l, ']');
		if (!end) {
			bad(x, "?", NULL, "syntax error: a section header needs its closing ']'");
			return;
		}
		*end = '\0';
		cut_comment(end + 1);
		if (*trim(end + 1)) {
			bad(x, "?", NULL, "syntax error: text after the section header's ']'");
			return;
		}
		end_section(x);
		section_begin(x, trim(l + 1));
		return;
	}
	cut_comment(l);
	eq = strpbrk(l, "=:");
	if (!eq) {
		bad(x, "?", NULL, "syntax error; expected [section] or key = value");
		return;
	}
	*eq = '\0';
	on_key(x, trim(l), trim(eq + 1));
}

/* Reads the text line by line; lines may be of any length. */
static void parse_text(parse_ctx *x, const char *text)
{
	const char *p = text;
	sq_buf line;
	sq_buf_init(&line);
	if (!strncmp(p, "\xEF\xBB\xBF", 3)) /* a UTF-8 byte order mark */
		p += 3;
	while (*p) {
		size_t n = strcspn(p, "\n");
		x->line++;
		sq_buf_reset(&line);
		sq_buf_append(&line, p, n);
		if (line.oom) {
			bad(x, "?", NULL, "out of memory");
			break;
		}
		if (line.data)
			parse_line(x, line.data);
		p += n + (p[n] == '\n');
	}
	end_section(x);
	sq_buf_free(&line);
}

static int is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

static int line_of(parse_ctx *x, const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].sec <= SEC_SCHEDULER && !strcmp(keys[i].name, name))
			return x->key_line[i];
	return 0;
}

/* A dsn libpq cannot parse fails here, named, not at connect time. */
static void check_dsn(parse_ctx *x, const char *sec, const char *key, const char *dsn)
{
	char *msg = NULL;
	PQconninfoOption *o = PQconninfoParse(dsn, &msg);
	if (o) {
		PQconninfoFree(o);
		return;
	}
	if (msg)
		msg[strcspn(msg, "\n")] = '\0';
	bad(x, sec, key, "not a libpq connection string: %s", msg ? msg : "out of memory");
	PQfreemem(msg);
}

/* "sha256:" and 64 hex digits */
static int valid_token_hash(const char *h)
{
	if (strncmp(h, "sha256:", 7) || strlen(h) != 7 + 64)
		return 0;
	for (h += 7; *h; h++)
		if (!isxdigit((unsigned char)*h))
			return 0;
	return 1;
}

/* claim_wait_max not below request_timeout: named at the key the file sets
 * (claim_wait_max if it does), with both values and which is a default. */
static void claim_wait_conflict(parse_ctx *x)
{
	int cw_line = line_of(x, "claim_wait_max"), rt_line = line_of(x, "request_timeout");
	double cw = (double)x->cfg->daemon.claim_wait_max_ms / 1000;
	double rt = (double)x->cfg->daemon.request_timeout_ms / 1000;
	if (cw_line) {
		x->line = cw_line;
		bad(x, "daemon", "claim_wait_max",
		    "%gs must be below request_timeout (%gs%s), or a long poll would be cut "
		    "off: lower it, or raise request_timeout",
		    cw, rt, rt_line ? "" : ", its default");
	} else {
		x->line = rt_line;
		bad(x, "daemon", "request_timeout",
		    "%gs must be above claim_wait_max (%gs, its default), or a long poll would "
		    "be cut off: raise it, or set claim_wait_max below it",
		    rt, cw);
	}
}

static void validate_daemon(parse_ctx *x)
{
	sq_config *cfg = x->cfg;
	const char *l = cfg->daemon.listen;
	const char *colon = strrchr(l, ':');
	char *end;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == l || !colon[1] || *end || port < 0 || port > 65535) {
		x->line = line_of(x, "listen");
		bad(x, "daemon", "listen", "'%s' is not HOST:PORT (for example 127.0.0.1:8080)", l);
	}
	if (cfg->daemon.claim_wait_max_ms >= cfg->daemon.request_timeout_ms)
		claim_wait_conflict(x);
	for (int i = 0; i < cfg->ntokens; i++) {
		sq_token_conf *t = &cfg->tokens[i];
		char sec[96];
		snprintf(sec, sizeof(sec), "token %s", t->name);
		x->line = t->line;
		if (!t->hash)
			bad(x, sec, "hash",
			    "missing; set hash = sha256:HEX (shardqd --hash-token prints it)");
		else if (!valid_token_hash(t->hash))
			bad(x, sec, "hash",
			    "expected sha256: and 64 hex digits (shardqd --hash-token prints it), "
			    "never the token itself");
		if (!t->scopes_text) {
			bad(x, sec, "scopes",
			    "missing; set one or more of worker, producer, admin");
			continue;
		}
		char *copy = strdup(t->scopes_text), *save = NULL;
		if (!copy) {
			x->oom = 1;
			continue;
		}
		for (char *w = strtok_r(copy, ", \t", &save); w;
		     w = strtok_r(NULL, ", \t", &save)) {
			if (!strcmp(w, "worker"))
				t->scopes |= SQ_SCOPE_WORKER;
			else if (!strcmp(w, "producer"))
				t->scopes |= SQ_SCOPE_PRODUCER;
			else if (!strcmp(w, "admin"))
				t->scopes |= SQ_SCOPE_ADMIN;
			else
				bad(x, sec, "scopes", "'%s' is not one of worker, producer, admin",
				    w);
		}
		free(copy);
		if (!t->scopes)
			bad(x, sec, "scopes", "empty; set one or more of worker, producer, admin");
	}
}

/* The line of a [schedule]'s key (its header's when not set). */
static int sched_line(parse_ctx *x, int i, const char *key)
{
	int l = x->schedule_key_line[(size_t)i * NKEYS + key_index(SEC_SCHEDULE, key)];
	return l ? l : x->cfg->schedules[i].line;
}

static void validate_schedules(parse_ctx *x)
{
	sq_config *cfg = x->cfg;
	for (int i = 0; i < cfg->nschedules; i++) {
		sq_schedule_conf *s = &cfg->schedules[i];
		char sec[96], why[256];
		snprintf(sec, sizeof(sec), "schedule %s", s->name);
		x->line = s->line;
		if (!s->cron_text && !s->every_ms)
			bad(x, sec, NULL,
			    "no slots: set cron = \"MIN HOUR DOM MON DOW\" (for example \"0 3 * * "
			    "*\") or every = DURATION (for example every = 10m)");
		if (s->cron_text && s->every_ms) {
			x->line = sched_line(x, i, "every");
			bad(x, sec, "every", "set either cron or every, not both");
		}
		if (s->cron_text && sq_cron_parse(s->cron_text, &s->cron, why, sizeof(why))) {
			x->line = sched_line(x, i, "cron");
			bad(x, sec, "cron", "%s", why);
		}
		if (s->every_ms % 1000) {
			x->line = sched_line(x, i, "every");
			bad(x, sec, "every",
			    "must be a whole number of seconds (slots are seconds)");
		}
		if (s->timezone) {
			x->line = sched_line(x, i, "timezone");
			if (s->every_ms)
				bad(x, sec, "timezone",
				    "applies to cron only: every = slots are counted from the "
				    "epoch; "
				    "delete the line");
			else if (!sq_tz_valid(s->timezone))
				bad(x, sec, "timezone",
				    "'%s' is not a time zone of the system's tz database (an IANA "
				    "name such as Europe/Moscow or America/New_York, or UTC; see "
				    "/usr/share/zoneinfo)",
				    s->timezone);
		}
		x->line = sched_line(x, i, "type");
		if (!s->type)
			bad(x, sec, "type",
			    "missing; set the [type NAME] its jobs are enqueued as");
		else if (!sq_config_type(cfg, s->type))
			bad(x, sec, "type",
			    "'%s' is not a configured type; add a [type %s] section", s->type,
			    s->type);
		if (s->params) {
			size_t where;
			const char *what;
			x->line = sched_line(x, i, "params");
			if (sq_json_validate_object(s->params, strlen(s->params), &where, &what))
				bad(x, sec, "params",
				    "not a JSON object: %s at byte %zu (for example params = "
				    "{\"report\": \"daily\"})",
				    what, where);
		}
		if (s->key) {
			char k[SQ_MAX_KEY_LEN + 64];
			const char *kwhy;
			/* the longest a slot can print: 9999-12-31T23:59:59Z */
			int n = sq_schedule_key(s->key, s->name, INT64_C(253402300799), k,
						sizeof(k), &kwhy);
			x->line = sched_line(x, i, "key");
			if (n < 0)
				bad(x, sec, "key", "%s; for example key = %s-{slot}", kwhy,
				    s->name);
			else if (n == 0 || n > SQ_MAX_KEY_LEN)
				bad(x, sec, "key", "the key would be %d bytes; it must be 1-%d", n,
				    SQ_MAX_KEY_LEN);
			else if (!strstr(s->key, "{slot}") && !strstr(s->key, "{epoch}"))
				bad(x, sec, "key",
				    "names no slot: every slot would share one key; add {slot} or "
				    "{epoch}");
		}
	}
}

/* rate and max_running are kept per shard, each shard its share by the
 * partitions it holds (docs/operations.md, "Rate limits"): every shard
 * that can hold jobs needs at least one running slot. */
static void validate_limits(parse_ctx *x, int i, const char *sec)
{
	sq_type_conf *t = &x->cfg->types[i];
	int holding = 0;
	for (int s = 0; s < x->cfg->nshards; s++)
		holding += x->cfg->shards[s].weight > 0;
	x->line = x->type_key_line[(size_t)i * NKEYS + key_index(SEC_TYPE, "max_running")];
	if (t->max_running > 0 && t->max_running < holding)
		bad(x, sec, "max_running",
		    "%d is below the %d shards that hold jobs: each shard enforces its own "
		    "share, at least one; set max_running to %d or more",
		    t->max_running, holding, holding);
	x->line = x->type_key_line[(size_t)i * NKEYS + key_index(SEC_TYPE, "burst")];
	if (t->burst > 0 && t->rate_per_s <= 0)
		bad(x, sec, "burst", "is set but rate is not; set rate (e.g. rate = 100/s)");
	if (t->burst > 0 && t->burst < 1)
		bad(x, sec, "burst",
		    "%g is below 1 job; set 1 or more, or 0 for one second of rate", t->burst);
	x->line = t->line;
}

static void validate(parse_ctx *x)
{
	sq_config *cfg = x->cfg;
	x->line = line_of(x, "partitions");
	if (!is_pow2(cfg->partitions))
		bad(x, "cluster", "partitions", "%u is not a power of two", cfg->partitions);
	if (cfg->nshards == 0) {
		x->line = 1;
		bad(x, "shard", NULL, "no shard configured; add a [shard ID] section with a dsn");
	}
	for (int i = 0; i < cfg->nshards; i++) {
		x->line = cfg->shards[i].line;
		char sec[64];
		snprintf(sec, sizeof(sec), "shard %s", cfg->shards[i].id);
		if (!cfg->shards[i].dsn) {
			bad(x, sec, "dsn", "missing; every shard needs a dsn");
			continue;
		}
		x->line = cfg->shards[i].dsn_line;
		check_dsn(x, sec, "dsn", cfg->shards[i].dsn);
	}
	if (cfg->meta_dsn) {
		x->line = line_of(x, "meta_dsn");
		check_dsn(x, "cluster", "meta_dsn", cfg->meta_dsn);
	}
	if (cfg->meta_shard && cfg->meta_dsn) {
		x->line = line_of(x, "meta_dsn");
		bad(x, "cluster", "meta_dsn", "set either meta_shard or meta_dsn, not both");
	}
	if (cfg->meta_shard && sq_config_shard_index(cfg, cfg->meta_shard) < 0) {
		x->line = line_of(x, "meta_shard");
		bad(x, "cluster", "meta_shard", "'%s' is not a configured shard", cfg->meta_shard);
	}
	validate_daemon(x);
	validate_schedules(x);
	for (int i = 0; i < cfg->ntypes; i++) {
		sq_type_conf *t = &cfg->types[i];
		char sec[96];
		snprintf(sec, sizeof(sec), "type %s", t->name);
		x->line = t->line;
		if (t->backoff_cap_ms < t->backoff_base_ms)
			bad(x, sec, "backoff_cap", "is below backoff_base");
		validate_limits(x, i, sec);
	}
}

sq_status sq_config_parse(const char *text, const char *name, sq_config **out, sq_error *err)
{
	parse_ctx x;
	sq_status st = SQ_OK;
	memset(&x, 0, sizeof(x));
	*out = NULL;
	x.cfg = calloc(1, sizeof(sq_config));
	x.shard_key_line = calloc((size_t)SQ_MAX_SHARDS * NKEYS, sizeof(int));
	x.type_key_line = calloc((size_t)SQ_MAX_TYPES * NKEYS, sizeof(int));
	x.token_key_line = calloc((size_t)SQ_MAX_TOKENS * NKEYS, sizeof(int));
	x.schedule_key_line = calloc((size_t)SQ_MAX_SCHEDULES * NKEYS, sizeof(int));
	if (!x.cfg || !x.shard_key_line || !x.type_key_line || !x.token_key_line ||
	    !x.schedule_key_line || !(x.cfg->path = strdup(name))) {
		st = sq_err(err, SQ_ENOMEM, "out of memory");
		goto out;
	}
	x.name = name;
	apply_defaults(&x, SEC_CLUSTER, 0);
	apply_defaults(&x, SEC_CONNECTION, 0);
	apply_defaults(&x, SEC_DAEMON, 0);
	apply_defaults(&x, SEC_SCHEDULER, 0);
	parse_text(&x, text);
	for (int i = 0; i < x.cfg->nshards; i++)
		x.cfg->shards[i].dsn_line =
			x.shard_key_line[(size_t)i * NKEYS + key_index(SEC_SHARD, "dsn")];
	validate(&x);
	if (x.nerrors || x.errors.oom || x.oom)
		st = sq_err(err, x.errors.oom || x.oom ? SQ_ENOMEM : SQ_ECONFIG, "%s",
			    x.errors.data && !x.oom ? x.errors.data : "out of memory");
out:
	sq_buf_free(&x.errors);
	free(x.section);
	free(x.shard_key_line);
	free(x.type_key_line);
	free(x.token_key_line);
	free(x.schedule_key_line);
	if (st != SQ_OK) {
		sq_config_free(x.cfg);
		return st;
	}
	*out = x.cfg;
	return SQ_OK;
}

sq_status sq_config_load(const char *path, sq_config **out, sq_error *err)
{
	FILE *f = fopen(path, "r");
	struct stat sb;
	sq_buf b;
	char chunk[4096];
	size_t n;
	sq_status st;
	*out = NULL;
	if (!f)
		return sq_err(err, SQ_ECONFIG, "%s: cannot open the config file: %s", path,
			      strerror(errno));
	if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
		fclose(f);
		return sq_err(err, SQ_ECONFIG, "%s: is a directory, not a config file", path);
	}
	sq_buf_init(&b);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		sq_buf_append(&b, chunk, n);
	if (ferror(f)) {
		int e = errno;
		fclose(f);
		sq_buf_free(&b);
		return sq_err(err, SQ_ECONFIG, "%s: cannot read the config file: %s", path,
			      strerror(e));
	}
	fclose(f);
	if (b.oom) {
		sq_buf_free(&b);
		return sq_err(err, SQ_ENOMEM, "out of memory reading %s", path);
	}
	const char *nul = b.data ? memchr(b.data, '\0', b.len) : NULL;
	if (nul) {
		int line = 1;
		for (const char *p = b.data; p < nul; p++)
			line += *p == '\n';
		sq_buf_free(&b);
		return sq_err(err, SQ_ECONFIG, "%s:%d: a NUL byte; is this a text file?", path,
			      line);
	}
	st = sq_config_parse(b.data ? b.data : "", path, out, err);
	sq_buf_free(&b);
	return st;
}

void sq_config_free(sq_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->meta_shard);
	free(cfg->meta_dsn);
	free(cfg->application_name);
	for (int i = 0; i < cfg->nshards; i++) {
		free(cfg->shards[i].id);
		free(cfg->shards[i].dsn);
	}
	for (int i = 0; i < cfg->ntypes; i++)
		free(cfg->types[i].name);
	for (int i = 0; i < cfg->ntokens; i++) {
		free(cfg->tokens[i].name);
		free(cfg->tokens[i].hash);
		free(cfg->tokens[i].scopes_text);
	}
	for (int i = 0; i < cfg->nschedules; i++) {
		sq_schedule_conf *s = &cfg->schedules[i];
		free(s->name);
		free(s->cron_text);
		free(s->timezone);
		free(s->type);
		free(s->key);
		free(s->params);
	}
	free(cfg->daemon.listen);
	free(cfg->daemon.worker_id);
	free(cfg);
}

const sq_type_conf *sq_config_type(const sq_config *cfg, const char *name)
{
	for (int i = 0; i < cfg->ntypes; i++)
		if (!strcmp(cfg->types[i].name, name))
			return &cfg->types[i];
	return NULL;
}

int sq_config_shard_index(const sq_config *cfg, const char *id)
{
	for (int i = 0; id && i < cfg->nshards; i++)
		if (!strcmp(cfg->shards[i].id, id))
			return i;
	return -1;
}

const char *sq_config_meta_dsn(const sq_config *cfg)
{
	int i;
	if (cfg->meta_dsn)
		return cfg->meta_dsn;
	i = cfg->meta_shard ? sq_config_shard_index(cfg, cfg->meta_shard) : 0;
	return cfg->shards[i < 0 ? 0 : i].dsn;
}

int sq_config_shard_count(const sq_config *cfg)
{
	return cfg->nshards;
}

const char *sq_config_shard_id(const sq_config *cfg, int i)
{
	return i >= 0 && i < cfg->nshards ? cfg->shards[i].id : NULL;
}

uint32_t sq_config_partitions(const sq_config *cfg)
{
	return cfg->partitions;
}

int sq_config_type_count(const sq_config *cfg)
{
	return cfg->ntypes;
}

const char *sq_config_type_name(const sq_config *cfg, int i)
{
	return i >= 0 && i < cfg->ntypes ? cfg->types[i].name : NULL;
}

void sq_config_type_limits(const sq_config *cfg, int i, int32_t *max_running, double *rate)
{
	int in = i >= 0 && i < cfg->ntypes;
	*max_running = in ? cfg->types[i].max_running : 0;
	*rate = in ? cfg->types[i].rate_per_s : 0;
}

/* config.h - the parsed configuration; see conf/shardq.ini for every key. */
#ifndef SQ_CONFIG_H
#define SQ_CONFIG_H

/* the [daemon] and [token NAME] sections, which only shardqd reads */
#include "router_internal.h"
#include "cron.h"
#include "shardq.h"

#define SQ_MAX_SHARDS 256

typedef enum { SQ_BACKOFF_CONSTANT, SQ_BACKOFF_LINEAR, SQ_BACKOFF_EXPONENTIAL } sq_backoff_kind;
typedef enum { SQ_DEDUP_IGNORE, SQ_DEDUP_REPLACE, SQ_DEDUP_MERGE, SQ_DEDUP_RERUN } sq_dedup_policy;

typedef struct sq_shard_conf {
	char *id;
	char *dsn;
	double weight;
	int line;     /* of its section header */
	int dsn_line; /* of its dsn key (0: none) */
} sq_shard_conf;

typedef struct sq_type_conf {
	char *name;
	int64_t starting_timeout_ms;
	int64_t execution_timeout_ms;
	int32_t max_attempts;
	sq_backoff_kind backoff;
	int64_t backoff_base_ms;
	int64_t backoff_cap_ms;
	double backoff_jitter;
	sq_dedup_policy dedup;
	int32_t priority;
	int64_t delay_tolerance_ms; /* 0: none */
	int history;
	double rate_per_s;            /* jobs started per second, fleet-wide (0: no limit) */
	double burst;                 /* the bucket's size in jobs (0: one second of rate) */
	int32_t max_running;          /* starting + running jobs, fleet-wide (0: no limit) */
	int64_t history_retention_ms; /* rounded up to whole days where used */
	int line;
} sq_type_conf;

#define SQ_MAX_TOKENS    64
#define SQ_MAX_SCHEDULES 256
typedef enum { SQ_MISSED_ONCE, SQ_MISSED_SKIP } sq_missed_policy;

/* [schedule NAME]: a periodic job (src/schedule.c). */
typedef struct sq_schedule_conf {
	char *name;
	char *cron_text;  /* as written, or NULL */
	sq_cron cron;     /* parsed from cron_text */
	int64_t every_ms; /* > 0: slots every this long (whole seconds) */
	char *timezone;   /* cron only; NULL: UTC */
	char *type;
	char *key;    /* template; NULL: {name}:{slot} */
	char *params; /* JSON object, or NULL */
	sq_missed_policy missed;
	int64_t max_lateness_ms; /* missed = skip: a slot later than this is missed */
	int line;
} sq_schedule_conf;

/* [scheduler]: whether this process runs the schedules, and how often. */
typedef struct sq_scheduler_conf {
	int enabled;
	int64_t interval_ms;
	int64_t claim_lease_ms;
} sq_scheduler_conf;

struct sq_config {
	char *path;
	uint32_t partitions;
	char *meta_shard; /* shard id holding the meta schema, or NULL */
	char *meta_dsn;   /* explicit meta database, or NULL */
	int notify;       /* enqueue sends NOTIFY shardq_jobs, once per batch per shard */
	/* how often the worker runtime and shardqd run sq_maintain (0: never) */
	int64_t maintain_interval_ms;
	int64_t connect_timeout_ms;
	int64_t statement_timeout_ms;
	/* how long a client waits for an answer (0: statement_timeout +
	 * connect_timeout; sq_client_open) */
	int64_t answer_timeout_ms;
	int64_t idle_in_tx_timeout_ms;
	char *application_name;
	int64_t map_poll_ms;    /* how often a client checks the map version */
	int64_t moving_wait_ms; /* how long a write waits on a moving partition */
	/* statement_timeout of the mover's bulk statements (copy, deletes) */
	int64_t move_statement_timeout_ms;
	int nshards;
	sq_shard_conf shards[SQ_MAX_SHARDS];
	int ntypes;
	sq_type_conf types[SQ_MAX_TYPES];
	sq_daemon_conf daemon;
	int ntokens;
	sq_token_conf tokens[SQ_MAX_TOKENS];
	sq_scheduler_conf scheduler;
	int nschedules;
	sq_schedule_conf schedules[SQ_MAX_SCHEDULES];
};

/* history_retention: at most ten years; kept in whole days (rounded up). */
#define SQ_MAX_HISTORY_RETENTION_DAYS 3650
static inline int sq_retention_days(const sq_type_conf *t)
{
	return (int)((t->history_retention_ms + 86400000 - 1) / 86400000);
}

/* A type with max_running or rate: each shard enforces its share. */
static inline int sq_type_limited(const sq_type_conf *t)
{
	return t->rate_per_s > 0 || t->max_running > 0;
}

/* The type's config, or NULL if the type is not configured. */
const sq_type_conf *sq_config_type(const sq_config *cfg, const char *name);
/* The meta database's DSN (explicit, or the meta shard's). */
const char *sq_config_meta_dsn(const sq_config *cfg);

/* Parses "65536", "64KB", "8MB" or "1GB" (powers of 1024) into bytes; -1 if
 * s is not a size. */
int64_t sq_parse_size(const char *s);

#endif

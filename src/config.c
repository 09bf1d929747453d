/* config.c - INI configuration: one table of keys, then one validation pass
 * that reports every bad key with its file and line. */
#include "config.h"
#include "buf.h"
#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_INT, K_DURATION, K_DOUBLE, K_STRING, K_BOOL, K_ENUM } key_kind;

typedef enum { SEC_CLUSTER, SEC_CONNECTION, SEC_SHARD, SEC_TYPE } sec_kind;

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

#define DAY_MS (86400.0 * 1000)
/* Every key the config knows; conf/shardq.ini documents each one. */
static const key_def keys[] = {
	{SEC_CLUSTER, "partitions", K_INT, "16384", 1, SQ_MAX_PARTITIONS, NULL},
	{SEC_CLUSTER, "meta_shard", K_STRING, NULL, 0, 0, NULL},
	{SEC_CLUSTER, "meta_dsn", K_STRING, NULL, 0, 0, NULL},
	{SEC_CLUSTER, "notify", K_BOOL, "true", 0, 0, NULL},
	{SEC_CONNECTION, "connect_timeout", K_DURATION, "5s", 1000, 600000, NULL},
	{SEC_CONNECTION, "statement_timeout", K_DURATION, "30s", 0, DAY_MS, NULL},
	{SEC_CONNECTION, "idle_in_transaction_session_timeout", K_DURATION, "60s", 0, DAY_MS, NULL},
	{SEC_CONNECTION, "pool_size", K_INT, "1", 1, 64, NULL},
	{SEC_CONNECTION, "application_name", K_STRING, "shardq", 0, 0, NULL},
	{SEC_CONNECTION, "map_poll", K_DURATION, "1s", 0, 3600000, NULL},
	{SEC_CONNECTION, "moving_wait", K_DURATION, "30s", 0, 3600000, NULL},
	{SEC_SHARD, "dsn", K_STRING, NULL, 0, 0, NULL},
	{SEC_SHARD, "weight", K_DOUBLE, "1", 0, 1e6, NULL},
	{SEC_TYPE, "starting_timeout", K_DURATION, "30s", 100, DAY_MS, NULL},
	{SEC_TYPE, "execution_timeout", K_DURATION, "5m", 100, 30 * DAY_MS, NULL},
	{SEC_TYPE, "max_attempts", K_INT, "5", 1, 1000000, NULL},
	{SEC_TYPE, "backoff", K_ENUM, "exponential", 0, 0, backoff_names},
	{SEC_TYPE, "backoff_base", K_DURATION, "1s", 0, 30 * DAY_MS, NULL},
	{SEC_TYPE, "backoff_cap", K_DURATION, "1h", 0, 30 * DAY_MS, NULL},
	{SEC_TYPE, "backoff_jitter", K_DOUBLE, "0.1", 0, 1, NULL},
	{SEC_TYPE, "dedup", K_ENUM, "ignore", 0, 0, dedup_names},
	{SEC_TYPE, "priority", K_INT, "0", -1000000, 1000000, NULL},
	{SEC_TYPE, "delay_tolerance", K_DURATION, "0", 0, 365 * DAY_MS, NULL},
	{SEC_TYPE, "history", K_BOOL, "false", 0, 0, NULL},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

typedef struct parse_ctx {
	sq_config *cfg;
	const char *name;
	int line; /* line of the text being handled, counted by reader */
	sq_buf errors;
	int nerrors;
	const char *text; /* for ini_parse_stream */
	size_t pos;
	int key_line[32]; /* line of each [cluster]/[connection] key, by keys[] index */
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
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || v < 0 || !isfinite(v))
		return -1;
	while (*end == ' ')
		end++;
	if (!strcmp(end, "ms"))
		return (int64_t)v;
	if (!strcmp(end, "s"))
		return (int64_t)(v * 1000);
	if (!strcmp(end, "m") || !strcmp(end, "min"))
		return (int64_t)(v * 60000);
	if (!strcmp(end, "h"))
		return (int64_t)(v * 3600000);
	if (!strcmp(end, "d"))
		return (int64_t)(v * 86400000);
	if (!*end && v == 0)
		return 0;
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

/* Where a key's value is stored, by section and key name. */
static void *slot(sq_config *cfg, sec_kind sec, int idx, const char *name)
{
	sq_shard_conf *sh = sec == SEC_SHARD ? &cfg->shards[idx] : NULL;
	sq_type_conf *t = sec == SEC_TYPE ? &cfg->types[idx] : NULL;
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
		F(SEC_CONNECTION, "connect_timeout", sq_config, connect_timeout_ms),
		F(SEC_CONNECTION, "statement_timeout", sq_config, statement_timeout_ms),
		F(SEC_CONNECTION, "idle_in_transaction_session_timeout", sq_config,
		  idle_in_tx_timeout_ms),
		F(SEC_CONNECTION, "pool_size", sq_config, pool_size),
		F(SEC_CONNECTION, "application_name", sq_config, application_name),
		F(SEC_CONNECTION, "map_poll", sq_config, map_poll_ms),
		F(SEC_CONNECTION, "moving_wait", sq_config, moving_wait_ms),
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
#undef F
	};
	char *base = sh ? (char *)sh : t ? (char *)t : (char *)cfg;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].sec == sec && !strcmp(map[i].name, name))
			return base + map[i].off;
	return NULL;
}

/* Stores one value; returns an error text or NULL. Integers are int32 except
 * durations (int64 ms). */
static const char *store(const key_def *k, void *dst, const char *v, char *why, size_t whylen)
{
	char *end;
	switch (k->kind) {
	case K_INT: {
		long long n;
		errno = 0;
		n = strtoll(v, &end, 10);
		if (end == v || *end || errno)
			return "expected an integer";
		if (n < k->min || n > k->max) {
			snprintf(why, whylen, "%lld is out of range [%.0f, %.0f]", n, k->min,
				 k->max);
			return why;
		}
		if (!strcmp(k->name, "partitions"))
			*(uint32_t *)dst = (uint32_t)n;
		else
			*(int32_t *)dst = (int32_t)n;
		return NULL;
	}
	case K_DURATION: {
		int64_t ms = sq_parse_duration_ms(v);
		if (ms < 0)
			return "expected a duration such as 500ms, 30s, 5m, 1h or 2d";
		if (ms < k->min || ms > k->max) {
			snprintf(why, whylen, "%s is out of range [%.0fms, %.0fms]", v, k->min,
				 k->max);
			return why;
		}
		*(int64_t *)dst = ms;
		return NULL;
	}
	case K_DOUBLE: {
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
	case K_STRING: {
		char *s = strdup(v);
		if (!s)
			return "out of memory";
		free(*(char **)dst);
		*(char **)dst = s;
		return NULL;
	}
	case K_BOOL:
		if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"))
			*(int *)dst = 1;
		else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") ||
			 !strcmp(v, "0"))
			*(int *)dst = 0;
		else
			return "expected true or false";
		return NULL;
	case K_ENUM:
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
	return "unknown key kind";
}

static void apply_defaults(sq_config *cfg, sec_kind sec, int idx)
{
	char why[128];
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].sec != sec || !keys[i].def)
			continue;
		(void)store(&keys[i], slot(cfg, sec, idx, keys[i].name), keys[i].def, why,
			    sizeof(why));
	}
}

/* Finds or adds the shard/type entry named by a "[shard ID]" section. */
static int section_index(parse_ctx *x, sec_kind sec, const char *name, const char *section)
{
	sq_config *cfg = x->cfg;
	if (sec == SEC_SHARD) {
		for (int i = 0; i < cfg->nshards; i++)
			if (!strcmp(cfg->shards[i].id, name))
				return i;
		if (!valid_ident(name, 32)) {
			bad(x, section, NULL,
			    "shard id must be 1-32 letters, digits, '_', '-', '.' or ':'");
			return -1;
		}
		if (cfg->nshards == SQ_MAX_SHARDS) {
			bad(x, section, NULL, "too many shards (at most %d)", SQ_MAX_SHARDS);
			return -1;
		}
		sq_shard_conf *s = &cfg->shards[cfg->nshards];
		s->id = strdup(name);
		s->line = x->line;
		apply_defaults(cfg, SEC_SHARD, cfg->nshards);
		return cfg->nshards++;
	}
	for (int i = 0; i < cfg->ntypes; i++)
		if (!strcmp(cfg->types[i].name, name))
			return i;
	if (!valid_ident(name, SQ_MAX_TYPE_LEN)) {
		bad(x, section, NULL,
		    "type name must be 1-%d letters, digits, '_', '-', '.' or ':'",
		    SQ_MAX_TYPE_LEN);
		return -1;
	}
	if (cfg->ntypes == SQ_MAX_TYPES) {
		bad(x, section, NULL, "too many task types (at most %d)", SQ_MAX_TYPES);
		return -1;
	}
	sq_type_conf *t = &cfg->types[cfg->ntypes];
	t->name = strdup(name);
	t->line = x->line;
	apply_defaults(cfg, SEC_TYPE, cfg->ntypes);
	return cfg->ntypes++;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
	parse_ctx *x = user;
	sec_kind sec;
	int idx = 0;
	const char *arg = NULL;
	char why[256];

	if (!strcmp(section, "cluster"))
		sec = SEC_CLUSTER;
	else if (!strcmp(section, "connection"))
		sec = SEC_CONNECTION;
	else if (!strncmp(section, "shard ", 6))
		sec = SEC_SHARD, arg = section + 6;
	else if (!strncmp(section, "type ", 5))
		sec = SEC_TYPE, arg = section + 5;
	else {
		bad(x, section, name,
		    "unknown section; expected [cluster], [connection], "
		    "[shard ID] or [type NAME]");
		return 1;
	}
	if (arg) {
		while (*arg == ' ')
			arg++;
		if (!valid_ident(arg, sec == SEC_SHARD ? 32 : SQ_MAX_TYPE_LEN))
			return 1; /* reported once, at the section header */
		idx = section_index(x, sec, arg, section);
		if (idx < 0)
			return 1;
	}
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].sec != sec || strcmp(keys[i].name, name))
			continue;
		if (!arg && i < 32)
			x->key_line[i] = x->line;
		const char *e =
			store(&keys[i], slot(x->cfg, sec, idx, name), value, why, sizeof(why));
		if (e)
			bad(x, section, name, "%s", e);
		return 1;
	}
	bad(x, section, name, "unknown key (see conf/shardq.ini for the keys of this section)");
	return 1;
}

/* Feeds inih one line at a time, counting lines for messages. */
static char *reader(char *str, int num, void *stream)
{
	parse_ctx *x = stream;
	size_t i = 0;
	if (!x->text[x->pos])
		return NULL;
	while (x->text[x->pos] && (int)i < num - 1) {
		char c = x->text[x->pos++];
		str[i++] = c;
		if (c == '\n')
			break;
	}
	str[i] = '\0';
	x->line++;
	/* sections are registered here, so that a [type x] with no keys (all
	 * defaults) exists, and its messages name the header's line */
	{
		const char *p = str;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '[') {
			char sec[300];
			size_t n = strcspn(p + 1, "]\n");
			if (p[1 + n] == ']' && n < sizeof(sec)) {
				memcpy(sec, p + 1, n);
				sec[n] = '\0';
				if (!strncmp(sec, "shard ", 6) || !strncmp(sec, "type ", 5)) {
					int is_shard = sec[0] == 's';
					const char *arg = sec + (is_shard ? 6 : 5);
					while (*arg == ' ')
						arg++;
					section_index(x, is_shard ? SEC_SHARD : SEC_TYPE, arg, sec);
				}
			}
		}
	}
	return str;
}

static int is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

static int line_of(parse_ctx *x, const char *name)
{
	for (size_t i = 0; i < NKEYS && i < 32; i++)
		if (keys[i].sec <= SEC_CONNECTION && !strcmp(keys[i].name, name))
			return x->key_line[i];
	return 0;
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
		if (!cfg->shards[i].dsn) {
			char sec[64];
			snprintf(sec, sizeof(sec), "shard %s", cfg->shards[i].id);
			bad(x, sec, "dsn", "missing; every shard needs a dsn");
		}
	}
	if (cfg->meta_shard && cfg->meta_dsn) {
		x->line = line_of(x, "meta_dsn");
		bad(x, "cluster", "meta_dsn", "set either meta_shard or meta_dsn, not both");
	}
	if (cfg->meta_shard && sq_config_shard_index(cfg, cfg->meta_shard) < 0) {
		x->line = line_of(x, "meta_shard");
		bad(x, "cluster", "meta_shard", "'%s' is not a configured shard", cfg->meta_shard);
	}
	for (int i = 0; i < cfg->ntypes; i++) {
		sq_type_conf *t = &cfg->types[i];
		char sec[96];
		snprintf(sec, sizeof(sec), "type %s", t->name);
		x->line = t->line;
		if (t->backoff_cap_ms < t->backoff_base_ms)
			bad(x, sec, "backoff_cap", "is below backoff_base");
	}
}

static sq_status finish(parse_ctx *x, int rc, sq_config **out, sq_error *err)
{
	if (rc < 0) {
		sq_buf_free(&x->errors);
		sq_config_free(x->cfg);
		return sq_err(err, SQ_ECONFIG, "%s: cannot read the file", x->name);
	}
	validate(x);
	if (x->nerrors) {
		sq_err(err, SQ_ECONFIG, "%s", x->errors.data ? x->errors.data : "invalid config");
		sq_buf_free(&x->errors);
		sq_config_free(x->cfg);
		return SQ_ECONFIG;
	}
	sq_buf_free(&x->errors);
	*out = x->cfg;
	return SQ_OK;
}

sq_status sq_config_parse(const char *text, const char *name, sq_config **out, sq_error *err)
{
	parse_ctx x;
	int rc;
	memset(&x, 0, sizeof(x));
	*out = NULL;
	x.cfg = calloc(1, sizeof(sq_config));
	if (!x.cfg)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	x.cfg->path = strdup(name);
	x.name = name;
	x.text = text;
	apply_defaults(x.cfg, SEC_CLUSTER, 0);
	apply_defaults(x.cfg, SEC_CONNECTION, 0);
	rc = ini_parse_stream(reader, &x, on_key, &x);
	/* a syntax error on line N makes inih return N; report it with the rest */
	if (rc > 0) {
		int line = rc;
		x.line = line;
		bad(&x, "?", NULL, "syntax error; expected [section] or key = value");
		rc = 0;
	}
	return finish(&x, rc, out, err);
}

sq_status sq_config_load(const char *path, sq_config **out, sq_error *err)
{
	FILE *f = fopen(path, "r");
	sq_buf b;
	char chunk[4096];
	size_t n;
	sq_status st;
	*out = NULL;
	if (!f)
		return sq_err(err, SQ_ECONFIG, "%s: cannot open the config file: %s", path,
			      strerror(errno));
	sq_buf_init(&b);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		sq_buf_append(&b, chunk, n);
	fclose(f);
	if (b.oom) {
		sq_buf_free(&b);
		return sq_err(err, SQ_ENOMEM, "out of memory reading %s", path);
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
	for (int i = 0; i < cfg->nshards; i++)
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

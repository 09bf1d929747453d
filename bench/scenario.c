/* scenario.c - reads and checks a scenario file: one table of keys, every
 * bad key reported at once with its file and line. */
#include "scenario.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <shardq.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct ctx {
	scenario *sc;
	const char *name; /* file name for messages */
	FILE *f;
	int line;
	char *err;
	size_t errlen, used;
	int nerr;
	int seen_jobs, seen_duration;
} ctx;

static void bad(ctx *x, const char *section, const char *key, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	x->nerr++;
	if (x->used + 1 >= x->errlen)
		return;
	int k = snprintf(x->err + x->used, x->errlen - x->used, "%s%s:%d: [%s]%s%s: %s",
			 x->used ? "\n" : "", x->name, x->line, section, key ? " " : "",
			 key ? key : "", msg);
	if (k > 0)
		x->used += (size_t)k < x->errlen - x->used ? (size_t)k : x->errlen - x->used - 1;
}

/* "250us", "5ms", "2s", "1m", "0"; -1 if not a duration. */
static int64_t parse_us(const char *s)
{
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || v < 0)
		return -1;
	while (isspace((unsigned char)*end))
		end++;
	double mul;
	if (!strcmp(end, "us"))
		mul = 1;
	else if (!strcmp(end, "ms"))
		mul = 1e3;
	else if (!strcmp(end, "s"))
		mul = 1e6;
	else if (!strcmp(end, "m") || !strcmp(end, "min"))
		mul = 60e6;
	else if (!strcmp(end, "h"))
		mul = 3600e6;
	else if (!*end && v == 0)
		mul = 0;
	else
		return -1;
	return (int64_t)llround(v * mul);
}

/* A whole number, written plainly or as 1e7; -1 if not one. */
static int64_t parse_count(const char *s)
{
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	while (isspace((unsigned char)*end))
		end++;
	if (end == s || *end || errno || v < 0 || v > 9e15 || v != floor(v))
		return -1;
	return (int64_t)v;
}

static int parse_bool(const char *s)
{
	if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "1"))
		return 1;
	if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "0"))
		return 0;
	return -1;
}

static int int_in(ctx *x, const char *sec, const char *key, const char *v, int64_t lo, int64_t hi,
		  int64_t *out)
{
	int64_t n = parse_count(v);
	if (n < lo || n > hi) {
		bad(x, sec, key, "'%s' is not a whole number in %lld..%lld", v, (long long)lo,
		    (long long)hi);
		return 0;
	}
	*out = n;
	return 1;
}

static int parse_hosts(ctx *x, const char *sec, const char *key, const char *v)
{
	scenario *sc = x->sc;
	char buf[4096];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *save = NULL, *t = strtok_r(buf, ", \t", &save); t;
	     t = strtok_r(NULL, ", \t", &save)) {
		char *colon = strrchr(t, ':');
		long port = colon ? strtol(colon + 1, NULL, 10) : 0;
		if (!colon || colon == t || port < 1 || port > 65535 ||
		    (size_t)(colon - t) >= sizeof(sc->host[0])) {
			bad(x, sec, key, "'%s' is not HOST:PORT", t);
			return 0;
		}
		if (n == SC_MAX_SHARDS) {
			bad(x, sec, key, "more than %d shards", SC_MAX_SHARDS);
			return 0;
		}
		memcpy(sc->host[n], t, (size_t)(colon - t));
		sc->host[n][colon - t] = '\0';
		sc->port[n++] = (int)port;
	}
	if (!n) {
		bad(x, sec, key, "no shard given; list HOST:PORT, comma-separated");
		return 0;
	}
	sc->nshards = n;
	return 1;
}

static int parse_exec(ctx *x, const char *sec, const char *v, sc_type *t)
{
	char kind[16] = "";
	const char *rest = v;
	size_t k = strcspn(v, " \t");
	if (k >= sizeof(kind))
		k = sizeof(kind) - 1;
	memcpy(kind, v, k);
	rest = v + strcspn(v, " \t");
	while (isspace((unsigned char)*rest))
		rest++;
	if (!strcmp(kind, "noop") && !*rest) {
		t->exec = EXEC_NOOP;
		t->exec_us = 0;
		return 1;
	}
	int64_t us = *rest ? parse_us(rest) : -1;
	if ((!strcmp(kind, "fixed") || !strcmp(kind, "exp")) && us >= 0 && us <= 3600000000LL) {
		t->exec = kind[0] == 'f' ? EXEC_FIXED : EXEC_EXP;
		t->exec_us = us;
		return 1;
	}
	bad(x, sec, "exec", "'%s' is not one of: noop, fixed DURATION, exp MEAN (e.g. exp 2ms)", v);
	return 0;
}

static sc_type *type_named(ctx *x, const char *name, const char *sec)
{
	scenario *sc = x->sc;
	for (int i = 0; i < sc->ntypes; i++)
		if (!strcmp(sc->types[i].name, name))
			return &sc->types[i];
	size_t len = strlen(name);
	int ok = len >= 1 && len <= 64;
	for (size_t i = 0; ok && i < len; i++)
		ok = isalnum((unsigned char)name[i]) || strchr("_-.:", name[i]);
	if (!ok) {
		bad(x, sec, NULL, "a type name is 1-64 letters, digits, '_', '-', '.', ':'");
		return NULL;
	}
	if (sc->ntypes == SC_MAX_TYPES) {
		bad(x, sec, NULL, "more than %d types", SC_MAX_TYPES);
		return NULL;
	}
	sc_type *t = &sc->types[sc->ntypes++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->share = 1;
	t->exec = EXEC_NOOP;
	t->threads = 32;
	t->claim_batch = 0; /* set to twice the threads after parsing */
	t->line = x->line;
	return t;
}

static int on_type_key(ctx *x, const char *sec, const char *tname, const char *key, const char *v)
{
	sc_type *t = type_named(x, tname, sec);
	int64_t n;
	if (!t)
		return 1;
	if (!key)
		return 1; /* the section header alone */
	if (!strcmp(key, "share")) {
		char *end;
		double d = strtod(v, &end);
		if (end == v || *end || !(d > 0) || d > 1e9)
			bad(x, sec, key, "'%s' is not a positive number", v);
		else
			t->share = d;
	} else if (!strcmp(key, "exec")) {
		parse_exec(x, sec, v, t);
	} else if (!strcmp(key, "threads")) {
		if (int_in(x, sec, key, v, 1, 1024, &n))
			t->threads = (int)n;
	} else if (!strcmp(key, "claim_batch")) {
		if (int_in(x, sec, key, v, 1, 100000, &n))
			t->claim_batch = (int)n;
	} else {
		bad(x, sec, key, "unknown key (known: share, exec, threads, claim_batch)");
	}
	return 1;
}

static int parse_baselines(ctx *x, const char *sec, const char *key, const char *v)
{
	scenario *sc = x->sc;
	char buf[256];
	sc->run_a = sc->run_b = sc->run_c = 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *save = NULL, *t = strtok_r(buf, ", \t", &save); t;
	     t = strtok_r(NULL, ", \t", &save)) {
		if (!strcmp(t, "a"))
			sc->run_a = 1;
		else if (!strcmp(t, "b"))
			sc->run_b = 1;
		else if (!strcmp(t, "c"))
			sc->run_c = 1;
		else if (strcmp(t, "none"))
			bad(x, sec, key, "'%s' is not a baseline; list any of a, b, c, or none", t);
	}
	return 1;
}

static int count_item(const char *t, double *out)
{
	int64_t b = parse_count(t);
	*out = (double)b;
	return b >= 0 && b <= 1000000000;
}

static int rate_item(const char *t, double *out)
{
	char *end;
	*out = strtod(t, &end);
	return end != t && !*end && *out >= 0 && *out <= 1e9;
}

/* A comma-separated list of values, one step each: `backlog = 1e5, 1e6` or
 * `rate = 500, 2000`. `item` parses one (0: not valid, said as "'T' is not
 * <is_not>"); `what` names one value. Returns how many, 0 on error. */
static int parse_steps(ctx *x, const char *sec, const char *key, const char *v,
		       int (*item)(const char *, double *), const char *is_not, const char *what,
		       double *out)
{
	char buf[512];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *save = NULL, *t = strtok_r(buf, ", \t", &save); t;
	     t = strtok_r(NULL, ", \t", &save)) {
		double d;
		if (!item(t, &d)) {
			bad(x, sec, key, "'%s' is not %s", t, is_not);
			return 0;
		}
		if (n == SC_MAX_STEPS) {
			bad(x, sec, key, "at most %d %s steps", SC_MAX_STEPS, key);
			return 0;
		}
		out[n++] = d;
	}
	if (!n)
		bad(x, sec, key, "give %s, or a list of them (one run each)", what);
	return n;
}

static int parse_backlog(ctx *x, const char *sec, const char *key, const char *v)
{
	scenario *sc = x->sc;
	double d[SC_MAX_STEPS];
	int n = parse_steps(x, sec, key, v, count_item, "a job count in 0..1e9", "a job count", d);
	for (int i = 0; i < n; i++)
		sc->backlog[i] = (int64_t)d[i];
	if (n)
		sc->nsteps = n;
	return n > 0;
}

/* `rate = 2000` or `rate = 500, 2000, 8000`: offered rates, one step each
 * (the steps scenario). */
static int parse_rates(ctx *x, const char *sec, const char *key, const char *v)
{
	scenario *sc = x->sc;
	int n = parse_steps(x, sec, key, v, rate_item, "a rate in jobs/s (0: unbounded)",
			    "a rate in jobs/s", sc->rates);
	if (n) {
		sc->nrates = n;
		sc->rate = sc->rates[0];
	}
	return n > 0;
}

static void copy_name(ctx *x, const char *sec, const char *key, const char *v, char *out,
		      size_t outlen)
{
	size_t len = strlen(v);
	int ok = len >= 1 && len < outlen && (isalpha((unsigned char)v[0]) || v[0] == '_');
	for (size_t i = 0; ok && i < len; i++)
		ok = isalnum((unsigned char)v[i]) || v[i] == '_';
	if (!ok)
		bad(x, sec, key, "'%s' is not a database name (letters, digits, '_'; at most %zu)",
		    v, outlen - 1);
	else
		snprintf(out, outlen, "%s", v);
}

/* `via = library` (0) or `via = http` (1); -1 otherwise. */
static int parse_via(const char *s)
{
	return !strcmp(s, "library") ? 0 : !strcmp(s, "http") ? 1 : -1;
}

/* [rebalance] */
static void on_rebalance_key(ctx *x, const char *sec, const char *key, const char *v)
{
	scenario *sc = x->sc;
	int64_t n;
	sc->rebalance = 1;
	if (!strcmp(key, "live")) {
		if (int_in(x, sec, key, v, 0, 100000000, &n))
			sc->rb_live = n;
	} else if (!strcmp(key, "steady")) {
		int64_t us = parse_us(v);
		if (us < 1000000 || us > 3600000000LL)
			bad(x, sec, key, "'%s' is not a duration in 1s..1h", v);
		else
			sc->rb_steady_ms = us / 1000;
	} else if (!strcmp(key, "set_size")) {
		if (int_in(x, sec, key, v, 1, 65536, &n))
			sc->rb_set_size = (int)n;
	} else {
		bad(x, sec, key, "unknown key (known: live, steady, set_size)");
	}
}

static int on_key(void *user, const char *sec, const char *key, const char *v)
{
	ctx *x = user;
	scenario *sc = x->sc;
	int64_t n;
	int b;
	if (!strncmp(sec, "type ", 5))
		return on_type_key(x, sec, sec + 5, key, v);
	if (!strcmp(sec, "rebalance"))
		sc->rebalance = 1;
	if (!key)
		return 1;
	if (!strcmp(sec, "rebalance")) {
		on_rebalance_key(x, sec, key, v);
		return 1;
	}
	if (!strcmp(sec, "scenario")) {
		if (!strcmp(key, "name"))
			snprintf(sc->name, sizeof(sc->name), "%s", v);
		else if (!strcmp(key, "description"))
			snprintf(sc->description, sizeof(sc->description), "%s", v);
		else
			bad(x, sec, key, "unknown key (known: name, description)");
	} else if (!strcmp(sec, "shards")) {
		if (!strcmp(key, "hosts"))
			parse_hosts(x, sec, key, v);
		else if (!strcmp(key, "database"))
			copy_name(x, sec, key, v, sc->database, sizeof(sc->database));
		else if (!strcmp(key, "partitions")) {
			if (int_in(x, sec, key, v, 1, 65536, &n)) {
				if (n & (n - 1))
					bad(x, sec, key, "%lld is not a power of two",
					    (long long)n);
				sc->partitions = (uint32_t)n;
			}
		} else if (!strcmp(key, "notify")) {
			if ((b = parse_bool(v)) < 0)
				bad(x, sec, key, "'%s' is not true or false", v);
			else
				sc->notify = b;
		} else
			bad(x, sec, key,
			    "unknown key (known: hosts, database, partitions, notify)");
	} else if (!strcmp(sec, "producers")) {
		if (!strcmp(key, "count")) {
			if (int_in(x, sec, key, v, 0, 256, &n))
				sc->producers = (int)n;
		} else if (!strcmp(key, "batch")) {
			if (int_in(x, sec, key, v, 1, 100000, &n))
				sc->batch = (int)n;
		} else if (!strcmp(key, "rate")) {
			parse_rates(x, sec, key, v);
		} else if (!strcmp(key, "keys")) {
			if ((b = parse_bool(v)) < 0)
				bad(x, sec, key, "'%s' is not true or false", v);
			else
				sc->keys = b;
		} else if (!strcmp(key, "via")) {
			if ((b = parse_via(v)) < 0)
				bad(x, sec, key, "'%s' is not library or http", v);
			else
				sc->producers_http = b;
		} else if (!strcmp(key, "depth")) {
			if (int_in(x, sec, key, v, 0, 100000000, &n))
				sc->depth = n;
		} else if (!strcmp(key, "in_flight")) {
			if (int_in(x, sec, key, v, 1, SQ_ENQUEUER_MAX_IN_FLIGHT, &n))
				sc->in_flight = (int)n;
		} else
			bad(x, sec, key,
			    "unknown key (known: count, batch, rate, keys, via, depth, in_flight)");
	} else if (!strcmp(sec, "workers")) {
		if (!strcmp(key, "processes")) {
			if (int_in(x, sec, key, v, 0, 64, &n))
				sc->processes = (int)n;
		} else if (!strcmp(key, "min_prefetch")) {
			if (int_in(x, sec, key, v, 0, 100000, &n))
				sc->min_prefetch = (int)n;
		} else if (!strcmp(key, "listen")) {
			if ((b = parse_bool(v)) < 0)
				bad(x, sec, key, "'%s' is not true or false", v);
			else
				sc->listen = b;
		} else if (!strcmp(key, "poll")) {
			int64_t us = parse_us(v);
			if (us < 1000 || us > 60000000)
				bad(x, sec, key, "'%s' is not a duration in 1ms..60s", v);
			else
				sc->poll_ms = us / 1000;
		} else if (!strcmp(key, "via")) {
			if ((b = parse_via(v)) < 0)
				bad(x, sec, key, "'%s' is not library or http", v);
			else
				sc->workers_http = b;
		} else if (!strcmp(key, "clients")) {
			if (int_in(x, sec, key, v, 1, 4096, &n))
				sc->clients = (int)n;
		} else if (!strcmp(key, "wait")) {
			int64_t us = parse_us(v);
			if (us < 0 || us > 20000000)
				bad(x, sec, key, "'%s' is not a duration in 0..20s", v);
			else
				sc->wait_ms = us / 1000;
		} else if (!strcmp(key, "pipeline")) {
			if ((b = parse_bool(v)) < 0)
				bad(x, sec, key, "'%s' is not true or false", v);
			else
				sc->pipeline = b;
		} else
			bad(x, sec, key,
			    "unknown key (known: processes, min_prefetch, listen, poll, via, "
			    "clients, wait, pipeline)");
	} else if (!strcmp(sec, "daemon")) {
		if (!strcmp(key, "threads")) {
			if (int_in(x, sec, key, v, 1, 256, &n))
				sc->daemon_threads = (int)n;
		} else if (!strcmp(key, "claim_poll")) {
			int64_t us = parse_us(v);
			if (us < 1000 || us > 60000000)
				bad(x, sec, key, "'%s' is not a duration in 1ms..60s", v);
			else
				sc->daemon_claim_poll_ms = us / 1000;
		} else
			bad(x, sec, key, "unknown key (known: threads, claim_poll)");
	} else if (!strcmp(sec, "run")) {
		if (!strcmp(key, "jobs")) {
			if (int_in(x, sec, key, v, 1, 1000000000, &n))
				sc->jobs = n;
			x->seen_jobs = 1;
		} else if (!strcmp(key, "duration")) {
			int64_t us = parse_us(v);
			if (us < 1000000 || us > 86400000000LL)
				bad(x, sec, key, "'%s' is not a duration in 1s..1d", v);
			else
				sc->duration_ms = us / 1000;
			x->seen_duration = 1;
		} else if (!strcmp(key, "warmup")) {
			int64_t us = parse_us(v);
			if (us < 0 || us > 3600000000LL)
				bad(x, sec, key, "'%s' is not 0 or a duration up to 1h", v);
			else
				sc->warmup_ms = us / 1000;
		} else if (!strcmp(key, "backlog")) {
			parse_backlog(x, sec, key, v);
		} else if (!strcmp(key, "timeout")) {
			int64_t us = parse_us(v);
			if (us < 1000000)
				bad(x, sec, key, "'%s' is not a duration of at least 1s", v);
			else
				sc->timeout_ms = us / 1000;
		} else if (!strcmp(key, "stall")) {
			int64_t us = parse_us(v);
			if (us < 0 || (us > 0 && us < 1000000))
				bad(x, sec, key, "'%s' is not 0 or a duration of at least 1s", v);
			else
				sc->stall_ms = us / 1000;
		} else if (!strcmp(key, "sample")) {
			int64_t us = parse_us(v);
			if (us < 100000 || us > 60000000)
				bad(x, sec, key, "'%s' is not a duration in 100ms..60s", v);
			else
				sc->sample_ms = (int)(us / 1000);
		} else if (!strcmp(key, "baselines")) {
			parse_baselines(x, sec, key, v);
		} else
			bad(x, sec, key,
			    "unknown key (known: jobs, duration, warmup, backlog, timeout, stall, "
			    "sample, baselines)");
	} else if (!strcmp(sec, "baselines")) {
		if (!strcmp(key, "workers")) {
			if (int_in(x, sec, key, v, 1, 150, &n))
				sc->base_workers = (int)n;
		} else if (!strcmp(key, "producers")) {
			if (int_in(x, sec, key, v, 1, 64, &n))
				sc->base_producers = (int)n;
		} else if (!strcmp(key, "claim")) {
			if (int_in(x, sec, key, v, 1, 100000, &n))
				sc->base_claim = (int)n;
		} else if (!strcmp(key, "raw_batch")) {
			if (int_in(x, sec, key, v, 1, 100000, &n))
				sc->raw_batch = (int)n;
		} else if (!strcmp(key, "raw_connections")) {
			if (int_in(x, sec, key, v, 1, 64, &n))
				sc->raw_conns = (int)n;
		} else if (!strcmp(key, "database")) {
			copy_name(x, sec, key, v, sc->base_database, sizeof(sc->base_database));
		} else
			bad(x, sec, key,
			    "unknown key (known: workers, producers, claim, raw_batch, "
			    "raw_connections, database)");
	} else {
		bad(x, sec, NULL,
		    "unknown section (known: scenario, shards, producers, workers, daemon, type "
		    "NAME, run, baselines, rebalance)");
	}
	return 1;
}

/* Feeds inih one line at a time, counting lines for messages. */
static char *reader(char *str, int num, void *stream)
{
	ctx *x = stream;
	char *r = fgets(str, num, x->f);
	if (r)
		x->line++;
	return r;
}

static void defaults(scenario *sc)
{
	memset(sc, 0, sizeof(*sc));
	snprintf(sc->database, sizeof(sc->database), "shardq_bench");
	snprintf(sc->base_database, sizeof(sc->base_database), "shardq_bench_baseline");
	for (int i = 0; i < 4; i++) {
		snprintf(sc->host[i], sizeof(sc->host[i]), "127.0.0.1");
		sc->port[i] = 55631 + i;
	}
	sc->nshards = 4;
	sc->partitions = 16384;
	sc->notify = 1;
	sc->producers = 2;
	sc->batch = 1000;
	sc->in_flight = 1;
	sc->processes = 2;
	sc->listen = 1;
	sc->poll_ms = 1000;
	sc->clients = 64;
	sc->wait_ms = 1000;
	sc->daemon_threads = 4;
	sc->nsteps = 1;
	sc->timeout_ms = 3600000;
	sc->stall_ms = 30000;
	sc->sample_ms = 1000;
	sc->run_a = sc->run_b = sc->run_c = 1;
	sc->base_workers = 8;
	sc->base_claim = 100;
	sc->raw_batch = 1000;
	sc->raw_conns = 4;
	sc->rb_steady_ms = 10000;
	sc->rb_set_size = 256;
}

/* A [rebalance] run: its length is the moves', on a shard to add. */
static void check_rebalance(ctx *x)
{
	scenario *sc = x->sc;
	if (sc->jobs || sc->duration_ms)
		bad(x, "run", sc->jobs ? "jobs" : "duration",
		    "a [rebalance] run lasts as long as its moves and steady periods take; "
		    "leave jobs and duration out");
	if (sc->nshards < 2)
		bad(x, "shards", "hosts",
		    "a [rebalance] run needs two shards at least (the last one is added and "
		    "drained)");
	if (!sc->producers)
		bad(x, "producers", "count", "a [rebalance] run needs producers");
	if (sc->nsteps > 1 || sc->backlog[0] || sc->nrates > 1)
		bad(x, "run", "backlog",
		    "a [rebalance] run has one step and no ready backlog ([rebalance] live "
		    "gives it jobs that wait)");
	if (sc->workers_http || sc->producers_http)
		bad(x, "rebalance", NULL, "a [rebalance] run drives library workers and producers");
	sc->run_a = sc->run_b = sc->run_c = 0;
}

/* Checks that need the whole file. */
static void check(ctx *x)
{
	scenario *sc = x->sc;
	x->line = 0;
	if (x->seen_jobs && x->seen_duration)
		bad(x, "run", NULL, "give jobs or duration, not both");
	if (sc->rebalance)
		check_rebalance(x);
	else if (!sc->jobs && !sc->duration_ms) {
		int any_backlog = 0;
		for (int i = 0; i < sc->nsteps; i++)
			any_backlog |= sc->backlog[i] > 0;
		if (any_backlog && !sc->producers) {
			/* a backlog-only run: drain it all */
		} else {
			bad(x, "run", NULL, "give the length: jobs = N or duration = 30s");
		}
	}
	if (sc->duration_ms && !sc->producers)
		bad(x, "run", "duration", "a run by duration needs producers ([producers] count)");
	if (sc->warmup_ms && sc->duration_ms && sc->warmup_ms >= sc->duration_ms)
		bad(x, "run", "warmup",
		    "the warm-up (%lld ms) leaves nothing of the %lld ms run to measure: make it "
		    "shorter than duration",
		    (long long)sc->warmup_ms, (long long)sc->duration_ms);
	if (sc->nrates > 1) {
		/* one step per offered rate, each with the same backlog */
		if (sc->nsteps > 1 && sc->nsteps != sc->nrates)
			bad(x, "producers", "rate",
			    "%d rates and %d backlog steps: give as many of each, or a list of "
			    "only one of them",
			    sc->nrates, sc->nsteps);
		else if (!sc->producers)
			bad(x, "producers", "rate",
			    "rate steps need producers ([producers] count)");
		for (int i = sc->nsteps; i < sc->nrates; i++)
			sc->backlog[i] = sc->backlog[0];
		sc->nsteps = sc->nrates;
	}
	if (!sc->ntypes)
		bad(x, "type NAME", NULL, "no task type; add a [type NAME] section");
	if (!sc->processes)
		bad(x, "workers", "processes", "at least one worker process is needed");
	for (int i = 0; i < sc->ntypes; i++) {
		sc_type *t = &sc->types[i];
		if (!t->claim_batch)
			t->claim_batch = 2 * t->threads;
		if (t->claim_batch < t->threads) {
			x->line = t->line;
			bad(x, "type", "claim_batch",
			    "%d is less than the type's threads (%d): a claim asks for free slots "
			    "plus the buffer",
			    t->claim_batch, t->threads);
		}
	}
	if (!sc->base_producers)
		sc->base_producers = sc->producers ? sc->producers : 1;
	if (!sc->name[0]) {
		const char *b = strrchr(sc->path, '/');
		b = b ? b + 1 : sc->path;
		snprintf(sc->name, sizeof(sc->name), "%.*s", (int)strcspn(b, "."), b);
	}
}

/* "section.key=value" or "type NAME.key=value". */
static void apply_override(ctx *x, const char *ov)
{
	char sec[128], key[64];
	const char *eq = strchr(ov, '='), *dot;
	x->line = 0;
	if (!eq) {
		bad(x, "--set", NULL, "'%s' is not SECTION.KEY=VALUE", ov);
		return;
	}
	dot = NULL;
	for (const char *p = ov; p < eq; p++)
		if (*p == '.')
			dot = p;
	if (!dot || dot == ov || (size_t)(dot - ov) >= sizeof(sec) ||
	    (size_t)(eq - dot - 1) >= sizeof(key) || eq == dot + 1) {
		bad(x, "--set", NULL, "'%s' is not SECTION.KEY=VALUE", ov);
		return;
	}
	memcpy(sec, ov, (size_t)(dot - ov));
	sec[dot - ov] = '\0';
	memcpy(key, dot + 1, (size_t)(eq - dot - 1));
	key[eq - dot - 1] = '\0';
	if (!strcmp(sec, "run") && !strcmp(key, "jobs")) {
		x->sc->duration_ms = 0;
		x->seen_duration = 0;
	}
	if (!strcmp(sec, "run") && !strcmp(key, "duration")) {
		x->sc->jobs = 0;
		x->seen_jobs = 0;
	}
	on_key(x, sec, key, eq + 1);
}

int scenario_load(const char *path, const char *const *overrides, int noverrides, scenario *sc,
		  char *errbuf, size_t errlen)
{
	ctx x = {sc, path, NULL, 0, errbuf, errlen, 0, 0, 0, 0};
	defaults(sc);
	snprintf(sc->path, sizeof(sc->path), "%s", path);
	errbuf[0] = '\0';
	x.f = fopen(path, "r");
	if (!x.f) {
		snprintf(errbuf, errlen, "%s: cannot open: %s; give a file of bench/scenarios/",
			 path, strerror(errno));
		return -1;
	}
	int rc = ini_parse_stream(reader, &x, on_key, &x);
	fclose(x.f);
	if (rc > 0) {
		x.line = rc;
		bad(&x, "?", NULL, "not INI syntax ([section] or key = value)");
	}
	for (int i = 0; i < noverrides; i++)
		apply_override(&x, overrides[i]);
	check(&x);
	return x.nerr ? -1 : 0;
}

int scenario_set_ports(scenario *sc, const char *ports, char *errbuf, size_t errlen)
{
	char buf[1024];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", ports);
	for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t;
	     t = strtok_r(NULL, ", ", &save)) {
		char *end;
		long p = strtol(t, &end, 10);
		if (*end || p < 1 || p > 65535 || n == SC_MAX_SHARDS) {
			snprintf(errbuf, errlen,
				 "--ports: '%s' is not a port; give ports, comma-separated "
				 "(at most %d)",
				 t, SC_MAX_SHARDS);
			return -1;
		}
		snprintf(sc->host[n], sizeof(sc->host[n]), "127.0.0.1");
		sc->port[n++] = (int)p;
	}
	if (!n) {
		snprintf(errbuf, errlen, "--ports: no port given");
		return -1;
	}
	sc->nshards = n;
	return 0;
}

int scenario_uses_daemon(const scenario *sc)
{
	return sc->workers_http || sc->producers_http;
}

int scenario_worker_procs(const scenario *sc)
{
	if (sc->workers_http && sc->clients < sc->processes)
		return sc->clients;
	return sc->processes;
}

int scenario_clients_of(const scenario *sc, int idx)
{
	int n = scenario_worker_procs(sc);
	if (!sc->workers_http || idx < 0 || idx >= n)
		return 0;
	return sc->clients / n + (idx < sc->clients % n);
}

int scenario_threads(const scenario *sc)
{
	int n = 0;
	for (int i = 0; i < sc->ntypes; i++)
		n += sc->types[i].threads;
	return n;
}

int scenario_type_of(const scenario *sc, uint64_t i)
{
	double sum = 0, u;
	if (sc->ntypes == 1)
		return 0;
	for (int t = 0; t < sc->ntypes; t++)
		sum += sc->types[t].share;
	u = (double)(XXH3_64bits(&i, sizeof(i)) >> 11) / 9007199254740992.0 * sum;
	for (int t = 0; t < sc->ntypes; t++) {
		if (u < sc->types[t].share)
			return t;
		u -= sc->types[t].share;
	}
	return sc->ntypes - 1;
}

void scenario_exec_text(const sc_type *t, char *out, size_t outlen)
{
	const char *kind = t->exec == EXEC_NOOP ? "noop" : t->exec == EXEC_FIXED ? "fixed" : "exp";
	if (t->exec == EXEC_NOOP)
		snprintf(out, outlen, "noop");
	else if (t->exec_us % 1000)
		snprintf(out, outlen, "%s %lldus", kind, (long long)t->exec_us);
	else
		snprintf(out, outlen, "%s %lldms", kind, (long long)(t->exec_us / 1000));
}

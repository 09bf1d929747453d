/* parse.c - the command line's pure parsers: strict integers, job
 * references (ID:ATTEMPT and `shardq claim` lines) and job-file lines. No
 * I/O; tests/fuzz runs them on any input. */
#include "parse.h"

#include "json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_int(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out)
{
	size_t i = len && s[0] == '-';
	uint64_t v = 0;
	int over = 0;
	int64_t r;
	if (i == len)
		return -1;
	for (; i < len; i++) {
		unsigned d = (unsigned char)s[i] - '0';
		if (d > 9)
			return -1;
		if (v > (UINT64_MAX - d) / 10)
			over = 1; /* keep reading: "99...9x" is not a number at all */
		else
			v = v * 10 + d;
	}
	if (over || v > (uint64_t)INT64_MAX + (s[0] == '-'))
		return -2;
	if (s[0] == '-')
		r = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
	else
		r = (int64_t)v;
	if (r < lo || r > hi)
		return -2;
	*out = r;
	return 0;
}

int cli_parse_ref(const char *s, sq_job_ref *ref)
{
	const char *colon = strchr(s, ':');
	int64_t id, att;
	if (!colon || cli_int(s, (size_t)(colon - s), 1, INT64_MAX, &id) ||
	    cli_int(colon + 1, strlen(colon + 1), 0, INT32_MAX, &att))
		return -1;
	ref->id = id;
	ref->attempt = (int32_t)att;
	return 0;
}

/* One line of `shardq claim` output: its "id" and "attempt"; other members
 * are ignored. Returns NULL or what is wrong. */
const char *cli_ref_of_line(const char *line, size_t len, sq_job_ref *ref, char *why, size_t wlen)
{
	size_t pos = 0, where;
	const char *what;
	sq_json_member m;
	int64_t v[2];
	int have[2] = {0, 0};
	if (sq_json_validate_object(line, len, &where, &what)) {
		snprintf(why, wlen, "invalid JSON: %s at column %zu", what, where + 1);
		return why;
	}
	while (sq_json_next_member(line, len, &pos, &m)) {
		char key[16];
		int k;
		if (m.key_len >= sizeof(key))
			continue;
		sq_json_unescape(m.key, m.key_len, key);
		k = !strcmp(key, "id") ? 0 : !strcmp(key, "attempt") ? 1 : -1;
		if (k < 0)
			continue;
		if (have[k]) {
			snprintf(why, wlen, "\"%s\" appears twice", key);
			return why;
		}
		have[k] = 1;
		int e = m.kind == SQ_JSON_NUMBER ? cli_int(m.val, m.val_len, k ? 0 : 1,
							   k ? INT32_MAX : INT64_MAX, &v[k])
						 : -1;
		if (e) {
			snprintf(why, wlen, "\"%s\" %.*s %s (%s)", key,
				 (int)(m.val_len > 40 ? 40 : m.val_len), m.val,
				 e == -1 ? "is not an integer" : "is out of range",
				 k ? "0..2147483647" : "1..9223372036854775807");
			return why;
		}
	}
	if (!have[0] || !have[1])
		return "expected a JSON object with integer \"id\" and \"attempt\" (as printed by "
		       "shardq claim)";
	ref->id = v[0];
	ref->attempt = (int32_t)v[1];
	return NULL;
}

void cli_line_jobs_free(line_job *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].type);
		free(v[i].key);
		free(v[i].params);
	}
	free(v);
}

/* The members a job line may have. */
enum {
	F_TYPE,
	F_KEY,
	F_PARAMS,
	F_PRIORITY,
	F_DELAY,
	F_RUN_AT,
	F_TOLERANCE,
	F_MAX_ATTEMPTS,
	F_RUN_AT_MS, /* as HTTP takes it */
	NFIELDS
};
static const char *const field_name[NFIELDS] = {"type",
						"key",
						"params",
						"priority",
						"delay_ms",
						"run_at_us",
						"delay_tolerance_ms",
						"max_attempts",
						"run_at_ms"};
/* the integers' bounds, checked before anything is narrowed */
static const int64_t field_lo[NFIELDS] = {
	[F_PRIORITY] = SQ_MIN_PRIORITY, [F_MAX_ATTEMPTS] = 1, [F_RUN_AT_MS] = 1};
static const int64_t field_hi[NFIELDS] = {
	[F_PRIORITY] = SQ_MAX_PRIORITY,     [F_DELAY] = SQ_MAX_DELAY_MS,
	[F_RUN_AT] = SQ_MAX_RUN_AT_US,      [F_TOLERANCE] = SQ_MAX_DELAY_TOLERANCE_MS,
	[F_MAX_ATTEMPTS] = SQ_MAX_ATTEMPTS, [F_RUN_AT_MS] = SQ_MAX_RUN_AT_US / 1000,
};

/* A string member's value, decoded (valid UTF-8, no NUL: the validator saw
 * to both). */
static char *member_string(const sq_json_member *m)
{
	char *s = malloc(m->val_len); /* the two quotes leave room for the NUL */
	if (s)
		sq_json_unescape(m->val + 1, m->val_len - 2, s);
	return s;
}

/* Sets one integer member; returns NULL or what is wrong. */
static const char *int_member(line_job *lj, int f, const sq_json_member *m, char *why, size_t wlen)
{
	int64_t v;
	int e = m->kind == SQ_JSON_NUMBER
			? cli_int(m->val, m->val_len, field_lo[f], field_hi[f], &v)
			: -1;
	if (e) {
		snprintf(why, wlen,
			 "\"%s\" %.*s%s %s; it takes an integer in %" PRId64 "..%" PRId64,
			 field_name[f], (int)(m->val_len > 40 ? 40 : m->val_len), m->val,
			 m->val_len > 40 ? "..." : "",
			 e == -1 ? "is not an integer" : "is out of range", field_lo[f],
			 field_hi[f]);
		return why;
	}
	switch (f) {
	case F_PRIORITY: lj->spec.has_priority = 1, lj->spec.priority = (int32_t)v; break;
	case F_DELAY: lj->spec.delay_ms = v; break;
	case F_RUN_AT: lj->spec.run_at_us = v; break;
	case F_RUN_AT_MS: lj->spec.run_at_us = v * 1000; break;
	/* in a file, 0 says "none"; leaving the field out takes the type's */
	case F_TOLERANCE: lj->spec.delay_tolerance_ms = v ? v : SQ_NO_DELAY_TOLERANCE; break;
	default: lj->spec.max_attempts = (int32_t)v; break;
	}
	return NULL;
}

/* One JSON-lines job: {"type", "key", "params", "priority", "delay_ms",
 * "run_at_us", "delay_tolerance_ms", "max_attempts"}, checked as sq_enqueue
 * will check it; also a line of an HTTP enqueue's "jobs" ("run_at_ms", and
 * "delay_tolerance_ms": null for none). params are kept as written, byte
 * for byte. Returns NULL or what is wrong. */
const char *cli_parse_job_line(const sq_config *cfg, const char *text, size_t len, line_job *lj,
			       char *why, size_t wlen)
{
	size_t pos = 0, where;
	const char *what, *bad;
	sq_json_member m;
	unsigned seen = 0;
	sq_error err;
	if (sq_json_validate_object(text, len, &where, &what)) {
		snprintf(why, wlen, "invalid JSON: %s (column %zu)", what, where + 1);
		return why;
	}
	while (sq_json_next_member(text, len, &pos, &m)) {
		char name[24];
		int f = NFIELDS;
		if (m.key_len < sizeof(name)) {
			sq_json_unescape(m.key, m.key_len, name);
			for (f = 0; f < NFIELDS && strcmp(name, field_name[f]); f++)
				;
		}
		if (f == NFIELDS) {
			snprintf(why, wlen,
				 "unknown field \"%.*s\" (known: type, key, params, priority, "
				 "delay_ms, run_at_us or run_at_ms, delay_tolerance_ms, "
				 "max_attempts)",
				 (int)(m.key_len > 40 ? 40 : m.key_len), m.key);
			return why;
		}
		if (seen & (1u << f)) {
			snprintf(why, wlen, "field \"%s\" appears twice", field_name[f]);
			return why;
		}
		seen |= 1u << f;
		if ((seen & (1u << F_RUN_AT)) && (seen & (1u << F_RUN_AT_MS)))
			return "give run_at_us or run_at_ms, not both";
		if ((f == F_KEY || f == F_PARAMS) && m.kind == SQ_JSON_NULL)
			continue;                                 /* none; params: {} */
		if (f == F_TOLERANCE && m.kind == SQ_JSON_NULL) { /* none, as over HTTP */
			lj->spec.delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE;
			continue;
		}
		if (f == F_TYPE || f == F_KEY) {
			char **dst = f == F_TYPE ? &lj->type : &lj->key;
			if (m.kind != SQ_JSON_STRING) {
				snprintf(why, wlen, "\"%s\" must be a string%s", field_name[f],
					 f == F_KEY ? " or null" : "");
				return why;
			}
			if (!(*dst = member_string(&m)))
				return "out of memory";
		} else if (f == F_PARAMS) {
			if (m.kind != SQ_JSON_OBJECT)
				return "\"params\" must be a JSON object ({...}) or null";
			if (!(lj->params = strndup(m.val, m.val_len)))
				return "out of memory";
		} else if ((bad = int_member(lj, f, &m, why, wlen))) {
			return bad;
		}
	}
	if (!lj->type)
		return "\"type\" (a string) is required";
	if ((seen & (1u << F_RUN_AT_MS)) && lj->spec.delay_ms)
		return "give run_at_ms or delay_ms, not both";
	lj->spec.type = lj->type;
	lj->spec.key = lj->key;
	lj->spec.params = lj->params;
	if (sq_job_spec_check(cfg, &lj->spec, &err) != SQ_OK) {
		snprintf(why, wlen, "%s", err.msg);
		return why;
	}
	return NULL;
}

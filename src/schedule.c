/* schedule.c - periodic jobs: the cron parser, slot arithmetic in a time
 * zone, and the scheduler pass that enqueues each slot once (the meta
 * table shardq_meta.schedules, sql/meta/003_schedules.sql). */
#include "schedule.h"
#include "client.h"
#include "clock.h"
#include "config.h"
#include "error.h"
#include "failpoint.h"
#include "pool.h"
#include "ticker.h"
#include "watch.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NONE INT64_MIN
/* how far a search looks for a matching minute: 10 years of minutes */
#define SEARCH_MINUTES (INT64_C(1440) * 366 * 10)

/* ---- cron expressions --------------------------------------------------- */

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
					  "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const dow_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

typedef struct field_def {
	const char *what;
	int lo, hi;
	const char *const *names; /* lo + i */
	int nnames;
} field_def;

static const field_def fields[5] = {
	{"minute", 0, 59, NULL, 0},          {"hour", 0, 23, NULL, 0},
	{"day of month", 1, 31, NULL, 0},    {"month", 1, 12, month_names, 12},
	{"day of week", 0, 7, dow_names, 7},
};

/* A number or a name; returns the end, or NULL. */
static const char *field_value(const field_def *f, const char *p, int *v)
{
	if (isdigit((unsigned char)*p)) {
		long n = 0;
		while (isdigit((unsigned char)*p) && n < 1000)
			n = n * 10 + (*p++ - '0');
		*v = (int)n;
		return p;
	}
	for (int i = 0; i < f->nnames; i++)
		if (!strncasecmp(p, f->names[i], 3) && !isalpha((unsigned char)p[3])) {
			*v = (f->names == month_names ? 1 : 0) + i;
			return p + 3;
		}
	return NULL;
}

/* One field ("*", "*\/5", "1,5-9/2,mon-fri") into bits. */
static int parse_field(const field_def *f, const char *text, uint64_t *bits, char *why,
		       size_t whylen)
{
	const char *p = text;
	*bits = 0;
	for (;;) {
		int a, b, step = 1, ranged = 1;
		const char *q;
		if (*p == '*') {
			a = f->lo, b = f->hi;
			if (f->hi == 7)
				b = 6; /* Sunday once */
			p++;
		} else {
			if (!(q = field_value(f, p, &a)))
				goto syntax;
			p = q;
			b = a;
			ranged = *p == '-';
			if (*p == '-') {
				if (!(q = field_value(f, p + 1, &b)))
					goto syntax;
				p = q;
			}
			if (a < f->lo || a > f->hi || b < f->lo || b > f->hi) {
				snprintf(why, whylen, "%s: %d is out of range %d-%d", f->what,
					 a < f->lo || a > f->hi ? a : b, f->lo, f->hi);
				return -1;
			}
			if (b < a) {
				snprintf(why, whylen,
					 "%s: the range %d-%d goes backwards; write it as two "
					 "ranges (%d-%d,%d-%d)",
					 f->what, a, b, a, f->hi, f->lo, b);
				return -1;
			}
		}
		if (*p == '/') {
			int n = 0;
			p++;
			if (!isdigit((unsigned char)*p))
				goto syntax;
			while (isdigit((unsigned char)*p) && n < 1000)
				n = n * 10 + (*p++ - '0');
			if (n < 1 || n > f->hi - f->lo + 1) {
				snprintf(why, whylen, "%s: step %d is out of range 1-%d", f->what,
					 n, f->hi - f->lo + 1);
				return -1;
			}
			step = n;
			if (!ranged)
				b = f->hi == 7 ? 6 : f->hi; /* "a/step": from a to the end */
		}
		for (int v = a; v <= b; v += step)
			*bits |= UINT64_C(1) << v;
		if (*p == ',') {
			p++;
			continue;
		}
		if (!*p)
			break;
		goto syntax;
	}
	if (f->hi == 7 && (*bits >> 7 & 1)) /* 7 is Sunday too */
		*bits = (*bits & 0x7F) | 1;
	return 0;
syntax:
	snprintf(why, whylen,
		 "%s: cannot read '%s' (expected *, N, N-M, a list of those, each with an "
		 "optional /STEP%s)",
		 f->what, text,
		 f->names == month_names ? ", or jan..dec"
		 : f->names              ? ", or sun..sat"
					 : "");
	return -1;
}

int sq_cron_parse(const char *text, sq_cron *out, char *why, size_t whylen)
{
	static const struct {
		const char *name, *expr;
	} macros[] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
		      {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
		      {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
		      {"@hourly", "0 * * * *"}};
	char buf[256], *f[6], *save = NULL;
	int n = 0;
	memset(out, 0, sizeof(*out));
	while (isspace((unsigned char)*text))
		text++;
	if (*text == '@') {
		size_t i;
		for (i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (!strcmp(text, macros[i].name))
				break;
		if (i == sizeof(macros) / sizeof(macros[0])) {
			snprintf(why, whylen,
				 "'%s' is not one of @hourly, @daily, @midnight, @weekly, "
				 "@monthly, @yearly, @annually",
				 text);
			return -1;
		}
		text = macros[i].expr;
	}
	if (strlen(text) >= sizeof(buf)) {
		snprintf(why, whylen, "too long (at most %zu characters)", sizeof(buf) - 1);
		return -1;
	}
	strcpy(buf, text);
	for (char *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (n == 5) {
			n++;
			break;
		}
		f[n++] = w;
	}
	if (n != 5) {
		snprintf(why, whylen,
			 "expected 5 fields (minute hour day-of-month month day-of-week), "
			 "found %s%d",
			 n > 5 ? "more than " : "", n > 5 ? 5 : n);
		return -1;
	}
	uint64_t bits[5];
	for (int i = 0; i < 5; i++)
		if (parse_field(&fields[i], f[i], &bits[i], why, whylen))
			return -1;
	out->minute = bits[0];
	out->hour = (uint32_t)bits[1];
	out->dom = (uint32_t)bits[2];
	out->month = (uint16_t)bits[3];
	out->dow = (uint8_t)bits[4];
	out->dom_any = f[2][0] == '*';
	out->dow_any = f[4][0] == '*';
	/* from 2000-01-01 (a leap year follows every 4 years up to 2096) */
	if (sq_cron_next_wall(out, INT64_C(946684800) - 1) == NONE) {
		snprintf(why, whylen, "never matches a day (such as February 30)");
		return -1;
	}
	return 0;
}

/* ---- calendar arithmetic (proleptic Gregorian, days since 1970-01-01) ---- */

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return q - ((a % b != 0) && ((a < 0) != (b < 0)));
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = floor_div(y, 400);
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = floor_div(z, 146097);
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static int day_ok(const sq_cron *c, int64_t day, int d)
{
	int dow = (int)(floor_div(day + 4, 7) * -7 + day + 4); /* 1970-01-01: Thursday */
	int dom_ok = (int)(c->dom >> d & 1), dow_ok = c->dow >> dow & 1;
	if (c->dom_any && c->dow_any)
		return 1;
	if (c->dom_any)
		return dow_ok;
	if (c->dow_any)
		return dom_ok;
	return dom_ok || dow_ok;
}

int64_t sq_cron_next_wall(const sq_cron *c, int64_t w)
{
	int64_t m = floor_div(w, 60) + 1, end = m + SEARCH_MINUTES;
	while (m < end) {
		int64_t day = floor_div(m, 1440), y;
		int mod = (int)(m - day * 1440), h = mod / 60, mi = mod % 60, mo, d;
		civil_from_days(day, &y, &mo, &d);
		if (!(c->month >> mo & 1)) {
			if (++mo > 12)
				mo = 1, y++;
			m = days_from_civil(y, mo, 1) * 1440;
		} else if (!day_ok(c, day, d)) {
			m = (day + 1) * 1440;
		} else if (!(c->hour >> h & 1)) {
			m = day * 1440 + (h + 1) * 60;
		} else if (!(c->minute >> mi & 1)) {
			m++;
		} else {
			return m * 60;
		}
	}
	return NONE;
}

int64_t sq_cron_prev_wall(const sq_cron *c, int64_t w)
{
	int64_t m = floor_div(w, 60), end = m - SEARCH_MINUTES;
	while (m > end) {
		int64_t day = floor_div(m, 1440), y;
		int mod = (int)(m - day * 1440), h = mod / 60, mi = mod % 60, mo, d;
		civil_from_days(day, &y, &mo, &d);
		if (!(c->month >> mo & 1))
			m = days_from_civil(y, mo, 1) * 1440 - 1;
		else if (!day_ok(c, day, d))
			m = day * 1440 - 1;
		else if (!(c->hour >> h & 1))
			m = day * 1440 + h * 60 - 1;
		else if (!(c->minute >> mi & 1))
			m--;
		else
			return m * 60;
	}
	return NONE;
}

/* ---- time zones ----------------------------------------------------------
 * Offsets come from the C library's reading of the system tz database: TZ
 * is set to the zone under a process-wide lock, tzset() and localtime_r()
 * answer, and TZ is put back (a process started without TZ is left with
 * TZ=:/etc/localtime, which names the same zone, so the environment only
 * ever has a value replaced, never an entry added or removed twice). */

static pthread_mutex_t tz_mu = PTHREAD_MUTEX_INITIALIZER;

static int is_utc(const char *tz)
{
	return !tz || !*tz || !strcmp(tz, "UTC") || !strcmp(tz, "Etc/UTC");
}

int sq_tz_valid(const char *tz)
{
	char path[512];
	struct stat sb;
	const char *dir = getenv("TZDIR");
	if (is_utc(tz))
		return 1;
	if (tz[0] == '/' || tz[0] == '.' || strstr(tz, "..") || strlen(tz) > 200)
		return 0;
	for (const char *p = tz; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("/_-+", *p))
			return 0;
	snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", tz);
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

typedef struct zone {
	int utc;
	char saved[256];
} zone;

static void zone_enter(zone *z, const char *tz)
{
	z->utc = is_utc(tz);
	if (z->utc)
		return;
	pthread_mutex_lock(&tz_mu);
	const char *old = getenv("TZ");
	snprintf(z->saved, sizeof(z->saved), "%s", old ? old : ":/etc/localtime");
	setenv("TZ", tz, 1);
	tzset();
}

static void zone_leave(zone *z)
{
	if (z->utc)
		return;
	setenv("TZ", z->saved, 1);
	tzset();
	pthread_mutex_unlock(&tz_mu);
}

static int64_t off(const zone *z, int64_t t)
{
	struct tm tm;
	time_t tt = (time_t)t;
	if (z->utc || !localtime_r(&tt, &tm))
		return 0;
	return tm.tm_gmtoff;
}

int64_t sq_tz_offset(const char *tz, int64_t t)
{
	zone z;
	zone_enter(&z, tz);
	int64_t o = off(&z, t);
	zone_leave(&z);
	return o;
}

/* The latest wall-clock time shown at or before t: the wall clock itself,
 * unless the clocks went back within the last 3 hours and it has not yet
 * caught up with where it stood. */
static int64_t max_wall(const zone *z, int64_t t)
{
	int64_t now = off(z, t), past = off(z, t - 10800), lo = t - 10800, hi = t;
	if (past <= now)
		return t + now;
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;
		if (off(z, mid) == past)
			lo = mid;
		else
			hi = mid;
	}
	return lo + past > t + now ? lo + past : t + now;
}

/* The first instant at which the wall clock reads W or later. */
static int64_t first_at(const zone *z, int64_t w)
{
	if (z->utc)
		return w;
	int64_t oa = off(z, w - 86400), ob = off(z, w + 86400), best = INT64_MAX;
	int64_t cand[2] = {w - oa, w - ob};
	for (int i = 0; i < 2; i++)
		if (cand[i] + off(z, cand[i]) == w && cand[i] < best)
			best = cand[i];
	if (best != INT64_MAX)
		return best;
	/* in a gap: the moment of the jump */
	int64_t lo = w - (oa > ob ? oa : ob), hi = w - (oa > ob ? ob : oa);
	if (lo + off(z, lo) >= w || hi + off(z, hi) < w)
		return w - oa;
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;
		if (mid + off(z, mid) >= w)
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

int64_t sq_cron_next(const sq_cron *c, const char *tz, int64_t t)
{
	zone z;
	int64_t w, u = NONE;
	zone_enter(&z, tz);
	w = max_wall(&z, t);
	for (int i = 0; i < 1000; i++) {
		if ((w = sq_cron_next_wall(c, w)) == NONE)
			break;
		if ((u = first_at(&z, w)) > t)
			break;
		u = NONE;
	}
	zone_leave(&z);
	return u;
}

int64_t sq_cron_prev(const sq_cron *c, const char *tz, int64_t t)
{
	zone z;
	int64_t w, u = NONE;
	zone_enter(&z, tz);
	w = max_wall(&z, t) + 1;
	for (int i = 0; i < 1000; i++) {
		if ((w = sq_cron_prev_wall(c, w - 1)) == NONE)
			break;
		if ((u = first_at(&z, w)) <= t)
			break;
		u = NONE;
	}
	zone_leave(&z);
	return u;
}

int64_t sq_schedule_next(const sq_schedule_conf *s, int64_t t)
{
	if (s->every_ms > 0) {
		int64_t e = s->every_ms / 1000;
		return (floor_div(t, e) + 1) * e;
	}
	return sq_cron_next(&s->cron, s->timezone, t);
}

int64_t sq_schedule_prev(const sq_schedule_conf *s, int64_t t)
{
	if (s->every_ms > 0) {
		int64_t e = s->every_ms / 1000;
		return floor_div(t, e) * e;
	}
	return sq_cron_prev(&s->cron, s->timezone, t);
}

static void iso_utc(int64_t t, char *out, size_t len)
{
	int64_t day = floor_div(t, 86400), y;
	int sec = (int)(t - day * 86400), m, d;
	civil_from_days(day, &y, &m, &d);
	snprintf(out, len, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02dZ", y, m, d, sec / 3600,
		 sec / 60 % 60, sec % 60);
}

int sq_schedule_key(const char *tmpl, const char *name, int64_t slot, char *out, size_t len,
		    const char **why)
{
	size_t n = 0;
	char tmp[64];
	*why = NULL;
	if (len == 0)
		return -1;
	for (const char *p = tmpl; *p;) {
		const char *put = NULL;
		size_t plen = 1;
		if (*p == '{') {
			const char *e = strchr(p, '}');
			size_t k = e ? (size_t)(e - p + 1) : 0;
			if (k == 6 && !strncmp(p, "{slot}", 6)) {
				iso_utc(slot, tmp, sizeof(tmp));
				put = tmp;
			} else if (k == 7 && !strncmp(p, "{epoch}", 7)) {
				snprintf(tmp, sizeof(tmp), "%" PRId64, slot);
				put = tmp;
			} else if (k == 6 && !strncmp(p, "{name}", 6)) {
				put = name;
			} else {
				*why = "only {slot}, {epoch} and {name} may stand in braces";
				return -1;
			}
			p += k;
			plen = strlen(put);
		} else {
			put = p++;
		}
		for (size_t i = 0; i < plen; i++)
			if (n + 1 < len)
				out[n++] = put[i];
			else
				n++;
	}
	out[n < len ? n : len - 1] = '\0';
	return (int)n;
}

/* ---- the scheduler pass --------------------------------------------------
 * Per schedule, one row in shardq_meta.schedules: last_slot is the latest
 * slot some scheduler claimed (or skipped, or the baseline taken when the
 * schedule was first seen). A slot is claimed by a compare-and-set that
 * moves last_slot forward; only one scheduler's UPDATE can match. The
 * claim carries a lease (lease_until): until the winner confirms the
 * enqueue (lease_until back to NULL), the row is pending, and once the
 * lease has passed any scheduler takes the claim over and enqueues the
 * same slot again, under the same key (so a job still live dedups). */

static PGresult *q(sq_client *c, const char *sql, int n, const char *const *v, sq_error *err)
{
	PGresult *r = sq_pgconn_exec(&c->meta, sql, n, v, err);
	if (!r && strstr(err->msg, "shardq_meta.schedules") && strstr(err->msg, "does not exist"))
		sq_err(err, SQ_ESTATE,
		       "the meta database has no shardq_meta.schedules table (schema older than "
		       "version 3); run 'shardq init' to upgrade it");
	return r;
}

static int changed(PGresult *r)
{
	int n = r ? PQntuples(r) : 0;
	if (r)
		PQclear(r);
	return n;
}

static sq_status enqueue_slot(sq_client *c, const sq_schedule_conf *s, const char *who,
			      int64_t slot, sq_error *err)
{
	char key[SQ_MAX_KEY_LEN + 1], sl[32], id[32];
	const char *why;
	sq_enqueue_result res;
	sq_job_spec spec;
	sq_status st;
	snprintf(sl, sizeof(sl), "%" PRId64, slot);
	if (sq_schedule_key(s->key ? s->key : "{name}:{slot}", s->name, slot, key, sizeof(key),
			    &why) < 0)
		return sq_err(err, SQ_ECONFIG, "[schedule %s] key: %s", s->name, why);
	memset(&spec, 0, sizeof(spec));
	spec.type = s->type;
	spec.key = key;
	spec.params = s->params;
	spec.run_at_us = slot > 0 ? slot * 1000000 : 0;
	sq_failpoint("schedule_claimed");
	st = sq_enqueue(c, &spec, 1, &res, err);
	if (st != SQ_OK) {
		/* hand the claim back at once: the next pass (anyone's) retries */
		sq_error e2;
		const char *v[3] = {s->name, sl, who};
		changed(q(
			c,
			"UPDATE shardq_meta.schedules SET lease_until = now(), updated_at = now() "
			"WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND "
			"claimed_by = $3 AND lease_until IS NOT NULL RETURNING 1",
			3, v, &e2));
		sq_err_prefix(err, "[schedule %s] slot %s", s->name, key);
		return st;
	}
	sq_failpoint("schedule_enqueued");
	snprintf(id, sizeof(id), "%" PRId64, res.id);
	const char *v[4] = {s->name, sl, who, id};
	PGresult *r = q(c,
			"UPDATE shardq_meta.schedules SET lease_until = NULL, enqueued_slot = "
			"last_slot, job_id = $4, enqueues = enqueues + 1, updated_at = now() "
			"WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND claimed_by = "
			"$3 AND lease_until IS NOT NULL RETURNING 1",
			4, v, err);
	if (!r)
		return err->code;
	PQclear(r);
	return SQ_OK;
}

/* seen: (may be NULL) a slot this scheduler saw claimed and confirmed
 * already; while the due slot is not past it, the meta row is not read
 * (last_slot only ever grows), so an idle pass costs no statement. */
static sq_status run_one(sq_client *c, const sq_schedule_conf *s, const char *who, int64_t now,
			 int64_t lease_ms, sq_schedule_pass *p, int64_t *seen, sq_error *err)
{
	char due_s[32], lease_s[32], last_s[32];
	int64_t due = sq_schedule_prev(s, now);
	if (due == NONE || (seen && *seen >= due))
		return SQ_OK;
	snprintf(due_s, sizeof(due_s), "%" PRId64, due);
	snprintf(lease_s, sizeof(lease_s), "%" PRId64, lease_ms);
	const char *v1[1] = {s->name};
	PGresult *r = q(c,
			"SELECT extract(epoch from last_slot)::bigint, lease_until IS NOT NULL, "
			"coalesce(lease_until < now(), false) FROM shardq_meta.schedules WHERE "
			"name = $1",
			1, v1, err);
	if (!r)
		return err->code;
	if (PQntuples(r) == 0) {
		/* first seen: the schedule starts with its next slot */
		PQclear(r);
		const char *v[2] = {s->name, due_s};
		r = q(c,
		      "INSERT INTO shardq_meta.schedules (name, last_slot) VALUES ($1, "
		      "to_timestamp($2::bigint)) ON CONFLICT (name) DO NOTHING",
		      2, v, err);
		if (!r)
			return err->code;
		PQclear(r);
		return SQ_OK;
	}
	int64_t last = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	int pending = PQgetvalue(r, 0, 1)[0] == 't', expired = PQgetvalue(r, 0, 2)[0] == 't';
	PQclear(r);
	snprintf(last_s, sizeof(last_s), "%" PRId64, last);
	if (pending) {
		if (!expired) {
			p->busy++;
			return SQ_OK;
		}
		/* a claim whose enqueue was never confirmed: take it over */
		const char *v[3] = {s->name, last_s, who};
		const char *v4[4] = {v[0], v[1], v[2], lease_s};
		r = q(c,
		      "UPDATE shardq_meta.schedules SET claimed_by = $3, lease_until = now() + "
		      "$4::bigint * interval '1 millisecond', retries = retries + 1, updated_at = "
		      "now() WHERE name = $1 AND last_slot = to_timestamp($2::bigint) AND "
		      "lease_until < now() RETURNING 1",
		      4, v4, err);
		if (!r)
			return err->code;
		if (!changed(r))
			return SQ_OK;
		p->retried++;
		sq_status st = enqueue_slot(c, s, who, last, err);
		if (st == SQ_OK)
			p->enqueued++;
		return st;
	}
	if (last >= due) {
		if (seen)
			*seen = last;
		return SQ_OK;
	}
	const char *v[4] = {s->name, due_s, who, lease_s};
	if (s->missed == SQ_MISSED_SKIP && (now - due) * 1000 > s->max_lateness_ms) {
		/* too late for this slot: record it as passed, run the next */
		r = q(c,
		      "UPDATE shardq_meta.schedules SET last_slot = to_timestamp($2::bigint), "
		      "skipped = skipped + 1, updated_at = now() WHERE name = $1 AND last_slot < "
		      "to_timestamp($2::bigint) AND lease_until IS NULL RETURNING 1",
		      2, v, err);
		if (!r)
			return err->code;
		p->skipped += changed(r);
		if (seen)
			*seen = due;
		return SQ_OK;
	}
	r = q(c,
	      "UPDATE shardq_meta.schedules SET last_slot = to_timestamp($2::bigint), claimed_by "
	      "= $3, lease_until = now() + $4::bigint * interval '1 millisecond', updated_at = "
	      "now() WHERE name = $1 AND last_slot < to_timestamp($2::bigint) AND lease_until IS "
	      "NULL RETURNING 1",
	      4, v, err);
	if (!r)
		return err->code;
	if (!changed(r))
		return SQ_OK; /* another scheduler won the slot */
	sq_status st = enqueue_slot(c, s, who, due, err);
	if (st == SQ_OK)
		p->enqueued++;
	if (st == SQ_OK && seen)
		*seen = due;
	return st;
}

static sq_status run_pass(sq_client *c, const char *who, int64_t now_us, sq_schedule_pass *out,
			  int64_t *seen, const atomic_int *stop, sq_error *err)
{
	const sq_config *cfg = c->cfg;
	sq_schedule_pass p;
	sq_status first = SQ_OK;
	char host[64] = "?", whobuf[128];
	memset(&p, 0, sizeof(p));
	if (!who) {
		gethostname(host, sizeof(host) - 1);
		snprintf(whobuf, sizeof(whobuf), "%s-%d", host, (int)getpid());
		who = whobuf;
	}
	if (!now_us) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	}
	for (int i = 0; i < cfg->nschedules && !(stop && atomic_load(stop)); i++) {
		sq_error e;
		e.code = SQ_OK;
		e.msg[0] = '\0';
		sq_status st =
			run_one(c, &cfg->schedules[i], who, floor_div(now_us, 1000000),
				cfg->scheduler.claim_lease_ms, &p, seen ? &seen[i] : NULL, &e);
		if (st != SQ_OK) {
			p.errors++;
			if (first == SQ_OK) {
				first = st;
				if (err)
					*err = e;
			}
		}
	}
	if (out)
		*out = p;
	return first;
}

sq_status sq_schedules_run(sq_client *c, const char *who, int64_t now_us, sq_schedule_pass *out,
			   sq_error *err)
{
	return run_pass(c, who, now_us, out, NULL, NULL, err);
}

sq_status sq_schedules_list(sq_client *c, int64_t now_us, sq_schedule_info **out, size_t *n,
			    sq_error *err)
{
	const sq_config *cfg = c->cfg;
	*out = NULL;
	*n = 0;
	if (!now_us) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	}
	if (!cfg->nschedules)
		return SQ_OK;
	PGresult *r = q(c,
			"SELECT name, extract(epoch from last_slot)::bigint, lease_until IS NOT "
			"NULL, coalesce(claimed_by, ''), coalesce(extract(epoch from "
			"enqueued_slot)::bigint, 0), coalesce(job_id, 0), enqueues, retries, "
			"skipped FROM shardq_meta.schedules",
			0, NULL, err);
	if (!r)
		return err->code;
	sq_schedule_info *v = calloc((size_t)cfg->nschedules, sizeof(*v));
	if (!v) {
		PQclear(r);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	int64_t now = floor_div(now_us, 1000000);
	for (int i = 0; i < cfg->nschedules; i++) {
		const sq_schedule_conf *s = &cfg->schedules[i];
		sq_schedule_info *o = &v[i];
		snprintf(o->name, sizeof(o->name), "%s", s->name);
		if (s->every_ms > 0)
			snprintf(o->spec, sizeof(o->spec), "every %" PRId64 "s",
				 s->every_ms / 1000);
		else
			snprintf(o->spec, sizeof(o->spec), "%s", s->cron_text);
		snprintf(o->timezone, sizeof(o->timezone), "%s",
			 s->every_ms > 0 ? "UTC"
			 : s->timezone   ? s->timezone
					 : "UTC");
		snprintf(o->type, sizeof(o->type), "%s", s->type);
		o->missed_skip = s->missed == SQ_MISSED_SKIP;
		int64_t next = sq_schedule_next(s, now);
		o->next_slot_us = next == NONE ? 0 : next * 1000000;
		for (int k = 0; k < PQntuples(r); k++) {
			if (strcmp(PQgetvalue(r, k, 0), s->name))
				continue;
			o->known = 1;
			o->last_slot_us = strtoll(PQgetvalue(r, k, 1), NULL, 10) * 1000000;
			o->pending = PQgetvalue(r, k, 2)[0] == 't';
			snprintf(o->claimed_by, sizeof(o->claimed_by), "%s", PQgetvalue(r, k, 3));
			o->enqueued_slot_us = strtoll(PQgetvalue(r, k, 4), NULL, 10) * 1000000;
			o->job_id = strtoll(PQgetvalue(r, k, 5), NULL, 10);
			o->enqueues = strtoll(PQgetvalue(r, k, 6), NULL, 10);
			o->retries = strtoll(PQgetvalue(r, k, 7), NULL, 10);
			o->skipped = strtoll(PQgetvalue(r, k, 8), NULL, 10);
		}
	}
	PQclear(r);
	*out = v;
	*n = (size_t)cfg->nschedules;
	return SQ_OK;
}

/* ---- the runtime hooks ---------------------------------------------------- */

struct sq_sched {
	const sq_config *cfg;
	char who[128];
	double next_at;
	int64_t seen[]; /* per schedule, see run_one */
};

sq_sched *sq_sched_new(const sq_config *cfg, const char *who)
{
	if (!cfg->scheduler.enabled || !cfg->nschedules)
		return NULL;
	sq_sched *s = calloc(1, sizeof(*s) + (size_t)cfg->nschedules * sizeof(int64_t));
	if (!s)
		return NULL;
	for (int i = 0; i < cfg->nschedules; i++)
		s->seen[i] = NONE;
	s->cfg = cfg;
	snprintf(s->who, sizeof(s->who), "%s", who);
	return s;
}

sq_status sq_sched_tick(sq_sched *s, sq_client *c, sq_error *err)
{
	double now = sq_mono_s();
	if (!s || now < s->next_at)
		return SQ_OK;
	s->next_at = now + (double)s->cfg->scheduler.interval_ms / 1000.0;
	return run_pass(c, s->who, 0, NULL, s->seen, NULL, err);
}

void sq_sched_free(sq_sched *s)
{
	free(s);
}

struct sq_sched_thread {
	const sq_config *cfg;
	char who[128];
	void (*on_error)(const sq_error *e, void *arg);
	void *arg;
	sq_client *c;
	sq_sched *sc; /* what this runner saw claimed (NULL: out of memory) */
	char last[sizeof(((sq_error *)0)->msg)]; /* the error reported last */
	double last_at;
	sq_ticker *ticker;
	atomic_int stop_asked; /* no pass begins, and one under way ends soon */
	atomic_int in_pass;
	atomic_int stopping; /* a pass under way is cut now */
};

/* The end of a duration in seconds ("0.3s") at p, or NULL. */
static const char *seconds_end(const char *p)
{
	const char *q = p;
	while (isdigit((unsigned char)*q) || (*q == '.' && q > p && isdigit((unsigned char)q[1])))
		q++;
	return q > p && *q == 's' && !isalnum((unsigned char)q[1]) ? q + 1 : NULL;
}

/* Whether two messages differ only in their durations ("still connecting
 * (0.3s so far" and "(1.2s so far"): the same problem, said again. Any
 * other figure (a shard's address, a count) must be the same. */
static int same_but_numbers(const char *a, const char *b)
{
	for (;;) {
		const char *ea = seconds_end(a), *eb = seconds_end(b);
		if (ea && eb) {
			a = ea, b = eb;
			continue;
		}
		if (*a != *b)
			return 0;
		if (!*a)
			return 1;
		a++, b++;
	}
}

/* The pass itself: its connections are watched for the stop's cut
 * (watch.h): a shard or meta database that stopped answering (its host
 * cut off without a reset, or stuck) would hold it up to the answer wait,
 * and shardqd's stop waits for it. */
static void sched_pass_run(sq_sched_thread *t)
{
	sq_error err;
	double end = sq_mono_s() + SQ_SCHED_CONNECT_WAIT_S;
	sq_watch watch[SQ_MAX_SHARDS + 1];
	int nw = 0;
	sq_failpoint("sched_pass");
	if (t->c->meta.conn)
		sq_watch_arm(&watch[nw++], t->c->meta.conn, 0, &t->stopping);
	for (int s = 0; s < t->c->nshards; s++)
		if (t->c->shards[s].conn)
			sq_watch_arm(&watch[nw++], t->c->shards[s].conn, 0, &t->stopping);
	sq_status st = t->sc ? run_pass(t->c, t->who, 0, NULL, t->sc->seen, &t->stop_asked, &err)
			     : sq_schedules_run(t->c, t->who, 0, NULL, &err);
	int stopped = 0;
	for (int i = 0; i < nw; i++)
		stopped |= sq_watch_disarm(&watch[i]) != SQ_WATCH_NONE;
	if (stopped || atomic_load(&t->stop_asked))
		return; /* its error is the stop's */
	/* a connect under way goes on here too (this thread has no loop to
	 * take it on between passes): up to SQ_SCHED_CONNECT_WAIT_S from the
	 * pass's start, so that a server slow to answer is connected within a
	 * few passes, before its connect_timeout */
	while (sq_client_advance_connects(t->c) > 0 && sq_mono_s() < end &&
	       !atomic_load(&t->stop_asked))
		(void)poll(NULL, 0, 20);
	/* the same error again (a shard down), whatever its figures: once a
	 * minute */
	if (st != SQ_OK && t->on_error &&
	    (!same_but_numbers(t->last, err.msg) || sq_mono_s() - t->last_at >= 60)) {
		t->on_error(&err, t->arg);
		snprintf(t->last, sizeof(t->last), "%s", err.msg);
		t->last_at = sq_mono_s();
	} else if (st == SQ_OK) {
		t->last[0] = '\0';
	}
}

/* One scheduler pass, on the ticker's thread; none once the stop is asked
 * for (in_pass tells sq_sched_thread_stop whether one is under way). */
static void sched_pass(void *arg)
{
	sq_sched_thread *t = arg;
	atomic_store(&t->in_pass, 1);
	if (atomic_load(&t->stop_asked)) {
		atomic_store(&t->in_pass, 0);
		return;
	}
	sched_pass_run(t);
	atomic_store(&t->in_pass, 0);
}

sq_sched_thread *sq_sched_thread_start(const sq_config *cfg, const char *who, sq_client *c,
				       void (*on_error)(const sq_error *e, void *arg), void *arg)
{
	if (!cfg->scheduler.enabled || !cfg->nschedules || !c)
		return NULL;
	sq_sched_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cfg = cfg;
	snprintf(t->who, sizeof(t->who), "%s", who);
	t->c = c;
	sq_client_connect_wait(c, SQ_SCHED_CONNECT_WAIT_S);
	t->on_error = on_error;
	t->arg = arg;
	t->sc = sq_sched_new(cfg, t->who);
	/* the first pass at once, then every [scheduler] interval */
	t->ticker = sq_ticker_start(sched_pass, t, 0, cfg->scheduler.interval_ms);
	if (!t->ticker) {
		sq_sched_free(t->sc);
		free(t);
		return NULL;
	}
	return t;
}

void sq_sched_thread_stop(sq_sched_thread *t)
{
	if (!t)
		return;
	/* a pass under way ends by itself (no schedule after the one under
	 * way), for SQ_SCHED_STOP_GRACE_S; then its connections are cut */
	atomic_store(&t->stop_asked, 1);
	double until = sq_mono_s() + SQ_SCHED_STOP_GRACE_S;
	while (atomic_load(&t->in_pass) && sq_mono_s() < until)
		(void)poll(NULL, 0, 10);
	atomic_store(&t->stopping, 1);
	sq_ticker_stop(t->ticker);
	sq_sched_free(t->sc);
	sq_client_close(t->c);
	free(t);
}

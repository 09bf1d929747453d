/* cron.c - the cron parser, slot arithmetic in a time zone, and a
 * schedule's key template: pure functions over the calendar and the
 * system's tz database, no I/O beyond it, so that config.c can check a
 * [schedule] section and the scheduler (schedule.c) can find its slots. */
#include "cron.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define NONE SQ_CRON_NONE
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

static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = sq_floor_div(y, 400);
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = sq_floor_div(z, 146097);
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
	int dow = (int)(sq_floor_div(day + 4, 7) * -7 + day + 4); /* 1970-01-01: Thursday */
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
	int64_t m = sq_floor_div(w, 60) + 1, end = m + SEARCH_MINUTES;
	while (m < end) {
		int64_t day = sq_floor_div(m, 1440), y;
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
	int64_t m = sq_floor_div(w, 60), end = m - SEARCH_MINUTES;
	while (m > end) {
		int64_t day = sq_floor_div(m, 1440), y;
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

static void iso_utc(int64_t t, char *out, size_t len)
{
	int64_t day = sq_floor_div(t, 86400), y;
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

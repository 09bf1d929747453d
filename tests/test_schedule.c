/* test_schedule.c - periodic jobs ([schedule NAME]): the cron parser and
 * slot arithmetic (time zones with DST, the day-of-month / day-of-week
 * rule, steps and ranges, errors), the config's checks, and against real
 * shards: three schedulers at once enqueue each slot exactly once, also
 * after the slot's job completed; the missed = once / skip policies after
 * downtime; a claim whose enqueue never happened (a scheduler killed between
 * the two) is taken over; the worker runtime and the CLI run schedules. */
#include "support.h"

#include "config.h"
#include "schedule.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

static const char *types = "[type tick]\nhistory = true\n"
			   "[type once]\nhistory = true\n"
			   "[type skip]\nhistory = true\n"
			   "[type crash]\nhistory = true\n"
			   "[type live]\n"
			   "[type wk]\nhistory = true\n"
			   "[type cli]\nhistory = true\n"
			   "[type frozen]\n"
			   "[type grace]\n"
			   "[type sec]\nhistory = true\n";

static testdb t;

/* One cluster for the suite (made once, in the runner's process); each
 * test reads a config of its own over it: the types above and its own
 * schedule sections, with names no other test uses. */
static testdb base;

static void cluster_setup(void)
{
	testdb_open(&t, "sqt_sched", 2, 256, types);
	base.nshards = t.nshards;
	base.partitions = t.partitions;
	memcpy(base.ports, t.ports, sizeof(base.ports));
	memcpy(base.db, t.db, sizeof(base.db));
	testdb_release(&t); /* kept for every case; dropped by cluster_teardown */
}

static void cluster_teardown(void)
{
	testdb_drop(base.db);
}

static double opened_at;

static void open_with(const char *schedule)
{
	sq_error err;
	opened_at = test_now_s();
	size_t n = strlen(types) + strlen(schedule) + 1;
	t.nshards = base.nshards;
	t.partitions = base.partitions;
	memcpy(t.ports, base.ports, sizeof(t.ports));
	memcpy(t.db, base.db, sizeof(t.db));
	const char *sched = strstr(schedule, "[scheduler]")
				    ? ""
				    : "[scheduler]\nclaim_lease = 1s\ninterval = 100ms\n";
	n += strlen(sched);
	t.extra = malloc(n);
	snprintf(t.extra, n, "%s%s%s", types, sched, schedule);
	t.ini = testdb_ini(&t, NULL, NULL);
	OKE(sq_config_parse(t.ini, "test.ini", &t.cfg, &err));
	OKE(sq_client_open(t.cfg, 0, &t.client, &err));
}

static void teardown(void)
{
	printf("  %.2f s\n", test_now_s() - opened_at);
	testdb_release(&t);
}

/* ---- (a) the cron parser and the slots, no database ---------------------- */

/* unix seconds of a UTC date and time */
static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = s;
	return (int64_t)timegm(&tm);
}

static sq_cron cron(const char *text)
{
	sq_cron c;
	char why[256];
	ck_assert_msg(sq_cron_parse(text, &c, why, sizeof(why)) == 0, "'%s': %s", text, why);
	return c;
}

static void cron_bad(const char *text, const char *want)
{
	sq_cron c;
	char why[256] = "";
	ck_assert_msg(sq_cron_parse(text, &c, why, sizeof(why)) == -1, "'%s' was accepted", text);
	ck_assert_msg(strstr(why, want), "'%s': '%s' does not say '%s'", text, why, want);
}

#define NEXT_EQ(expr, tz, from, want)                                                        \
	do {                                                                                 \
		sq_cron c_ = cron(expr);                                                     \
		int64_t got_ = sq_cron_next(&c_, tz, from), want_ = (want);                  \
		ck_assert_msg(got_ == want_, "next('%s', %s, %lld) = %lld, want %lld", expr, \
			      tz ? tz : "UTC", (long long)(from), (long long)got_,           \
			      (long long)want_);                                             \
	} while (0)

#define PREV_EQ(expr, tz, from, want)                                                        \
	do {                                                                                 \
		sq_cron c_ = cron(expr);                                                     \
		int64_t got_ = sq_cron_prev(&c_, tz, from), want_ = (want);                  \
		ck_assert_msg(got_ == want_, "prev('%s', %s, %lld) = %lld, want %lld", expr, \
			      tz ? tz : "UTC", (long long)(from), (long long)got_,           \
			      (long long)want_);                                             \
	} while (0)

START_TEST(cron_fields)
{
	sq_cron c = cron("*/15 0-6/2 1,15 jan-mar mon-fri");
	ck_assert_uint_eq(c.minute, (1ULL << 0) | (1ULL << 15) | (1ULL << 30) | (1ULL << 45));
	ck_assert_uint_eq(c.hour, (1u << 0) | (1u << 2) | (1u << 4) | (1u << 6));
	ck_assert_uint_eq(c.dom, (1u << 1) | (1u << 15));
	ck_assert_uint_eq(c.month, (1u << 1) | (1u << 2) | (1u << 3));
	ck_assert_uint_eq(c.dow, 0x3E);
	ck_assert(!c.dom_any && !c.dow_any);
	/* a/step runs to the end; 7 is Sunday; names in any case */
	c = cron("5/20 23 * DEC 5-7");
	ck_assert_uint_eq(c.minute, (1ULL << 5) | (1ULL << 25) | (1ULL << 45));
	ck_assert_uint_eq(c.dow, (1u << 0) | (1u << 5) | (1u << 6));
	ck_assert(c.dom_any && !c.dow_any);
	c = cron("0 0 * * 7");
	ck_assert_uint_eq(c.dow, 1);
	/* edges: the last values, a step as wide as the field, a range of one */
	c = cron("58-59 23/1 31 12 6/7");
	ck_assert_uint_eq(c.minute, (1ULL << 58) | (1ULL << 59));
	ck_assert_uint_eq(c.hour, 1u << 23);
	ck_assert_uint_eq(c.dow, 1u << 6);
	c = cron("*/60 * * * *");
	ck_assert_uint_eq(c.minute, 1);
	/* macros */
	sq_cron d = cron("@daily"), e = cron("0 0 * * *");
	ck_assert(!memcmp(&d, &e, sizeof(d)));
	d = cron("@hourly");
	ck_assert_uint_eq(d.minute, 1);
	ck_assert_uint_eq(d.hour, 0xFFFFFF);
}
END_TEST

START_TEST(cron_errors)
{
	cron_bad("* * * *", "expected 5 fields");
	cron_bad("* * * * * *", "expected 5 fields");
	cron_bad("", "expected 5 fields");
	cron_bad("60 * * * *", "minute: 60 is out of range 0-59");
	cron_bad("* 24 * * *", "hour: 24 is out of range 0-23");
	cron_bad("* * 0 * *", "day of month: 0 is out of range 1-31");
	cron_bad("* * * 13 *", "month: 13 is out of range 1-12");
	cron_bad("* * * * 8", "day of week: 8 is out of range 0-7");
	cron_bad("30-10 * * * *", "goes backwards");
	cron_bad("*/0 * * * *", "step 0 is out of range");
	cron_bad("*/61 * * * *", "step 61 is out of range");
	cron_bad("x * * * *", "minute: cannot read 'x'");
	cron_bad("1,,2 * * * *", "cannot read");
	cron_bad("* * * foo *", "or jan..dec");
	cron_bad("* * * * funday", "or sun..sat");
	cron_bad("0 0 30 2 *", "never matches");
	cron_bad("0 0 31 4,6,9,11 *", "never matches");
	cron_bad("@often", "is not one of @hourly");
}
END_TEST

START_TEST(cron_next_prev_utc)
{
	int64_t at = utc(2026, 11, 23, 12, 3, 10);
	NEXT_EQ("*/5 * * * *", NULL, at, utc(2026, 11, 23, 12, 5, 0));
	PREV_EQ("*/5 * * * *", NULL, at, utc(2026, 11, 23, 12, 0, 0));
	/* on a slot: next is the one after, prev is the slot itself */
	NEXT_EQ("*/5 * * * *", NULL, utc(2026, 11, 23, 12, 5, 0), utc(2026, 11, 23, 12, 10, 0));
	PREV_EQ("*/5 * * * *", NULL, utc(2026, 11, 23, 12, 5, 0), utc(2026, 11, 23, 12, 5, 0));
	/* rolls over the hour, the day, the month and the year */
	NEXT_EQ("5/20 * * * *", NULL, utc(2026, 12, 31, 23, 45, 0), utc(2027, 1, 1, 0, 5, 0));
	NEXT_EQ("0 0 1 * *", NULL, utc(2026, 12, 31, 12, 0, 0), utc(2027, 1, 1, 0, 0, 0));
	PREV_EQ("0 0 1 * *", NULL, utc(2027, 1, 1, 0, 0, 0) - 1, utc(2026, 12, 1, 0, 0, 0));
	PREV_EQ("59 23 31 12 *", NULL, utc(2027, 6, 1, 0, 0, 0), utc(2026, 12, 31, 23, 59, 0));
	/* February 29th: the next leap year */
	NEXT_EQ("0 0 29 2 *", NULL, utc(2026, 3, 1, 0, 0, 0), utc(2028, 2, 29, 0, 0, 0));
	PREV_EQ("0 0 29 2 *", NULL, utc(2026, 3, 1, 0, 0, 0), utc(2024, 2, 29, 0, 0, 0));
	/* day of month OR day of week when both restrict: the 12th (a
	 * Thursday) or Fridays; with one of them '*', only the other */
	int64_t from = utc(2026, 11, 7, 0, 0, 0);
	NEXT_EQ("0 0 12 * 5", NULL, from, utc(2026, 11, 12, 0, 0, 0));
	NEXT_EQ("0 0 12 * 5", NULL, utc(2026, 11, 12, 0, 0, 0), utc(2026, 11, 13, 0, 0, 0));
	PREV_EQ("0 0 12 * 5", NULL, utc(2026, 11, 12, 23, 0, 0), utc(2026, 11, 12, 0, 0, 0));
	PREV_EQ("0 0 12 * 5", NULL, utc(2026, 11, 11, 0, 0, 0), utc(2026, 11, 6, 0, 0, 0));
	NEXT_EQ("0 0 12 * *", NULL, utc(2026, 11, 12, 0, 0, 0), utc(2026, 12, 12, 0, 0, 0));
	NEXT_EQ("0 0 * * fri", NULL, from, utc(2026, 11, 13, 0, 0, 0));
	/* a day field with a leading star does not restrict: Fridays only */
	NEXT_EQ("0 0 */2 * 5", NULL, from, utc(2026, 11, 13, 0, 0, 0));
	/* the wall-clock search alone */
	sq_cron c = cron("30 2 * * *");
	ck_assert_int_eq(sq_cron_next_wall(&c, utc(2026, 1, 1, 2, 30, 0)),
			 utc(2026, 1, 2, 2, 30, 0));
	ck_assert_int_eq(sq_cron_prev_wall(&c, utc(2026, 1, 1, 2, 29, 59)),
			 utc(2025, 12, 31, 2, 30, 0));
}
END_TEST

START_TEST(cron_dst_europe_berlin)
{
	const char *tz = "Europe/Berlin";
	ck_assert(sq_tz_valid(tz));
	ck_assert(!sq_tz_valid("Europe/Nowhere"));
	ck_assert(!sq_tz_valid("../etc/passwd"));
	ck_assert_int_eq(sq_tz_offset(tz, utc(2026, 1, 1, 0, 0, 0)), 3600);
	ck_assert_int_eq(sq_tz_offset(tz, utc(2026, 7, 1, 0, 0, 0)), 7200);
	/* 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC). 02:30 does
	 * not exist that day: it runs at the jump, once; the next day as usual */
	NEXT_EQ("30 2 * * *", tz, utc(2026, 3, 28, 12, 0, 0), utc(2026, 3, 29, 1, 0, 0));
	NEXT_EQ("30 2 * * *", tz, utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 30, 0));
	PREV_EQ("30 2 * * *", tz, utc(2026, 3, 29, 12, 0, 0), utc(2026, 3, 29, 1, 0, 0));
	/* every minute of the skipped hour runs at the jump, as one slot */
	NEXT_EQ("* 2 * * *", tz, utc(2026, 3, 29, 0, 59, 0), utc(2026, 3, 29, 1, 0, 0));
	NEXT_EQ("* 2 * * *", tz, utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 0, 0));
	/* 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC). 02:30
	 * happens twice: it runs once, at its first occurrence */
	NEXT_EQ("30 2 * * *", tz, utc(2026, 10, 24, 12, 0, 0), utc(2026, 10, 25, 0, 30, 0));
	NEXT_EQ("30 2 * * *", tz, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0));
	PREV_EQ("30 2 * * *", tz, utc(2026, 10, 25, 1, 45, 0), utc(2026, 10, 25, 0, 30, 0));
	/* every 30 minutes: 02:00 and 02:30 CEST run; the repeated 02:00 and
	 * 02:30 CET do not; 03:00 CET does */
	NEXT_EQ("*/30 * * * *", tz, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 25, 2, 0, 0));
	PREV_EQ("*/30 * * * *", tz, utc(2026, 10, 25, 1, 45, 0), utc(2026, 10, 25, 0, 30, 0));
	/* daily at 02:30 in a zone without DST: a fixed offset */
	NEXT_EQ("30 2 * * *", "Europe/Moscow", utc(2026, 11, 23, 0, 0, 0),
		utc(2026, 11, 23, 23, 30, 0));
	/* New York: the gap at 02:00 EST on 2026-03-08 (07:00 UTC) */
	NEXT_EQ("30 2 * * *", "America/New_York", utc(2026, 3, 8, 0, 0, 0),
		utc(2026, 3, 8, 7, 0, 0));
	/* the process's own TZ is left as it was */
	ck_assert_int_eq(sq_tz_offset(NULL, utc(2026, 7, 1, 0, 0, 0)), 0);
}
END_TEST

START_TEST(schedule_keys_and_every)
{
	char k[128];
	const char *why;
	ck_assert_int_eq(sq_schedule_key("{name}:{slot}", "nightly", utc(2026, 11, 23, 6, 55, 0), k,
					 sizeof(k), &why),
			 (int)strlen("nightly:2026-11-23T06:55:00Z"));
	ck_assert_str_eq(k, "nightly:2026-11-23T06:55:00Z");
	ck_assert_int_gt(sq_schedule_key("r-{epoch}", "x", 1795000000, k, sizeof(k), &why), 0);
	ck_assert_str_eq(k, "r-1795000000");
	ck_assert_int_eq(sq_schedule_key("r-{when}", "x", 0, k, sizeof(k), &why), -1);
	ck_assert(why && strstr(why, "{slot}"));
	sq_schedule_conf s;
	memset(&s, 0, sizeof(s));
	s.every_ms = 600000;
	ck_assert_int_eq(sq_schedule_next(&s, 1795000123), 1795000200);
	ck_assert_int_eq(sq_schedule_prev(&s, 1795000123), 1794999600);
	ck_assert_int_eq(sq_schedule_prev(&s, 1795000200), 1795000200);
}
END_TEST

static void config_bad(const char *extra, const char *want)
{
	char text[4096];
	sq_config *cfg;
	sq_error err;
	snprintf(text, sizeof(text), "[shard s1]\ndsn = host=127.0.0.1\n[type report]\n%s", extra);
	ck_assert_msg(sq_config_parse(text, "x.ini", &cfg, &err) == SQ_ECONFIG, "accepted: %s",
		      extra);
	ck_assert_msg(strstr(err.msg, want), "'%s' does not say '%s'", err.msg, want);
}

START_TEST(config_checks)
{
	sq_config *cfg;
	sq_error err;
	const char *good = "[shard s1]\ndsn = host=127.0.0.1\n[type report]\n"
			   "[schedule nightly]\ncron = \"30 2 * * *\"\ntimezone = Europe/Moscow\n"
			   "type = report\nkey = nightly-{slot}\nparams = {\"a\": [1, 2]}\n"
			   "missed = skip\nmax_lateness = 5m\n"
			   "[schedule often]\nevery = 10m\ntype = report\n"
			   "[scheduler]\nenabled = false\n";
	OKE(sq_config_parse(good, "x.ini", &cfg, &err));
	ck_assert_int_eq(cfg->nschedules, 2);
	ck_assert_str_eq(cfg->schedules[0].cron_text, "30 2 * * *");
	ck_assert_int_eq(cfg->schedules[0].missed, SQ_MISSED_SKIP);
	ck_assert_int_eq(cfg->schedules[0].max_lateness_ms, 300000);
	ck_assert_int_eq(cfg->schedules[1].every_ms, 600000);
	ck_assert_int_eq(cfg->schedules[1].missed, SQ_MISSED_ONCE);
	ck_assert_int_eq(cfg->scheduler.enabled, 0);
	ck_assert_int_eq(cfg->scheduler.interval_ms, 1000);
	ck_assert_ptr_null(sq_sched_new(cfg, "w"));
	sq_config_free(cfg);

	config_bad("[schedule a]\ntype = report\n", "x.ini:4: [schedule a]: no slots: set cron = ");
	config_bad("[schedule a]\ncron = 0 * * * *\nevery = 1h\ntype = report\n",
		   "x.ini:6: [schedule a] every: set either cron or every, not both");
	config_bad("[schedule a]\ncron = 61 * * * *\ntype = report\n",
		   "x.ini:5: [schedule a] cron: minute: 61 is out of range 0-59");
	config_bad("[schedule a]\nevery = 1500ms\ntype = report\n",
		   "x.ini:5: [schedule a] every: must be a whole number of seconds");
	config_bad("[schedule a]\nevery = 500ms\ntype = report\n",
		   "x.ini:5: [schedule a] every: 500ms is out of range");
	config_bad("[schedule a]\ncron = @daily\ntimezone = Mars/Olympus\ntype = report\n",
		   "x.ini:6: [schedule a] timezone: 'Mars/Olympus' is not a time zone");
	config_bad("[schedule a]\nevery = 1h\ntimezone = UTC\ntype = report\n",
		   "x.ini:6: [schedule a] timezone: applies to cron only");
	config_bad("[schedule a]\nevery = 1h\n", "x.ini:4: [schedule a] type: missing");
	config_bad("[schedule a]\nevery = 1h\ntype = nosuch\n",
		   "x.ini:6: [schedule a] type: 'nosuch' is not a configured type; add a "
		   "[type nosuch] section");
	config_bad("[schedule a]\nevery = 1h\ntype = report\nparams = [1]\n",
		   "x.ini:7: [schedule a] params: not a JSON object");
	config_bad("[schedule a]\nevery = 1h\ntype = report\nkey = a-{day}\n",
		   "x.ini:7: [schedule a] key: only {slot}, {epoch} and {name}");
	config_bad("[schedule a]\nevery = 1h\ntype = report\nkey = fixed\n",
		   "x.ini:7: [schedule a] key: names no slot");
	config_bad("[schedule a]\nevery = 1h\ntype = report\nmissed = twice\n",
		   "x.ini:7: [schedule a] missed: 'twice' is not one of once, skip");
	config_bad("[schedule a]\nevery = 1h\ntype = report\n[schedule a]\n",
		   "x.ini:7: [schedule a]: schedule a appears a second time (first at line 4)");
	config_bad("[schedule a]\nevery = 1h\ntype = report\nwhen = now\n",
		   "x.ini:7: [schedule a] when: unknown key");
	config_bad("[scheduler]\ninterval = 10ms\n",
		   "x.ini:5: [scheduler] interval: 10ms is out of range");
}
END_TEST

/* ---- against the shards --------------------------------------------------- */

/* jobs of a type on the shards, live and finished (these types keep history) */
static long long jobs_of(const char *type)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM (SELECT task FROM shardq.jobs UNION ALL SELECT task FROM "
		 "shardq.jobs_history) j WHERE task = '%s'",
		 type);
	return testdb_sum(&t, sql);
}

static long long jobs_with_key(const char *type, const char *key)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM (SELECT task, active_uid FROM shardq.jobs UNION ALL "
		 "SELECT task, active_uid FROM shardq.jobs_history) j WHERE task = '%s' AND "
		 "active_uid = '%s'",
		 type, key);
	return testdb_sum(&t, sql);
}

static sq_schedule_pass pass_at(sq_client *c, const char *who, int64_t now_s)
{
	sq_schedule_pass p;
	sq_error err;
	OKE(sq_schedules_run(c, who, now_s * 1000000, &p, &err));
	return p;
}

/* a slot time far enough in the past that its jobs are due, aligned to 10 s */
static int64_t base_time(void)
{
	return (int64_t)time(NULL) / 3600 * 3600 - 86400;
}

/* The meta database is the first shard's (schema shardq_meta). */
static long long meta_scalar(const char *sql)
{
	return testdb_scalar(&t, 0, sql);
}

/* Three schedulers, each its own client, over N slots of `every = 1s` on
 * a clock of their own; a completer finishes the jobs as they come, and
 * one scheduler also passes again over each slot after its job completed:
 * only the meta claim keeps that slot from a second job. */
enum { SLOTS = 24, SCHEDULERS = 3 };
static int64_t T0;
static atomic_int completed_n;
static atomic_int total_enqueued;
static atomic_int done_schedulers;

typedef struct sched_arg {
	int i;
} sched_arg;

static long long slot_done_remaining(void *arg)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs_history WHERE task = 'tick' AND active_uid = "
		 "'tick-%lld'",
		 (long long)*(int64_t *)arg);
	return 1 - testdb_sum(&t, sql);
}

/* the slot's enqueue is confirmed in the meta row (someone's) */
static long long slot_enqueued_remaining(void *arg)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq_meta.schedules WHERE name = 'tick' AND "
		 "enqueued_slot >= to_timestamp(%lld)",
		 (long long)*(int64_t *)arg);
	return 1 - testdb_scalar(&t, 0, sql);
}

static void *scheduler_main(void *arg)
{
	sched_arg *a = arg;
	sq_client *c = testdb_client(&t);
	char who[16];
	long long left;
	snprintf(who, sizeof(who), "s%d", a->i);
	for (int k = 1; k <= SLOTS; k++) {
		int64_t now = T0 + k;
		sq_schedule_pass p = pass_at(c, who, now);
		atomic_fetch_add(&total_enqueued, p.enqueued);
		/* as on a real clock, where a slot lasts far longer than its
		 * enqueue: nobody moves to the next slot before this one is in */
		ck_assert_msg(wait_progress(slot_enqueued_remaining, &now, &left),
			      "slot %d was never enqueued", k);
		if (a->i == SCHEDULERS - 1) {
			/* late: once the slot's job has completed, pass over it again */
			ck_assert_msg(wait_progress(slot_done_remaining, &now, &left),
				      "the job of slot %d never completed", k);
			p = pass_at(c, who, now);
			atomic_fetch_add(&total_enqueued, p.enqueued);
		}
	}
	sq_client_close(c);
	atomic_fetch_add(&done_schedulers, 1);
	return NULL;
}

static void *completer_main(void *arg)
{
	(void)arg;
	sq_client *c = testdb_client(&t);
	while (atomic_load(&completed_n) < SLOTS) {
		sq_job *js;
		size_t n = claim_type(c, "completer", "tick", 16, &js);
		if (n) {
			sq_job_ref refs[16];
			sq_status out[16];
			sq_error err;
			for (size_t i = 0; i < n; i++)
				refs[i].id = js[i].id, refs[i].attempt = js[i].attempt;
			OKE(sq_complete(c, "completer", refs, n, out, &err));
			atomic_fetch_add(&completed_n, (int)n);
		} else {
			usleep(5000);
		}
		sq_jobs_free(js, n);
	}
	sq_client_close(c);
	return NULL;
}

START_TEST(three_schedulers_each_slot_once)
{
	pthread_t th[SCHEDULERS], comp;
	sched_arg args[SCHEDULERS];
	double t0 = test_now_s();
	open_with("[schedule tick]\nevery = 1s\ntype = tick\nkey = tick-{epoch}\n");
	T0 = base_time();
	/* the first pass sees the schedule: it starts with its next slot */
	sq_schedule_pass p = pass_at(t.client, "s0", T0);
	ck_assert_int_eq(p.enqueued, 0);
	ck_assert_int_eq(jobs_of("tick"), 0);
	pthread_create(&comp, NULL, completer_main, NULL);
	for (int i = 0; i < SCHEDULERS; i++) {
		args[i].i = i;
		pthread_create(&th[i], NULL, scheduler_main, &args[i]);
	}
	for (int i = 0; i < SCHEDULERS; i++)
		pthread_join(th[i], NULL);
	pthread_join(comp, NULL);
	ck_assert_int_eq(atomic_load(&total_enqueued), SLOTS);
	ck_assert_int_eq(jobs_of("tick"), SLOTS);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE task = "
					"'tick' AND status = 'completed'"),
			 SLOTS);
	for (int k = 1; k <= SLOTS; k++) {
		char key[64];
		snprintf(key, sizeof(key), "tick-%lld", (long long)(T0 + k));
		ck_assert_msg(jobs_with_key("tick", key) == 1, "slot %d: %lld jobs", k,
			      jobs_with_key("tick", key));
	}
	/* and a pass over every slot again, later: nothing */
	for (int k = 1; k <= SLOTS; k++)
		ck_assert_int_eq(pass_at(t.client, "s9", T0 + k).enqueued, 0);
	ck_assert_int_eq(jobs_of("tick"), SLOTS);
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq_meta.schedules WHERE name = 'tick' AND enqueues = "
		 "%d AND retries = 0 AND lease_until IS NULL AND last_slot = to_timestamp(%lld)",
		 SLOTS, (long long)(T0 + SLOTS));
	ck_assert_int_eq(meta_scalar(sql), 1);
	printf("three_schedulers_each_slot_once: %d slots in %.2f s\n", SLOTS, test_now_s() - t0);
}
END_TEST

START_TEST(missed_once_runs_the_latest_slot_once)
{
	open_with("[schedule once]\nevery = 10s\ntype = once\n");
	int64_t b = base_time();
	ck_assert_int_eq(pass_at(t.client, "a", b).enqueued, 0);
	ck_assert_int_eq(pass_at(t.client, "a", b + 10).enqueued, 1);
	ck_assert_int_eq(jobs_of("once"), 1);
	/* down from b+10 to b+103: slots b+20 .. b+100 were missed */
	sq_schedule_pass p = pass_at(t.client, "b", b + 103);
	ck_assert_int_eq(p.enqueued, 1);
	ck_assert_int_eq(jobs_of("once"), 2);
	char key[64];
	struct tm tm;
	time_t tt = (time_t)(b + 100);
	gmtime_r(&tt, &tm);
	strftime(key, sizeof(key), "once:%Y-%m-%dT%H:%M:%SZ", &tm);
	ck_assert_int_eq(jobs_with_key("once", key), 1);
	/* another scheduler, and the same one again: nothing more */
	ck_assert_int_eq(pass_at(t.client, "c", b + 104).enqueued, 0);
	ck_assert_int_eq(pass_at(t.client, "b", b + 109).enqueued, 0);
	ck_assert_int_eq(jobs_of("once"), 2);
	ck_assert_int_eq(pass_at(t.client, "c", b + 110).enqueued, 1);
	ck_assert_int_eq(jobs_of("once"), 3);
}
END_TEST

START_TEST(missed_skip_waits_for_the_next_slot)
{
	open_with("[schedule skip]\nevery = 10s\ntype = skip\nmissed = skip\nmax_lateness = 2s\n");
	int64_t b = base_time();
	ck_assert_int_eq(pass_at(t.client, "a", b).enqueued, 0);
	/* one second late: within max_lateness (2s) */
	ck_assert_int_eq(pass_at(t.client, "a", b + 11).enqueued, 1);
	ck_assert_int_eq(jobs_of("skip"), 1);
	/* down until b+105: slot b+100 is 5 s late, past max_lateness */
	sq_schedule_pass p = pass_at(t.client, "b", b + 105);
	ck_assert_int_eq(p.enqueued, 0);
	ck_assert_int_eq(p.skipped, 1);
	ck_assert_int_eq(pass_at(t.client, "b", b + 109).enqueued, 0);
	ck_assert_int_eq(jobs_of("skip"), 1);
	/* the next slot runs */
	ck_assert_int_eq(pass_at(t.client, "c", b + 110).enqueued, 1);
	ck_assert_int_eq(jobs_of("skip"), 2);
	char key[64];
	struct tm tm;
	time_t tt = (time_t)(b + 110);
	gmtime_r(&tt, &tm);
	strftime(key, sizeof(key), "skip:%Y-%m-%dT%H:%M:%SZ", &tm);
	ck_assert_int_eq(jobs_with_key("skip", key), 1);
	sq_schedule_info *v;
	size_t n;
	sq_error err;
	OKE(sq_schedules_list(t.client, (b + 111) * 1000000, &v, &n, &err));
	int found = 0;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, "skip")) {
			found = 1;
			ck_assert(v[i].known && !v[i].pending && v[i].missed_skip);
			ck_assert_int_eq(v[i].last_slot_us, (b + 110) * 1000000);
			ck_assert_int_eq(v[i].enqueued_slot_us, (b + 110) * 1000000);
			ck_assert_int_eq(v[i].enqueues, 2);
			ck_assert_int_eq(v[i].skipped, 1);
			ck_assert_int_eq(v[i].next_slot_us, (b + 120) * 1000000);
			ck_assert_str_eq(v[i].claimed_by, "c");
		}
	free(v);
	ck_assert(found);
}
END_TEST

static int64_t crash_slot;

/* A scheduler killed between its claim and its enqueue (failpoint
 * schedule_claimed, a test build's _exit): the row stays claimed; while
 * its lease (1 min here) holds, others leave it alone; once it has passed
 * (moved back by hand), another scheduler enqueues the slot, once. */
START_TEST(crash_between_claim_and_enqueue_is_taken_over)
{
	open_with("[scheduler]\nclaim_lease = 1m\n[schedule crash]\nevery = 10s\ntype = crash\n");
	int64_t b = base_time();
	ck_assert_int_eq(pass_at(t.client, "a", b).enqueued, 0);
	crash_slot = b + 10;
	pid_t pid = fork();
	if (pid == 0) {
		sq_client *c = testdb_client(&t);
		sq_schedule_pass p;
		sq_error err;
		setenv("SHARDQ_FAILPOINT", "schedule_claimed", 1);
		if (sq_schedules_run(c, "victim", (crash_slot + 1) * 1000000, &p, &err))
			_exit(1);
		_exit(0); /* a build without failpoints */
	}
	int ws;
	waitpid(pid, &ws, 0);
#ifdef SHARDQ_FAILPOINTS
	ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 99, "the victim exited %d", ws);
	ck_assert_int_eq(jobs_of("crash"), 0);
	ck_assert_int_eq(meta_scalar("SELECT count(*) FROM shardq_meta.schedules WHERE name = "
				     "'crash' AND claimed_by = 'victim' AND lease_until > now()"),
			 1);
	/* while the lease holds, others leave it alone, later slots too */
	sq_schedule_pass p = pass_at(t.client, "early", crash_slot + 1);
	ck_assert_int_eq(p.enqueued + p.retried, 0);
	ck_assert_int_eq(p.busy, 1);
	ck_assert_int_eq(pass_at(t.client, "early", crash_slot + 25).enqueued, 0);
	ck_assert_int_eq(jobs_of("crash"), 0);
	/* the lease runs out */
	ck_assert_int_eq(
		meta_scalar("WITH u AS (UPDATE shardq_meta.schedules SET lease_until = "
			    "now() - interval '1 second' WHERE name = 'crash' RETURNING 1) "
			    "SELECT count(*) FROM u"),
		1);
	p = pass_at(t.client, "rescuer", crash_slot + 2);
	ck_assert_int_eq(p.retried, 1);
	ck_assert_int_eq(p.enqueued, 1);
#endif
	ck_assert_int_eq(jobs_of("crash"), 1);
	char key[64];
	struct tm tm;
	time_t tt = (time_t)crash_slot;
	gmtime_r(&tt, &tm);
	strftime(key, sizeof(key), "crash:%Y-%m-%dT%H:%M:%SZ", &tm);
	ck_assert_int_eq(jobs_with_key("crash", key), 1);
	ck_assert_int_eq(meta_scalar("SELECT count(*) FROM shardq_meta.schedules WHERE name = "
				     "'crash' AND lease_until IS NULL AND enqueues = 1"),
			 1);
	/* nothing more for that slot */
	ck_assert_int_eq(pass_at(t.client, "x", crash_slot + 5).enqueued, 0);
	ck_assert_int_eq(jobs_of("crash"), 1);
}
END_TEST

/* Killed after its enqueue but before confirming it: the takeover enqueues
 * the same key again, and the live job dedups it. */
START_TEST(crash_after_enqueue_dedups_on_the_live_job)
{
	open_with("[schedule live]\nevery = 10s\ntype = live\n");
	int64_t b = base_time();
	ck_assert_int_eq(pass_at(t.client, "a", b).enqueued, 0);
	ck_assert_int_eq(pass_at(t.client, "a", b + 10).enqueued, 1);
	/* as if the confirmation never landed, and its lease has passed */
	ck_assert_int_eq(meta_scalar("WITH u AS (UPDATE shardq_meta.schedules SET lease_until = "
				     "now() - interval '1 second' WHERE name = 'live' RETURNING 1) "
				     "SELECT count(*) FROM u"),
			 1);
	sq_schedule_pass p = pass_at(t.client, "b", b + 11);
	ck_assert_int_eq(p.retried, 1);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE task = 'live'"), 1);
	ck_assert_int_eq(meta_scalar("SELECT count(*) FROM shardq_meta.schedules WHERE name = "
				     "'live' AND lease_until IS NULL AND retries = 1"),
			 1);
}
END_TEST

static atomic_int wk_handled;
/* A handler that counts its runs in arg (an atomic_int). */
static sq_job_result count_handler(const sq_job *job, void *arg, char *errbuf, size_t errlen)
{
	(void)job;
	(void)errbuf;
	(void)errlen;
	atomic_fetch_add((atomic_int *)arg, 1);
	return SQ_RESULT_DONE;
}

static long long wk_remaining(void *arg)
{
	(void)arg;
	return atomic_load(&wk_handled) >= 1 ? 0 : 1;
}

/* The worker runtime runs the schedules on the real clock: the cron
 * "* * * * *" schedule is begun a minute back, so its current slot is due;
 * the worker's scheduler enqueues it and its handler runs the job. */
START_TEST(worker_runs_the_schedules)
{
	sq_error err;
	open_with("[schedule wk]\ncron = \"* * * * *\"\ntype = wk\n");
	ck_assert_int_eq(pass_at(t.client, "seed", (int64_t)time(NULL) - 60).enqueued, 0);
	sq_worker_opts o;
	sq_worker *w;
	pthread_t th;
	sq_worker_opts_init(&o);
	o.worker_id = "wk1";
	o.poll_min_ms = o.poll_max_ms = 50;
	OKE(sq_worker_create(t.cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "wk", 1, count_handler, &wk_handled, &err));
	test_worker_thread(&th, w);
	long long left;
	int ok = wait_progress(wk_remaining, NULL, &left);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	ck_assert_msg(ok, "the worker ran no scheduled job");
	ck_assert_int_ge(meta_scalar("SELECT enqueues FROM shardq_meta.schedules WHERE name = 'wk' "
				     "AND claimed_by = 'wk1'"),
			 1);
}
END_TEST

/* ---- every = 1s on the real clock, with the default [scheduler] ---------- */

enum { SEC_SLOTS = 20 };
static atomic_int sec_handled;

/* The slots of schedule sec after `after` (unix s) that have a job. */
static long long sec_slots_after(int64_t after)
{
	char sql[300];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM (SELECT active_uid FROM shardq.jobs WHERE task = 'sec' "
		 "UNION ALL SELECT active_uid FROM shardq.jobs_history WHERE task = 'sec') j "
		 "WHERE substr(active_uid, 5)::bigint > %lld",
		 (long long)after);
	return testdb_sum(&t, sql);
}

static int64_t sec_after;
static long long sec_remaining(void *arg)
{
	(void)arg;
	return SEC_SLOTS - sec_slots_after(sec_after);
}

/* Every slot from the first after `after` to the last has one job, none
 * missing; returns the last. */
static int64_t sec_slots_whole(int64_t after, const char *who)
{
	char sql[400], missing[512] = "";
	snprintf(sql, sizeof(sql),
		 "SELECT e FROM (SELECT substr(active_uid, 5)::bigint e FROM shardq.jobs WHERE "
		 "task = 'sec' UNION ALL SELECT substr(active_uid, 5)::bigint FROM "
		 "shardq.jobs_history WHERE task = 'sec') j WHERE e > %lld",
		 (long long)after);
	int64_t v[4096];
	size_t n = 0;
	for (int s = 0; s < t.nshards; s++) {
		PGconn *c = testdb_pg(&t, s);
		PGresult *r = PQexec(c, sql);
		ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
		for (int i = 0; i < PQntuples(r) && n < 4096; i++)
			v[n++] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
		PQclear(r);
		PQfinish(c);
	}
	ck_assert_msg(n >= SEC_SLOTS, "%s: %zu slots", who, n);
	qsort(v, n, sizeof(v[0]), test_cmp_i64);
	for (size_t i = 1; i < n; i++) {
		ck_assert_msg(v[i] != v[i - 1], "%s: slot %lld has two jobs", who, (long long)v[i]);
		for (int64_t e = v[i - 1] + 1; e < v[i] && strlen(missing) < sizeof(missing) - 24;
		     e++)
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
				 " %lld", (long long)(e - v[0]));
	}
	ck_assert_msg(!missing[0],
		      "%s: of the slots %lld..%lld (%zu with a job), these have none "
		      "(seconds after the first):%s",
		      who, (long long)v[0], (long long)v[n - 1], n, missing);
	printf("%s: %zu one-second slots, each once, none missing\n", who, n);
	return v[n - 1];
}

/* `every = 1s` with every default: the [scheduler] interval (1s) and the
 * worker's poll. The pass rode the worker loop's wake-ups, each a little
 * later than the last, and a slot was skipped whenever two slots' starts
 * fell between two passes (4 of 95 on an idle machine); shardqd's
 * scheduler thread timed each pass off the last one's end alike. Now a
 * pass follows each slot's start: each slot once, none missing, under the
 * worker runtime and then under the scheduler thread of shardqd. */
START_TEST(every_second_with_the_defaults_misses_no_slot)
{
	sq_error err;
	long long left;
	open_with("[scheduler]\n[schedule sec]\nevery = 1s\ntype = sec\nkey = sec-{epoch}\n");
	sq_worker_opts o;
	sq_worker *w;
	pthread_t th;
	sq_worker_opts_init(&o);
	o.worker_id = "sec-w";
	OKE(sq_worker_create(t.cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "sec", 4, count_handler, &sec_handled, &err));
	test_worker_thread(&th, w);
	sec_after = 0;
	int ok = wait_progress(sec_remaining, NULL, &left);
	sq_worker_stop(w, 0);
	pthread_join(th, NULL);
	sq_worker_destroy(w);
	ck_assert_msg(ok, "the worker's scheduler stalled %lld slots short of %d", left, SEC_SLOTS);
	int64_t last = sec_slots_whole(0, "the worker runtime");

	/* shardqd's: a thread of its own with a client of its own */
	sq_client *c = testdb_client(&t);
	sq_sched_thread *st = sq_sched_thread_start(t.cfg, "sec-d", c, NULL, NULL);
	ck_assert_ptr_nonnull(st);
	sec_after = last + 1; /* the slots in between were missed (missed = once) */
	ok = wait_progress(sec_remaining, NULL, &left);
	sq_sched_thread_stop(st);
	ck_assert_msg(ok, "the scheduler thread stalled %lld slots short of %d", left, SEC_SLOTS);
	sec_slots_whole(last + 1, "the scheduler thread");
}
END_TEST

static void stop_sched(void *th)
{
	sq_sched_thread_stop(th);
}

/*
 * shardqd runs the schedules on a thread with a client of its own
 * (sq_sched_thread), and its stop (SIGTERM) waits for the pass under way.
 * A meta database that stopped answering in the middle of a pass (its
 * host cut off without a reset, or stuck) held the stop up to the answer
 * wait: answer_timeout, 10 minutes here. Now the pass ends as soon as the
 * stop is asked for.
 */
START_TEST(a_stop_does_not_wait_for_a_pass_on_a_frozen_meta)
{
#ifndef SHARDQ_FAILPOINTS
	printf("%s: needs a failpoint build; skipped\n", __func__);
	return;
#endif
	sq_error err;
	testdb_proxy px;
	sq_config *cfg;
	sq_client *c;
	open_with("[schedule frozen]\nevery = 1s\ntype = frozen\nkey = frozen-{epoch}\n");
	/* s1 holds the meta database; this runner reaches it through px */
	testdb_proxy_start(&px, t.ports[0]);
	char *direct = testdb_ini(&t, NULL, "\n[connection]\nanswer_timeout = 10m\n");
	char *ini = testdb_ini_via(direct, t.ports[0], px.port);
	free(direct);
	OKE(sq_config_parse(ini, "frozen.ini", &cfg, &err));
	free(ini);
	OKE(sq_client_open(cfg, 0, &c, &err));
	testdb_failpoint_hold("sched_pass");
	sq_sched_thread *th = sq_sched_thread_start(cfg, "frozen", c, NULL, NULL);
	ck_assert_ptr_nonnull(th);
	testdb_failpoint_await("the scheduler's pass");
	testdb_proxy_freeze(&px, 1);
	testdb_failpoint_go();
	/* let the pass send the meta database its first statement (if it has
	 * not by the stop, the statement waits the same way) */
	usleep(200000);
	double took =
		testdb_call_within(stop_sched, th,
				   "the scheduler's stop, which waits for its pass, which waits "
				   "for the meta database (frozen; answer_timeout 10 min)");
	printf("scheduler stopped %.2fs after the stop was asked\n", took);
	testdb_proxy_freeze(&px, 0);
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	testdb_tmpdir_remove();
}
END_TEST

/*
 * A stop does not cut a pass that is under way on databases that answer:
 * cut between its claim and its enqueue, the slot would wait claim_lease
 * for another scheduler to take it over (and a cut between the enqueue
 * and its confirmation is the one case that may enqueue a slot twice,
 * docs/operations.md). The pass's claim of a slot waits for a row lock
 * the test holds; the stop is asked for; the lock goes within the stop's
 * grace; the pass claims, enqueues and confirms its slot, and only then
 * does the stop return.
 */
START_TEST(a_stop_lets_a_pass_under_way_end)
{
	sq_error err;
	sq_client *c;
	open_with("[schedule grace]\nevery = 1s\ntype = grace\nkey = grace-{epoch}\n");
	OKE(sq_client_open(t.cfg, 0, &c, &err));
	sq_sched_thread *th = sq_sched_thread_start(t.cfg, "grace", c, NULL, NULL);
	ck_assert_ptr_nonnull(th);
	/* the schedule is begun (its first pass enqueues nothing) */
	double since = test_now_s();
	while (meta_scalar("SELECT count(*) FROM shardq_meta.schedules WHERE name = 'grace'") < 1) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the scheduler did not begin its schedule within %.0fs",
			      testdb_stall_s());
		usleep(20000);
	}
	PGconn *lk = testdb_pg(&t, 0);
	PQclear(PQexec(lk, "BEGIN"));
	PGresult *r =
		PQexec(lk, "SELECT 1 FROM shardq_meta.schedules WHERE name = 'grace' FOR UPDATE");
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	/* the next slot's claim waits for that lock */
	since = test_now_s();
	while (meta_scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
			   "AND query LIKE 'UPDATE shardq_meta.schedules%'") < 1) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "no claim of the scheduler waited for the row lock within %.0fs",
			      testdb_stall_s());
		usleep(20000);
	}
	testdb_call stop;
	testdb_call_start(&stop, stop_sched, th);
	/* the stop is under way, its grace not over (SQ_SCHED_STOP_GRACE_S) */
	usleep(300000);
	PQclear(PQexec(lk, "COMMIT"));
	PQfinish(lk);
	double took = testdb_call_wait(&stop, "the scheduler's stop, which waits for its pass");
	printf("scheduler stopped %.2fs after the stop was asked\n", took + 0.3);
	ck_assert_int_eq(
		meta_scalar("SELECT count(*) FROM shardq_meta.schedules WHERE name = "
			    "'grace' AND lease_until IS NULL AND enqueued_slot = last_slot "
			    "AND enqueues = 1"),
		1);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE task = 'grace'"),
			 1);
}
END_TEST

START_TEST(cli_lists_and_runs_once)
{
	const char *cli = getenv("SHARDQ_CLI");
	if (!cli) {
		printf("cli_lists_and_runs_once: SHARDQ_CLI not set, skipped\n");
		return;
	}
	char ini[512], cmd[2048], line[2048];
	open_with("[schedule cli]\nevery = 10s\ntype = cli\n"
		  "[schedule nightly]\ncron = \"30 2 * * *\"\ntimezone = Europe/Moscow\n"
		  "type = cli\nkey = nightly-{slot}\n");
	testdb_path(ini, sizeof(ini), "sched.ini");
	FILE *f = fopen(ini, "w");
	ck_assert_ptr_nonnull(f);
	fputs(t.ini, f);
	fclose(f);
	int64_t b = base_time();
	snprintf(cmd, sizeof(cmd),
		 "%s -c %s schedules --run-once --now %lld --json >/dev/null 2>&1", cli, ini,
		 (long long)b);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s -c %s schedules --run-once --now %lld --json 2>&1", cli, ini,
		 (long long)(b + 10));
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	int once = 0, lines = 0;
	while (fgets(line, sizeof(line), p)) {
		lines++;
		if (strstr(line, "\"name\":\"cli\"") && strstr(line, "\"enqueues\":1"))
			once = 1;
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(once, "no line shows schedule cli enqueued");
	ck_assert_int_eq(lines, 3); /* the pass's line on stderr, two schedules */
	ck_assert_int_eq(jobs_of("cli"), 1);
	snprintf(cmd, sizeof(cmd), "%s schedules --help | grep -q run-once", cli);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("schedule");
	ADD_CASE(s, cron_fields, 60);
	ADD_CASE(s, cron_errors, 60);
	ADD_CASE(s, cron_next_prev_utc, 60);
	ADD_CASE(s, cron_dst_europe_berlin, 60);
	ADD_CASE(s, schedule_keys_and_every, 60);
	ADD_CASE(s, config_checks, 60);
	/* the tests against the shards share one cluster (CK_RUN_CASE=shards) */
	TCase *tc = tcase_create("shards");
	tcase_set_timeout(tc, 600);
	tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
	tcase_add_checked_fixture(tc, NULL, teardown);
	ADD_TEST(tc, three_schedulers_each_slot_once);
	ADD_TEST(tc, missed_once_runs_the_latest_slot_once);
	ADD_TEST(tc, missed_skip_waits_for_the_next_slot);
	ADD_TEST(tc, crash_between_claim_and_enqueue_is_taken_over);
	ADD_TEST(tc, crash_after_enqueue_dedups_on_the_live_job);
	ADD_TEST(tc, worker_runs_the_schedules);
	ADD_TEST(tc, every_second_with_the_defaults_misses_no_slot);
	ADD_TEST(tc, cli_lists_and_runs_once);
	ADD_TEST(tc, a_stop_does_not_wait_for_a_pass_on_a_frozen_meta);
	ADD_TEST(tc, a_stop_lets_a_pass_under_way_end);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

/* test_maintain.c - history retention: jobs_history partitioned by the day
 * rows expire, filled over three "days" with the test clock
 * ($SHARDQ_TEST_CLOCK_OFFSET, failpoint builds), sq_maintain at successive
 * fake days dropping exactly the partitions that ended; one runner per
 * shard; a completion with no partition for its day lands in the default
 * one; lock_timeout; the periodic runner of the worker runtime; the
 * migration of an old history table; `shardq maintain`. */
#include "support.h"

#include "client.h"
#include "maintain.h"
#include "schema.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <sys/wait.h>

static const char *types = "[type d1]\nhistory = true\nhistory_retention = 1d\n"
			   "[type d3]\nhistory = true\nhistory_retention = 60h\n"
			   "[type plain]\n";

#define DAY_S INT64_C(86400)

/* The databases are made by the first case of a run and reused by the
 * others (making them is most of a case's time): a row on the first shard
 * names the run ($SQT_MAINTAIN_RUN, set by main). Each case gets its own
 * client and an emptied jobs table, history and set of day partitions. */
static testdb t;

static void drop_days(void);

static int reuse(void)
{
	const char *run = getenv("SQT_MAINTAIN_RUN");
	char dsn[256], sql[128];
	int ports[16], ok = 0;
	if (!run || testdb_ports(ports, 16) < 2)
		return 0;
	char db[64];
	testdb_name(db, sizeof(db), "sqt_maintain");
	snprintf(dsn, sizeof(dsn), "host=127.0.0.1 port=%d dbname=%s user=postgres", ports[0], db);
	PGconn *pc = PQconnectdb(dsn);
	snprintf(sql, sizeof(sql), "SELECT 1 FROM public.sqt_run WHERE id = '%s'", run);
	PGresult *r = PQstatus(pc) == CONNECTION_OK ? PQexec(pc, sql) : NULL;
	ok = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	PQclear(r);
	PQfinish(pc);
	if (!ok)
		return 0;
	sq_error err;
	memset(&t, 0, sizeof(t));
	t.nshards = 2;
	t.partitions = 64;
	testdb_ports(t.ports, 16);
	snprintf(t.db, sizeof(t.db), "%s", db);
	t.extra = strdup(types);
	t.ini = testdb_ini(&t, NULL, NULL);
	OKE(sq_config_parse(t.ini, t.db, &t.cfg, &err));
	t.client = testdb_client(&t);
	return 1;
}

static void setup(void)
{
	if (!reuse()) {
		char sql[128];
		testdb_open(&t, "sqt_maintain", 2, 64, types);
		snprintf(sql, sizeof(sql),
			 "CREATE TABLE public.sqt_run AS SELECT '%s'::text AS id, 1 AS one; "
			 "SELECT 1",
			 getenv("SQT_MAINTAIN_RUN") ? getenv("SQT_MAINTAIN_RUN") : "");
		testdb_scalar(&t, 0, sql);
		return;
	}
	drop_days();
	for (int s = 0; s < t.nshards; s++)
		testdb_scalar(&t, s,
			      "WITH a AS (DELETE FROM shardq.jobs RETURNING 1),"
			      " b AS (DELETE FROM shardq.jobs_history RETURNING 1)"
			      " SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)");
}

static void teardown(void)
{
	testdb_close(&t);
}

/* Drops every day partition on every shard (as if no pass had run). */
static void drop_days(void)
{
	for (int s = 0; s < t.nshards; s++) {
		PGconn *pc = testdb_pg(&t, s);
		PGresult *r = PQexec(pc, "DO $$ DECLARE n text; BEGIN"
					 " FOR n IN SELECT name FROM shardq.history_partitions()"
					 "  WHERE NOT is_default LOOP"
					 "   EXECUTE format('DROP TABLE shardq.%I', n);"
					 " END LOOP; END $$");
		ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pc));
		PQclear(r);
		PQfinish(pc);
	}
}

static int64_t wall_s(void)
{
	return (int64_t)time(NULL);
}

/* Enqueues n jobs of type, claims and completes them all with the test
 * clock `days` days ahead (or behind). */
static void complete_n(const char *type, int n, int days)
{
	sq_error err;
	char off[32];
	snprintf(off, sizeof(off), "%lld", (long long)(days * DAY_S));
	setenv("SHARDQ_TEST_CLOCK_OFFSET", off, 1);
	for (int i = 0; i < n; i++)
		enqueue_one(t.client, type, NULL, NULL, NULL);
	int done = 0;
	double last = test_now_s();
	while (done < n) {
		sq_job *js;
		size_t got = claim_type(t.client, "w", type, n - done, &js);
		sq_job_ref refs[64];
		sq_status st[64];
		ck_assert_uint_le(got, 64);
		for (size_t i = 0; i < got; i++)
			refs[i] = (sq_job_ref){js[i].id, js[i].attempt};
		sq_jobs_free(js, got);
		if (got) {
			OKE(sq_complete(t.client, "w", refs, got, st, &err));
			for (size_t i = 0; i < got; i++)
				ck_assert_int_eq(st[i], SQ_OK);
		}
		done += (int)got;
		if (got)
			last = test_now_s();
		ck_assert_msg(test_now_s() - last < testdb_stall_s(), "claims stalled at %d of %d",
			      done, n);
	}
	unsetenv("SHARDQ_TEST_CLOCK_OFFSET");
}

static long long hist_count(const char *type)
{
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs_history WHERE task = '%s'",
		 type);
	return testdb_sum(&t, sql);
}

/* Day partitions (not the default) of shard s. */
static long long day_parts(int s)
{
	return testdb_scalar(&t, s,
			     "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = "
			     "i.inhrelid WHERE i.inhparent = 'shardq.jobs_history'::regclass "
			     "AND c.relname <> 'jobs_history_default'");
}

/* Whether shard s has the partition of day (days since the epoch). */
static int has_day(int s, int64_t day)
{
	char sql[300];
	time_t tt = (time_t)(day * DAY_S);
	struct tm tm;
	char name[32];
	gmtime_r(&tt, &tm);
	strftime(name, sizeof(name), "jobs_history_p%Y%m%d", &tm);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
		 " WHERE i.inhparent = 'shardq.jobs_history'::regclass AND c.relname = '%s'",
		 name);
	return testdb_scalar(&t, s, sql) == 1;
}

static void day_name(int64_t day, char *out, size_t len)
{
	time_t tt = (time_t)(day * DAY_S);
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, len, "jobs_history_p%Y%m%d", &tm);
}

static void maintain_at(int64_t now_s, sq_maintain_report *rep)
{
	sq_maintain_opts o;
	sq_error err;
	sq_maintain_opts_init(&o);
	o.now_us = now_s * 1000000;
	OKE(sq_maintain(t.client, &o, rep, &err));
	ck_assert_int_eq(rep->nshards, t.nshards);
	for (int s = 0; s < rep->nshards; s++)
		ck_assert_msg(rep->shards[s].ran && !rep->shards[s].skipped, "shard %d: %s", s,
			      rep->shards[s].error);
}

/* Three days of history of a 1-day and a 60-hour (3 days) type; maintenance
 * at each following midnight drops exactly the day that ended, and the rows
 * of the longer retention stay until theirs. */
START_TEST(retention_drops_whole_days)
{
	sq_maintain_report rep;
#ifndef SHARDQ_FAILPOINTS
	printf("%s: needs the test clock of a failpoint build; skipped\n", __func__);
	return;
#endif
	int64_t t0 = wall_s(), d0 = t0 / DAY_S;
	if (t0 - d0 * DAY_S > DAY_S - 120) {
		/* the days below must not change under the test */
		sleep((unsigned)(DAY_S - (t0 - d0 * DAY_S) + 1));
		t0 = wall_s(), d0 = t0 / DAY_S;
	}
	maintain_at(t0, &rep);
	for (int s = 0; s < t.nshards; s++) {
		/* today through today + 3 (the longest retention) + 2 */
		ck_assert_uint_eq(rep.shards[s].ncreated, 6);
		ck_assert_int_eq(day_parts(s), 6);
		for (int64_t d = d0; d <= d0 + 5; d++)
			ck_assert_msg(has_day(s, d), "shard %d lacks day %lld", s, (long long)d);
	}
	sq_maintain_report_free(&rep);
	/* history finished on days d0, d0+1, d0+2 */
	for (int k = 0; k < 3; k++) {
		complete_n("d1", 12, k);
		complete_n("d3", 12, k);
		complete_n("plain", 4, k);
	}
	ck_assert_int_eq(hist_count("d1"), 36);
	ck_assert_int_eq(hist_count("d3"), 36);
	ck_assert_int_eq(hist_count("plain"), 0);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history_default"), 0);
	/* each row is in the partition of its expiry day: finished + 1 or 3 days */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history WHERE "
					"(task = 'd1' AND expires_at - finished_at <> '1 day') OR "
					"(task = 'd3' AND expires_at - finished_at <> '3 days') OR "
					"tableoid::regclass::text <> 'shardq.jobs_history_p' || "
					"to_char(expires_at AT TIME ZONE 'UTC', 'YYYYMMDD')"),
			 0);
	/* every shard got some of each day, or the drops below prove less */
	for (int s = 0; s < t.nshards; s++)
		ck_assert_int_gt(testdb_scalar(&t, s, "SELECT count(*) FROM shardq.jobs_history"),
				 0);

	/* rows of d1 finished on day k expire on k+1: gone once k+2 began;
	 * d3's on k+3: gone once k+4 began */
	for (int64_t j = 1; j <= 6; j++) {
		int64_t now = (d0 + j) * DAY_S + 1;
		char gone[40];
		day_name(d0 + j - 1, gone, sizeof(gone));
		maintain_at(now, &rep);
		long long want1 = 0, want3 = 0;
		for (int k = 0; k < 3; k++) {
			want1 += k + 2 > j ? 12 : 0;
			want3 += k + 4 > j ? 12 : 0;
		}
		ck_assert_msg(hist_count("d1") == want1, "day %lld: d1 has %lld rows, want %lld",
			      (long long)j, hist_count("d1"), want1);
		ck_assert_msg(hist_count("d3") == want3, "day %lld: d3 has %lld rows, want %lld",
			      (long long)j, hist_count("d3"), want3);
		for (int s = 0; s < t.nshards; s++) {
			sq_maintain_shard *sh = &rep.shards[s];
			/* exactly yesterday's partition went; one more day was made */
			ck_assert_uint_eq(sh->ndropped, 1);
			ck_assert_str_eq(sh->dropped[0].name, gone);
			ck_assert_uint_eq(sh->ncreated, 1);
			ck_assert_int_eq(sh->partitions, 6);
			ck_assert_int_eq(sh->default_rows, 0);
			ck_assert_int_eq(day_parts(s), 6);
			ck_assert(!has_day(s, d0 + j - 1));
			for (int64_t d = d0 + j; d <= d0 + j + 5; d++)
				ck_assert_msg(has_day(s, d), "day %lld: shard %d lacks day %lld",
					      (long long)j, s, (long long)d);
		}
		sq_maintain_report_free(&rep);
	}
	/* a second pass at the same time changes nothing */
	maintain_at((d0 + 6) * DAY_S + 1, &rep);
	for (int s = 0; s < t.nshards; s++)
		ck_assert(!rep.shards[s].ncreated && !rep.shards[s].ndropped);
	sq_maintain_report_free(&rep);
}
END_TEST

/* Before any maintenance (or after missed passes) a completion lands in the
 * default partition; the next pass moves it into its day, deletes what
 * expired there, and reports what is left. */
START_TEST(missing_partition_goes_to_default)
{
	sq_maintain_report rep;
	sq_error err;
#ifndef SHARDQ_FAILPOINTS
	printf("%s: needs the test clock of a failpoint build; skipped\n", __func__);
	return;
#endif
	ck_assert_int_eq(day_parts(0), 0); /* a fresh cluster has only the default */
	complete_n("d1", 8, 0);            /* expires tomorrow: no partition */
	complete_n("d1", 3, -10);          /* expired nine days ago */
	complete_n("d3", 2, 30);           /* far beyond the days made ahead */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history_default"), 13);
	/* the history is read from the default partition as from any other */
	int64_t id = enqueue_one(t.client, "d1", "look", NULL, NULL);
	sq_job *js;
	ck_assert_uint_eq(claim_type(t.client, "w", "d1", 1, &js), 1);
	sq_job_ref r = {js[0].id, js[0].attempt};
	sq_jobs_free(js, 1);
	sq_status st;
	OKE(sq_complete(t.client, "w", &r, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	sq_job j;
	OKE(sq_get_job(t.client, id, &j, &err));
	ck_assert_int_eq(j.status, SQ_COMPLETED);
	sq_job_clear(&j);

	maintain_at(wall_s(), &rep);
	int64_t moved = 0, deleted = 0, left = 0;
	for (int s = 0; s < rep.nshards; s++) {
		moved += rep.shards[s].default_moved;
		deleted += rep.shards[s].default_deleted;
		left += rep.shards[s].default_rows;
		ck_assert(!rep.shards[s].default_rows_capped);
	}
	sq_maintain_report_free(&rep);
	ck_assert_int_eq(moved, 9);
	ck_assert_int_eq(deleted, 3);
	ck_assert_int_eq(left, 2);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history_default"), 2);
	ck_assert_int_eq(hist_count("d1"), 9);
	OKE(sq_get_job(t.client, id, &j, &err));
	ck_assert_int_eq(j.status, SQ_COMPLETED);
	sq_job_clear(&j);
}
END_TEST

/* One runner per shard: while another session holds a shard's maintenance
 * lock that shard is skipped, the others are done. */
static void second_runner_is_skipped(void)
{
	sq_maintain_report rep;
	sq_error err;
	PGconn *hold = testdb_pg(&t, 0);
	PGresult *r = PQexec(hold, "SELECT pg_advisory_lock(" SQ_MAINTAIN_KEY ")");
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	OKE(sq_maintain(t.client, NULL, &rep, &err));
	ck_assert(rep.shards[0].skipped && !rep.shards[0].ran);
	ck_assert_uint_eq(rep.shards[0].ncreated, 0);
	ck_assert_int_eq(day_parts(0), 0);
	for (int s = 1; s < t.nshards; s++) {
		ck_assert(!rep.shards[s].skipped && rep.shards[s].ran);
		ck_assert_int_eq(day_parts(s), 6);
	}
	sq_maintain_report_free(&rep);
	/* the lock is a session's: released, the next pass does shard 0 */
	r = PQexec(hold, "SELECT pg_advisory_unlock(" SQ_MAINTAIN_KEY ")");
	PQclear(r);
	OKE(sq_maintain(t.client, NULL, &rep, &err));
	ck_assert(rep.shards[0].ran && !rep.shards[0].skipped);
	ck_assert_uint_eq(rep.shards[0].ncreated, 6);
	sq_maintain_report_free(&rep);
	PQfinish(hold);
}

/* A transaction that holds jobs_history: the DDL gives up after
 * lock_timeout (no queueing behind it), the shard reports why, the others
 * are done, and the next pass finishes it. */
static void lock_timeout_then_retry(void)
{
	sq_maintain_report rep;
	sq_maintain_opts o;
	sq_error err;
	PGconn *hold = testdb_pg(&t, 0);
	PGresult *r = PQexec(hold, "BEGIN; SELECT count(*) FROM shardq.jobs_history");
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	sq_maintain_opts_init(&o);
	o.lock_timeout_ms = 100;
	ck_assert_int_eq(sq_maintain(t.client, &o, &rep, &err), SQ_EDB);
	ck_assert_msg(strstr(err.msg, "shard s1") && strstr(err.msg, "lock timeout"), "%s",
		      err.msg);
	ck_assert_int_eq(rep.shards[0].status, SQ_EDB);
	ck_assert(!rep.shards[0].ran);
	ck_assert_ptr_nonnull(strstr(rep.shards[0].error, "the next pass tries again"));
	for (int s = 1; s < t.nshards; s++)
		ck_assert(rep.shards[s].ran);
	sq_maintain_report_free(&rep);
	/* completions go on meanwhile: they do not wait behind the DDL */
	complete_n("d1", 2, 0);
	r = PQexec(hold, "COMMIT");
	PQclear(r);
	OKE(sq_maintain(t.client, &o, &rep, &err));
	ck_assert(rep.shards[0].ran);
	ck_assert_int_eq(day_parts(0), 6);
	sq_maintain_report_free(&rep);
	PQfinish(hold);
}

/* Both on one cluster: skipped first, then the lock timeout makes the
 * missing days on shard s1 wait for the next pass. */
START_TEST(one_runner_and_lock_timeout)
{
	second_runner_is_skipped();
	drop_days(); /* so that the lock timeout finds DDL to do */
	lock_timeout_then_retry();
}
END_TEST

/* The worker runtime runs maintenance on its own every maintain_interval:
 * the partitions appear without anyone calling sq_maintain. */
static sq_job_result nop(const sq_job *job, void *arg, char *errbuf, size_t errlen)
{
	(void)job, (void)arg, (void)errbuf, (void)errlen;
	return SQ_RESULT_DONE;
}

/* Waits until every shard has its six day partitions, made by `who`
 * (process pid, if not 0, which must live on); fails on a stall. */
static void wait_day_parts(pid_t pid, const char *who)
{
	double t0 = test_now_s();
	int done = 0;
	while (!done) {
		done = 1;
		for (int s = 0; s < t.nshards; s++)
			done &= day_parts(s) == 6;
		if (!done) {
			int st;
			ck_assert_msg(!pid || waitpid(pid, &st, WNOHANG) == 0, "%s exited", who);
			ck_assert_msg(test_now_s() - t0 < testdb_stall_s(),
				      "no partitions made by %s", who);
			usleep(50 * 1000);
		}
	}
}

static void worker_runs_maintenance(void)
{
	sq_error err;
	sq_config *cfg;
	sq_worker *w;
	sq_worker_opts o;
	char *ini = testdb_ini(&t, NULL, "maintain_interval = 1s");
	OKE(sq_config_parse(ini, "maintain.ini", &cfg, &err));
	sq_worker_opts_init(&o);
	OKE(sq_worker_create(cfg, &o, &w, &err));
	OKE(sq_worker_add(w, "d1", 1, nop, NULL, &err));
	wait_day_parts(0, "the worker");
	sq_worker_destroy(w);
	sq_config_free(cfg);
	free(ini);
}

/* shardqd runs it too, and logs what each pass did. */
static void daemon_runs_maintenance(void)
{
	char path[512];
	testdb_path(path, sizeof(path), "shardqd.ini");
	char *ini = testdb_ini(&t, NULL, "maintain_interval = 1s");
	test_write_file(path, 0, "%s\n[daemon]\nlisten = 127.0.0.1:0\nthreads = 1\n", ini);
	free(ini);
	test_daemon d = {0};
	test_daemon_spawn(&d, path, "shardqd.log");
	wait_day_parts(d.pid, "shardqd");
	/* the log line follows the pass */
	const char *log;
	double t0 = test_now_s();
	while (!strstr(log = test_file_text(d.out), "maintain: shard s1: created 6")) {
		ck_assert_msg(test_now_s() - t0 < testdb_stall_s(), "log: %s", log);
		usleep(50 * 1000);
	}
	ck_assert_int_eq(test_daemon_stop(&d, SIGTERM), 0);
}

/* The worker runtime first; shardqd then finds the days made and still
 * logs its pass once the clusters' partitions are gone again. */
START_TEST(periodic_runners)
{
	worker_runs_maintenance();
	drop_days();
	daemon_runs_maintenance();
}
END_TEST

/* A shard at schema 3 with rows in the old, plain history table: init
 * makes it partitioned and keeps every row (expires_at = finished + 7 days,
 * at least two days ahead), found by id as before. */
START_TEST(migration_keeps_old_history)
{
	sq_error err;
	int created;
	PGconn *pc = testdb_pg(&t, 1);
	PGresult *r = PQexec(pc, "SET client_min_messages = warning; DROP SCHEMA shardq CASCADE");
	ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	for (int i = 0; i < 3; i++) {
		r = PQexec(pc, sq_shard_migrations[i].sql);
		ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s",
			      sq_shard_migrations[i].name, PQerrorMessage(pc));
		PQclear(r);
	}
	r = PQexec(
		pc,
		"CREATE TABLE shardq.schema_version (version integer PRIMARY KEY, "
		"name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());"
		"INSERT INTO shardq.schema_version VALUES (1, '001_init'), "
		"(2, '002_attempt_base'), (3, '003_stats_estimate');"
		"INSERT INTO shardq.jobs_history (id, partition, task, status, attempt,"
		" params, created_at, finished_at) VALUES"
		" (4242 << 16, 0, 'd1', 'completed', 1, '{}', now(), now() - '30 days'::interval),"
		" (4243 << 16, 0, 'd1', 'completed', 1, '{}', now(), now() - '1 hour'::interval);"
		"INSERT INTO shardq.jobs (id, partition, task, status, worker,"
		" expected_status_change_time) VALUES"
		" (4244 << 16, 0, 'd1', 'ready', NULL, NULL),"
		" (4245 << 16, 0, 'd1', 'running', 'w', now() + '1 hour'::interval)");
	ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pc));
	PQclear(r);
	OKE(sq_init(t.client, &created, &err));
	ck_assert_int_eq(testdb_scalar(&t, 1,
				       "SELECT count(*) FROM pg_class WHERE oid = "
				       "'shardq.jobs_history'::regclass AND relkind = 'p'"),
			 1);
	ck_assert_int_eq(testdb_scalar(&t, 1, "SELECT count(*) FROM shardq.jobs_history"), 2);
	ck_assert_int_eq(
		testdb_scalar(&t, 1,
			      "SELECT count(*) FROM shardq.jobs_history WHERE expires_at >= "
			      "date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE "
			      "'UTC' + '2 days'::interval"),
		2);
	ck_assert_int_eq(
		testdb_scalar(&t, 1,
			      "SELECT count(*) FROM shardq.jobs_history WHERE id = 4243 << 16 "
			      "AND expires_at = finished_at + '7 days'::interval"),
		1);
	ck_assert_int_eq(testdb_scalar(&t, 1, "SELECT count(*) FROM shardq.jobs_history_default"),
			 0);
	/* version 6: jobs_partition leaves out the jobs in flight; the live
	 * jobs are all still there, and a move's two arms find both */
	ck_assert_int_eq(
		testdb_scalar(&t, 1,
			      "SELECT count(*) FROM pg_indexes WHERE schemaname = 'shardq' "
			      "AND indexname = 'jobs_partition' AND indexdef LIKE "
			      "'%WHERE ((status <> ''starting''::shardq.job_status) AND "
			      "(status <> ''running''::shardq.job_status))'"),
		1);
	ck_assert_int_eq(testdb_scalar(&t, 1,
				       "SELECT count(*) FROM shardq.jobs WHERE partition = 0 "
				       "AND status <> 'starting' AND status <> 'running'"),
			 1);
	ck_assert_int_eq(testdb_scalar(&t, 1,
				       "SELECT count(*) FROM shardq.jobs WHERE partition = 0 "
				       "AND status IN ('starting', 'running')"),
			 1);
	/* a maintenance pass now keeps them */
	sq_maintain_report rep;
	OKE(sq_maintain(t.client, NULL, &rep, &err));
	sq_maintain_report_free(&rep);
	ck_assert_int_eq(testdb_scalar(&t, 1, "SELECT count(*) FROM shardq.jobs_history"), 2);
	PQfinish(pc);
}
END_TEST

START_TEST(cli_maintain)
{
	char path[512], out[8192];
	testdb_path(path, sizeof(path), "maintain.ini");
	FILE *f = fopen(path, "w");
	fputs(t.ini, f);
	fclose(f);
	PGconn *hold = testdb_pg(&t, 0);
	PGresult *r = PQexec(hold, "SELECT pg_advisory_lock(" SQ_MAINTAIN_KEY ")");
	PQclear(r);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain", path), 0);
	ck_assert_msg(strstr(out, "shard s1: skipped: another runner"), "%s", out);
	ck_assert_msg(strstr(out, "shard s2: done"), "%s", out);
	ck_assert_msg(strstr(out, "created 6: jobs_history_p"), "%s", out);
	ck_assert_msg(strstr(out, "default partition: 0 rows"), "%s", out);
	r = PQexec(hold, "SELECT pg_advisory_unlock(" SQ_MAINTAIN_KEY ")");
	PQclear(r);
	PQfinish(hold);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain --json", path), 0);
	ck_assert_msg(strstr(out, "{\"shard\":\"s1\",\"result\":\"done\",\"created\":[{\"name\":"
				  "\"jobs_history_p"),
		      "%s", out);
	ck_assert_msg(strstr(out, "{\"shard\":\"s2\",\"result\":\"done\",\"created\":[],"), "%s",
		      out);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain --help", path), 0);
	ck_assert_ptr_nonnull(strstr(out, "usage: shardq [-c FILE] maintain"));
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain --bogus", path), 2);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain --lock-timeout 0", path),
			 2);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain extra", path), 2);

	/* `shardq init` makes the days ahead too (a worker's first pass comes
	 * at a random time within its first maintain_interval) */
	drop_days();
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s init", path), 0);
	ck_assert_msg(strstr(out, "history: 12 day partitions made ahead on "), "%s", out);
	for (int s = 0; s < t.nshards; s++)
		ck_assert_int_eq(day_parts(s), 6);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s init", path), 0);
	ck_assert_msg(strstr(out, "history: 0 day partitions made ahead on "), "%s", out);
	/* when it cannot (a long transaction on the history of s1), init still
	 * succeeds, says so, and s2's days are made */
	drop_days();
	hold = testdb_pg(&t, 0);
	r = PQexec(hold, "BEGIN; SELECT count(*) FROM shardq.jobs_history");
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s init", path), 0);
	ck_assert_msg(strstr(out, "warning: the history's day partitions were not all made") &&
			      strstr(out, "shard s1") && strstr(out, "run `shardq maintain`"),
		      "%s", out);
	ck_assert_int_eq(day_parts(0), 0);
	ck_assert_int_eq(day_parts(1), 6);
	PQfinish(hold);
}
END_TEST

/* A port nothing listens on (a black hole's, closed): a connect is refused. */
static int closed_port(void)
{
	int port;
	close(testdb_black_hole(1, &port));
	return port;
}

/* `shardq maintain` while s2 is down: s1's expired day is dropped and its
 * days made, s2 is reported with why, and the exit code says a shard
 * failed (4), for cron. It once opened a full client, which refused to
 * open with a shard down, and did nothing anywhere. */
START_TEST(cli_maintain_does_every_shard_it_can_reach)
{
	char path[512], out[8192];
	PGconn *pc = testdb_pg(&t, 0);
	PGresult *r = PQexec(pc, "SELECT shardq.history_add_day(current_date - 3)");
	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pc));
	PQclear(r);
	PQfinish(pc);
	long long before = day_parts(0);
	ck_assert_int_ge(before, 1);
	char *ini = testdb_ini_via(t.ini, t.ports[1], closed_port());
	testdb_path(path, sizeof(path), "down.ini");
	test_write_bytes(path, ini, strlen(ini));
	free(ini);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain --json", path), 4);
	ck_assert_msg(strstr(out, "{\"shard\":\"s1\",\"result\":\"done\"") &&
			      strstr(out, "\"dropped\":[{\"name\":\"jobs_history_p"),
		      "%s", out);
	ck_assert_msg(strstr(out, "{\"shard\":\"s2\",\"result\":\"error\",\"error\":") &&
			      strstr(out, "refused"),
		      "%s", out);
	ck_assert_int_eq(has_day(0, wall_s() / DAY_S - 3), 0);
	ck_assert_int_eq(testdb_run_cli(out, sizeof(out), "-c %s maintain", path), 4);
	ck_assert_msg(strstr(out, "shard s1: done") && strstr(out, "shard s2: stopped"), "%s", out);
}
END_TEST

static void check_retention_config(void);

/* The test clock moves finished_at and expires_at in a failpoint build
 * only: no environment shifts a production build's history. */
START_TEST(config_and_test_clock)
{
	check_retention_config();
	complete_n("d1", 1, 10);
	long long ahead =
		testdb_sum(&t, "SELECT coalesce(max(round(extract(epoch from expires_at - now()) / "
			       "86400)), 0) FROM shardq.jobs_history");
#ifdef SHARDQ_FAILPOINTS
	ck_assert_int_eq(ahead, 11);
#else
	ck_assert_int_eq(ahead, 1);
#endif
}
END_TEST

/* history_retention: whole days, clear errors. */
static void check_retention_config(void)
{
	sq_config *cfg;
	sq_error err;
	const char *head = "[shard s1]\ndsn = host=x\n";
	char ini[512];
	snprintf(ini, sizeof(ini), "%s[type a]\nhistory_retention = 0\n", head);
	ck_assert_int_eq(sq_config_parse(ini, "r.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "r.ini:4: [type a] history_retention:"), "%s", err.msg);
	snprintf(ini, sizeof(ini), "%s[type a]\nhistory_retention = soon\n", head);
	ck_assert_int_eq(sq_config_parse(ini, "r.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "expected a duration"));
	snprintf(ini, sizeof(ini), "%s[type a]\nhistory_retention = 3651d\n", head);
	ck_assert_int_eq(sq_config_parse(ini, "r.ini", &cfg, &err), SQ_ECONFIG);
	snprintf(ini, sizeof(ini), "%s[cluster]\nmaintain_interval = -1s\n", head);
	ck_assert_int_eq(sq_config_parse(ini, "r.ini", &cfg, &err), SQ_ECONFIG);
	/* whole days, rounded up (60h: 3), for the types that keep history */
	ck_assert_str_eq(t.client->ta.hist_names, "{\"d1\",\"d3\"}");
	ck_assert_str_eq(t.client->ta.hist_days, "{1,3}");
	/* the default is 7 days */
	snprintf(ini, sizeof(ini), "%s[type a]\nhistory = true\n", head);
	OKE(sq_config_parse(ini, "r.ini", &cfg, &err));
	ck_assert_int_eq(sq_retention_days(&cfg->types[0]), 7);
	sq_config_free(cfg);
}

static void stop_maintainer(void *m)
{
	sq_maintainer_stop(m);
}

/*
 * The maintainer's pass connects to each shard in turn. With s2's host
 * gone (it takes the connection and never answers; connect_timeout 10
 * minutes) the pass waits at s2's connect, and a stop (a worker's
 * sq_worker_destroy, shardqd's SIGTERM) waited for it: 10 minutes. The
 * connect now ends as soon as the stop is asked for.
 */
START_TEST(a_stop_does_not_wait_for_a_gone_shards_connect)
{
	sq_error err;
	testdb_hole h;
	testdb_hole_start(&h, 16);
	char *direct = testdb_ini(
		&t, NULL, "maintain_interval = 1s\n\n[connection]\nconnect_timeout = 10m\n");
	char *ini = testdb_ini_via(direct, t.ports[1], h.port);
	free(direct);
	sq_config *cfg;
	OKE(sq_config_parse(ini, "hole.ini", &cfg, &err));
	free(ini);
	sq_maintainer *m = sq_maintainer_start(cfg, NULL, NULL);
	ck_assert_ptr_nonnull(m);
	/* the pass has done s1 and waits at s2's connect */
	double since = test_now_s();
	while (atomic_load(&h.took) < 1) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "no maintenance pass connected to s2 within %.0fs", testdb_stall_s());
		usleep(20000);
	}
	double took =
		testdb_call_within(stop_maintainer, m,
				   "the maintainer's stop, which waits for its pass, which waits "
				   "for s2's connect (connect_timeout 10 min)");
	printf("maintainer stopped at s2's connect after %.2fs (%d connects taken by the hole)\n",
	       took, atomic_load(&h.took));
	testdb_hole_stop(&h);
	sq_config_free(cfg);
}
END_TEST

/* What a maintainer logs, kept for the test to read. */
typedef struct logged {
	pthread_mutex_t mu;
	char text[4096];
} logged;

static void keep_log(const char *line, void *arg)
{
	logged *l = arg;
	pthread_mutex_lock(&l->mu);
	size_t n = strlen(l->text);
	snprintf(l->text + n, sizeof(l->text) - n, "%s\n", line);
	pthread_mutex_unlock(&l->mu);
}

/* A config whose s2 is reached through the proxy px, with `extra` in its
 * [cluster]; a maintenance pass will stop at s2 once connected (a
 * failpoint) until freeze_at_maintain has frozen px: what the pass sends
 * s2 next is never answered. */
static sq_config *via_proxy(testdb_proxy *px, const char *extra)
{
	sq_error err;
	sq_config *cfg;
	testdb_proxy_start(px, t.ports[1]);
	char *direct = testdb_ini(&t, NULL, extra);
	char *ini = testdb_ini_via(direct, t.ports[1], px->port);
	free(direct);
	OKE(sq_config_parse(ini, "frozen.ini", &cfg, &err));
	free(ini);
	testdb_failpoint_hold("maintain_connected_s2");
	return cfg;
}

static void freeze_at_maintain(testdb_proxy *px)
{
	testdb_failpoint_await("the maintenance pass at s2");
	testdb_proxy_freeze(px, 1);
	testdb_failpoint_go();
}

static void maintain_pass_of(void *arg)
{
	void **a = arg;
	sq_error err;
	if (sq_maintain_cfg(a[0], NULL, a[1], &err) != SQ_OK)
		printf("sq_maintain: %s\n", err.msg);
}

/*
 * A pass sends each statement to a shard and waits for its answer. A shard
 * whose host was cut off without a reset, or is stuck, keeps the
 * connection open and never answers; the pass waited for good, and so did
 * what waits for it: a worker's stop (sq_worker_destroy, shardqd's
 * SIGTERM) waits for its maintainer. Now the statement ends as soon as the
 * stop is asked for (answer_timeout 10 minutes here, so only the stop can
 * end it).
 */
START_TEST(a_stop_does_not_wait_for_a_frozen_shards_answer)
{
#ifndef SHARDQ_FAILPOINTS
	printf("%s: needs a failpoint build; skipped\n", __func__);
	return;
#endif
	testdb_proxy px;
	logged log = {PTHREAD_MUTEX_INITIALIZER, ""};
	sq_config *cfg =
		via_proxy(&px, "maintain_interval = 1s\n\n[connection]\nanswer_timeout = 10m\n");
	sq_maintainer *m = sq_maintainer_start(cfg, keep_log, &log);
	ck_assert_ptr_nonnull(m);
	freeze_at_maintain(&px);
	/* let the pass send s2 its next statement (if it has not by the stop,
	 * the statement waits the same way) */
	usleep(200000);
	double took =
		testdb_call_within(stop_maintainer, m,
				   "the maintainer's stop, which waits for its pass, which waits "
				   "for the answer of s2 (frozen; answer_timeout 10 min)");
	printf("maintainer stopped %.2fs after the stop was asked; its log:\n%s", took, log.text);
	ck_assert_msg(strstr(log.text, "shard s2: ") && strstr(log.text, "not done: stopping"),
		      "the pass should say it left s2 undone because of the stop; it logged:\n%s",
		      log.text);
	testdb_proxy_freeze(&px, 0);
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	testdb_tmpdir_remove();
}
END_TEST

/*
 * The same shard with no stop: sq_maintain (`shardq maintain`) waits for
 * an answer at most answer_timeout, then reports the shard and goes on;
 * the shard before it is done.
 */
START_TEST(a_pass_gives_up_on_a_shard_that_stops_answering)
{
#ifndef SHARDQ_FAILPOINTS
	printf("%s: needs a failpoint build; skipped\n", __func__);
	return;
#endif
	testdb_proxy px;
	sq_maintain_report rep;
	sq_config *cfg = via_proxy(&px, "\n[connection]\nanswer_timeout = 2s\n");
	void *args[2] = {cfg, &rep};
	testdb_call pass;
	testdb_call_start(&pass, maintain_pass_of, args);
	freeze_at_maintain(&px);
	testdb_call_wait(&pass, "the pass, which waits for the answer of s2 (frozen; "
				"answer_timeout 2s)");
	ck_assert_int_eq(rep.nshards, 2);
	printf("s1: ran %d, status %d; s2: status %d, %s\n", rep.shards[0].ran,
	       rep.shards[0].status, rep.shards[1].status, rep.shards[1].error);
	ck_assert_msg(rep.shards[0].ran && rep.shards[0].status == SQ_OK, "s1 should be done: %s",
		      rep.shards[0].error);
	ck_assert_int_eq(rep.shards[1].status, SQ_ECONN);
	ck_assert_msg(strstr(rep.shards[1].error, "no answer within 2.0s"),
		      "s2's error should say it did not answer: %s", rep.shards[1].error);
	sq_maintain_report_free(&rep);
	testdb_proxy_freeze(&px, 0);
	testdb_proxy_stop(&px);
	sq_config_free(cfg);
	testdb_tmpdir_remove();
}
END_TEST

/* One case per test, named for it (CK_RUN_CASE=NAME runs one alone). */
#define CASE(fn)                                                         \
	do {                                                             \
		if (test_take_next()) {                                  \
			TCase *tc_ = tcase_create(#fn);                  \
			tcase_add_checked_fixture(tc_, setup, teardown); \
			tcase_set_timeout(tc_, 300);                     \
			tcase_add_test(tc_, fn);                         \
			suite_add_tcase(s, tc_);                         \
		}                                                        \
	} while (0)

int main(void)
{
	Suite *s = suite_create("maintain");
	char run[64];
	snprintf(run, sizeof(run), "%d-%ld", (int)getpid(), (long)time(NULL));
	setenv("SQT_MAINTAIN_RUN", run, 1);
	CASE(retention_drops_whole_days);
	CASE(missing_partition_goes_to_default);
	CASE(one_runner_and_lock_timeout);
	CASE(periodic_runners);
	CASE(migration_keeps_old_history);
	CASE(cli_maintain);
	CASE(cli_maintain_does_every_shard_it_can_reach);
	CASE(config_and_test_clock);
	CASE(a_stop_does_not_wait_for_a_gone_shards_connect);
	CASE(a_stop_does_not_wait_for_a_frozen_shards_answer);
	CASE(a_pass_gives_up_on_a_shard_that_stops_answering);
	return run_suite(s);
}

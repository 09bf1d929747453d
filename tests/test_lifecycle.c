/* test_lifecycle.c - fenced transitions: expired leases go to another
 * worker and the first one's writes are LOST; retry with backoff, failed at
 * max attempts, permanent failure; release; heartbeat; cancel. */
#include "fenced.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *types =
	"[type short]\nstarting_timeout = 400ms\nexecution_timeout = 600ms\nmax_attempts = 5\n"
	"[type lin]\nbackoff = linear\nbackoff_base = 1s\nbackoff_jitter = 0\nmax_attempts = 3\n"
	"[type fast]\nbackoff = constant\nbackoff_base = 0\nmax_attempts = 3\n"
	"[type hist]\nhistory = true\n"
	"[type poison]\nstarting_timeout = 300ms\nmax_attempts = 2\n";

static testdb t;

static void setup(void)
{
	testdb_open(&t, "sqt_life", test_shard_count(), 256, types);
}

static void teardown(void)
{
	testdb_close(&t);
}

static sq_status one(sq_status (*fn)(sq_client *, const char *, const sq_job_ref *, size_t,
				     sq_status *, sq_error *),
		     sq_client *c, const char *w, int64_t id, int att)
{
	sq_job_ref r = {id, att};
	sq_status st;
	sq_error err;
	OKE(fn(c, w, &r, 1, &st, &err));
	return st;
}

static sq_status fail_one(const char *w, int64_t id, int att, const char *msg, int permanent)
{
	sq_fail_req f = {{id, att}, msg, permanent};
	sq_status st;
	sq_error err;
	OKE(sq_fail(t.client, w, &f, 1, &st, &err));
	return st;
}

/* Microseconds of the wall clock, as the shards' schedule times are. */
static int64_t wall_us(void)
{
	return (int64_t)(test_wall_s() * 1e6);
}

/* Waits until the lease of job id has run out on its shard's clock (the
 * clock its claims read), for as long as the stall time. */
static void wait_lease_over(int64_t id)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE id = %lld AND "
		 "expected_status_change_time < clock_timestamp()",
		 (long long)id);
	double since = test_now_s();
	while (testdb_sum(&t, sql) == 0) {
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "the lease of job %lld has not run out in %.0fs", (long long)id,
			      testdb_stall_s());
		usleep(20000);
	}
}

static int64_t claim1(sq_client *c, const char *w, const char *type, int *att)
{
	sq_job *js;
	size_t n = claim_type(c, w, type, 1, &js);
	int64_t id = 0;
	*att = -1;
	if (n) {
		id = js[0].id;
		*att = js[0].attempt;
	}
	sq_jobs_free(js, n);
	return id;
}

START_TEST(expired_starting_lease_goes_to_another_worker)
{
	int a1 = 0, a2 = 0;
	sq_client *w2 = testdb_client(&t);
	int64_t id = enqueue_one(t.client, "short", "job", NULL, NULL);
	double t0 = test_now_s();
	ck_assert_int_eq(claim1(t.client, "w1", "short", &a1), id);
	/* while the lease (400 ms from the first claim) is valid nobody else
	 * gets it; on a machine so slow that it ran out already, w2 may */
	int64_t early = claim1(w2, "w2", "short", &a2);
	double t1 = test_now_s();
	if (t1 - t0 < 0.4)
		ck_assert_msg(early == 0, "w2 took the job %.3fs after w1's claim", t1 - t0);
	else
		printf("expired_starting_lease: the claims took %.3fs; lease not checked\n",
		       t1 - t0);
	if (!early) {
		wait_lease_over(id);
		ck_assert_int_eq(claim1(w2, "w2", "short", &a2), id);
	}
	ck_assert_int_eq(a2, a1 + 1);
	/* the first worker's writes are lost and change nothing */
	ck_assert_int_eq(one(sq_start, t.client, "w1", id, a1), SQ_ELOST);
	ck_assert_int_eq(one(sq_complete, t.client, "w1", id, a1), SQ_ELOST);
	sq_job j = test_get_job(t.client, id);
	ck_assert_str_eq(j.worker, "w2");
	ck_assert_int_eq(j.attempt, a2);
	ck_assert_int_eq(j.status, SQ_STARTING);
	sq_job_clear(&j);
	/* the second run completes it, exactly once */
	ck_assert_int_eq(one(sq_start, w2, "w2", id, a2), SQ_OK);
	ck_assert_int_eq(one(sq_complete, w2, "w2", id, a2), SQ_OK);
	ck_assert_int_eq(one(sq_complete, w2, "w2", id, a2), SQ_ELOST);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 0);
	sq_client_close(w2);
}
END_TEST

START_TEST(expired_running_lease_complete_is_lost)
{
	int a1 = 0, a2 = 0;
	sq_error err;
	sq_client *w2 = testdb_client(&t);
	int64_t id = enqueue_one(t.client, "short", "run", "{\"x\":1}", NULL);
	ck_assert_int_eq(claim1(t.client, "w1", "short", &a1), id);
	ck_assert_int_eq(one(sq_start, t.client, "w1", id, a1), SQ_OK);
	wait_lease_over(id); /* execution lease is 600ms */
	ck_assert_int_eq(claim1(w2, "w2", "short", &a2), id);
	ck_assert_int_eq(one(sq_complete, t.client, "w1", id, a1), SQ_ELOST);
	sq_fail_req f = {{id, a1}, "late failure", 0};
	sq_status st;
	OKE(sq_fail(t.client, "w1", &f, 1, &st, &err));
	ck_assert_int_eq(st, SQ_ELOST);
	sq_job j = test_get_job(t.client, id);
	ck_assert_str_eq(j.worker, "w2");
	ck_assert_int_eq(j.status, SQ_STARTING);
	ck_assert_ptr_null(strstr(j.params, "late"));
	sq_job_clear(&j);
	ck_assert_int_eq(one(sq_start, w2, "w2", id, a2), SQ_OK);
	ck_assert_int_eq(one(sq_complete, w2, "w2", id, a2), SQ_OK);
	sq_client_close(w2);
}
END_TEST

START_TEST(heartbeat_keeps_the_lease)
{
	int a1 = 0, a2 = 0;
	sq_client *w2 = testdb_client(&t);
	/* heartbeats every 300 ms keep a 600 ms lease for 1.2 s. A machine
	 * that stalls longer than the lease between two of them lets the lease
	 * lapse, as it should: then the round starts again with a new job. */
	int64_t id = 0;
	for (int round = 0; round < 5; round++) {
		char key[16];
		snprintf(key, sizeof(key), "hb%d", round);
		id = enqueue_one(t.client, "short", key, NULL, NULL);
		ck_assert_int_eq(claim1(t.client, "w1", "short", &a1), id);
		ck_assert_int_eq(one(sq_start, t.client, "w1", id, a1), SQ_OK);
		double beat = test_now_s();
		int lapsed = 0;
		for (int i = 0; i < 4 && !lapsed; i++) {
			usleep(300 * 1000);
			double t0 = test_now_s();
			sq_status hb = one(sq_heartbeat, t.client, "w1", id, a1);
			if (hb == SQ_ELOST && t0 - beat > 0.6) {
				lapsed = 1;
				break;
			}
			ck_assert_int_eq(hb, SQ_OK);
			beat = t0;
			int64_t other = claim1(w2, "w2", "short", &a2);
			if (other && test_now_s() - beat > 0.6) {
				lapsed = 1;
				break;
			}
			ck_assert_msg(other == 0, "w2 took job %lld %.3fs after a heartbeat",
				      (long long)other, test_now_s() - beat);
		}
		if (!lapsed)
			break;
		printf("heartbeat_keeps_the_lease: a stall longer than the lease; again\n");
		ck_assert_int_lt(round, 4);
		id = 0;
	}
	/* the lease variants answer the lease they set, as the row holds it */
	{
		sq_job_ref ref = {id, a1};
		sq_status st;
		int64_t lease = -1;
		sq_error err;
		OKE(sq_heartbeat_lease(t.client, "w1", &ref, 1, &st, &lease, &err));
		ck_assert_int_eq(st, SQ_OK);
		sq_job j = test_get_job(t.client, id);
		ck_assert_int_eq(lease, j.lease_until_us);
		sq_job_clear(&j);
		OKE(sq_start_lease(t.client, "w1", &ref, 1, &st, &lease, &err));
		ck_assert_int_eq(st, SQ_OK);
		j = test_get_job(t.client, id);
		ck_assert_int_eq(lease, j.lease_until_us);
		sq_job_clear(&j);
		/* not ours: lost, and no lease */
		ref.attempt = a1 + 7;
		OKE(sq_heartbeat_lease(t.client, "w1", &ref, 1, &st, &lease, &err));
		ck_assert_int_eq(st, SQ_ELOST);
		ck_assert_int_eq(lease, 0);
	}
	ck_assert_int_eq(one(sq_complete, t.client, "w1", id, a1), SQ_OK);
	/* heartbeat of a job not ours (or gone) is lost */
	ck_assert_int_eq(one(sq_heartbeat, t.client, "w1", id, a1), SQ_ELOST);
	/* a heartbeat of a job still starting (its start never sent) starts it:
	 * it is the worker's, and running */
	id = enqueue_one(t.client, "short", "hb-starting", NULL, NULL);
	ck_assert_int_eq(claim1(t.client, "w1", "short", &a1), id);
	sq_job j = test_get_job(t.client, id);
	ck_assert_str_eq(sq_job_status_name(j.status), "starting");
	sq_job_clear(&j);
	ck_assert_int_eq(one(sq_heartbeat, t.client, "w1", id, a1), SQ_OK);
	j = test_get_job(t.client, id);
	ck_assert_str_eq(sq_job_status_name(j.status), "running");
	ck_assert_str_eq(j.worker, "w1");
	ck_assert_int_eq(j.attempt, a1);
	sq_job_clear(&j);
	/* and another worker's heartbeat of it is lost */
	ck_assert_int_eq(one(sq_heartbeat, w2, "w2", id, a1), SQ_ELOST);
	ck_assert_int_eq(one(sq_complete, t.client, "w1", id, a1), SQ_OK);
	sq_client_close(w2);
}
END_TEST

START_TEST(retry_with_backoff_then_failed)
{
	int att = 0;
	int64_t early = 0;
	int64_t id = enqueue_one(t.client, "lin", "flaky", NULL, NULL);
	for (int round = 1; round <= 3; round++) {
		int64_t got = early;
		double until = test_now_s() + round + testdb_stall_s();
		while (!got && test_now_s() < until) {
			got = claim1(t.client, "w", "lin", &att);
			if (!got)
				usleep(100 * 1000);
		}
		early = 0;
		ck_assert_int_eq(got, id);
		ck_assert_int_eq(att, round);
		ck_assert_int_eq(one(sq_start, t.client, "w", id, att), SQ_OK);
		int64_t before = wall_us();
		ck_assert_int_eq(fail_one("w", id, att, "boom", 0), SQ_OK);
		int64_t after = wall_us();
		sq_job j = test_get_job(t.client, id);
		ck_assert_str_eq(j.params, "{}");
		if (round < 3) {
			/* linear backoff: attempt * 1s from the failure */
			ck_assert_int_eq(j.status, SQ_READY);
			ck_assert_msg(j.schedule_time_us >= before + round * 1000000 - 1000 &&
					      j.schedule_time_us <= after + round * 1000000 + 1000,
				      "round %d: scheduled %.3fs after the failure began, %.3fs "
				      "after it returned",
				      round, (double)(j.schedule_time_us - before) / 1e6,
				      (double)(j.schedule_time_us - after) / 1e6);
			/* not due yet: a claim now takes nothing (one that comes after
			 * the schedule time, on a slow machine, may) */
			early = claim1(t.client, "w", "lin", &att);
			ck_assert_msg(!early || wall_us() >= j.schedule_time_us,
				      "round %d: claimed %.3fs before it was due", round,
				      (double)(j.schedule_time_us - wall_us()) / 1e6);
		} else {
			ck_assert_int_eq(j.status, SQ_FAILED);
			ck_assert_int_eq(j.attempt, 3);
		}
		sq_job_clear(&j);
	}
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE status = 'failed' "
					"AND last_error = 'boom'"),
			 1);
	/* a failed job is not claimed again */
	ck_assert_int_eq(claim1(t.client, "w", "lin", &att), 0);
}
END_TEST

START_TEST(permanent_failure_and_max_attempts)
{
	int att = 0;
	int64_t p = enqueue_one(t.client, "fast", "perm", NULL, NULL);
	ck_assert_int_eq(claim1(t.client, "w", "fast", &att), p);
	ck_assert_int_eq(one(sq_start, t.client, "w", p, att), SQ_OK);
	ck_assert_int_eq(fail_one("w", p, att, "bad input", 1), SQ_OK);
	sq_job j = test_get_job(t.client, p);
	ck_assert_int_eq(j.status, SQ_FAILED);
	ck_assert_int_eq(j.attempt, 1);
	sq_job_clear(&j);

	int64_t q = enqueue_one(t.client, "fast", "retry", NULL, NULL);
	for (int i = 1; i <= 3; i++) {
		ck_assert_int_eq(claim1(t.client, "w", "fast", &att), q);
		ck_assert_int_eq(att, i);
		ck_assert_int_eq(one(sq_start, t.client, "w", q, att), SQ_OK);
		ck_assert_int_eq(fail_one("w", q, att, "again", 0), SQ_OK);
	}
	j = test_get_job(t.client, q);
	ck_assert_int_eq(j.status, SQ_FAILED);
	sq_job_clear(&j);
	ck_assert_int_eq(claim1(t.client, "w", "fast", &att), 0);
}
END_TEST

START_TEST(release_counts_no_attempt)
{
	int att, last = 0;
	int64_t id = enqueue_one(t.client, "fast", "rel", NULL, NULL);
	for (int i = 0; i < 3; i++) {
		sq_job *js;
		ck_assert_uint_eq(claim_type(t.client, "w", "fast", 1, &js), 1);
		ck_assert_int_eq(js[0].id, id);
		ck_assert_int_eq(js[0].tries, 1);      /* released tries did not count */
		ck_assert_int_gt(js[0].attempt, last); /* the fence only grows */
		att = last = js[0].attempt;
		sq_jobs_free(js, 1);
		ck_assert_int_eq(one(sq_release, t.client, "w", id, att), SQ_OK);
		sq_job j = test_get_job(t.client, id);
		ck_assert_int_eq(j.status, SQ_READY);
		ck_assert_int_eq(j.tries, 0);
		ck_assert_ptr_null(j.worker);
		sq_job_clear(&j);
		/* a write of the released run can never match a later run */
		ck_assert_int_eq(one(sq_start, t.client, "w", id, att), SQ_ELOST);
	}
	/* a running job cannot be released (only starting ones) */
	ck_assert_int_eq(claim1(t.client, "w", "fast", &att), id);
	ck_assert_int_eq(one(sq_start, t.client, "w", id, att), SQ_OK);
	ck_assert_int_eq(one(sq_release, t.client, "w", id, att), SQ_ELOST);
	/* a start sent twice (its answer lost) is the same run: still ok */
	ck_assert_int_eq(one(sq_start, t.client, "w", id, att), SQ_OK);
	ck_assert_int_eq(one(sq_complete, t.client, "w", id, att), SQ_OK);
}
END_TEST

START_TEST(cancel_running_makes_complete_lost)
{
	int att = 0;
	sq_status st;
	sq_error err;
	int64_t id = enqueue_one(t.client, "fast", "cancel-me", NULL, NULL);
	int64_t other = enqueue_one(t.client, "fast", "other", NULL, NULL);
	sq_job *js;
	ck_assert_uint_eq(claim_type(t.client, "w", "fast", 5, &js), 2);
	att = js[0].id == id ? js[0].attempt : js[1].attempt;
	sq_jobs_free(js, 2);
	ck_assert_int_eq(one(sq_start, t.client, "w", id, att), SQ_OK);
	int64_t ids[2] = {id, 999999999};
	sq_status out[2];
	OKE(sq_cancel(t.client, ids, 2, out, &err));
	ck_assert_int_eq(out[0], SQ_OK);
	ck_assert_int_eq(out[1], SQ_ENOTFOUND);
	ck_assert_int_eq(one(sq_complete, t.client, "w", id, att), SQ_ELOST);
	sq_job j = test_get_job(t.client, id);
	ck_assert_int_eq(j.status, SQ_CANCELLED);
	sq_job_clear(&j);
	j = test_get_job(t.client, other);
	ck_assert_int_eq(j.status, SQ_STARTING);
	sq_job_clear(&j);
	(void)st;
}
END_TEST

/* Claims one job of `type` until one comes, or until the job `id` is
 * failed (then 0): a client's claims take the expired leases up on their
 * next full claim, within a second (sql/queries/claim.sql,
 * claim_cursor_key). */
static int64_t claim1_until(sq_client *c, const char *w, const char *type, int64_t id, int *att)
{
	double since = test_now_s();
	for (;;) {
		int64_t got = claim1(c, w, type, att);
		sq_job j = test_get_job(c, id);
		int failed = j.status == SQ_FAILED;
		sq_job_clear(&j);
		if (got || failed)
			return got;
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "no claim took up job %lld's expired lease in %.0fs", (long long)id,
			      testdb_stall_s());
		usleep(50000);
	}
}

/* A job whose lease expires on every attempt (it kills its worker) is
 * failed when its attempts are used up, not handed out forever. */
START_TEST(expired_on_last_attempt_fails)
{
	int att;
	int64_t id = enqueue_one(t.client, "poison", "p", NULL, NULL);
	ck_assert_int_eq(claim1(t.client, "w1", "poison", &att), id);
	ck_assert_int_eq(att, 1);
	wait_lease_over(id);
	ck_assert_int_eq(claim1_until(t.client, "w2", "poison", id, &att), id);
	ck_assert_int_eq(att, 2);
	wait_lease_over(id);
	ck_assert_int_eq(claim1_until(t.client, "w3", "poison", id, &att), 0);
	sq_job j = test_get_job(t.client, id);
	ck_assert_int_eq(j.status, SQ_FAILED);
	ck_assert_int_eq(j.attempt, 2);
	sq_job_clear(&j);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE last_error LIKE "
					"'the lease of try 2 of 2 expired (worker w2 %'"),
			 1);
}
END_TEST

START_TEST(batched_mixed_results)
{
	/* one call over many jobs on all shards: each gets its own answer */
	enum { N = 400 };
	sq_job_spec js[N];
	sq_enqueue_result rs[N];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < N; i++)
		js[i].type = "hist";
	OKE(sq_enqueue(t.client, js, N, rs, &err));
	sq_job *cl;
	size_t n = claim_type(t.client, "w", "hist", N, &cl);
	ck_assert_uint_eq(n, N);
	sq_job_ref refs[N];
	sq_status out[N];
	for (size_t i = 0; i < n; i++)
		refs[i].id = cl[i].id, refs[i].attempt = cl[i].attempt;
	refs[7].attempt = 99; /* a wrong attempt: lost, others fine */
	OKE(sq_start(t.client, "w", refs, n, out, &err));
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(out[i], i == 7 ? SQ_ELOST : SQ_OK);
	OKE(sq_complete(t.client, "w", refs, n, out, &err));
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(out[i], i == 7 ? SQ_ELOST : SQ_OK);
	/* completed jobs left the hot table; this type keeps history */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), 1);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs_history "
					"WHERE status = 'completed'"),
			 N - 1);
	sq_jobs_free(cl, n);
}
END_TEST

/* The plans of the fenced writes. Each must look its refs up in jobs_pkey,
 * one probe per ref, whatever the statistics say: a plan that reaches the
 * jobs another way reads the whole queue per call (a completion of 250 jobs
 * took 3.2 s on a fresh cluster of 100,000 jobs). */
static testdb tp;

static void setup_plans(void)
{
	testdb_open(&tp, "sqt_life_plan", 2, 16384, "[type p]\n");
}

static void teardown_plans(void)
{
	testdb_close(&tp);
}

static void exec_ok(PGconn *pg, const char *sql)
{
	PGresult *r = PQexec(pg, sql);
	ExecStatusType st = PQresultStatus(r);
	ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
		      PQerrorMessage(pg));
	PQclear(r);
}

/* Enqueues n keyless jobs of type p, in batches of 1,000. */
static void enqueue_p(int n)
{
	static sq_job_spec js[1000];
	static sq_enqueue_result rs[1000];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < 1000; i++)
		js[i].type = "p";
	for (int done = 0; done < n; done += 1000)
		OKE(sq_enqueue(tp.client, js, (size_t)(n - done < 1000 ? n - done : 1000), rs,
			       &err));
}

/* The statistics a vacuum leaves on a churned queue table (many pages, a
 * few live rows, most of them running), made on pg with jobs whose ids no
 * allocator gives out (10^12 << 16 and up), which it then deletes; the
 * statistics stay, since autovacuum is turned off for the table. */
static const char *const churn_sql[] = {
	"ALTER TABLE shardq.jobs SET (autovacuum_enabled = false);"
	"INSERT INTO shardq.jobs (id, partition, task)"
	" SELECT ((g + 1000000000000) << 16), 0, 'p' FROM generate_series(1::bigint, 30000) g;"
	"UPDATE shardq.jobs SET status = 'running', worker = 'w', attempt = 1,"
	"       expected_status_change_time = now() + interval '1 hour'"
	" WHERE id >= 1000000000000::bigint << 16 AND (id >> 16) % 3 <> 0;"
	"DELETE FROM shardq.jobs"
	" WHERE id >= 1000000000000::bigint << 16 AND (id >> 16) % 100 <> 0",
	"VACUUM ANALYZE shardq.jobs",
	"DELETE FROM shardq.jobs WHERE id >= 1000000000000::bigint << 16"};

static void churned_statistics(PGconn *pg)
{
	for (size_t i = 0; i < sizeof(churn_sql) / sizeof(churn_sql[0]); i++)
		exec_ok(pg, churn_sql[i]);
}

/* Runs sql on every shard of tp. */
static void on_every_shard(const char *sql)
{
	for (int s = 0; s < tp.nshards; s++) {
		PGconn *pg = testdb_pg(&tp, s);
		exec_ok(pg, sql);
		PQfinish(pg);
	}
}

/* The lines of an EXPLAIN's result, joined (malloc'd); clears r. */
static char *plan_lines(PGresult *r)
{
	size_t len = 0, cap = 1 << 16;
	char *out = malloc(cap);
	ck_assert_ptr_nonnull(out);
	out[0] = 0;
	for (int i = 0; i < PQntuples(r); i++)
		len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s\n",
					PQgetvalue(r, i, 0));
	ck_assert_uint_lt(len, cap);
	PQclear(r);
	return out;
}

/* EXPLAIN of fenced write k for the refs ids/atts (array literals) of worker
 * "w", planned for these values (generic 0) or once for all (1); the plan's
 * lines joined, malloc'd. */
static char *fenced_plan(PGconn *pg, sq_fenced_kind k, const char *ids, const char *atts,
			 int generic)
{
	PGresult *r;
	int np;
	size_t len = 0, cap = 1 << 16;
	char *sql = malloc(cap);
	ck_assert_ptr_nonnull(sql);
	exec_ok(pg, "DEALLOCATE ALL");
	r = PQprepare(pg, "fenced", sq_fenced_sql(k), 0, NULL);
	ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "prepare: %s", PQerrorMessage(pg));
	PQclear(r);
	r = PQdescribePrepared(pg, "fenced");
	np = PQnparams(r);
	PQclear(r);
	len = (size_t)snprintf(sql, cap, "EXPLAIN EXECUTE fenced('%s', '%s', 'w'", ids, atts);
	for (int i = 3; i < np && len < cap; i++)
		len += (size_t)snprintf(sql + len, cap - len, ", NULL");
	ck_assert_uint_lt(len + 2, cap);
	strcat(sql, ")");
	exec_ok(pg, generic ? "SET plan_cache_mode = force_generic_plan"
			    : "SET plan_cache_mode = force_custom_plan");
	r = PQexec(pg, sql);
	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "explain: %s", PQerrorMessage(pg));
	free(sql);
	return plan_lines(r);
}

/* Whether every scan of jobs_pkey in a plan's lines finds its rows by an
 * Index Cond: one without it reads the whole table. */
static int pkey_scans_have_conds(const char *plan)
{
	for (const char *p = strstr(plan, "jobs_pkey on jobs"); p;
	     p = strstr(p + 1, "jobs_pkey on jobs")) {
		const char *next = strstr(p, "->"), *cond = strstr(p, "Index Cond:");
		if (!cond || (next && next < cond))
			return 0;
	}
	return 1;
}

/* Every fenced write, both ways of planning: jobs_pkey, and no other path
 * to the jobs. */
static void check_fenced_plans(PGconn *pg, const char *ids, const char *atts, const char *when)
{
	static const char *const bad[] = {"jobs_partition", "jobs_lease", "jobs_ready",
					  "Seq Scan on jobs ", "Seq Scan on partition_state"};
	static const char *const names[] = {"start", "heartbeat", "complete",
					    "fail",  "release",   "completion without history"};
	static const sq_fenced_kind kinds[] = {SQ_FENCED_START,    SQ_FENCED_HEARTBEAT,
					       SQ_FENCED_COMPLETE, SQ_FENCED_FAIL,
					       SQ_FENCED_RELEASE,  SQ_FENCED_COMPLETE_PLAIN};
	for (int k = 0; k < 6; k++)
		for (int generic = 0; generic < 2; generic++) {
			char *plan = fenced_plan(pg, kinds[k], ids, atts, generic);
			ck_assert_msg(strstr(plan, "jobs_pkey on jobs"),
				      "%s, %s plan of the %s does not probe jobs_pkey:\n%s", when,
				      generic ? "generic" : "custom", names[k], plan);
			ck_assert_msg(pkey_scans_have_conds(plan),
				      "%s, %s plan of the %s reads all of jobs_pkey instead of "
				      "probing it by id:\n%s",
				      when, generic ? "generic" : "custom", names[k], plan);
			for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
				ck_assert_msg(!strstr(plan, bad[b]),
					      "%s, %s plan of the %s reads the jobs through %s "
					      "instead of one jobs_pkey probe per ref:\n%s",
					      when, generic ? "generic" : "custom", names[k],
					      bad[b], plan);
			free(plan);
		}
}

START_TEST(fenced_writes_probe_the_key_whatever_the_statistics)
{
	enum { N = 20000, REFS = 250 };
	sq_job *cl;
	size_t n, len = 0, alen = 0;
	char *ids = malloc(REFS * 24), *atts = malloc(REFS * 12);
	int shard;
	PGconn *pg;

	ck_assert_ptr_nonnull(ids);
	ck_assert_ptr_nonnull(atts);
	enqueue_p(N);
	/* the statistics of an idle queue: every job ready, none running */
	on_every_shard("ANALYZE shardq.jobs, shardq.partition_state");
	n = claim_type(tp.client, "w", "p", REFS * 4, &cl);
	ck_assert_uint_ge(n, REFS);
	/* the refs of one shard, as the library sends them */
	shard = cl[0].shard;
	len = (size_t)sprintf(ids, "{"), alen = (size_t)sprintf(atts, "{");
	for (size_t i = 0, m = 0; i < n && m < REFS; i++)
		if (cl[i].shard == shard) {
			len += (size_t)sprintf(ids + len, "%s%lld", m ? "," : "",
					       (long long)cl[i].id);
			alen += (size_t)sprintf(atts + alen, "%s%d", m ? "," : "", cl[i].attempt);
			m++;
		}
	strcat(ids, "}"), strcat(atts, "}");
	pg = testdb_pg(&tp, shard);

	check_fenced_plans(pg, ids, atts, "with the statistics of an idle queue");

	/* none at all, as on a fresh cluster before autovacuum's first look */
	exec_ok(pg, "DELETE FROM pg_statistic WHERE starelid IN "
		    "('shardq.jobs'::regclass, 'shardq.partition_state'::regclass)");
	exec_ok(pg, "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid IN "
		    "('shardq.jobs'::regclass, 'shardq.partition_state'::regclass)");
	check_fenced_plans(pg, ids, atts, "without statistics");

	/* those a vacuum leaves on a churned table: many pages, a few live
	 * rows, most of them running. Planned with the library's settings
	 * (no sequential or bitmap scans), a completion of 600 refs read all
	 * of jobs_pkey and compared each row with each ref (docs/design.md,
	 * "Plans that keep to the indexes") */
	exec_ok(pg, "DELETE FROM shardq.jobs");
	churned_statistics(pg);
	exec_ok(pg, "SET enable_seqscan = off; SET enable_bitmapscan = off");
	/* a call of 1,000 refs (only planned: they need not exist) */
	free(ids), free(atts);
	ids = malloc(1000 * 24), atts = malloc(1000 * 12);
	ck_assert_ptr_nonnull(ids);
	ck_assert_ptr_nonnull(atts);
	len = (size_t)sprintf(ids, "{"), alen = (size_t)sprintf(atts, "{");
	for (int i = 0; i < 1000; i++) {
		len += (size_t)sprintf(ids + len, "%s%lld", i ? "," : "",
				       ((1000000000000LL + i * 100) << 16));
		alen += (size_t)sprintf(atts + alen, "%s1", i ? "," : "");
	}
	strcat(ids, "}"), strcat(atts, "}");
	check_fenced_plans(pg, ids, atts, "with the statistics of a churned table");

	PQfinish(pg);
	sq_jobs_free(cl, n);
	free(ids);
	free(atts);
}
END_TEST

/* One statement on the library's own connection to a shard, between its
 * calls (sq_pgconn_exec leaves and re-enters its pipeline mode). */
static PGresult *library_exec(sq_pgconn *pc, const char *sql, int nparams, const char *const *vals)
{
	sq_error err;
	PGresult *r = sq_pgconn_exec(pc, sql, nparams, vals, &err);
	ck_assert_msg(r != NULL, "%s: %s", sql, err.msg);
	return r;
}

/* The claim's cursor arguments (sql/queries/claim.sql, claim_cursor_key)
 * of a full claim, from the front. */
#define FULL_CURSOR "'{t}', '{0}', '{0}', '{0}'"

/* Whether a plan sorts jobs: a Sort other than the cursor rows' (a few
 * picked rows, claim_cursor_rows). */
static int sorts_jobs(const char *plan)
{
	for (const char *p = plan; (p = strstr(p, "Sort Key: ")) != NULL; p++)
		if (strncmp(p + 10, "p.task", 6) != 0)
			return 1;
	return 0;
}

/* The plan the library's own session cached for statement `name`, as the
 * generic plan (EXPLAIN EXECUTE with `args`); malloc'd lines. */
static char *cached_plan(sq_pgconn *pc, const char *name, const char *args)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "EXPLAIN EXECUTE %s(%s)", name, args);
	PQclear(library_exec(pc, "SET plan_cache_mode = force_generic_plan", 0, NULL));
	char *out = plan_lines(library_exec(pc, sql, 0, NULL));
	PQclear(library_exec(pc, "RESET plan_cache_mode", 0, NULL));
	return out;
}

/* Whether the library's session on pc has prepared statement `name`. */
static int cached_plan_exists(sq_pgconn *pc, const char *name)
{
	const char *v[1] = {name};
	PGresult *r =
		library_exec(pc, "SELECT 1 FROM pg_prepared_statements WHERE name = $1", 1, v);
	int n = PQntuples(r);
	PQclear(r);
	return n > 0;
}

START_TEST(plans_made_on_an_empty_table_keep_to_the_indexes)
{
	/* A worker that starts on an empty queue makes its plans then, and
	 * keeps them; the queue then fills up. */
	enum { N = 20000, BATCH = 1000 };
	static sq_job_spec js[BATCH];
	static sq_enqueue_result rs[BATCH];
	sq_client *w = testdb_client(&tp);
	sq_error err;
	sq_job *cl;
	size_t n;

	memset(js, 0, sizeof(js));
	for (int i = 0; i < BATCH; i++)
		js[i].type = "p";
	/* an idle queue that autovacuum has analyzed: the planner then knows
	 * the table is empty (a table never analyzed is taken for ten pages) */
	on_every_shard("VACUUM ANALYZE shardq.jobs");
	ck_assert_uint_eq(claim_type(w, "w", "p", 1000, &cl), 0);
	sq_jobs_free(cl, 0);
	/* a completion of a few refs (a plan made once per session too) */
	OKE(sq_enqueue(tp.client, js, 8, rs, &err));
	n = claim_type(w, "w", "p", 1000, &cl);
	ck_assert_uint_eq(n, 8);
	{
		sq_job_ref refs[8];
		sq_status out[8];
		for (size_t i = 0; i < n; i++)
			refs[i].id = cl[i].id, refs[i].attempt = cl[i].attempt;
		OKE(sq_complete(w, "w", refs, n, out, &err));
		for (size_t i = 0; i < n; i++)
			ck_assert_int_eq(out[i], SQ_OK);
	}
	sq_jobs_free(cl, n);
	enqueue_p(N);

	for (int s = 0, completed = 0; s < tp.nshards; s++) {
		sq_pgconn *pg = &w->shards[s];
		char *claim = cached_plan(pg, "sq_claim",
					  "'{p}', '{1000}', '{300000}', 'w', '{0}', " FULL_CURSOR);
		/* a plan is longer than a check message may be: printed apart */
		int scan = !strstr(claim, "Seq Scan on jobs ");
		/* and not by all of an index and a sort either: each arm reads
		 * its own index in claim order from the type's first row
		 * (jobs_partition holds every ready job, of every type) */
		int arms = strstr(claim, "jobs_ready") && strstr(claim, "jobs_lease") &&
			   !strstr(claim, "jobs_partition") && !sorts_jobs(claim);
		/* and the update finds the picked rows by jobs_pkey, not by a join
		 * with them: a plan made on an empty table joined them by a
		 * nested loop that read all picked rows for each one (a join
		 * filter), quadratic in the claim's size. Only the updates' part
		 * of the plan counts: the arms' anti join with the few rows of
		 * partition_state may take a join filter, and cheaply. */
		const char *upds = strstr(claim, "CTE upd_run");
		int upd = upds && !strstr(upds, "Join Filter") && strstr(upds, "jobs_pkey");
		if (!scan || !arms || !upd)
			fprintf(stderr, "s%d: the claim's plan, made on an empty table:\n%s\n",
				s + 1, claim);
		ck_assert_msg(scan,
			      "s%d: the claim's plan, made on an empty table, reads all of a "
			      "table of %d jobs (the plan: above)",
			      s + 1, N);
		ck_assert_msg(arms,
			      "s%d: the claim's plan, made on an empty table, does not find a "
			      "type's ready jobs and expired leases by jobs_ready and "
			      "jobs_lease (the plan: above)",
			      s + 1);
		ck_assert_msg(upd,
			      "s%d: the claim's plan, made on an empty table, joins the picked "
			      "rows to the update by a filter (the plan: above)",
			      s + 1);
		free(claim);
		/* the 8 jobs were one keyless run: only their shard completed */
		if (!cached_plan_exists(pg, "sq_complete_plain")) {
			ck_assert_msg(s < tp.nshards - 1 || completed, "no shard completed");
			continue;
		}
		completed = 1;
		/* its types keep no history: the completion without it */
		char *done = cached_plan(pg, "sq_complete_plain", "'{1}', '{1}', 'w'");
		if (strstr(done, "Seq Scan on jobs "))
			fprintf(stderr, "s%d: the completion's plan:\n%s\n", s + 1, done);
		ck_assert_msg(!strstr(done, "Seq Scan on jobs "),
			      "s%d: the completion's plan, made on a table of 8 jobs, reads all "
			      "of a table of %d jobs (the plan: above)",
			      s + 1, N);
		free(done);
	}
	/* and the claim still hands out what is there, once */
	n = claim_type(w, "w", "p", N, &cl);
	ck_assert_uint_eq(n, N);
	sq_jobs_free(cl, n);
	sq_client_close(w);
}
END_TEST

/* A queue table is vacuumed while most of its rows are dead and the few
 * live ones mostly running: the statistics then say a large table holds a
 * handful of jobs, a third of them ready. A claim planned on them, with
 * bitmap scans allowed, read every ready entry of the type into a bitmap,
 * every page they were on, and sorted them all to take its limit: on the
 * bench at 26,000 jobs/s, 25 ms a claim on a table of 52,000 ready
 * entries instead of 1. Its cost then grows with the backlog until the
 * next ANALYZE (docs/design.md, "Plans that keep to the indexes"). */
START_TEST(a_claim_planned_after_a_vacuum_of_a_churned_table_keeps_to_the_index)
{
	enum { N = 5000 };
	sq_job *cl;
	size_t n;
	for (int s = 0; s < tp.nshards; s++) {
		PGconn *pg = testdb_pg(&tp, s);
		churned_statistics(pg);
		PQfinish(pg);
	}
	sq_client *w = testdb_client(&tp);
	/* the claim's plan is made on those statistics, then the backlog comes */
	ck_assert_uint_eq(claim_type(w, "w", "p", 100, &cl), 0);
	sq_jobs_free(cl, 0);
	enqueue_p(N);
	for (int s = 0; s < tp.nshards; s++) {
		char *claim = cached_plan(&w->shards[s], "sq_claim",
					  "'{p}', '{100}', '{300000}', 'w', '{0}', " FULL_CURSOR);
		int ok = strstr(claim, "Index Scan using jobs_ready") && !sorts_jobs(claim) &&
			 !strstr(claim, "Bitmap Index Scan on jobs_ready");
		if (!ok) /* the plan is longer than a check message may be */
			fprintf(stderr,
				"s%d: the claim's plan after a vacuum of a churned table:\n%s\n",
				s + 1, claim);
		ck_assert_msg(ok,
			      "s%d: after a vacuum of a churned table the claim reads all of a "
			      "type's ready jobs and sorts them, instead of reading jobs_ready in "
			      "claim order up to its limit (its plan is above)",
			      s + 1);
		free(claim);
	}
	/* and everything is handed out, once */
	n = claim_type(w, "w", "p", N, &cl);
	ck_assert_uint_eq(n, N);
	sq_jobs_free(cl, n);
	sq_client_close(w);
}
END_TEST

/* This build runs on shard schema 6 (SQ_SHARD_SCHEMA_MIN), so workers
 * are rolled before `shardq init` applies 7: there the claim must still
 * read each arm by its own index, which then leads with the task's text. */
START_TEST(claims_keep_to_the_indexes_on_schema_6)
{
	enum { N = 5000 };
	sq_job *cl;
	size_t n;
	on_every_shard("DROP INDEX shardq.jobs_ready; DROP INDEX shardq.jobs_lease;"
		       "CREATE INDEX jobs_ready ON shardq.jobs (task, priority DESC,"
		       " (COALESCE(delay_tolerance_time, schedule_time)), id)"
		       " WHERE status = 'ready';"
		       "CREATE INDEX jobs_lease ON shardq.jobs (task, expected_status_change_time)"
		       " WHERE status IN ('starting', 'running');"
		       "DELETE FROM shardq.schema_version WHERE version = 7");
	sq_client *w = testdb_client(&tp);
	enqueue_p(N);
	on_every_shard("ANALYZE shardq.jobs");
	n = claim_type(w, "w", "p", 10, &cl);
	ck_assert_uint_eq(n, 10);
	sq_jobs_free(cl, n);
	for (int s = 0; s < tp.nshards; s++) {
		char *claim = cached_plan(&w->shards[s], "sq_claim",
					  "'{p}', '{1000}', '{300000}', 'w', '{0}', " FULL_CURSOR);
		int ok = strstr(claim, "Index Cond: ((task = t") && strstr(claim, "jobs_ready") &&
			 strstr(claim, "jobs_lease") && !strstr(claim, "jobs_partition") &&
			 !sorts_jobs(claim) && !strstr(claim, "Seq Scan on jobs ");
		if (!ok) /* the plan is longer than a check message may be */
			fprintf(stderr, "s%d: the claim's plan on schema 6:\n%s\n", s + 1, claim);
		ck_assert_msg(ok,
			      "s%d: on schema 6 the claim does not find a type's ready jobs and "
			      "expired leases by jobs_ready and jobs_lease (its plan is above)",
			      s + 1);
		free(claim);
	}
	/* and everything is still handed out, once */
	n = claim_type(w, "w", "p", N, &cl);
	ck_assert_uint_eq(n, N - 10);
	sq_jobs_free(cl, n);
	sq_client_close(w);
}
END_TEST

/* Enqueues n keyless jobs of type p at `prio`, due after delay_ms (and up to
 * an hour more), each
 * tolerating tol_ms of delay (0: none). */
static void enqueue_p_at(int n, int prio, int64_t delay_ms, int64_t tol_ms)
{
	static sq_job_spec js[1000];
	static sq_enqueue_result rs[1000];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < 1000; i++) {
		js[i].type = "p";
		js[i].has_priority = 1;
		js[i].priority = prio;
		/* spread over an hour from delay_ms, so that the jobs' order in
		 * jobs_ready is not the order of their rows in the table */
		js[i].delay_ms = delay_ms ? delay_ms + (i * 7919) % 3600000 : 0;
		js[i].delay_tolerance_ms = tol_ms;
	}
	for (int done = 0; done < n; done += 1000)
		OKE(sq_enqueue(tp.client, js, (size_t)(n - done < 1000 ? n - done : 1000), rs,
			       &err));
}

/* The buffers (hits and reads) the claim of up to `lim` jobs of type p
 * touches on the library's session pc, run and rolled back; from cursor
 * (its arguments) or NULL: a full claim. */
static long claim_buffers(sq_pgconn *pc, int lim, const char *cursor)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "EXPLAIN (ANALYZE, BUFFERS) EXECUTE sq_claim('{p}', '{%d}', '{300000}', 'w',"
		 " '{0}', %s)",
		 lim, cursor ? cursor : FULL_CURSOR);
	PQclear(library_exec(pc, "BEGIN", 0, NULL));
	char *plan = plan_lines(library_exec(pc, sql, 0, NULL));
	PQclear(library_exec(pc, "ROLLBACK", 0, NULL));
	/* the first Buffers line is the top node's: the whole statement */
	const char *b = strstr(plan, "Buffers: shared");
	ck_assert_msg(b != NULL, "no buffer counts in the claim's plan:\n%s", plan);
	const char *hit = strstr(b, "hit="), *rd = strstr(b, "read="), *eol = strchr(b, '\n');
	long n = (hit && hit < eol ? atol(hit + 4) : 0) + (rd && rd < eol ? atol(rd + 5) : 0);
	free(plan);
	return n;
}

/* The index entries of jobs_ready and jobs_lease that the claim of up to
 * `lim` jobs of type p reads on the library's session pc (dead ones
 * included: what a scan steps over), run and rolled back; from cursor
 * (its arguments) or NULL: a full claim. */
static long claim_entries(sq_pgconn *pc, int lim, const char *cursor)
{
	static const char count[] =
		"SELECT pg_stat_get_xact_tuples_returned('shardq.jobs_ready'::regclass)"
		" + pg_stat_get_xact_tuples_returned('shardq.jobs_lease'::regclass)";
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "EXPLAIN ANALYZE EXECUTE sq_claim('{p}', '{%d}', '{300000}', 'w', '{0}', %s)", lim,
		 cursor ? cursor : FULL_CURSOR);
	PQclear(library_exec(pc, "BEGIN", 0, NULL));
	PGresult *r = library_exec(pc, count, 0, NULL);
	long before = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQclear(library_exec(pc, sql, 0, NULL));
	r = library_exec(pc, count, 0, NULL);
	long after = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQclear(library_exec(pc, "ROLLBACK", 0, NULL));
	return after - before;
}

/* Jobs scheduled for later are never read by a claim: before shard schema
 * 9 a claim that found fewer due jobs than it asked for read every one of
 * them (a shard with 195,000 delayed jobs took 2.4 s a claim). Due jobs
 * still come in the documented order, the ones whose tolerance runs past
 * now included. */
START_TEST(a_claim_reads_no_job_scheduled_for_later)
{
	enum { LATER = 6000, TOLERANT_LATER = 2000, DUE = 10 };
	sq_job *cl;
	sq_client *w = testdb_client(&tp);
	enqueue_p_at(LATER, 0, 3600000, 0);
	enqueue_p_at(TOLERANT_LATER, 0, 3600000, 600000);
	enqueue_p_at(LATER / 4, 2, 3600000, 0);
	on_every_shard("ANALYZE shardq.jobs");
	ck_assert_uint_eq(claim_type(w, "w", "p", 100, &cl), 0);
	sq_jobs_free(cl, 0);
	/* due now: at priority 2 with a tolerance of an hour (its order key is
	 * later than any other due job's), at 0 without one, at -3 */
	enqueue_p_at(DUE, 2, 0, 3600000);
	enqueue_p_at(DUE, 0, 0, 0);
	enqueue_p_at(DUE, -3, 0, 0);
	for (int s = 0; s < tp.nshards; s++) {
		long later = testdb_scalar(
			&tp, s, "SELECT count(*) FROM shardq.jobs WHERE schedule_time > now()");
		long bufs = claim_buffers(&w->shards[s], 100, NULL);
		fprintf(stderr,
			"s%d: a claim of 100 with %ld jobs scheduled for later: %ld buffers\n",
			s + 1, later, bufs);
		ck_assert_msg(bufs < 1000,
			      "s%d: a claim of 100 with 30 due jobs in the cluster touched %ld "
			      "buffers: it reads the %ld jobs scheduled for later",
			      s + 1, bufs, later);
	}
	size_t n = claim_type(w, "w", "p", 100, &cl);
	ck_assert_uint_eq(n, 3 * DUE);
	int at[3] = {0};
	for (size_t i = 0; i < n; i++) {
		ck_assert_msg(cl[i].schedule_time_us < (int64_t)time(NULL) * 1000000 + 600000000,
			      "job %lld is due later and was claimed", (long long)cl[i].id);
		at[cl[i].priority == 2 ? 0 : cl[i].priority == 0 ? 1 : 2]++;
	}
	ck_assert_int_eq(at[0], DUE);
	ck_assert_int_eq(at[1], DUE);
	ck_assert_int_eq(at[2], DUE);
	sq_jobs_free(cl, n);
	/* and none that is due is left */
	ck_assert_int_eq(testdb_sum(&tp, "SELECT count(*) FROM shardq.jobs"
					 " WHERE status = 'ready' AND schedule_time <= now()"),
			 0);
	sq_client_close(w);
}
END_TEST

/* The cursor arguments of client c's next claim of type p on shard s, as
 * if its last full claim were recent (claim_cursor_key). */
static void cursor_args(sq_client *c, int s, char *out, size_t len)
{
	const sq_type_conf *tc = sq_config_type(c->cfg, "p");
	const sq_claim_cursor *cu = &c->cursor[s * c->cfg->ntypes + (int)(tc - c->cfg->types)];
	ck_assert_msg(cu->has, "s%d: the client's claims of p left no cursor", s + 1);
	snprintf(out, len, "'{f}', '{%d}', '{%lld}', '{%lld}'", (int)cu->prio,
		 (long long)cu->key_us, (long long)cu->id);
}

/* Beside a transaction left open on a shard, the entries of the jobs
 * claimed and completed since stay in jobs_ready, where a claim from the
 * front steps over each (issue 43, item 4: 77 ms a claim of 1,000 after
 * 250,000 jobs). A client's claim goes on from its cursor and touches
 * none of them: a full claim is left for once a second. */
START_TEST(claims_step_over_no_dead_entries_beside_an_open_transaction)
{
	enum { N = 6000, BATCH = 200 };
	sq_client *w = testdb_client(&tp);
	sq_job *cl;
	sq_error err;
	PGconn *open_tx[2];
	for (int s = 0; s < 2; s++) {
		open_tx[s] = testdb_pg(&tp, s);
		exec_ok(open_tx[s], "BEGIN ISOLATION LEVEL REPEATABLE READ");
		exec_ok(open_tx[s], "SELECT count(*) FROM shardq.jobs");
	}
	enqueue_p(N);
	for (int done = 0; done < N;) {
		size_t n = claim_type(w, "w", "p", BATCH, &cl);
		ck_assert_msg(n > 0, "%d of %d jobs claimed, then none", done, N);
		sq_job_ref refs[BATCH];
		sq_status out[BATCH];
		for (size_t i = 0; i < n; i++)
			refs[i].id = cl[i].id, refs[i].attempt = cl[i].attempt;
		OKE(sq_complete(w, "w", refs, n, out, &err));
		sq_jobs_free(cl, n);
		done += (int)n;
	}
	/* a keyless batch this small goes to one shard: measured there */
	enqueue_p(BATCH);
	int s = testdb_scalar(&tp, 0, "SELECT count(*) FROM shardq.jobs") > 0 ? 0 : 1;
	char cursor[256];
	cursor_args(w, s, cursor, sizeof(cursor));
	long full = claim_entries(&w->shards[s], 10, NULL);
	long from_cursor = claim_entries(&w->shards[s], 10, cursor);
	fprintf(stderr,
		"s%d: a claim of 10 beside an open transaction after %d jobs: %ld index entries "
		"read from the front, %ld from the client's cursor\n",
		s + 1, N, full, from_cursor);
	ck_assert_msg(full > N / (2 * tp.nshards),
		      "s%d: a claim from the front read %ld index entries after %d jobs: the "
		      "open transaction kept no dead entry, and this test shows nothing",
		      s + 1, full, N);
	ck_assert_msg(from_cursor <= 2 * 10,
		      "s%d: a claim of 10 from the cursor read %ld index entries (from the "
		      "front: %ld): it steps over dead ones",
		      s + 1, from_cursor, full);
	for (int k = 0; k < 2; k++) {
		exec_ok(open_tx[k], "ROLLBACK");
		PQfinish(open_tx[k]);
	}
	/* and the new jobs all come out, once */
	size_t n = claim_type(w, "w", "p", 2 * BATCH, &cl);
	ck_assert_uint_eq(n, BATCH);
	sq_jobs_free(cl, n);
	sq_client_close(w);
}
END_TEST

/* What lies behind a client's cursor (a job another client released, a
 * priority above the cursor's, an expired lease) is claimed by its next
 * full claim, within about a second, and nothing is claimed twice. */
START_TEST(what_lies_behind_a_cursor_comes_at_the_next_full_claim)
{
	enum { N = 400 };
	sq_client *a = testdb_client(&tp), *b = testdb_client(&tp);
	sq_job *cl, *bl;
	sq_error err;
	enqueue_p(N);
	size_t na = claim_type(a, "wa", "p", 100, &cl); /* a's cursor is past these */
	size_t nb = claim_type(b, "wb", "p", 100, &bl);
	ck_assert_uint_eq(na + nb, 200);
	sq_job_ref refs[100];
	sq_status out[100];
	for (size_t i = 0; i < nb; i++)
		refs[i].id = bl[i].id, refs[i].attempt = bl[i].attempt;
	OKE(sq_release(b, "wb", refs, nb, out, &err)); /* behind a's cursor */
	static sq_job_spec hi;
	sq_enqueue_result hr;
	hi.type = "p";
	hi.has_priority = 1;
	hi.priority = 5;
	OKE(sq_enqueue(tp.client, &hi, 1, &hr, &err));
	/* a claims all that is left, one small claim after another */
	long left = N - (long)na + 1, got = 0, hi_at = -1;
	int64_t *seen = calloc((size_t)N + 1, sizeof(int64_t));
	double since = test_now_s(), t0 = since;
	while (got < left) {
		sq_job *more;
		size_t m = claim_type(a, "wa", "p", 10, &more);
		for (size_t i = 0; i < m; i++) {
			for (long k = 0; k < got; k++)
				ck_assert_msg(seen[k] != more[i].id, "job %lld was claimed twice",
					      (long long)more[i].id);
			if (more[i].priority == 5)
				hi_at = got;
			seen[got++] = more[i].id;
		}
		if (m)
			since = test_now_s();
		sq_jobs_free(more, m);
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%ld of the %ld jobs left came to the first client, then none", got,
			      left);
		if (!m)
			usleep(20000);
	}
	fprintf(stderr, "the priority-5 job came as the %ldth of %ld; all %ld left came in %.2fs\n",
		hi_at + 1, left, left, test_now_s() - t0);
	ck_assert_int_ge(hi_at, 0);
	free(seen);
	sq_jobs_free(cl, na);
	sq_jobs_free(bl, nb);
	sq_client_close(a);
	sq_client_close(b);
}
END_TEST

/* A partition that is not owned here (a move's source after its freeze,
 * its destination before the switch, a source after it) is skipped by
 * both of the claim's arms: its ready jobs and its expired leases stay
 * where they are, whatever the plan (the first claims are planned for
 * their values, the later ones once for all), and come out once it is
 * owned again. Normally no partition is in such a state, and the claim
 * tests that once per statement instead of once per row (docs/design.md,
 * "Plans that keep to the indexes"). */
START_TEST(claims_skip_partitions_that_are_not_owned)
{
	enum { N = 4000 };
	static const char *const states[] = {"moving_out", "importing", "gone"};
	char sql[512];
	sq_job *cl;
	size_t n;
	long long held = 0, held_expired = 0, expired = 0;
	/* per shard and partition: set to a state other than owned here */
	unsigned char *not_owned = calloc((size_t)tp.nshards * tp.partitions, 1);
	ck_assert_ptr_nonnull(not_owned);
	sq_client *w = testdb_client(&tp);
	enqueue_p(N);
	for (int s = 0; s < tp.nshards; s++) {
		PGconn *pg = testdb_pg(&tp, s);
		/* the three partitions with the most jobs on this shard: one in
		 * each state; the first one's jobs run under a lease that
		 * expired, as a dead worker leaves them */
		PGresult *r = PQexec(pg, "SELECT partition FROM shardq.jobs GROUP BY partition"
					 " ORDER BY count(*) DESC, partition LIMIT 3");
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		ck_assert_int_eq(PQntuples(r), 3);
		for (int i = 0; i < 3; i++) {
			snprintf(sql, sizeof(sql),
				 "UPDATE shardq.partition_state SET state = '%s'"
				 " WHERE partition = %s",
				 states[i], PQgetvalue(r, i, 0));
			exec_ok(pg, sql);
			not_owned[(size_t)s * tp.partitions + (unsigned)atoi(PQgetvalue(r, i, 0))] =
				1;
		}
		snprintf(sql, sizeof(sql),
			 "UPDATE shardq.jobs SET status = 'running', attempt = 1, max_attempts = 3,"
			 " worker = 'dead',"
			 " expected_status_change_time = now() - interval '1 minute'"
			 " WHERE partition = %s",
			 PQgetvalue(r, 0, 0));
		exec_ok(pg, sql);
		PQclear(r);
		/* and a few of an owned partition, which do come back */
		exec_ok(pg,
			"UPDATE shardq.jobs SET status = 'running', attempt = 1, max_attempts = 3,"
			" worker = 'dead', expected_status_change_time = now() - interval"
			" '1 minute' WHERE id IN (SELECT j.id FROM shardq.jobs j JOIN"
			" shardq.partition_state ps USING (partition) WHERE ps.state = 'owned'"
			" ORDER BY j.id LIMIT 5)");
		PQfinish(pg);
		expired += 5;
		held += testdb_scalar(
			&tp, s,
			"SELECT count(*) FROM shardq.jobs j JOIN shardq.partition_state"
			" ps USING (partition) WHERE ps.state <> 'owned'");
		held_expired +=
			testdb_scalar(&tp, s,
				      "SELECT count(*) FROM shardq.jobs j JOIN"
				      " shardq.partition_state ps USING (partition)"
				      " WHERE ps.state <> 'owned' AND j.status = 'running'");
	}
	ck_assert_int_gt(held_expired, 0);
	ck_assert_int_gt(held - held_expired, 0);
	/* claims of 100 until none is left: more than the five executions
	 * after which PostgreSQL may plan a prepared statement once */
	long long got = 0, got_expired = 0, rounds = 0;
	while ((n = claim_type(w, "w", "p", 100, &cl)) > 0) {
		for (size_t i = 0; i < n; i++) {
			uint32_t part = sq_partition_of_id(cl[i].id);
			ck_assert_msg(!not_owned[(size_t)cl[i].shard * tp.partitions + part],
				      "claim %lld handed out job %lld of partition %u on s%d, "
				      "which is not owned there",
				      rounds + 1, (long long)cl[i].id, part, cl[i].shard + 1);
			got_expired += cl[i].attempt == 2;
		}
		got += (long long)n;
		rounds++;
		sq_jobs_free(cl, n);
	}
	ck_assert_int_gt(rounds, 5);
	ck_assert_int_eq(got, N - held);
	ck_assert_int_eq(got_expired, expired);
	/* and the states are read by index, not by a scan of all of them */
	for (int s = 0; s < tp.nshards; s++) {
		char *claim = cached_plan(&w->shards[s], "sq_claim",
					  "'{p}', '{1000}', '{300000}', 'w', '{0}', " FULL_CURSOR);
		int ok = !strstr(claim, "Seq Scan on partition_state") &&
			 strstr(claim, "partition_state_not_owned");
		if (!ok || getenv("SHARDQ_TEST_SHOW_PLANS"))
			fprintf(stderr, "s%d: the claim's plan:\n%s\n", s + 1, claim);
		ck_assert_msg(ok,
			      "s%d: the claim does not read the partitions' states by "
			      "partition_state_not_owned (its plan is above)",
			      s + 1);
		free(claim);
	}
	/* owned again (the move called off): what was held comes out, once */
	on_every_shard("UPDATE shardq.partition_state SET state = 'owned'");
	got = got_expired = 0;
	/* they lie behind the client's cursor: its next full claim, within a
	 * second, takes them (sql/queries/claim.sql, claim_cursor_key) */
	for (double since = test_now_s(); got < held;) {
		n = claim_type(w, "w", "p", 100, &cl);
		for (size_t i = 0; i < n; i++)
			got_expired += cl[i].attempt == 2;
		got += (long long)n;
		sq_jobs_free(cl, n);
		if (n)
			since = test_now_s();
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%lld of the %lld jobs held came out, then none", got, held);
		if (!n)
			usleep(20000);
	}
	ck_assert_uint_eq(claim_type(w, "w", "p", 100, &cl), 0);
	sq_jobs_free(cl, 0);
	ck_assert_int_eq(got, held);
	ck_assert_int_eq(got_expired, held_expired);
	free(not_owned);
	sq_client_close(w);
}
END_TEST

/* Plans of the library's session on pc for prepared statements whose name
 * is like `pattern`: custom (made for the values of a call) and generic
 * (made once), summed. */
static void plans_of(sq_pgconn *pc, const char *pattern, long long *custom, long long *generic)
{
	const char *v[1] = {pattern};
	PGresult *r = library_exec(
		pc,
		"SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0)"
		"  FROM pg_prepared_statements WHERE name LIKE $1",
		1, v);
	*custom = atoll(PQgetvalue(r, 0, 0));
	*generic = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
}

/* A fenced write's report of the partitions not owned is a probe of
 * partition_state's key per partition, whatever the batch: it is planned
 * once per session, also in the transaction of a write of more than
 * SQ_GENERIC_PLAN_ROWS refs, whose own statement is planned for its values.
 * Planned with it, the report would be planned on most calls: 0.1 ms a
 * plan, four times what the report itself takes. */
START_TEST(a_large_fenced_write_plans_its_ownership_report_once)
{
	enum { CALLS = 8, PER_CALL = 400 };
	static sq_job_ref refs[PER_CALL];
	static sq_status out[PER_CALL];
	sq_client *w = testdb_client(&tp);
	long long done = 0, claimed = 0;
	/* per shard: completions sent to it, and those of more than
	 * SQ_GENERIC_PLAN_ROWS refs */
	long long *sent = calloc((size_t)tp.nshards, sizeof(*sent));
	long long *large = calloc((size_t)tp.nshards, sizeof(*large));
	size_t *per = calloc((size_t)tp.nshards, sizeof(*per));
	ck_assert_ptr_nonnull(sent);
	ck_assert_ptr_nonnull(large);
	ck_assert_ptr_nonnull(per);
	enqueue_p(2 * CALLS * PER_CALL);
	for (int k = 0; k < CALLS; k++) {
		sq_job *cl;
		sq_error err;
		size_t n = claim_type(w, "w", "p", PER_CALL, &cl);
		ck_assert_uint_gt(n, 0);
		memset(per, 0, (size_t)tp.nshards * sizeof(*per));
		for (size_t i = 0; i < n; i++) {
			refs[i] = (sq_job_ref){cl[i].id, cl[i].attempt};
			per[cl[i].shard]++;
		}
		for (int s = 0; s < tp.nshards; s++) {
			sent[s] += per[s] > 0;
			large[s] += per[s] > SQ_GENERIC_PLAN_ROWS;
		}
		OKE(sq_complete(w, "w", refs, n, out, &err));
		for (size_t i = 0; i < n; i++)
			done += out[i] == SQ_OK;
		claimed += (long long)n;
		sq_jobs_free(cl, n);
	}
	ck_assert_int_eq(done, claimed);
	for (int s = 0; s < tp.nshards; s++) {
		long long wc, wg, rc, rg;
		plans_of(&w->shards[s], "sq_complete%", &wc, &wg);
		plans_of(&w->shards[s], "sq_not_owned", &rc, &rg);
		/* large completions reached this shard, and were planned for
		 * their values: the case this test is about */
		ck_assert_msg(large[s] > 0 && wc > 0,
			      "s%d: %lld completions of more than %d refs, planned for their "
			      "values %lld times: the test did not run its case",
			      s + 1, large[s], SQ_GENERIC_PLAN_ROWS, wc);
		ck_assert_msg(rc == 0 && rg == sent[s],
			      "s%d: the ownership report of %lld completions was planned for "
			      "its values %lld times and once for all %lld times; it should be "
			      "planned once for all every time",
			      s + 1, sent[s], rc, rg);
	}
	free(sent);
	free(large);
	free(per);
	sq_client_close(w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("lifecycle");
	tcase_set_timeout(tc, 3600);
	tcase_add_checked_fixture(tc, setup, teardown);
	ADD_TEST(tc, expired_starting_lease_goes_to_another_worker);
	ADD_TEST(tc, expired_running_lease_complete_is_lost);
	ADD_TEST(tc, heartbeat_keeps_the_lease);
	ADD_TEST(tc, retry_with_backoff_then_failed);
	ADD_TEST(tc, permanent_failure_and_max_attempts);
	ADD_TEST(tc, release_counts_no_attempt);
	ADD_TEST(tc, cancel_running_makes_complete_lost);
	ADD_TEST(tc, expired_on_last_attempt_fails);
	ADD_TEST(tc, batched_mixed_results);
	suite_add_tcase(s, tc);
	tc = tcase_create("plans");
	tcase_set_timeout(tc, 3600);
	tcase_add_checked_fixture(tc, setup_plans, teardown_plans);
	ADD_TEST(tc, fenced_writes_probe_the_key_whatever_the_statistics);
	ADD_TEST(tc, plans_made_on_an_empty_table_keep_to_the_indexes);
	ADD_TEST(tc, claims_keep_to_the_indexes_on_schema_6);
	ADD_TEST(tc, a_claim_planned_after_a_vacuum_of_a_churned_table_keeps_to_the_index);
	ADD_TEST(tc, claims_skip_partitions_that_are_not_owned);
	ADD_TEST(tc, a_claim_reads_no_job_scheduled_for_later);
	ADD_TEST(tc, claims_step_over_no_dead_entries_beside_an_open_transaction);
	ADD_TEST(tc, what_lies_behind_a_cursor_comes_at_the_next_full_claim);
	ADD_TEST(tc, a_large_fenced_write_plans_its_ownership_report_once);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

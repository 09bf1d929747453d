/* test_dedup.c - the four dedup policies of design section 5, on real
 * shards: what happens to a live duplicate of (type, key). */
#include "support.h"

#include <pthread.h>
#include <stdint.h>

static const char *types = "[type ign]\ndedup = ignore\n"
			   "[type rep]\ndedup = replace\n"
			   "[type mrg]\ndedup = merge\n"
			   "[type rr]\ndedup = rerun\n";

static testdb t;

static void setup(void)
{
	testdb_open(&t, "sqt_dedup", test_shard_count(), 1024, types);
}

static void teardown(void)
{
	testdb_close(&t);
}

static long live_with_key(const char *key)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE active_uid = '%s' "
		 "AND status IN ('ready','starting','running')",
		 key);
	return (long)testdb_sum(&t, sql);
}

/* claim + start one job of `type` for worker w; returns it */
static sq_job run_one(const char *type, const char *w)
{
	sq_job *js;
	sq_error err;
	sq_status st;
	size_t n = claim_type(t.client, w, type, 1, &js);
	ck_assert_uint_eq(n, 1);
	sq_job_ref ref = {js[0].id, js[0].attempt};
	OKE(sq_start(t.client, w, &ref, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	sq_job j = js[0];
	free(js);
	return j;
}

START_TEST(ignore_keeps_existing)
{
	sq_enqueue_outcome o;
	int64_t a = enqueue_one(t.client, "ign", "k1", "{\"v\":1}", &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	int64_t b = enqueue_one(t.client, "ign", "k1", "{\"v\":2}", &o);
	ck_assert_int_eq(o, SQ_ENQ_DUPLICATE);
	ck_assert_int_eq(a, b);
	sq_job j = test_get_job(t.client, a);
	ck_assert_str_eq(j.params, "{\"v\": 1}");
	sq_job_clear(&j);
	ck_assert_int_eq(live_with_key("k1"), 1);
	/* a different type with the same key is another job */
	int64_t c = enqueue_one(t.client, "rep", "k1", NULL, &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	ck_assert_int_ne(c, a);
}
END_TEST

START_TEST(replace_while_ready_only)
{
	sq_enqueue_outcome o;
	sq_job_spec js;
	sq_enqueue_result r;
	sq_error err;
	int64_t a = enqueue_one(t.client, "rep", "k2", "{\"v\":1}", &o);
	memset(&js, 0, sizeof(js));
	js.type = "rep", js.key = "k2", js.params = "{\"v\":2}", js.has_priority = 1,
	js.priority = 9;
	OKE(sq_enqueue(t.client, &js, 1, &r, &err));
	ck_assert_int_eq(r.outcome, SQ_ENQ_REPLACED);
	ck_assert_int_eq(r.id, a);
	sq_job j = test_get_job(t.client, a);
	ck_assert_str_eq(j.params, "{\"v\": 2}");
	ck_assert_int_eq(j.priority, 9);
	sq_job_clear(&j);
	/* once it runs, a duplicate changes nothing */
	sq_job run = run_one("rep", "w");
	ck_assert_int_eq(run.id, a);
	int64_t b = enqueue_one(t.client, "rep", "k2", "{\"v\":3}", &o);
	ck_assert_int_eq(o, SQ_ENQ_DUPLICATE);
	ck_assert_int_eq(b, a);
	j = test_get_job(t.client, a);
	ck_assert_str_eq(j.params, "{\"v\": 2}");
	ck_assert_int_eq(j.status, SQ_RUNNING);
	sq_job_clear(&j);
	sq_job_clear(&run);
	ck_assert_int_eq(live_with_key("k2"), 1);
}
END_TEST

START_TEST(merge_params_while_ready)
{
	sq_enqueue_outcome o;
	int64_t a = enqueue_one(t.client, "mrg", "k3", "{\"a\":1,\"x\":1}", &o);
	int64_t b = enqueue_one(t.client, "mrg", "k3", "{\"b\":2,\"x\":2}", &o);
	ck_assert_int_eq(o, SQ_ENQ_MERGED);
	ck_assert_int_eq(a, b);
	sq_job j = test_get_job(t.client, a);
	ck_assert_str_eq(j.params, "{\"a\": 1, \"b\": 2, \"x\": 2}");
	sq_job_clear(&j);
	/* three copies in one batch merge in order */
	sq_job_spec js[3];
	sq_enqueue_result r[3];
	sq_error err;
	memset(js, 0, sizeof(js));
	const char *ps[3] = {"{\"n\":1}", "{\"m\":2}", "{\"n\":3}"};
	for (int i = 0; i < 3; i++)
		js[i].type = "mrg", js[i].key = "k4", js[i].params = ps[i];
	OKE(sq_enqueue(t.client, js, 3, r, &err));
	ck_assert_int_eq(r[0].outcome, SQ_ENQ_INSERTED);
	ck_assert_int_eq(r[1].outcome, SQ_ENQ_MERGED);
	ck_assert_int_eq(r[2].outcome, SQ_ENQ_MERGED);
	ck_assert_int_eq(r[0].id, r[2].id);
	j = test_get_job(t.client, r[0].id);
	ck_assert_str_eq(j.params, "{\"m\": 2, \"n\": 3}");
	sq_job_clear(&j);
	/* running: merge does not touch it */
	sq_job run = run_one("mrg", "w");
	enqueue_one(t.client, "mrg", run.key, "{\"late\":true}", &o);
	ck_assert_int_eq(o, SQ_ENQ_DUPLICATE);
	j = test_get_job(t.client, run.id);
	ck_assert_ptr_null(strstr(j.params, "late"));
	sq_job_clear(&j);
	sq_job_clear(&run);
}
END_TEST

START_TEST(ignore_copies_in_one_batch)
{
	sq_job_spec js[5];
	sq_enqueue_result r[5];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < 5; i++)
		js[i].type = "ign", js[i].key = "same";
	OKE(sq_enqueue(t.client, js, 5, r, &err));
	ck_assert_int_eq(r[0].outcome, SQ_ENQ_INSERTED);
	for (int i = 1; i < 5; i++) {
		ck_assert_int_eq(r[i].outcome, SQ_ENQ_DUPLICATE);
		ck_assert_int_eq(r[i].id, r[0].id);
	}
	ck_assert_int_eq(live_with_key("same"), 1);
}
END_TEST

/* rerun: a duplicate of a running job makes it run once more, after it
 * finishes, with the new params; however many duplicates came meanwhile. */
START_TEST(rerun_after_running)
{
	sq_enqueue_outcome o;
	sq_error err;
	sq_status st;
	int64_t a = enqueue_one(t.client, "rr", "sync:1", "{\"rev\":1}", &o);
	/* while ready, the new params replace the old */
	enqueue_one(t.client, "rr", "sync:1", "{\"rev\":2}", &o);
	ck_assert_int_eq(o, SQ_ENQ_REPLACED);
	sq_job run = run_one("rr", "w1");
	ck_assert_int_eq(run.id, a);
	ck_assert_str_eq(run.params, "{\"rev\": 2}");
	enqueue_one(t.client, "rr", "sync:1", "{\"rev\":3}", &o);
	ck_assert_int_eq(o, SQ_ENQ_RERUN);
	int64_t b = enqueue_one(t.client, "rr", "sync:1", "{\"rev\":4}", &o);
	ck_assert_int_eq(o, SQ_ENQ_RERUN);
	ck_assert_int_eq(b, a);
	ck_assert_int_eq(live_with_key("sync:1"), 1);
	/* the running copy still has its params */
	sq_job j = test_get_job(t.client, a);
	ck_assert_str_eq(j.params, "{\"rev\": 2}");
	sq_job_clear(&j);
	/* complete: it becomes ready again, with the last params, fresh attempts */
	sq_job_ref ref = {run.id, run.attempt};
	OKE(sq_complete(t.client, "w1", &ref, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	j = test_get_job(t.client, a);
	ck_assert_int_eq(j.status, SQ_READY);
	ck_assert_str_eq(j.params, "{\"rev\": 4}");
	ck_assert_int_eq(j.tries, 0); /* a fresh budget; the fence keeps growing */
	ck_assert_int_eq(j.attempt, 1);
	sq_job_clear(&j);
	sq_job_clear(&run);
	/* it runs once more and then is gone */
	run = run_one("rr", "w2");
	ck_assert_str_eq(run.params, "{\"rev\": 4}");
	ref.id = run.id, ref.attempt = run.attempt;
	OKE(sq_complete(t.client, "w2", &ref, 1, &st, &err));
	ck_assert_int_eq(st, SQ_OK);
	ck_assert_int_eq(sq_get_job(t.client, a, &j, &err), SQ_ENOTFOUND);
	ck_assert_int_eq(live_with_key("sync:1"), 0);
	sq_job_clear(&run);
	/* the key is free again: a new job */
	int64_t c = enqueue_one(t.client, "rr", "sync:1", "{\"rev\":5}", &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	ck_assert_int_ne(c, a);
}
END_TEST

START_TEST(finished_or_cancelled_key_is_free)
{
	sq_enqueue_outcome o;
	sq_error err;
	int64_t id2;
	int64_t a = enqueue_one(t.client, "ign", "kc", NULL, &o);
	OKE(sq_cancel_key(t.client, "ign", "kc", &id2, &err));
	ck_assert_int_eq(id2, a);
	sq_job j = test_get_job(t.client, a);
	ck_assert_int_eq(j.status, SQ_CANCELLED);
	sq_job_clear(&j);
	int64_t b = enqueue_one(t.client, "ign", "kc", NULL, &o);
	ck_assert_int_eq(o, SQ_ENQ_INSERTED);
	ck_assert_int_ne(a, b);
	ck_assert_int_eq(sq_cancel_key(t.client, "ign", "nope", &id2, &err), SQ_ENOTFOUND);
}
END_TEST

/* ---- pipelined enqueue (sq_enqueuer) ------------------------------------------ */

#define PIPE_BATCHES     240
#define PIPE_JOBS        20
#define PIPE_CUT_BATCHES 40

/* What the callbacks were told, batch by batch. */
static pthread_mutex_t told_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int calls[PIPE_BATCHES + 40];
	sq_status st[PIPE_BATCHES + 40];
	int64_t id[PIPE_BATCHES + 40][PIPE_JOBS];
	sq_enqueue_outcome outcome[PIPE_BATCHES + 40][PIPE_JOBS];
	size_t n[PIPE_BATCHES + 40];
	int printed; /* the first error is printed */
} told;

static void on_batch(void *arg, sq_status st, const sq_enqueue_result *res, size_t n,
		     const sq_error *err)
{
	int b = (int)(intptr_t)arg;
	pthread_mutex_lock(&told_mu);
	told.calls[b]++;
	told.st[b] = st;
	told.n[b] = n;
	for (size_t i = 0; i < n && i < PIPE_JOBS; i++) {
		told.id[b][i] = res[i].id;
		told.outcome[b][i] = res[i].outcome;
	}
	if (st != SQ_OK && !told.printed++)
		printf("batch %d: %s\n", b, err->msg);
	pthread_mutex_unlock(&told_mu);
}

/* Batch b's jobs: keys p<b*PIPE_JOBS+i>, except every tenth batch, which
 * repeats batch 0's keys (live duplicates under policy ignore). */
static void pipe_batch(int b, sq_job_spec *js, char (*keys)[32])
{
	memset(js, 0, PIPE_JOBS * sizeof(*js));
	for (int i = 0; i < PIPE_JOBS; i++) {
		int k = b % 10 == 9 ? i : b * PIPE_JOBS + i;
		snprintf(keys[i], 32, "p%d", k);
		js[i].type = "ign";
		js[i].key = keys[i];
	}
}

/* 240 batches of 20 through four lanes, the caller's arrays reused at
 * once: every batch called back once, every job's outcome the shards
 * agree with (the repeated keys duplicates of their first job), no id
 * given twice; a bad batch refused whole before anything is sent. */
START_TEST(pipelined_enqueue_reports_every_job)
{
	sq_error err;
	sq_enqueuer *q;
	sq_job_spec js[PIPE_JOBS];
	char keys[PIPE_JOBS][32];
	memset(&told, 0, sizeof(told));
	ck_assert_int_eq(sq_enqueuer_open(t.cfg, 0, 0, &q, &err), SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "in_flight") != NULL, "%s", err.msg);
	OKE(sq_enqueuer_open(t.cfg, 4, 0, &q, &err));
	pipe_batch(0, js, keys);
	OKE(sq_enqueue_send(q, js, PIPE_JOBS, on_batch, (void *)(intptr_t)0, &err));
	sq_enqueuer_flush(q); /* batch 0 first: the repeats find its jobs live */
	for (int b = 1; b < PIPE_BATCHES; b++) {
		pipe_batch(b, js, keys);
		OKE(sq_enqueue_send(q, js, PIPE_JOBS, on_batch, (void *)(intptr_t)b, &err));
		/* the caller's strings are copied: scribbled on at once */
		memset(keys, 'x', sizeof(keys));
	}
	/* a bad job refuses its batch: no callback, nothing written */
	pipe_batch(PIPE_BATCHES, js, keys);
	js[7].type = "nosuch";
	ck_assert_int_eq(
		sq_enqueue_send(q, js, PIPE_JOBS, on_batch, (void *)(intptr_t)PIPE_BATCHES, &err),
		SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "job 8") && strstr(err.msg, "nosuch"), "%s", err.msg);
	sq_enqueuer_close(q);

	long inserted = 0, dups = 0;
	int64_t *ids = malloc(sizeof(int64_t) * PIPE_BATCHES * PIPE_JOBS);
	size_t nid = 0;
	for (int b = 0; b < PIPE_BATCHES; b++) {
		ck_assert_msg(told.calls[b] == 1, "batch %d called back %d times", b,
			      told.calls[b]);
		ck_assert_int_eq(told.st[b], SQ_OK);
		ck_assert_uint_eq(told.n[b], PIPE_JOBS);
		for (int i = 0; i < PIPE_JOBS; i++) {
			ck_assert_msg(told.id[b][i] > 0, "batch %d job %d: no id", b, i);
			if (b % 10 == 9) {
				ck_assert_msg(
					told.outcome[b][i] == SQ_ENQ_DUPLICATE &&
						told.id[b][i] == told.id[0][i],
					"batch %d job %d: %s of %lld, not a duplicate of %lld", b,
					i, sq_enqueue_outcome_name(told.outcome[b][i]),
					(long long)told.id[b][i], (long long)told.id[0][i]);
				dups++;
			} else {
				ck_assert_int_eq(told.outcome[b][i], SQ_ENQ_INSERTED);
				ids[nid++] = told.id[b][i];
				inserted++;
			}
		}
	}
	ck_assert_int_eq(told.calls[PIPE_BATCHES], 0);
	qsort(ids, nid, sizeof(*ids), test_cmp_i64);
	for (size_t i = 1; i < nid; i++)
		ck_assert_msg(ids[i] != ids[i - 1], "id %lld given twice", (long long)ids[i]);
	free(ids);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), inserted);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT active_uid) FROM shardq.jobs"),
			 inserted);
	printf("pipelined: %d batches, %ld inserted, %ld duplicates\n", PIPE_BATCHES, inserted,
	       dups);
}
END_TEST

/* A shard whose sessions end, and which then refuses new ones, while
 * batches are in flight: the batches routed to it are called back with
 * the error and their jobs
 * there not written (or unknown: its session lost after the send, and the
 * shard not there to ask); every job reported written is on the shards,
 * and none that was not. */
START_TEST(pipelined_enqueue_with_a_shard_gone_mid_flight)
{
	sq_error err;
	sq_enqueuer *q;
	sq_job_spec js[PIPE_JOBS];
	char keys[PIPE_JOBS][32];
	memset(&told, 0, sizeof(told));
	OKE(sq_enqueuer_open(t.cfg, 3, 0, &q, &err));
	char sql[256];
	snprintf(sql, sizeof(sql), "host=127.0.0.1 port=%d dbname=postgres user=postgres",
		 t.ports[1]);
	PGconn *adm = PQconnectdb(sql);
	ck_assert_msg(PQstatus(adm) == CONNECTION_OK, "%s", PQerrorMessage(adm));
	for (int b = 0; b < PIPE_CUT_BATCHES; b++) {
		pipe_batch(b * 10 + 1, js, keys); /* never a repeat */
		OKE(sq_enqueue_send(q, js, PIPE_JOBS, on_batch, (void *)(intptr_t)b, &err));
		if (b != PIPE_CUT_BATCHES / 3)
			continue;
		/* with batches under way, shard 2 dies to the lanes: their
		 * sessions ended, new ones refused */
		snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS false", t.db);
		PQclear(PQexec(adm, sql));
		snprintf(sql, sizeof(sql),
			 "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
			 "WHERE datname = '%s' AND pid <> pg_backend_pid()",
			 t.db);
		PQclear(PQexec(adm, sql));
	}
	sq_enqueuer_flush(q);
	snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS true", t.db);
	PQclear(PQexec(adm, sql));
	PQfinish(adm);
	sq_enqueuer_close(q);

	long written = 0, not_written = 0, failed_batches = 0;
	for (int b = 0; b < PIPE_CUT_BATCHES; b++) {
		ck_assert_int_eq(told.calls[b], 1);
		failed_batches += told.st[b] != SQ_OK;
		for (int i = 0; i < PIPE_JOBS; i++) {
			char q2[160];
			snprintf(q2, sizeof(q2), "SELECT count(*) FROM shardq.jobs WHERE id = %lld",
				 (long long)told.id[b][i]);
			if (told.id[b][i] > 0) {
				ck_assert_int_eq(told.outcome[b][i], SQ_ENQ_INSERTED);
				ck_assert_msg(
					testdb_sum(&t, q2) == 1,
					"batch %d job %d: reported written as %lld, not there", b,
					i, (long long)told.id[b][i]);
				written++;
			} else {
				ck_assert_msg(
					told.st[b] != SQ_OK,
					"batch %d job %d: not written in a batch that said OK", b,
					i);
				ck_assert_msg(told.outcome[b][i] == SQ_ENQ_NOT_WRITTEN ||
						      told.outcome[b][i] == SQ_ENQ_UNKNOWN,
					      "batch %d job %d: %s without an id", b, i,
					      sq_enqueue_outcome_name(told.outcome[b][i]));
				not_written++;
			}
		}
	}
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), written);
	ck_assert_msg(failed_batches > 0 && not_written > 0 && written > 0,
		      "%ld batches failed, %ld jobs written, %ld not: the refusing shard was not "
		      "in play",
		      failed_batches, written, not_written);
	printf("a shard gone mid-flight: %ld of %d batches failed; %ld jobs written, %ld not\n",
	       failed_batches, PIPE_CUT_BATCHES, written, not_written);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dedup");
	TCase *tc = tcase_create("dedup");
	tcase_set_timeout(tc, 3600);
	tcase_add_checked_fixture(tc, setup, teardown);
	ADD_TEST(tc, ignore_keeps_existing);
	ADD_TEST(tc, replace_while_ready_only);
	ADD_TEST(tc, merge_params_while_ready);
	ADD_TEST(tc, ignore_copies_in_one_batch);
	ADD_TEST(tc, rerun_after_running);
	ADD_TEST(tc, finished_or_cancelled_key_is_free);
	ADD_TEST(tc, pipelined_enqueue_reports_every_job);
	ADD_TEST(tc, pipelined_enqueue_with_a_shard_gone_mid_flight);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

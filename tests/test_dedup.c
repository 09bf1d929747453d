/* test_dedup.c - the four dedup policies of design section 5, on real
 * shards: what happens to a live duplicate of (type, key). */
#include "support.h"

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
	suite_add_tcase(s, tc);
	return run_suite(s);
}

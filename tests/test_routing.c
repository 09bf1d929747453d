/* test_routing.c - keys land where the map says, in the map's shares; ids
 * are unique across shards and carry their partition. */
#include "support.h"

#include <inttypes.h>
#include <time.h>

static const char *types = "[type t]\nmax_attempts = 3\n";

START_TEST(random_keys_follow_map_shares)
{
	testdb t;
	int ns = test_shard_count();
	enum { N = 100000, B = 5000 };
	testdb_open(&t, "sqt_routing", ns, 16384, types);
	sq_job_spec *js = calloc(B, sizeof(*js));
	sq_enqueue_result *rs = calloc(B, sizeof(*rs));
	char(*keys)[40] = calloc(B, 40);
	long expected_parts[16] = {0}, landed[16] = {0};
	sq_error err;
	srand(12345);
	for (int done = 0; done < N; done += B) {
		for (int i = 0; i < B; i++) {
			snprintf(keys[i], 40, "k%08x%08x-%d", (unsigned)rand(), (unsigned)rand(),
				 done + i);
			memset(&js[i], 0, sizeof(js[i]));
			js[i].type = "t";
			js[i].key = keys[i];
		}
		OKE(sq_enqueue(t.client, js, B, rs, &err));
		for (int i = 0; i < B; i++) {
			uint32_t part = sq_partition_of_key(keys[i], strlen(keys[i]), 16384);
			ck_assert_int_eq(rs[i].outcome, SQ_ENQ_INSERTED);
			/* the id encodes the key's partition; the shard is the map's */
			ck_assert_uint_eq(sq_partition_of_id(rs[i].id), part);
			ck_assert_int_eq(rs[i].shard, sq_client_shard_of_partition(t.client, part));
			landed[rs[i].shard]++;
		}
	}
	for (uint32_t p = 0; p < 16384; p++)
		expected_parts[sq_client_shard_of_partition(t.client, p)]++;
	long total = 0;
	for (int s = 0; s < ns; s++) {
		/* count on the shard itself, not what the client believes */
		long on_shard = (long)testdb_scalar(&t, s, "SELECT count(*) FROM shardq.jobs");
		double share = (double)expected_parts[s] / 16384.0;
		double want = share * N;
		ck_assert_int_eq(on_shard, landed[s]);
		ck_assert_msg(on_shard > want * 0.95 && on_shard < want * 1.05,
			      "shard %d holds %ld jobs, map share says %.0f (+-5%%)", s, on_shard,
			      want);
		total += on_shard;
	}
	ck_assert_int_eq(total, N);
	/* each row sits in the partition its key hashes to, on an owned partition */
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs j LEFT JOIN "
					"shardq.partition_state ps USING (partition) "
					"WHERE ps.state IS DISTINCT FROM 'owned' "
					"OR j.partition <> (j.id & 65535)"),
			 0);
	/* ids are unique across shards */
	long long distinct = 0;
	{
		/* ids of all shards are disjoint: compare the per-shard id ranges by
		 * inserting every shard's ids into one table on shard 0 */
		PGconn *c0 = testdb_pg(&t, 0);
		PQclear(PQexec(c0, "CREATE TEMP TABLE allids (id bigint)"));
		for (int s = 0; s < ns; s++) {
			PGconn *cs = testdb_pg(&t, s);
			PGresult *r =
				PQexec(cs, "SELECT string_agg(id::text, ',') FROM shardq.jobs");
			char *sql = malloc(strlen(PQgetvalue(r, 0, 0)) + 64);
			sprintf(sql, "INSERT INTO allids SELECT unnest('{%s}'::bigint[])",
				PQgetvalue(r, 0, 0));
			PGresult *r2 = PQexec(c0, sql);
			ck_assert_int_eq(PQresultStatus(r2), PGRES_COMMAND_OK);
			PQclear(r2);
			free(sql);
			PQclear(r);
			PQfinish(cs);
		}
		PGresult *r = PQexec(c0, "SELECT count(DISTINCT id) FROM allids");
		distinct = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
		PQfinish(c0);
	}
	ck_assert_int_eq(distinct, N);
	free(js);
	free(rs);
	free(keys);
	testdb_close(&t);
}
END_TEST

START_TEST(same_key_same_place)
{
	testdb t;
	sq_enqueue_outcome o;
	testdb_open(&t, "sqt_routing2", test_shard_count(), 1024, types);
	/* another client, with its own id blocks, routes the key identically */
	sq_client *other = testdb_client(&t);
	for (int i = 0; i < 50; i++) {
		char key[32];
		snprintf(key, sizeof(key), "user:%d", i);
		int64_t a = enqueue_one(t.client, "t", key, NULL, &o);
		ck_assert_int_eq(o, SQ_ENQ_INSERTED);
		int64_t b = enqueue_one(other, "t", key, NULL, &o);
		ck_assert_int_eq(o, SQ_ENQ_DUPLICATE);
		ck_assert_int_eq(a, b);
		ck_assert_uint_eq(sq_partition_of_id(a),
				  sq_partition_of_key(key, strlen(key), 1024));
	}
	/* keyless jobs: a small batch goes whole to one shard (one statement),
	 * and many batches spread over the shards (the partition of a batch's
	 * run comes from its first job's id) */
	enum { BATCHES = 1000, PER = 4 };
	sq_job_spec js[4000];
	sq_enqueue_result rs[4000];
	long per[16] = {0};
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < 4000; i++)
		js[i].type = "t";
	for (int b = 0; b < BATCHES; b++) {
		OKE(sq_enqueue(other, js, PER, rs, &err));
		for (int i = 0; i < PER; i++) {
			ck_assert_int_eq(rs[i].outcome, SQ_ENQ_INSERTED);
			ck_assert_msg(rs[i].shard == rs[0].shard,
				      "keyless batch %d: job 1 went to shard %d, job %d to %d", b,
				      rs[0].shard, i + 1, rs[i].shard);
		}
		per[rs[0].shard]++;
	}
	for (int s = 0; s < t.nshards; s++)
		ck_assert_msg(per[s] > BATCHES / t.nshards * 0.8,
			      "keyless batches: shard %d got %ld of %d", s, per[s], BATCHES);
	/* a large batch is split into runs, over more than one shard */
	OKE(sq_enqueue(other, js, 4000, rs, &err));
	int shards_used = 0;
	memset(per, 0, sizeof(per));
	for (int i = 0; i < 4000; i++)
		shards_used += per[rs[i].shard]++ == 0;
	ck_assert_msg(shards_used > 1, "4000 keyless jobs all went to shard %d", rs[0].shard);
	ck_assert_int_eq(
		testdb_sum(&t, "SELECT count(*) FROM shardq.jobs WHERE active_uid IS NULL"),
		BATCHES * PER + 4000);
	sq_client_close(other);
	testdb_close(&t);
}
END_TEST

START_TEST(init_is_idempotent_and_refuses_other_partition_count)
{
	testdb t;
	sq_error err;
	int created = 7;
	testdb_open(&t, "sqt_routing3", 2, 256, types);
	int64_t id = enqueue_one(t.client, "t", "keep-me", NULL, NULL);
	OKE(sq_init(t.client, &created, &err));
	ck_assert_int_eq(created, 0);
	ck_assert_int_eq(sq_client_map_version(t.client), 1);
	/* the job is still there after re-running init */
	sq_job j;
	OKE(sq_get_job(t.client, id, &j, &err));
	ck_assert_str_eq(j.key, "keep-me");
	sq_job_clear(&j);

	/* same databases, another partition count: refused, clearly */
	char *ini = strdup(t.ini);
	char *p = strstr(ini, "partitions = 256");
	memcpy(p, "partitions = 512", 16);
	sq_config *cfg;
	sq_client *c;
	OKE(sq_config_parse(ini, "other.ini", &cfg, &err));
	OKE(sq_client_open(cfg, 1, &c, &err));
	ck_assert_int_eq(sq_init(c, &created, &err), SQ_ESTATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "256 partitions"));
	ck_assert_ptr_nonnull(strstr(err.msg, "512"));
	sq_client_close(c);
	/* and a normal client refuses to start with it */
	ck_assert_int_eq(sq_client_open(cfg, 0, &c, &err), SQ_ESTATE);
	sq_config_free(cfg);
	free(ini);
	testdb_close(&t);
}
END_TEST

/* A batch without keys is written by a plain insert, one with keys by the
 * dedup statement: the same specs give the same jobs either way, field by
 * field (the type's defaults, priority, run_at / delay, tolerance, tries). */
START_TEST(keyless_insert_writes_what_keyed_does)
{
	testdb t;
	testdb_open(&t, "sqt_routing4", test_shard_count(), 1024,
		    "[type t]\nmax_attempts = 3\npriority = 7\ndelay_tolerance = 5s\n");
	enum { N = 6 };
	int64_t now_us = (int64_t)time(NULL) * 1000000;
	sq_job_spec spec[N] = {
		{.type = "t"},
		{.type = "t", .params = "{\"x\":[1,\"two\"]}", .has_priority = 1, .priority = -3},
		{.type = "t", .delay_ms = 600000, .max_attempts = 9},
		{.type = "t", .run_at_us = now_us + 3600 * 1000000LL, .delay_tolerance_ms = 2500},
		{.type = "t", .delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE},
		{.type = "t", .delay_ms = 1500, .delay_tolerance_ms = 60000, .has_priority = 1},
	};
	sq_job_spec keyed[N];
	char keys[N][16];
	sq_enqueue_result rl[N], rk[N];
	sq_error err;
	for (int i = 0; i < N; i++) {
		keyed[i] = spec[i];
		snprintf(keys[i], sizeof(keys[i]), "twin%d", i);
		keyed[i].key = keys[i];
	}
	OKE(sq_enqueue(t.client, spec, N, rl, &err));
	OKE(sq_enqueue(t.client, keyed, N, rk, &err));
	for (int i = 0; i < N; i++) {
		sq_job a, b;
		ck_assert_int_eq(rl[i].outcome, SQ_ENQ_INSERTED);
		ck_assert_int_eq(rk[i].outcome, SQ_ENQ_INSERTED);
		ck_assert_int_eq(sq_get_job(t.client, rl[i].id, &a, &err), SQ_OK);
		ck_assert_int_eq(sq_get_job(t.client, rk[i].id, &b, &err), SQ_OK);
		ck_assert_msg(a.key == NULL && b.key && !strcmp(b.key, keys[i]), "job %d: keys", i);
		ck_assert_str_eq(a.type, b.type);
		ck_assert_str_eq(a.params, b.params);
		ck_assert_int_eq(a.status, SQ_READY);
		ck_assert_int_eq(a.status, b.status);
		ck_assert_int_eq(a.priority, b.priority);
		ck_assert_int_eq(a.max_attempts, b.max_attempts);
		ck_assert_int_eq(a.attempt, b.attempt);
		/* now()-relative times: the two calls are a moment apart */
		ck_assert_msg(llabs(a.schedule_time_us - b.schedule_time_us) < 60 * 1000000LL,
			      "job %d: schedule %" PRId64 " against %" PRId64, i,
			      a.schedule_time_us, b.schedule_time_us);
		int64_t ta = a.delay_tolerance_time_us
				     ? a.delay_tolerance_time_us - a.schedule_time_us
				     : -1;
		int64_t tb = b.delay_tolerance_time_us
				     ? b.delay_tolerance_time_us - b.schedule_time_us
				     : -1;
		ck_assert_msg(ta == tb, "job %d: tolerance %" PRId64 " against %" PRId64 " us", i,
			      ta, tb);
		sq_job_clear(&a);
		sq_job_clear(&b);
	}
	/* and the values themselves, on the keyless side */
	sq_job j;
	ck_assert_int_eq(sq_get_job(t.client, rl[0].id, &j, &err), SQ_OK);
	ck_assert_int_eq(j.priority, 7);
	ck_assert_int_eq(j.max_attempts, 3);
	ck_assert_str_eq(j.params, "{}");
	ck_assert_int_eq(j.delay_tolerance_time_us - j.schedule_time_us, 5000000);
	sq_job_clear(&j);
	ck_assert_int_eq(sq_get_job(t.client, rl[1].id, &j, &err), SQ_OK);
	ck_assert_int_eq(j.priority, -3);
	sq_job_clear(&j);
	ck_assert_int_eq(sq_get_job(t.client, rl[2].id, &j, &err), SQ_OK);
	ck_assert_int_eq(j.max_attempts, 9);
	ck_assert_msg(j.schedule_time_us > now_us + 500 * 1000000LL, "delay_ms 600000 not applied");
	sq_job_clear(&j);
	ck_assert_int_eq(sq_get_job(t.client, rl[3].id, &j, &err), SQ_OK);
	ck_assert_int_eq(j.schedule_time_us, spec[3].run_at_us);
	ck_assert_int_eq(j.delay_tolerance_time_us - j.schedule_time_us, 2500000);
	sq_job_clear(&j);
	ck_assert_int_eq(sq_get_job(t.client, rl[4].id, &j, &err), SQ_OK);
	ck_assert_int_eq(j.delay_tolerance_time_us, 0);
	sq_job_clear(&j);
	testdb_close(&t);
}
END_TEST

/* One statement sends a column once when all its rows share the value, and
 * whole from the first row that differs: every row must still get its own
 * values. 40 jobs in one call; the keyless ones share a partition (one
 * statement), and keyed ones joining that shard's statement make it mix
 * rows with and without keys. Values are shared by the first rows, then
 * differ, column by column at different rows. */
START_TEST(a_batch_keeps_each_rows_values)
{
	testdb t;
	testdb_open(&t, "sqt_routing5", test_shard_count(), 1024, "[type t]\n[type u]\n");
	enum { N = 40 };
	int64_t now_us = (int64_t)time(NULL) * 1000000;
	sq_job_spec spec[N];
	char keys[N][16], params[N][24];
	sq_enqueue_result r[N];
	sq_error err;
	memset(spec, 0, sizeof(spec));
	for (int i = 0; i < N; i++) {
		spec[i].type = i < 10 || i % 2 == 0 ? "t" : "u";
		spec[i].has_priority = 1;
		spec[i].priority = i < 15 ? 5 : i % 7 - 3;
		spec[i].max_attempts = i < 25 ? 2 : 3 + i % 4;
		spec[i].delay_tolerance_ms = i < 20       ? 1000
					     : i % 3 == 0 ? SQ_NO_DELAY_TOLERANCE
							  : 100 * i;
		if (i < 30)
			spec[i].run_at_us = now_us - 1000000;
		else
			spec[i].delay_ms = 60000 * i;
		if (i % 4 == 3) {
			snprintf(keys[i], sizeof(keys[i]), "mix-%d", i);
			spec[i].key = keys[i];
		}
		snprintf(params[i], sizeof(params[i]), "{\"i\": %d}", i);
		spec[i].params = params[i];
	}
	OKE(sq_enqueue(t.client, spec, N, r, &err));
	for (int i = 0; i < N; i++) {
		sq_job j;
		ck_assert_int_eq(r[i].outcome, SQ_ENQ_INSERTED);
		OKE(sq_get_job(t.client, r[i].id, &j, &err));
		ck_assert_msg(!strcmp(j.type, spec[i].type), "job %d: type %s", i, j.type);
		ck_assert_msg(j.priority == spec[i].priority, "job %d: priority %d", i, j.priority);
		ck_assert_msg(j.max_attempts == spec[i].max_attempts, "job %d: max_attempts %d", i,
			      j.max_attempts);
		ck_assert_msg(!j.key == !spec[i].key && (!j.key || !strcmp(j.key, spec[i].key)),
			      "job %d: key %s", i, j.key ? j.key : "(none)");
		ck_assert_msg(!strcmp(j.params, params[i]), "job %d: params %s", i, j.params);
		if (i < 30)
			ck_assert_msg(j.schedule_time_us == spec[i].run_at_us,
				      "job %d: schedule %" PRId64, i, j.schedule_time_us);
		else
			ck_assert_msg(j.schedule_time_us > now_us + (60000LL * i - 30000) * 1000,
				      "job %d: delay not applied", i);
		int64_t tol = spec[i].delay_tolerance_ms == SQ_NO_DELAY_TOLERANCE
				      ? -1
				      : spec[i].delay_tolerance_ms * 1000;
		int64_t got = j.delay_tolerance_time_us
				      ? j.delay_tolerance_time_us - j.schedule_time_us
				      : -1;
		ck_assert_msg(got == tol, "job %d: tolerance %" PRId64 " us, not %" PRId64, i, got,
			      tol);
		sq_job_clear(&j);
	}
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("routing");
	TCase *tc = tcase_create("routing");
	tcase_set_timeout(tc, 3600);
	ADD_TEST(tc, random_keys_follow_map_shares);
	ADD_TEST(tc, same_key_same_place);
	ADD_TEST(tc, keyless_insert_writes_what_keyed_does);
	ADD_TEST(tc, a_batch_keeps_each_rows_values);
	ADD_TEST(tc, init_is_idempotent_and_refuses_other_partition_count);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

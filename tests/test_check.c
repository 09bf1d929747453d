/* test_check.c - `shardq check`: a sound cluster, and one with an open move,
 * have no findings; each fault put into the shards by hand is found with
 * its shard and partition; --repair mends exactly the provably safe ones,
 * and nothing a user enqueued is lost by it. */
#include "buf.h"
#include "sql_queries.h"
#include "support.h"

#include <stdarg.h>

static const char *types = "[type t]\nmax_attempts = 3\n";
enum { P = 256 };

static testdb t;
static char ini[600], out[32768];

static void open_cluster(const char *db)
{
	testdb_open(&t, db, 3, P, types);
	testdb_path(ini, sizeof(ini), "shardq.ini");
	test_write_bytes(ini, t.ini, strlen(t.ini));
}

/* `shardq check ARGS` on the cluster; its output in out. */
static int check(const char *args)
{
	return test_cli(NULL, out, sizeof(out), "-c %s check %s", ini, args);
}

static void has(const char *text)
{
	ck_assert_msg(strstr(out, text) != NULL, "the check's output lacks \"%s\":\n%s", text, out);
}

static void lacks(const char *text)
{
	ck_assert_msg(strstr(out, text) == NULL, "the check's output has \"%s\":\n%s", text, out);
}

/* Runs SQL (printf) on shard s's test database (the meta database is
 * shard 0's). */
static void sql(int s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sql(int s, const char *fmt, ...)
{
	char q[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	PGconn *c = testdb_pg(&t, s);
	PGresult *r = PQexec(c, q);
	ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
		      "s%d: %s: %s", s + 1, q, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
}

static long long scalar(int s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long long scalar(int s, const char *fmt, ...)
{
	char q[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	return testdb_scalar(&t, s, q);
}

/* The nth partition (from 0) the map puts on shard s. */
static uint32_t part_on(int s, int nth)
{
	for (uint32_t p = 0; p < P; p++)
		if (sq_client_shard_of_partition(t.client, p) == s && nth-- == 0)
			return p;
	ck_abort_msg("shard s%d holds too few partitions", s + 1);
	return 0;
}

/* A key (into buf) that hashes to partition p, the nth such. */
static const char *key_in(uint32_t p, int nth, char *buf, size_t len)
{
	for (int i = 0;; i++) {
		snprintf(buf, len, "key-%d", i);
		if (sq_partition_of_key(buf, strlen(buf), P) == p && nth-- == 0)
			return buf;
	}
}

static int64_t enqueue_in(uint32_t p, int nth)
{
	char key[32];
	sq_enqueue_outcome oc;
	int64_t id = enqueue_one(t.client, "t", key_in(p, nth, key, sizeof(key)), NULL, &oc);
	ck_assert_int_eq(oc, SQ_ENQ_INSERTED);
	return id;
}

/* Copies job id from shard `from` to shard `to`, as a row (a stray copy). */
static void copy_job(int64_t id, int from, int to)
{
	PGconn *c = testdb_pg(&t, from);
	char q[256];
	snprintf(q, sizeof(q), "SELECT row_to_json(j) FROM shardq.jobs j WHERE id = %lld",
		 (long long)id);
	PGresult *r = PQexec(c, q);
	ck_assert_int_eq(PQntuples(r), 1);
	const char *row = PQgetvalue(r, 0, 0);
	PGconn *d = testdb_pg(&t, to);
	const char *v[1] = {row};
	PGresult *w = PQexecParams(d,
				   "INSERT INTO shardq.jobs SELECT * FROM "
				   "json_populate_record(NULL::shardq.jobs, $1::json)",
				   1, NULL, v, NULL, NULL, 0);
	ck_assert_msg(PQresultStatus(w) == PGRES_COMMAND_OK, "copy of %lld: %s", (long long)id,
		      PQerrorMessage(d));
	PQclear(w);
	PQclear(r);
	PQfinish(d);
	PQfinish(c);
}

static long long rows_in(int s, uint32_t p)
{
	return scalar(s, "SELECT count(*) FROM shardq.jobs WHERE partition = %u", p);
}

/* A cluster with jobs in flight, after a finished move, during an open move
 * (a mover killed under its freeze) and after its abort: nothing found. */
START_TEST(a_sound_cluster_and_an_open_move_have_no_findings)
{
	open_cluster("sqt_check_sound");
	test_enqueue_n(t.client, "t", 300, NULL);
	for (uint32_t p = 0; p < 40; p++)
		enqueue_in(p, 0);
	sq_job *jobs = NULL;
	size_t n = claim_type(t.client, "w1", "t", 25, &jobs);
	ck_assert_uint_eq(n, 25);
	ck_assert_int_eq(check(""), 0);
	has("0 findings, 0 repaired, 0 left; 0 stray jobs");
	ck_assert_int_eq(check("--json"), 0);
	ck_assert_msg(strchr(out, '{') == NULL, "--json printed a finding:\n%s", out);

	char args[256];
	uint32_t a = part_on(0, 0), b = part_on(0, 1);
	snprintf(args, sizeof(args), "-c %s move --partitions %u --to s2", ini, a);
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "%s", args), 0);
	ck_assert_int_eq(check(""), 0);
	/* a mover that died with the partition frozen: explained by its move */
	snprintf(args, sizeof(args), "-c %s move --partitions %u --to s3", ini, b);
	ck_assert_int_ne(test_cli("SHARDQ_FAILPOINT=after_freeze", out, sizeof(out), "%s", args),
			 0);
	ck_assert_int_eq(scalar(0,
				"SELECT count(*) FROM shardq.partition_state WHERE "
				"partition = %u AND state = 'moving_out'",
				b),
			 1);
	ck_assert_int_eq(check(""), 0);
	long long move = scalar(0, "SELECT max(move_id) FROM shardq_meta.moves");
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "-c %s moves --abort %lld", ini, move),
			 0);
	ck_assert_int_eq(check(""), 0);
	for (size_t i = 0; i < n; i++)
		sq_job_clear(&jobs[i]);
	free(jobs);
	testdb_close(&t);
}
END_TEST

/* The map, a freeze, an importing leftover, a source's leftover and a
 * stale lock: found, repaired, and then nothing found; enqueues to the
 * mended partitions land on their owners. */
START_TEST(what_moves_leave_behind_is_found_and_repaired)
{
	open_cluster("sqt_check_moves");
	uint32_t pmap = part_on(0, 0), pfrozen = part_on(0, 1), pimp = part_on(1, 0),
		 pgone = part_on(0, 2), plock = part_on(2, 0);
	int64_t in_imp = enqueue_in(pimp, 0), in_gone = enqueue_in(pgone, 0);
	/* the map names s2 for a partition s1 owns */
	sql(0, "UPDATE shardq_meta.partition_map SET shard_id = 's2' WHERE partition = %u", pmap);
	/* s1's partition frozen by no open move */
	sql(0, "UPDATE shardq.partition_state SET state = 'moving_out' WHERE partition = %u",
	    pfrozen);
	/* s3 left importing a partition of s2, with a copy of its job */
	sql(2,
	    "INSERT INTO shardq.partition_state (partition, state, move_id) VALUES (%u, "
	    "'importing', 99)",
	    pimp);
	copy_job(in_imp, 1, 2);
	/* pgone moved from s1 to s2 (the move is done), and s1 kept its marker
	 * and rows */
	sql(0,
	    "INSERT INTO shardq_meta.moves (partitions, from_shard, to_shard, step, "
	    "finished_at) VALUES ('{%u}', 's1', 's2', 'done', now())",
	    pgone);
	copy_job(in_gone, 0, 1);
	sql(1, "INSERT INTO shardq.partition_state (partition, state) VALUES (%u, 'owned')", pgone);
	sql(0, "UPDATE shardq.partition_state SET state = 'gone' WHERE partition = %u", pgone);
	sql(0, "UPDATE shardq_meta.partition_map SET shard_id = 's2' WHERE partition = %u", pgone);
	/* a lock held for a move that finished */
	sql(0,
	    "INSERT INTO shardq_meta.moves (partitions, from_shard, to_shard, step, "
	    "finished_at) VALUES ('{%u}', 's3', 's1', 'aborted', now())",
	    plock);
	sql(0,
	    "INSERT INTO shardq_meta.move_lock SELECT %u, max(move_id) FROM "
	    "shardq_meta.moves",
	    plock);

	char line[256];
	ck_assert_int_eq(check(""), 8);
	snprintf(line, sizeof(line), "FOUND map: the map puts partition %u on s2, but s1 owns it",
		 pmap);
	has(line);
	snprintf(line, sizeof(line),
		 "FOUND ownership: partition %u is owned by no shard; it is "
		 "frozen (moving_out) by no open move on s1",
		 pfrozen);
	has(line);
	snprintf(line, sizeof(line), "shard s3 marks partition %u importing with no open move",
		 pimp);
	has(line);
	snprintf(line, sizeof(line),
		 "shard s1 marks partition %u gone with no open move, and s2 "
		 "owns it (left by the move to it, which is done)",
		 pgone);
	has(line);
	snprintf(line, sizeof(line), "partition %u is locked to move", plock);
	has(line);

	ck_assert_int_eq(check("--repair"), 8);
	lacks("FOUND");
	has("REPAIRED map");
	ck_assert_int_eq(check(""), 0);
	/* what was repaired holds: the jobs on the owners, none left behind */
	ck_assert_int_eq(rows_in(2, pimp), 0);
	ck_assert_int_eq(rows_in(1, pimp), 1);
	ck_assert_int_eq(rows_in(0, pgone), 0);
	ck_assert_int_eq(rows_in(1, pgone), 1);
	int64_t again = enqueue_in(pfrozen, 1), mapped = enqueue_in(pmap, 1);
	ck_assert_int_eq(scalar(0, "SELECT count(*) FROM shardq.jobs WHERE id IN (%lld, %lld)",
				(long long)again, (long long)mapped),
			 2);
	testdb_close(&t);
}
END_TEST

/* Stray jobs (a copy, a duplicate key, one only there), two owners, and an
 * id sequence behind the shards: the copy goes and the sequence is raised;
 * the rest is left, still reported, and no user job is lost. */
START_TEST(strays_two_owners_and_ids_are_found_and_only_the_safe_repaired)
{
	open_cluster("sqt_check_strays");
	uint32_t p = part_on(0, 0), q = part_on(0, 1);
	int64_t a = enqueue_in(p, 0), b = enqueue_in(p, 1), max_before = enqueue_in(q, 0);
	copy_job(a, 0, 1); /* a copy: the owner has the same id */
	/* a job of another id with b's key, and one of no key, only on s2 */
	char kb[32];
	key_in(p, 1, kb, sizeof(kb));
	sql(1,
	    "INSERT INTO shardq.jobs (id, partition, task, active_uid) VALUES (%lld + 65536, "
	    "%u, 't', '%s')",
	    (long long)b, p, kb);
	sql(1, "INSERT INTO shardq.jobs (id, partition, task) VALUES (%lld + 131072, %u, 't')",
	    (long long)b, p);
	/* s2 also says it owns q */
	sql(1, "INSERT INTO shardq.partition_state (partition, state) VALUES (%u, 'owned')", q);
	/* the meta database's sequence as a backup from before these jobs */
	sql(0, "SELECT setval('shardq_meta.id_block', 1, false)");

	char line[256];
	ck_assert_int_eq(check(""), 8);
	snprintf(line, sizeof(line),
		 "shard s2 holds 3 jobs in partition %u, which s1 owns; 1 of "
		 "the 3 read are copies",
		 p);
	has(line);
	snprintf(line, sizeof(line), "FOUND keys: type t key \"%s\" is live twice", kb);
	has(line);
	snprintf(line, sizeof(line), "partition %u is owned by several shards: s1, s2", q);
	has(line);
	has("FOUND ids: shard");

	ck_assert_int_eq(check("--repair"), 8);
	has("REPAIRED ids");
	ck_assert_int_eq(check(""), 8);
	lacks("FOUND ids");
	snprintf(line, sizeof(line),
		 "shard s2 holds 2 jobs in partition %u, which s1 owns; 0 of "
		 "the 2 read are copies",
		 p);
	has(line);
	has("FOUND keys");
	has("owned by several shards");
	/* nothing of the owner's went; the copy did */
	ck_assert_int_eq(rows_in(0, p), 2);
	ck_assert_int_eq(
		scalar(1, "SELECT count(*) FROM shardq.jobs WHERE id = %lld", (long long)a), 0);
	/* new ids come after every id on the shards */
	sq_client *fresh = testdb_client(&t);
	sq_enqueue_outcome oc;
	int64_t after = enqueue_one(fresh, "t", NULL, NULL, &oc);
	ck_assert_msg(after >> 32 > max_before >> 32, "a new job's id block %lld is not past %lld",
		      (long long)(after >> 32), (long long)(max_before >> 32));
	sq_client_close(fresh);
	testdb_close(&t);
}
END_TEST

/* The runbook's restore of one shard from a backup: s1 comes back owning a
 * partition it gave to s2 since (with its old job), and without one it was
 * given (no shard marks it). --repair leaves s2 the owner of the first,
 * with its jobs, and makes s1 own the second; new jobs land in both. */
START_TEST(a_shard_restored_from_a_backup_is_mended)
{
	open_cluster("sqt_check_restore");
	uint32_t away = part_on(0, 0), here = part_on(1, 0);
	int64_t old = enqueue_in(away, 0);
	char args[256];
	snprintf(args, sizeof(args), "-c %s move --partitions %u --to s2", ini, away);
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "%s", args), 0);
	snprintf(args, sizeof(args), "-c %s move --partitions %u --to s1", ini, here);
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "%s", args), 0);
	int64_t since = enqueue_in(away, 1);
	ck_assert_int_eq(rows_in(1, away), 2);
	/* s1 as its backup from before both moves had it */
	copy_job(old, 1, 0);
	sql(0, "INSERT INTO shardq.partition_state (partition, state) VALUES (%u, 'owned')", away);
	sql(0, "DELETE FROM shardq.partition_state WHERE partition = %u", here);

	char line[256];
	ck_assert_int_eq(check(""), 8);
	snprintf(line, sizeof(line),
		 "partition %u is owned by several shards: s1, s2; its last "
		 "move went from s1 to the other",
		 away);
	has(line);
	snprintf(line, sizeof(line),
		 "partition %u is owned by no shard; no shard marks it, and "
		 "the map names s1",
		 here);
	has(line);
	ck_assert_int_eq(check("--repair"), 8);
	lacks("FOUND");
	ck_assert_int_eq(check(""), 0);
	ck_assert_int_eq(rows_in(0, away), 0);
	ck_assert_int_eq(scalar(1, "SELECT count(*) FROM shardq.jobs WHERE id IN (%lld, %lld)",
				(long long)old, (long long)since),
			 2);
	int64_t there = enqueue_in(away, 2), back = enqueue_in(here, 0);
	ck_assert_int_eq(
		scalar(1, "SELECT count(*) FROM shardq.jobs WHERE id = %lld", (long long)there), 1);
	ck_assert_int_eq(
		scalar(0, "SELECT count(*) FROM shardq.jobs WHERE id = %lld", (long long)back), 1);
	testdb_close(&t);
}
END_TEST

/* EXPLAIN of every statement the check runs on a shard's jobs, planned
 * generic and custom, with the library's session settings, on the
 * statistics of a full queue and on none: each reaches the jobs through an
 * index, never a scan of the table, so the check stays index-driven at
 * 10^7 jobs. */
START_TEST(the_check_reads_the_jobs_by_index_only)
{
	static const struct {
		const char *name, *sql, *args;
	} st[] = {
		{"head", sq_sql_check_shard_head, ""},
		{"stray_counts", sq_sql_check_shard_stray_counts, "'{1,2,3,200}'"},
		{"stray_jobs", sq_sql_check_shard_stray_jobs, "'{1,2,3,200}', 1000"},
		{"have_ids", sq_sql_check_shard_have_ids, "'{65536,131072}'"},
		{"live_keys", sq_sql_check_shard_live_keys, "'{t,t}', '{a,b}'"},
		{"delete_copies", sq_sql_check_shard_delete_copies, "'{65536,131072}'"},
		{"forget", sq_sql_check_shard_forget, "'{1,2}', 'gone'"},
	};
	open_cluster("sqt_check_plans");
	test_enqueue_n(t.client, "t", 20000, NULL);
	for (uint32_t p = 0; p < 64; p++)
		enqueue_in(p, 0);
	PGconn *pg = testdb_pg(&t, 0);
	PQclear(PQexec(pg, "SET enable_seqscan = off; SET enable_bitmapscan = off"));
	for (int stats = 1; stats >= 0; stats--) {
		PQclear(PQexec(pg, stats ? "ANALYZE shardq.jobs"
					 : "DELETE FROM pg_statistic WHERE starelid = "
					   "'shardq.jobs'::regclass"));
		for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++)
			for (int generic = 0; generic < 2; generic++) {
				char q[256];
				PQclear(PQexec(pg, "DEALLOCATE ALL"));
				PGresult *r = PQprepare(pg, "s", st[i].sql, 0, NULL);
				ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s",
					      st[i].name, PQerrorMessage(pg));
				PQclear(r);
				PQclear(PQexec(
					pg, generic ? "SET plan_cache_mode = force_generic_plan"
						    : "SET plan_cache_mode = force_custom_plan"));
				snprintf(q, sizeof(q), "EXPLAIN EXECUTE s%s%s%s",
					 *st[i].args ? "(" : "", st[i].args,
					 *st[i].args ? ")" : "");
				r = PQexec(pg, q);
				ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", q,
					      PQerrorMessage(pg));
				sq_buf plan;
				sq_buf_init(&plan);
				for (int l = 0; l < PQntuples(r); l++)
					sq_buf_printf(&plan, "%s\n", PQgetvalue(r, l, 0));
				PQclear(r);
				ck_assert_msg(
					!strstr(plan.data, "Seq Scan on jobs") &&
						!strstr(plan.data, "Bitmap Heap Scan on jobs") &&
						strstr(plan.data, " on jobs"),
					"%s, %s plan, %s statistics: the jobs are not read by "
					"an index:\n%s",
					st[i].name, generic ? "generic" : "custom",
					stats ? "full" : "no", plan.data);
				sq_buf_free(&plan);
			}
	}
	PQfinish(pg);
	testdb_close(&t);
}
END_TEST

/* A shard behind in schema, one of another identity, one down: each found
 * and named; nothing repaired. */
START_TEST(schema_identity_and_reach_are_reported)
{
	open_cluster("sqt_check_shards");
	sql(1, "DELETE FROM shardq.schema_version WHERE version = (SELECT max(version) FROM "
	       "shardq.schema_version)");
	sql(2, "UPDATE shardq.node SET shard_id = 'elsewhere'");
	ck_assert_int_eq(check("--repair"), 8);
	has("FOUND schema: shard s2 is at schema version");
	has("FOUND identity: shard s3's database says it is shard 'elsewhere'");
	lacks("REPAIRED");
	/* a move to or from a shard behind is refused before anything is
	 * frozen: this build's markers are unknown there */
	char args[256];
	snprintf(args, sizeof(args), "-c %s move --partitions %u --to s2", ini, part_on(0, 0));
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "%s", args), 8);
	has("run 'shardq init' to upgrade it first");
	ck_assert_int_eq(scalar(0, "SELECT count(*) FROM shardq.partition_state WHERE state <> "
				   "'owned'"),
			 0);
	ck_assert_int_eq(scalar(0, "SELECT count(*) FROM shardq_meta.moves"), 0);
	sql(2, "UPDATE shardq.node SET shard_id = 's3'");
	/* s3 down: its dsn points at a port nobody listens on */
	char dead[600], port[32], *down = malloc(strlen(t.ini) + 1);
	snprintf(port, sizeof(port), "port=%d ", t.ports[2]);
	const char *at = strstr(t.ini, port);
	ck_assert_ptr_nonnull(at);
	snprintf(down, strlen(t.ini) + 1, "%.*sport=1 %s", (int)(at - t.ini), t.ini,
		 at + strlen(port));
	testdb_path(dead, sizeof(dead), "down.ini");
	test_write_bytes(dead, down, strlen(down));
	ck_assert_int_eq(test_cli(NULL, out, sizeof(out), "-c %s check", dead), 8);
	has("FOUND reach: shard s3 does not answer");
	free(down);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("check");
	ADD_CASE(s, a_sound_cluster_and_an_open_move_have_no_findings, 3600);
	ADD_CASE(s, what_moves_leave_behind_is_found_and_repaired, 3600);
	ADD_CASE(s, strays_two_owners_and_ids_are_found_and_only_the_safe_repaired, 3600);
	ADD_CASE(s, a_shard_restored_from_a_backup_is_mended, 3600);
	ADD_CASE(s, schema_identity_and_reach_are_reported, 3600);
	ADD_CASE(s, the_check_reads_the_jobs_by_index_only, 3600);
	return run_suite(s);
}

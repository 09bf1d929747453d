/* test_console.c - shardqd's admin console (GET /, src/daemon/page.html) in a real browser: Debian's chromium driven by puppeteer-core (tests/console/console.js), against a real shardqd on the test shards. */
/*
 * What an operator counts on: a click on Retry makes the failed job ready
 * again in the shards; Pause on a type stops the workers claiming it while
 * the other types run, and Resume lets its jobs run; a job's params, key
 * and last_error are shown as the text they are, never run as HTML.
 *
 * puppeteer-core is installed from the npm registry into the build
 * directory (SHARDQ_CONSOLE_NODE) at the first run; the screenshots go to
 * SHARDQ_CONSOLE_SHOTS, in the build directory too.
 */
#define _GNU_SOURCE
#include "support.h"

#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>

#define PUPPETEER_VERSION "24.43.1"

static const char tok_admin[] = "console-admin-token-0123456789abcdef";
static const char types[] =
	"[connection]\nmap_poll = 200ms\n"
	"[type a]\n[type b]\n[type f]\n[type x]\n[type y]\nmax_running = 7\nrate = 5/s\n";

/* what a job may hold that a page must never run */
#define XSS_SCRIPT "<script>window.__pwned=1</script>"
#define XSS_IMG    "<img src=x onerror=\"window.__pwned=1\">"
static const char xss_params[] = "{\"html\":\"" XSS_SCRIPT "\",\"img\":\"<img src=x "
				 "onerror=\\\"window.__pwned=1\\\">\"}";
/* as the params view shows them: JSON, so the img's quotes escaped */
static const char xss_marks[] = XSS_SCRIPT "\n<img src=x onerror=\\\"window.__pwned=1\\\">";
static const char xss_key[] = XSS_IMG;
static const char xss_error[] = "boom: " XSS_SCRIPT " and " XSS_IMG;

static testdb t;
static test_daemon D;

static long long count(const char *where)
{
	char sql[400];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE %s", where);
	return testdb_sum(&t, sql);
}
static const char *status_of(int64_t id)
{
	static const char *names[] = {"ready", "starting", "running", "failed", "cancelled"};
	for (int i = 0; i < 5; i++) {
		char where[128];
		snprintf(where, sizeof(where), "id = %lld AND status = '%s'", (long long)id,
			 names[i]);
		if (count(where) == 1)
			return names[i];
	}
	return "gone";
}

/* Enqueues one job, claims it and fails it for good with `error`. */
static int64_t failed_job(const char *type, const char *key, const char *params, const char *error)
{
	int64_t id = enqueue_one(t.client, type, key, params, NULL);
	sq_job *js;
	size_t n = claim_type(t.client, "console-test", type, 10, &js);
	ck_assert_uint_eq(n, 1);
	ck_assert(js[0].id == id);
	sq_fail_req fr = {{js[0].id, js[0].attempt}, error, 1};
	sq_status out;
	sq_error err;
	OKE(sq_fail(t.client, "console-test", &fr, 1, &out, &err));
	ck_assert_int_eq(out, SQ_OK);
	sq_jobs_free(js, n);
	ck_assert_str_eq(status_of(id), "failed");
	return id;
}

/* puppeteer-core, from the npm registry, into the build directory */
static void install_puppeteer(const char *dir)
{
	char pj[700], cmd[2048], log[600];
	snprintf(pj, sizeof(pj), "%s/node_modules/puppeteer-core/package.json", dir);
	if (strstr(test_file_text(pj), "\"version\": \"" PUPPETEER_VERSION "\""))
		return;
	testdb_path(log, sizeof(log), "npm.log");
	snprintf(
		cmd, sizeof(cmd),
		"mkdir -p '%s' && npm install --prefix '%s' --no-save --no-package-lock --no-audit "
		"--no-fund --loglevel=error puppeteer-core@" PUPPETEER_VERSION " > '%s' 2>&1",
		dir, dir, log);
	int rc = test_wait_exit(test_spawn(cmd, TEST_SPAWN_PDEATH), 0);
	ck_assert_msg(rc == 0 && strstr(test_file_text(pj), PUPPETEER_VERSION),
		      "npm install puppeteer-core@" PUPPETEER_VERSION " into %s failed (%d):\n%s",
		      dir, rc, test_file_text(log));
}

/* One run of tests/console/console.js; it fails the test if it fails. */
static void console_run(const char *cmd, const char *arg)
{
	char log[600], line[2048];
	static int runs;
	snprintf(line, sizeof(line), "console-%d-%s.log", ++runs, cmd);
	testdb_path(log, sizeof(log), line);
	snprintf(line, sizeof(line),
		 "HOME='%s' node '%s/tests/console/console.js' %s '%s' > '%s' 2>&1",
		 testdb_tmpdir(), getenv("SHARDQ_SOURCE_DIR"), cmd, arg ? arg : "", log);
	double t0 = test_now_s();
	int rc = test_wait_exit(test_spawn(line, TEST_SPAWN_GROUP | TEST_SPAWN_PDEATH), 0);
	printf("%s(%.1f s)\n", test_file_text(log), test_now_s() - t0);
	ck_assert_msg(rc == 0, "console %s %s failed (exit %d):\n%s", cmd, arg ? arg : "", rc,
		      test_file_text(log));
}

/* GET or POST on shardqd with the admin token: the status, the body in
 * *body (malloc'd). */
static int call(const char *method, const char *path, const char *body_in, char **body)
{
	hresp r = {0};
	int fd = hc_connect(D.port);
	int got = hc_send(fd, method, path, tok_admin, body_in) == 0 && hc_recv(fd, &r) == 0;
	close(fd);
	*body = r.body;
	return got ? r.status : 0;
}

static int type_paused(const char *type)
{
	char *b;
	ck_assert_int_eq(call("GET", "/v1/types", NULL, &b), 200);
	json_t *j = json_loads(b, 0, NULL), *ts = json_object_get(j, "types"), *x;
	size_t i;
	int paused = -1;
	json_array_foreach(ts, i, x)
	{
		if (!strcmp(json_string_value(json_object_get(x, "type")), type))
			paused = json_is_true(json_object_get(x, "paused"));
	}
	json_decref(j);
	free(b);
	ck_assert_msg(paused >= 0, "GET /v1/types does not list %s", type);
	return paused;
}

static const char *live_type;
static long long live_left(void *arg)
{
	(void)arg;
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE task = '%s'", live_type);
	return testdb_sum(&t, sql);
}

/* The documented bound for a pause to reach every client: map_poll (200
 * ms here) and a tick of the worker (200 ms) to read its answer, five
 * times over (as tests/test_admin.c). */
static void past_the_map_poll(void)
{
	usleep(5 * 600 * 1000);
}

START_TEST(the_console_retries_pauses_and_shows_values_as_text)
{
	char ini[600], dini[600], hash[160], out[600], ids[128], one[32];
	const char *node_dir = getenv("SHARDQ_CONSOLE_NODE"),
		   *shots = getenv("SHARDQ_CONSOLE_SHOTS");
	ck_assert_msg(node_dir && shots, "SHARDQ_CONSOLE_NODE and SHARDQ_CONSOLE_SHOTS unset "
					 "(tests/CMakeLists.txt sets them)");
	ck_assert_msg(access("/usr/bin/chromium", X_OK) == 0,
		      "no /usr/bin/chromium: scripts/deps --browser installs Debian's chromium");
	install_puppeteer(node_dir);

	testdb_open(&t, "console", 2, 64, types);
	test_write_bytes(testdb_path(ini, sizeof(ini), "c.ini"), t.ini, strlen(t.ini));
	test_hash_token(tok_admin, hash, sizeof(hash));
	test_write_file(testdb_path(dini, sizeof(dini), "d.ini"), 0,
			"%s\n[daemon]\nlisten = 127.0.0.1:0\n\n[token ops]\n%s\nscopes = admin\n",
			t.ini, hash);
	test_daemon_start(&D, dini, "shardqd.out");
	char url[64], stall[32];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", D.port);
	snprintf(stall, sizeof(stall), "%.0f", testdb_stall_s());
	setenv("CONSOLE_URL", url, 1);
	setenv("CONSOLE_TOKEN", tok_admin, 1);
	setenv("CONSOLE_NODE", node_dir, 1);
	setenv("CONSOLE_SHOTS", shots, 1);
	setenv("CONSOLE_STALL_S", stall, 1);

	/* four failed jobs of f, and one of x whose params, key and error
	 * hold HTML that would run if it were written as HTML */
	int64_t f[4];
	for (int i = 0; i < 4; i++) {
		char key[32], err[64];
		snprintf(key, sizeof(key), "f-%d", i);
		snprintf(err, sizeof(err), "f-%d: the printer is on fire", i);
		f[i] = failed_job("f", key, NULL, err);
	}
	int64_t x = failed_job("x", xss_key, xss_params, xss_error);
	setenv("CONSOLE_KEY", xss_key, 1);
	setenv("CONSOLE_ERROR", xss_error, 1);
	setenv("CONSOLE_MARKS", xss_marks, 1);
	snprintf(one, sizeof(one), "%lld", (long long)x);
	console_run("escape", one);
	ck_assert_str_eq(status_of(x), "failed");

	/* Retry on one failed job: ready in the shards, the others failed */
	snprintf(one, sizeof(one), "%lld", (long long)f[0]);
	console_run("retry-one", one);
	ck_assert_str_eq(status_of(f[0]), "ready");
	for (int i = 1; i < 4; i++)
		ck_assert_str_eq(status_of(f[i]), "failed");
	/* two ticked, "Retry selected" */
	snprintf(ids, sizeof(ids), "%lld,%lld", (long long)f[1], (long long)f[2]);
	console_run("retry-selected", ids);
	ck_assert_str_eq(status_of(f[1]), "ready");
	ck_assert_str_eq(status_of(f[2]), "ready");
	ck_assert_str_eq(status_of(f[3]), "failed");
	ck_assert_str_eq(status_of(x), "failed");
	/* every failed job of f, confirmed */
	console_run("retry-type", "f");
	ck_assert_str_eq(status_of(f[3]), "ready");
	ck_assert_int_eq(count("task = 'f' AND status = 'ready'"), 4);
	ck_assert_str_eq(status_of(x), "failed");

	/* Pause a: a `shardq work` worker of a and b runs b and leaves a
	 * ready; Resume: a runs */
	test_worker_cmd w = {ini, "cw", "a:4,b:4", "true", "--poll 200ms", NULL, 0, 0, NULL};
	w.out_path = testdb_path(out, sizeof(out), "worker.out");
	pid_t wp = test_spawn_worker(&w);
	setenv("CONSOLE_LIMITS", "y=at most 7 running · 5 starts/s;a=none", 1);
	console_run("pause", "a");
	ck_assert_msg(type_paused("a") == 1 && type_paused("b") == 0,
		      "after Pause, GET /v1/types does not say a alone is paused");
	past_the_map_poll();
	test_enqueue_n(t.client, "a", 20, NULL);
	test_enqueue_n(t.client, "b", 20, NULL);
	long long left;
	live_type = "b";
	ck_assert_msg(wait_progress(live_left, NULL, &left), "%lld b jobs never ran", left);
	ck_assert_int_eq(count("task = 'a' AND status = 'ready'"), 20);
	console_run("resume", "a");
	ck_assert_int_eq(type_paused("a"), 0);
	live_type = "a";
	ck_assert_msg(wait_progress(live_left, NULL, &left),
		      "%lld a jobs never ran after the resume", left);
	kill(wp, SIGTERM);
	ck_assert_int_eq(test_wait_exit(wp, testdb_stall_s()), 0);

	/* the job list (GET /v1/jobs): 30 ready jobs of x, a page of 25 at a
	 * time; a shardqd without it gets a view that says it needs it */
	test_enqueue_n(t.client, "x", 30, NULL);
	char *b;
	int st = call("GET", "/v1/jobs?type=x&status=ready&limit=1", NULL, &b);
	free(b);
	if (st == 404 || st == 405) {
		console_run("list-unavailable", NULL);
	} else {
		ck_assert_msg(st == 200, "GET /v1/jobs?type=x answered %d; shardqd's log:\n%s", st,
			      test_file_text(D.out));
		/* two of them on each shard made two hours old, for the
		 * creation filter */
		char old[256] = "";
		for (int s = 0; s < t.nshards; s++) {
			PGconn *pg = testdb_pg(&t, s);
			PGresult *r = PQexec(pg, "UPDATE shardq.jobs SET created_at = now() - "
						 "interval '2 hours' WHERE id "
						 "IN (SELECT id FROM shardq.jobs WHERE task = 'x' "
						 "AND status = 'ready' ORDER BY id LIMIT 2) "
						 "RETURNING id");
			for (int i = 0; i < PQntuples(r) && strlen(old) < 200; i++)
				snprintf(old + strlen(old), sizeof(old) - strlen(old), "%s%s",
					 old[0] ? "," : "", PQgetvalue(r, i, 0));
			PQclear(r);
			PQfinish(pg);
		}
		ck_assert_msg(old[0], "no job of x to make old");
		setenv("CONSOLE_OLD_IDS", old, 1);
		setenv("CONSOLE_EXPECT_N", "30", 1);
		console_run("list", "x");
	}
	ck_assert_int_eq(count("task = 'x' AND status = 'ready'"), 30);

	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	ck_assert_msg(strstr(test_file_text(D.out), "paused by token 'ops'") &&
			      strstr(test_file_text(D.out), "resumed by token 'ops'"),
		      "shardqd did not log the console's pause and resume:\n%s",
		      test_file_text(D.out));
	printf("screenshots in %s\n", shots);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("console");
	ADD_CASE(s, the_console_retries_pauses_and_shows_values_as_text, 3600);
	return run_suite(s);
}

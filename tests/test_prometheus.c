/* test_prometheus.c - Debian's prometheus scrapes a running shardqd with the shipped config and rules: every series it exports arrives with no error, every rule evaluates, and the shipped Grafana dashboard names only metrics the daemon exports. */
/*
 * The cluster has a type with max_running, a schedule every second and
 * live jobs, so that the gauges those make have values. Prometheus runs
 * with dist/prometheus/prometheus.yml's scrape job, pointed at this
 * shardqd (its port, an admin token in a file) and at the shipped rules,
 * scraping every second. dist/prometheus/shardq-alerts.test.yml (ctest
 * prometheus_rules) tests what the rules decide; this, that they run on
 * what the daemon exports.
 */
#define _GNU_SOURCE
#include "support.h"

#include "buf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

static const char tok[] = "prometheus-scrape-token-0123456789";

/* A port free now on 127.0.0.1, for prometheus's own listener. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0};
	socklen_t len = sizeof(a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* GET path on 127.0.0.1:port as HTTP/1.0 (the whole body, to the close):
 * the body (malloc'd), NULL when the connection failed; *status. */
static char *get(int port, const char *path, const char *token, int *status)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*status = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return NULL;
	}
	char req[1024];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: test\r\n%s%s%s\r\n", path,
			 token ? "Authorization: Bearer " : "", token ? token : "",
			 token ? "\r\n" : "");
	hc_send_bytes(fd, req, (size_t)n);
	size_t cap = 1 << 16, have = 0;
	char *buf = malloc(cap);
	ssize_t got;
	while ((got = recv(fd, buf + have, cap - have - 1, 0)) > 0) {
		have += (size_t)got;
		if (have + 1 >= cap)
			buf = realloc(buf, cap *= 2);
	}
	close(fd);
	buf[have] = '\0';
	char *body = strstr(buf, "\r\n\r\n");
	if (!body || sscanf(buf, "HTTP/%*s %d", status) != 1) {
		free(buf);
		return NULL;
	}
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return buf;
}

/* A JSON answer of prometheus's API (NULL while it does not answer). */
static json_t *api(int port, const char *path)
{
	int status;
	char *body = get(port, path, NULL, &status);
	json_t *j = body && status == 200 ? json_loads(body, 0, NULL) : NULL;
	free(body);
	return j;
}

/* The names of the metric families in a /metrics text: with a sample
 * (samples) or declared by a TYPE line (declared), each once, as
 * " name " strings joined. */
static void families(const char *text, sq_buf *samples, sq_buf *declared)
{
	sq_buf_puts(samples, " ");
	sq_buf_puts(declared, " ");
	for (const char *p = text; *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char name[128];
		if (sscanf(p, "# TYPE %127s", name) == 1) {
			sq_buf_printf(declared, "%s ", name);
		} else if (*p != '#' && len && sscanf(p, "%127[a-zA-Z0-9_:]", name) == 1) {
			char key[140];
			snprintf(key, sizeof(key), " %s ", name);
			if (!strstr(samples->data, key))
				sq_buf_printf(samples, "%s ", name);
		}
		p += len + (eol != NULL);
	}
}

/* The metric names an expression uses: its identifiers that begin with
 * shardq (histograms' _bucket, _sum and _count taken to their family). */
static void expr_metrics(const char *e, sq_buf *out)
{
	for (const char *p = e; (p = strstr(p, "shardq")) != NULL;) {
		if (p > e && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) {
			p++;
			continue;
		}
		size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
		char name[128];
		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		static const char *const suffix[] = {"_bucket", "_sum", "_count"};
		for (int k = 0; k < 3; k++) {
			size_t sl = strlen(suffix[k]), nl = strlen(name);
			if (nl > sl && !strcmp(name + nl - sl, suffix[k]))
				name[nl - sl] = '\0';
		}
		sq_buf_printf(out, "%s ", name);
		p += n;
	}
}

/* Every "expr" of a Grafana dashboard, anywhere in it. */
static void dashboard_exprs(json_t *j, sq_buf *out)
{
	const char *key;
	json_t *v;
	size_t i;
	if (json_is_object(j)) {
		json_object_foreach(j, key, v)
		{
			if (!strcmp(key, "expr") && json_is_string(v))
				expr_metrics(json_string_value(v), out);
			else
				dashboard_exprs(v, out);
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v) dashboard_exprs(v, out);
	}
}

/* t's config in a file of the test's directory. */
static const char *dini_of(testdb *t)
{
	static char path[600];
	testdb_path(path, sizeof(path), "cluster.ini");
	test_write_bytes(path, t->ini, strlen(t->ini));
	return path;
}

START_TEST(prometheus_scrapes_every_series_and_runs_every_rule)
{
	testdb t;
	test_daemon D = {0};
	char dini[600], hash[160], tokfile[600], conf[600], data[600], out[600], cmd[4096];
	const char *src = getenv("SHARDQ_SOURCE_DIR");
	ck_assert_msg(src != NULL, "SHARDQ_SOURCE_DIR is not set (run through ctest)");
	testdb_open(&t, "prom", 2, 64,
		    "[type mail]\nhistory = true\n[type pdf]\nmax_running = 4\n"
		    "[scheduler]\ninterval = 100ms\n[schedule tick]\ntype = mail\nevery = 1s\n");
	char mout[4096];
	int rc = test_cli(NULL, mout, sizeof(mout), "-c %s maintain", dini_of(&t));
	ck_assert_msg(rc == 0, "shardq maintain exited %d:\n%s", rc, mout);
	test_enqueue_n(t.client, "mail", 20, NULL);
	test_enqueue_n(t.client, "pdf", 20, NULL);
	test_hash_token(tok, hash, sizeof(hash));
	test_write_file(
		testdb_path(dini, sizeof(dini), "d.ini"), 0,
		"%s\n[daemon]\nlisten = 127.0.0.1:0\n\n[token scrape]\n%s\nscopes = admin\n", t.ini,
		hash);
	test_daemon_start(&D, dini, "shardqd.out");

	/* the shipped config, with this daemon as its target */
	test_write_file(testdb_path(tokfile, sizeof(tokfile), "token"), 0, "%s\n", tok);
	char *shipped = NULL;
	{
		char path[700];
		snprintf(path, sizeof(path), "%s/dist/prometheus/prometheus.yml", src);
		shipped = test_read_file(path);
		ck_assert_msg(shipped != NULL, "cannot read %s", path);
	}
	sq_buf y;
	sq_buf_init(&y);
	for (const char *p = shipped; *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
		if (strstr(p, "scrape_interval:") && strstr(p, "scrape_interval:") < p + len)
			sq_buf_puts(&y, "  scrape_interval: 1s\n");
		else if (strstr(p, "evaluation_interval:") &&
			 strstr(p, "evaluation_interval:") < p + len)
			sq_buf_puts(&y, "  evaluation_interval: 1s\n");
		else if (strstr(p, "- shardq-alerts.yml") &&
			 strstr(p, "- shardq-alerts.yml") < p + len)
			sq_buf_printf(&y, "  - %s/dist/prometheus/shardq-alerts.yml\n", src);
		else if (strstr(p, "credentials_file:") && strstr(p, "credentials_file:") < p + len)
			sq_buf_printf(&y, "      credentials_file: %s\n", tokfile);
		else if (strstr(p, "- targets:") && strstr(p, "- targets:") < p + len)
			sq_buf_printf(&y, "      - targets: [\"127.0.0.1:%d\"]\n", D.port);
		else
			sq_buf_printf(&y, "%.*s", (int)len, p);
		p += len;
	}
	free(shipped);
	test_write_bytes(testdb_path(conf, sizeof(conf), "prometheus.yml"), y.data, y.len);
	sq_buf_free(&y);
	int port = free_port();
	testdb_path(data, sizeof(data), "tsdb");
	testdb_path(out, sizeof(out), "prometheus.out");
	snprintf(cmd, sizeof(cmd),
		 "exec prometheus --config.file=%s --storage.tsdb.path=%s "
		 "--web.listen-address=127.0.0.1:%d > %s 2>&1",
		 conf, data, port, out);
	pid_t prom = test_spawn(cmd, TEST_SPAWN_PDEATH);

	/* the target up, scraped without an error */
	double since = test_now_s();
	const char *health = "", *last_error = "";
	json_t *targets = NULL;
	for (;;) {
		json_decref(targets);
		targets = api(port, "/api/v1/targets");
		json_t *act = json_object_get(json_object_get(targets, "data"), "activeTargets");
		json_t *t0 = json_array_get(act, 0);
		health = json_string_value(json_object_get(t0, "health"));
		last_error = json_string_value(json_object_get(t0, "lastError"));
		if (health && !strcmp(health, "up"))
			break;
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "prometheus did not scrape shardqd in %.0fs (health %s, last error "
			      "'%s'):\n%s",
			      testdb_stall_s(), health ? health : "?", last_error ? last_error : "",
			      test_file_text(out));
		usleep(200000);
	}
	ck_assert_msg(last_error && !*last_error, "the scrape's last error: %s", last_error);
	json_decref(targets);

	/* every series the daemon exports is in prometheus */
	int status;
	char *text = get(D.port, "/metrics", tok, &status);
	ck_assert_msg(text && status == 200, "/metrics answered %d", status);
	sq_buf samples, declared;
	sq_buf_init(&samples);
	sq_buf_init(&declared);
	families(text, &samples, &declared);
	free(text);
	ck_assert_msg(strstr(samples.data, " shardq_schedule_late_seconds ") &&
			      strstr(samples.data, " shardq_type_max_running ") &&
			      strstr(samples.data, " shardq_history_ahead_seconds "),
		      "the cluster's schedule, limited type and history gauges are missing: %s",
		      samples.data);
	char missing[4096] = "";
	for (since = test_now_s();;) {
		json_t *names = api(port, "/api/v1/label/__name__/values");
		json_t *arr = json_object_get(names, "data");
		missing[0] = '\0';
		char *copy = strdup(samples.data), *save = NULL;
		for (char *name = strtok_r(copy, " ", &save); name;
		     name = strtok_r(NULL, " ", &save)) {
			int found = 0;
			size_t i;
			json_t *v;
			json_array_foreach(arr, i, v) found |= !strcmp(json_string_value(v), name);
			if (!found && strlen(missing) + strlen(name) + 2 < sizeof(missing))
				strcat(strcat(missing, " "), name);
		}
		free(copy);
		json_decref(names);
		if (!missing[0])
			break;
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "prometheus has not these series of shardqd's after %.0fs:%s",
			      testdb_stall_s(), missing);
		usleep(200000);
	}

	/* every rule evaluated, none with an error */
	for (since = test_now_s();;) {
		json_t *rules = api(port, "/api/v1/rules");
		json_t *groups = json_object_get(json_object_get(rules, "data"), "groups"), *g;
		size_t i, k, n = 0, evaluated = 0;
		json_array_foreach(groups, i, g)
		{
			json_t *r;
			json_array_foreach(json_object_get(g, "rules"), k, r)
			{
				const char *h = json_string_value(json_object_get(r, "health"));
				const char *le = json_string_value(json_object_get(r, "lastError"));
				n++;
				ck_assert_msg(!h || strcmp(h, "err"), "rule %s: %s",
					      json_string_value(json_object_get(r, "name")),
					      le ? le : "");
				evaluated += h && !strcmp(h, "ok");
			}
		}
		json_decref(rules);
		if (n >= 11 && evaluated == n) {
			printf("prometheus: %zu rules evaluated, all ok\n", n);
			break;
		}
		ck_assert_msg(test_now_s() - since < testdb_stall_s(),
			      "%zu of %zu rules evaluated after %.0fs", evaluated, n,
			      testdb_stall_s());
		usleep(200000);
	}

	/* the dashboard names only metrics the daemon exports */
	char dpath[700];
	snprintf(dpath, sizeof(dpath), "%s/dist/grafana/shardq-dashboard.json", src);
	json_error_t je;
	json_t *dash = json_load_file(dpath, 0, &je);
	ck_assert_msg(dash != NULL, "%s: %s", dpath, je.text);
	sq_buf used;
	sq_buf_init(&used);
	dashboard_exprs(dash, &used);
	json_decref(dash);
	int nused = 0;
	char *copy = strdup(used.data), *save = NULL;
	for (char *name = strtok_r(copy, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
		char key[140];
		snprintf(key, sizeof(key), " %s ", name);
		ck_assert_msg(strstr(declared.data, key) != NULL,
			      "the dashboard's query names %s, which shardqd does not export",
			      name);
		nused++;
	}
	free(copy);
	ck_assert_int_gt(nused, 20);
	int nseries = 0;
	for (const char *p = samples.data; (p = strchr(p, ' ')) != NULL && p[1]; p++)
		nseries++;
	printf("prometheus: all %d series scraped; the dashboard's %d metric names exported\n",
	       nseries, nused);
	sq_buf_free(&used);
	sq_buf_free(&samples);
	sq_buf_free(&declared);
	kill(prom, SIGTERM);
	ck_assert_int_eq(test_wait_exit(prom, testdb_stall_s()), 0);
	ck_assert_int_eq(test_daemon_stop(&D, SIGTERM), 0);
	testdb_close(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prometheus");
	ADD_CASE(s, prometheus_scrapes_every_series_and_runs_every_rule, 3600);
	return run_suite(s);
}

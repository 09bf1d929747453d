/* support.c - the helpers the suites share (support.h). */
#define _GNU_SOURCE
#include "support.h"
#include "client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* ---- the runner ----------------------------------------------------------- */

int test_shard_count(void)
{
	int ports[16];
	int n = testdb_ports(ports, 16);
	return n >= 4 ? 4 : n;
}

int test_take_next(void)
{
	static int added;
	int k = 0, n = 0;
	const char *part = getenv("SHARDQ_TEST_PART");
	int mine = !part || sscanf(part, "%d/%d", &k, &n) != 2 || n < 1 || added % n == k - 1;
	added++;
	return mine;
}

int run_suite(Suite *s)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	SRunner *sr = srunner_create(s);
	testdb_pool_begin();
	srunner_run_all(sr, CK_NORMAL);
	testdb_pool_end();
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

/* ---- time and waits ------------------------------------------------------- */

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double test_now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

double test_wall_s(void)
{
	return clock_s(CLOCK_REALTIME);
}

int wait_progress(test_remaining_fn remaining, void *arg, long long *left)
{
	long long best = remaining(arg);
	double moved = test_now_s(), stall = testdb_stall_s();
	while (best > 0) {
		usleep(50000);
		long long v = remaining(arg);
		if (v < best) {
			best = v;
			moved = test_now_s();
		} else if (test_now_s() - moved > stall) {
			break;
		}
	}
	if (left)
		*left = best;
	return best == 0;
}

/* ---- jobs ----------------------------------------------------------------- */

int64_t enqueue_one(sq_client *c, const char *type, const char *key, const char *params,
		    sq_enqueue_outcome *outcome)
{
	sq_job_spec j;
	sq_enqueue_result r;
	sq_error err;
	memset(&j, 0, sizeof(j));
	j.type = type;
	j.key = key;
	j.params = params;
	ck_assert_msg(sq_enqueue(c, &j, 1, &r, &err) == SQ_OK, "enqueue: %s", err.msg);
	if (outcome)
		*outcome = r.outcome;
	return r.id;
}

void test_enqueue_n(sq_client *c, const char *type, int n, const char *params)
{
	sq_job_spec *js = calloc((size_t)n, sizeof(*js));
	sq_enqueue_result *rs = calloc((size_t)n, sizeof(*rs));
	sq_error err;
	ck_assert(js != NULL && rs != NULL);
	for (int i = 0; i < n; i++)
		js[i].type = type, js[i].params = params;
	OKE(sq_enqueue(c, js, (size_t)n, rs, &err));
	free(js);
	free(rs);
}

sq_job test_get_job(sq_client *c, int64_t id)
{
	sq_job j;
	sq_error err;
	OKE(sq_get_job(c, id, &j, &err));
	return j;
}

size_t claim_type(sq_client *c, const char *worker, const char *type, int limit, sq_job **jobs)
{
	sq_claim_req rq = {type, limit, 0};
	size_t n;
	sq_error err;
	ck_assert_msg(sq_claim(c, worker, &rq, 1, jobs, &n, &err) == SQ_OK, "claim: %s", err.msg);
	return n;
}

long long test_live_jobs(testdb *t)
{
	return testdb_sum(t, "SELECT count(*) FROM shardq.jobs WHERE status IN "
			     "('ready','starting','running')");
}

long long test_all_jobs(testdb *t)
{
	return testdb_sum(t, "SELECT count(*) FROM shardq.jobs");
}

static void *worker_main(void *arg)
{
	sq_error err;
	ck_assert_msg(sq_worker_run(arg, &err) == SQ_OK, "worker: %s", err.msg);
	return NULL;
}

void test_worker_thread(pthread_t *th, sq_worker *w)
{
	ck_assert_int_eq(pthread_create(th, NULL, worker_main, w), 0);
}

/* ---- a producer thread ---------------------------------------------------- */

static void producer_ack(test_producer *p, int64_t id)
{
	pthread_mutex_lock(&p->mu);
	if (p->nacked == p->cap) {
		p->cap = p->cap * 2 + 1024;
		p->acked = realloc(p->acked, p->cap * sizeof(int64_t));
		ck_assert(p->acked != NULL);
	}
	p->acked[p->nacked++] = id;
	pthread_mutex_unlock(&p->mu);
}

/* New jobs for the next batch: as many as wanted, up to max_jobs in all. */
static int producer_take(test_producer *p, long *made, int want)
{
	if (p->stop)
		return 0;
	while (p->hold && !p->stop && p->hold(p->hold_arg))
		usleep(5000);
	long left = p->max_jobs ? p->max_jobs - *made : want;
	int n = left < want ? (int)(left > 0 ? left : 0) : want;
	*made += n;
	return n;
}

static void *producer_main(void *arg)
{
	test_producer *p = arg;
	sq_client *c = testdb_client(p->t);
	char(*keys)[48] = calloc(1000, sizeof(*keys));
	char(*retry)[48] = calloc(1000, sizeof(*retry));
	sq_job_spec *jobs = calloc(1000, sizeof(*jobs));
	sq_enqueue_result *res = calloc(1000, sizeof(*res));
	ck_assert(keys && retry && jobs && res && p->batch >= 1 && p->batch <= 1000);
	long made = 0;
	int nretry = 0;
	while (!p->stop || nretry > 0) {
		int n = 0;
		for (; n < nretry; n++)
			memcpy(keys[n], retry[n], sizeof(keys[n]));
		for (int k = producer_take(p, &made, p->batch - n); k > 0; k--, n++)
			snprintf(keys[n], sizeof(keys[n]), "%s-%ld", p->prefix ? p->prefix : "p",
				 made - k);
		if (n == 0) {
			if (p->max_jobs && made >= p->max_jobs)
				break;
			continue;
		}
		p->retried += nretry;
		nretry = 0;
		memset(jobs, 0, (size_t)n * sizeof(*jobs));
		for (int i = 0; i < n; i++) {
			jobs[i].type = p->type;
			jobs[i].key = p->keyed ? keys[i] : NULL;
			res[i].id = -1;
			res[i].outcome = SQ_ENQ_NOT_WRITTEN;
		}
		sq_error err;
		if (sq_enqueue(c, jobs, (size_t)n, res, &err) != SQ_OK) {
			p->failed_calls++;
			snprintf(p->last_error, sizeof(p->last_error), "%s", err.msg);
		}
		for (int i = 0; i < n; i++) {
			if (res[i].id > 0)
				producer_ack(p, res[i].id);
			else if (p->keyed || res[i].outcome == SQ_ENQ_NOT_WRITTEN)
				memcpy(retry[nretry++], keys[i], sizeof(keys[i]));
			else
				p->unknown++;
		}
		p->sent += n;
		usleep(p->pause_us);
	}
	p->map_rows_read = c->map_rows_read;
	sq_client_close(c);
	free(keys);
	free(retry);
	free(jobs);
	free(res);
	return NULL;
}

void test_producer_start(test_producer *p)
{
	pthread_mutex_init(&p->mu, NULL);
	p->stop = 0;
	ck_assert_int_eq(pthread_create(&p->th, NULL, producer_main, p), 0);
}

size_t test_producer_acked(test_producer *p)
{
	pthread_mutex_lock(&p->mu);
	size_t n = p->nacked;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void test_producer_stop(test_producer *p)
{
	p->stop = 1;
	pthread_join(p->th, NULL);
}

void test_producer_free(test_producer *p)
{
	free(p->acked);
	pthread_mutex_destroy(&p->mu);
	p->acked = NULL;
	p->nacked = p->cap = 0;
}

/* ---- files ---------------------------------------------------------------- */

void test_write_file(const char *path, int exec, const char *fmt, ...)
{
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
	if (exec)
		chmod(path, 0755);
}

void test_write_bytes(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

char *test_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t n = 0, cap = 4096;
	char *buf = malloc(cap);
	ck_assert(buf != NULL);
	if (f) {
		size_t r;
		while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
			n += r;
			if (cap - n - 1 == 0) {
				buf = realloc(buf, cap *= 2);
				ck_assert(buf != NULL);
			}
		}
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

const char *test_file_text(const char *path)
{
	static _Thread_local char *text;
	free(text);
	text = test_read_file(path);
	return text;
}

char *test_tail(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	buf[0] = '\0';
	if (!f)
		return buf;
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, size > (long)len - 1 ? size - (long)len + 1 : 0, SEEK_SET);
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* ---- processes ------------------------------------------------------------ */

pid_t test_spawn(const char *cmd, int flags)
{
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (flags & TEST_SPAWN_GROUP)
			setpgid(0, 0);
		if (flags & TEST_SPAWN_PDEATH)
			prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (flags & TEST_SPAWN_GROUP)
		setpgid(pid, pid);
	return pid;
}

static int exit_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int test_wait_exit(pid_t pid, double hang_s)
{
	double end = test_now_s() + hang_s;
	int status;
	while (hang_s <= 0 || test_now_s() < end) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return exit_code(status);
		if (r < 0 && errno != EINTR)
			return -1;
		usleep(20000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

double test_wait_no_procs(const char *want, const char *why)
{
	testdb_proc v[64];
	double t0 = test_now_s(), since = t0;
	int last = -1, n;
	while ((n = testdb_procs(want, v, 64)) > 0) {
		if (n != last) {
			last = n;
			since = test_now_s();
		}
		if (test_now_s() - since > testdb_stall_s()) {
			char list[8192];
			testdb_procs_describe(v, n < 64 ? n : 64, list, sizeof(list));
			for (int i = 0; i < n && i < 64; i++)
				kill(v[i].pid, SIGKILL);
			ck_abort_msg("%s: %d process(es) of its jobs still alive %.0fs later:\n%s",
				     why, n, test_now_s() - t0, list);
		}
		usleep(20000);
	}
	return test_now_s() - t0;
}

pid_t test_spawn_worker(const test_worker_cmd *w)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
		 "exec %s -c %s work --worker %s --types %s --exec '%s' %s %s %s 2>&1",
		 w->cli ? w->cli : getenv("SHARDQ_CLI"), w->ini, w->id, w->types, w->exec,
		 w->extra ? w->extra : "", w->append ? ">>" : ">", w->out_path);
	return test_spawn(cmd, w->flags);
}

static int cli_run(const char *cli, const char *env, char *out, size_t outlen, const char *fmt,
		   va_list ap)
{
	char cmd[4096], args[3072];
	ck_assert_msg(cli != NULL, "SHARDQ_CLI is not set (run through ctest)");
	vsnprintf(args, sizeof(args), fmt, ap);
	snprintf(cmd, sizeof(cmd), "%s %s %s 2>&1", env ? env : "", cli, args);
	FILE *f = popen(cmd, "r");
	ck_assert_msg(f != NULL, "cannot run %s", cmd);
	char sink[4096];
	size_t n = out && outlen ? fread(out, 1, outlen - 1, f) : 0;
	if (out && outlen)
		out[n] = '\0';
	while (fread(sink, 1, sizeof(sink), f) > 0) /* the rest, so it runs to its end */
		;
	int rc = pclose(f);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int test_cli(const char *env, char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = cli_run(getenv("SHARDQ_CLI"), env, out, outlen, fmt, ap);
	va_end(ap);
	return rc;
}

int test_cli_of(const char *cli, const char *env, char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = cli_run(cli, env, out, outlen, fmt, ap);
	va_end(ap);
	return rc;
}

void test_check_cluster(testdb *t)
{
	char ini[600], out[8192];
	testdb_path(ini, sizeof(ini), "check.ini");
	test_write_bytes(ini, t->ini, strlen(t->ini));
	int rc = test_cli(NULL, out, sizeof(out), "-c %s check", ini);
	ck_assert_msg(rc == 0, "shardq check exited %d:\n%s", rc, out);
}

int test_cli_argv(const char *const *args, const char *in, size_t inlen, char **out, char **err)
{
	const char *cli = getenv("SHARDQ_CLI");
	char pin[1024], pout[1024], perr[1024];
	const char *argv[64];
	int n = 0, status;
	ck_assert_msg(cli != NULL, "SHARDQ_CLI is not set (run through ctest)");
	testdb_path(pin, sizeof(pin), "stdin");
	testdb_path(pout, sizeof(pout), "stdout");
	testdb_path(perr, sizeof(perr), "stderr");
	test_write_bytes(pin, in ? in : "", in ? inlen : 0);
	argv[n++] = cli;
	for (int i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fi = open(pin, O_RDONLY), fo = open(pout, O_WRONLY | O_CREAT | O_TRUNC, 0600),
		    fe = open(perr, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fi < 0 || fo < 0 || fe < 0)
			_exit(126);
		dup2(fi, 0);
		dup2(fo, 1);
		dup2(fe, 2);
		unsetenv("SHARDQ_CONFIG");
		execv(cli, (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	*out = test_read_file(pout);
	*err = test_read_file(perr);
	return exit_code(status);
}

void test_daemon_spawn(test_daemon *d, const char *ini_path, const char *name)
{
	const char *bin = d->bin ? d->bin : getenv("SHARDQ_DAEMON");
	ck_assert_msg(bin != NULL, "SHARDQ_DAEMON is not set (run through ctest)");
	testdb_path(d->out, sizeof(d->out), name);
	unlink(d->out);
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(bin, bin, "-c", ini_path, (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
}

void test_daemon_wait(test_daemon *d)
{
	static const char listening[] = "listening on http://127.0.0.1:";
	double since = test_now_s(), stall = testdb_stall_s();
	for (;;) {
		char *out = test_read_file(d->out);
		const char *l = strstr(out, listening);
		if (l) {
			d->port = atoi(l + strlen(listening));
			const char *w = strstr(out, "worker id ");
			ck_assert(w != NULL);
			snprintf(d->worker_id, sizeof(d->worker_id), "%.*s",
				 (int)strcspn(w + 10, ")"), w + 10);
			free(out);
			return;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid)
			ck_abort_msg("shardqd exited before listening; its output:\n%s", out);
		ck_assert_msg(test_now_s() - since < stall,
			      "shardqd printed no 'listening on' line in %.0fs; its output:\n%s",
			      stall, out);
		free(out);
		usleep(20000);
	}
}

void test_daemon_start(test_daemon *d, const char *ini_path, const char *name)
{
	test_daemon_spawn(d, ini_path, name);
	test_daemon_wait(d);
}

int test_daemon_stop(test_daemon *d, int sig)
{
	kill(d->pid, sig);
	int rc = test_wait_exit(d->pid, testdb_stall_s());
	if (rc < 0) {
		char tail[2500];
		ck_abort_msg("shardqd did not exit %.0fs after signal %d; its output:\n%s",
			     testdb_stall_s(), sig, test_tail(d->out, tail, sizeof(tail)));
	}
	d->pid = 0;
	return rc;
}

int test_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- a small HTTP/1.1 client ---------------------------------------------- */

void test_hash_token(const char *token, char *out, size_t len)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "printf '%%s' '%s' | %s --hash-token", token,
		 getenv("SHARDQ_DAEMON"));
	FILE *p = popen(cmd, "r");
	ck_assert_msg(p != NULL, "popen: %s", strerror(errno));
	ck_assert_msg(fgets(out, (int)len, p) != NULL, "shardqd --hash-token printed nothing");
	out[strcspn(out, "\n")] = '\0';
	ck_assert_int_eq(pclose(p), 0);
}

int hc_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect to :%d: %s",
		      port, strerror(errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int hc_send_bytes(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int hc_send(int fd, const char *method, const char *path, const char *token, const char *body)
{
	char head[1024];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: test\r\n%s%s%sContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n",
			 method, path, token ? "Authorization: Bearer " : "", token ? token : "",
			 token ? "\r\n" : "", blen);
	if (hc_send_bytes(fd, head, (size_t)n))
		return -1;
	return blen ? hc_send_bytes(fd, body, blen) : 0;
}

int hc_recv(int fd, hresp *r)
{
	size_t cap = 8192, have = 0, body_at = 0; /* body_at: 0 until the head is in */
	char *buf = malloc(cap);
	memset(r, 0, sizeof(*r));
	for (;;) {
		if (have + 1 >= cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = recv(fd, buf + have, cap - have - 1, 0);
		if (n <= 0) {
			int e = n ? errno : 0;
			free(buf);
			errno = e;
			return -1;
		}
		have += (size_t)n;
		buf[have] = '\0';
		char *eoh;
		if (!body_at && (eoh = strstr(buf, "\r\n\r\n")) != NULL) {
			size_t hl = (size_t)(eoh - buf);
			snprintf(r->head, sizeof(r->head), "%.*s", (int)hl, buf);
			r->status = atoi(strchr(buf, ' ') + 1);
			const char *cl = strcasestr(r->head, "\r\nContent-Length:");
			r->len = cl ? strtoul(cl + 17, NULL, 10) : 0;
			body_at = hl + 4;
		}
		if (body_at && have - body_at >= r->len) {
			r->body = malloc(r->len + 1);
			memcpy(r->body, buf + body_at, r->len);
			r->body[r->len] = '\0';
			free(buf);
			return 0;
		}
	}
}

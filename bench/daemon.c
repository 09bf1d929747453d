/* daemon.c - shardqd for the HTTP phases (see daemon.h). */
#define _GNU_SOURCE
#include "daemon.h"
#include "cpu.h"
#include "http.h"
#include "tally.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *daemon_binary(char *out, size_t outlen)
{
	const char *env = getenv("SHARDQ_BENCH_SHARDQD");
	if (env && *env) {
		snprintf(out, outlen, "%s", env);
		return out;
	}
#ifdef SHARDQ_BENCH_SHARDQD
	if (access(SHARDQ_BENCH_SHARDQD, X_OK) == 0) {
		snprintf(out, outlen, "%s", SHARDQ_BENCH_SHARDQD);
		return out;
	}
#endif
	/* BUILD/bench/shardq-bench -> BUILD/shardqd */
	char self[900];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return NULL;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(out, outlen, "%s/../shardqd", self);
	return out;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* A fresh random token, 64 hex digits. */
static int make_token(char *out, size_t outlen)
{
	unsigned char r[32];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, r, sizeof(r)) != (ssize_t)sizeof(r)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	for (size_t i = 0; i < sizeof(r) && 2 * i + 2 < outlen; i++)
		snprintf(out + 2 * i, 3, "%02x", r[i]);
	return 0;
}

/* `shardqd --hash-token` of the token: the "sha256:..." line. */
static int hash_token(const char *bin, const char *token, char *out, size_t outlen, char *err,
		      size_t errlen)
{
	char cmd[1400];
	if (strchr(bin, '\'')) {
		snprintf(err, errlen, "the shardqd path %s holds a quote", bin);
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "printf '%%s' '%s' | '%s' --hash-token", token, bin);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(err, errlen, "cannot run %s --hash-token: %s", bin, strerror(errno));
		return -1;
	}
	out[0] = '\0';
	char *got = fgets(out, (int)outlen, p);
	int rc = pclose(p);
	out[strcspn(out, "\r\n")] = '\0';
	/* it prints the line for the config: hash = sha256:HEX */
	const char *h = strstr(out, "sha256:");
	if (!got || rc != 0 || !h) {
		snprintf(err, errlen,
			 "%s --hash-token failed (exit %d, printed '%s'); build it with: cmake "
			 "--build BUILD --target shardqd, or set SHARDQ_BENCH_SHARDQD",
			 bin, rc, out);
		return -1;
	}
	memmove(out, h, strlen(h) + 1);
	return 0;
}

int daemon_start(bench_daemon *d, const scenario *sc, const char *lib_config, const char *out_dir,
		 char *err, size_t errlen)
{
	char hash[128], ini[1100], logp[1100];
	memset(d, 0, sizeof(*d));
	d->out_fd = -1;
	if (!daemon_binary(d->path, sizeof(d->path)) || access(d->path, X_OK)) {
		snprintf(err, errlen,
			 "no shardqd binary (%s); build it (bench/run does: cmake --build "
			 "build-bench --target shardqd) or set SHARDQ_BENCH_SHARDQD",
			 d->path[0] ? d->path : "not found");
		return -1;
	}
	if (make_token(d->token, sizeof(d->token))) {
		snprintf(err, errlen, "cannot read /dev/urandom for a token");
		return -1;
	}
	if (hash_token(d->path, d->token, hash, sizeof(hash), err, errlen))
		return -1;
	snprintf(ini, sizeof(ini), "%s/shardqd.ini", out_dir);
	snprintf(logp, sizeof(logp), "%s/shardqd.log", out_dir);
	FILE *f = fopen(ini, "w");
	if (!f) {
		snprintf(err, errlen, "cannot write %s: %s", ini, strerror(errno));
		return -1;
	}
	fprintf(f, "%s\n; shardqd, added by shardq-bench ([workers] via = http)\n", lib_config);
	fprintf(f, "[daemon]\nlisten = 127.0.0.1:0\nthreads = %d\n", sc->daemon_threads);
	if (sc->daemon_claim_poll_ms)
		fprintf(f, "claim_poll = %lldms\n", (long long)sc->daemon_claim_poll_ms);
	fprintf(f, "max_connections = %d\n\n", sc->clients + sc->producers + 64);
	fprintf(f, "[token bench]\nhash = %s\nscopes = worker, producer, admin\n", hash);
	if (fclose(f)) {
		snprintf(err, errlen, "cannot write %s: %s", ini, strerror(errno));
		return -1;
	}
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC)) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "cannot start shardqd: %s", strerror(errno));
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid == 0) {
		int lf = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(pfd[1], 1);
		if (lf >= 0)
			dup2(lf, 2);
		execl(d->path, d->path, "-c", ini, (char *)NULL);
		fprintf(stderr, "shardq-bench: cannot run %s: %s\n", d->path, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	d->pid = pid;
	d->out_fd = pfd[0];
	/* its first line: shardqd: listening on http://HOST:PORT (...) */
	char line[1024];
	size_t have = 0;
	int64_t deadline = mono_us() + 60 * 1000000LL;
	while (!memchr(line, '\n', have)) {
		struct pollfd p = {d->out_fd, POLLIN, 0};
		int left = (int)((deadline - mono_us()) / 1000);
		ssize_t n = 0;
		if (left <= 0 || poll(&p, 1, left) <= 0 ||
		    (n = read(d->out_fd, line + have, sizeof(line) - 1 - have)) <= 0 ||
		    (have += (size_t)n) >= sizeof(line) - 1) {
			char e2[256];
			snprintf(err, errlen,
				 "shardqd printed no 'listening on' line (%s); its log: %s",
				 left <= 0 ? "within 60 s" : "it ended", logp);
			daemon_stop(d, 5, e2, sizeof(e2));
			return -1;
		}
	}
	line[have] = '\0';
	const char *l = strstr(line, "listening on http://");
	const char *colon = l ? strchr(l + 20, ':') : NULL;
	d->port = colon ? atoi(colon + 1) : 0;
	if (d->port <= 0) {
		char e2[256];
		snprintf(err, errlen, "shardqd: cannot read its port from '%.200s'", line);
		daemon_stop(d, 5, e2, sizeof(e2));
		return -1;
	}
	return 0;
}

double daemon_cpu_s(const bench_daemon *d)
{
	return d->pid > 0 ? cpu_process_s((int)d->pid) : -1;
}

/* The value of the sample line NAME (exactly, labels included). */
static double metric(const char *text, const char *name)
{
	size_t k = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, k) && p[k] == ' ')
			return strtod(p + k + 1, NULL);
	return 0;
}

int daemon_scrape(const bench_daemon *d, daemon_stats *st, char *err, size_t errlen)
{
	hconn c;
	char *body = NULL;
	size_t len = 0;
	hconn_init(&c, d->port);
	int status =
		hconn_request(&c, "GET", "/metrics", d->token, NULL, 0, &body, &len, err, errlen);
	if (status != 200) {
		if (status > 0)
			snprintf(err, errlen, "GET /metrics: status %d: %.200s", status, body);
		hconn_close(&c);
		return -1;
	}
	st->claim_requests = (uint64_t)metric(body, "shardqd_claim_requests_total");
	st->claim_statements = (uint64_t)metric(body, "shardqd_claim_statements_total");
	st->jobs_claimed = (uint64_t)metric(body, "shardqd_jobs_claimed_total");
	st->released_gone = (uint64_t)metric(body, "shardqd_jobs_released_gone_total");
	st->released_extra = (uint64_t)metric(body, "shardqd_jobs_released_extra_total");
	st->results_lost = (uint64_t)metric(body, "shardqd_results_total{result=\"lost\"}");
	st->req_claim = (uint64_t)metric(body, "shardqd_requests_total{endpoint=\"claim\"}");
	st->req_complete = (uint64_t)metric(body, "shardqd_requests_total{endpoint=\"complete\"}");
	st->req_enqueue = (uint64_t)metric(body, "shardqd_requests_total{endpoint=\"enqueue\"}");
	st->sum_claim_s = metric(body, "shardqd_request_seconds_sum{endpoint=\"claim\"}");
	st->sum_complete_s = metric(body, "shardqd_request_seconds_sum{endpoint=\"complete\"}");
	st->sum_enqueue_s = metric(body, "shardqd_request_seconds_sum{endpoint=\"enqueue\"}");
	hconn_close(&c);
	return 0;
}

int daemon_stop(bench_daemon *d, double wait_s, char *err, size_t errlen)
{
	int status = 0, rc = 0;
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		int64_t deadline = mono_us() + (int64_t)(wait_s * 1e6);
		while (waitpid(d->pid, &status, WNOHANG) != d->pid) {
			if (mono_us() > deadline) {
				kill(d->pid, SIGKILL);
				waitpid(d->pid, &status, 0);
				snprintf(err, errlen,
					 "shardqd did not stop within %.0f s of SIGTERM", wait_s);
				rc = -1;
				break;
			}
			sleep_ms(5);
		}
		if (!rc && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
			snprintf(err, errlen, "shardqd ended with status %d", status);
			rc = -1;
		}
		d->pid = 0;
	}
	if (d->out_fd >= 0)
		close(d->out_fd);
	d->out_fd = -1;
	return rc;
}

/* workerproc.c - the bench's worker processes: each runs libshardq's worker
 * runtime with the scenario's types (threads = concurrency), records into
 * the shared tally, and stops gracefully when the bench says so. */
#include "workerproc.h"
#include "handler.h"
#include "httpworker.h"
#include "wrap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int workerproc_buffer(const scenario *sc)
{
	int b = 0;
	for (int i = 0; i < sc->ntypes; i++)
		if (sc->types[i].claim_batch > sc->types[i].threads)
			b += sc->types[i].claim_batch - sc->types[i].threads;
	return b;
}

typedef struct child {
	tally *t;
	sq_worker *w;
} child;

/* Called by the runtime's loop every few ms: the bench's stop request. */
static void on_report(const sq_worker_stats *st, void *arg)
{
	child *ch = arg;
	(void)st;
	if (atomic_load(&ch->t->go) == 2)
		sq_worker_stop(ch->w, 0);
}

/* The tally's tick hook, and the first tick marks the process running. */
typedef struct tick_hook {
	tally *t;
	proc_report *pr;
} tick_hook;

static void on_tick(const sq_worker_tick *tk, void *arg)
{
	tick_hook *h = arg;
	wrap_on_tick(tk, h->t);
	if (atomic_load(&h->pr->state) == 1)
		atomic_store(&h->pr->state, 3);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

int workerproc_main(int fd, int idx)
{
	char msg[512];
	sq_error err;
	sq_config *cfg = NULL;
	sq_worker_opts opts;
	handler_arg args[SC_MAX_TYPES];
	char wid[64];
	child ch = {NULL, NULL};
	int rc = 1;
	tally *t = tally_attach(fd, msg, sizeof(msg));
	if (!t || idx < 0 || idx >= TALLY_MAX_PROCS) {
		fprintf(stderr, "shardq-bench worker: %s\n", t ? "bad index" : msg);
		return 1;
	}
	proc_report *pr = &t->procs[idx];
	const scenario *sc = &t->sc;
	ch.t = t;
	if (sc->workers_http) {
		rc = httpworker_main(t, idx);
		atomic_store(&pr->state, rc ? -1 : 2);
		tally_unmap(t);
		return rc;
	}
	if (sq_config_parse(t->config, "shardq-bench config", &cfg, &err) != SQ_OK) {
		snprintf(pr->error, sizeof(pr->error), "worker %d: config: %s", idx, err.msg);
		goto out;
	}
	sq_worker_opts_init(&opts);
	snprintf(wid, sizeof(wid), "bench-%d-%d", idx, (int)getpid());
	opts.worker_id = wid;
	opts.buffer = workerproc_buffer(sc);
	opts.min_prefetch = sc->min_prefetch;
	opts.poll_max_ms = sc->poll_ms;
	opts.listen = sc->listen;
	opts.handle_signals = 1;
	opts.report_ms = 20;
	opts.report = on_report;
	opts.report_arg = &ch;
	tick_hook hook = {t, pr};
	opts.on_tick = on_tick;
	opts.tick_arg = &hook;
	if (sq_worker_create(cfg, &opts, &ch.w, &err) != SQ_OK) {
		snprintf(pr->error, sizeof(pr->error), "worker %d: %s", idx, err.msg);
		goto out;
	}
	for (int i = 0; i < sc->ntypes; i++) {
		args[i].t = t;
		args[i].type = &sc->types[i];
		args[i].type_idx = i;
		if (sq_worker_add(ch.w, sc->types[i].name, sc->types[i].threads, bench_handler,
				  &args[i], &err) != SQ_OK) {
			snprintf(pr->error, sizeof(pr->error), "worker %d: %s", idx, err.msg);
			goto out;
		}
	}
	atomic_store(&pr->state, 1);
	while (atomic_load(&t->go) == 0)
		sleep_ms(1);
	if (atomic_load(&t->go) == 1 && sq_worker_run(ch.w, &err) != SQ_OK) {
		snprintf(pr->error, sizeof(pr->error), "worker %d: %s", idx, err.msg);
		/* jobs still running: the leases bring them back; do not wait */
		atomic_store(&pr->state, -1);
		_exit(1);
	}
	sq_worker_stats st;
	sq_worker_get_stats(ch.w, &st);
	pr->claims = st.claims;
	pr->claim_rtt_ms = st.claim_rtt_ms;
	pr->slot_idle_ratio = st.slot_idle_ratio;
	for (int i = 0; i < st.ntypes; i++) {
		pr->lost += st.types[i].lost;
		pr->released += st.types[i].released;
	}
	rc = 0;
out:
	sq_worker_destroy(ch.w);
	sq_config_free(cfg);
	atomic_store(&pr->state, rc ? -1 : 2);
	tally_unmap(t);
	return rc;
}

pid_t workerproc_spawn(int fd, int idx, char *err, size_t errlen)
{
	char fds[16], idxs[16], self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		snprintf(err, errlen, "cannot find this program (/proc/self/exe): %s",
			 strerror(errno));
		return -1;
	}
	self[n] = '\0';
	snprintf(fds, sizeof(fds), "%d", fd);
	snprintf(idxs, sizeof(idxs), "%d", idx);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "cannot start worker process %d: %s", idx, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		char *argv[] = {self, "--worker-process", fds, idxs, NULL};
		/* a bench killed outright takes its workers with it: left running,
		 * they would claim the next run's jobs from a database of the
		 * same name and make its counts wrong */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int fl = fcntl(fd, F_GETFD);
		if (fl >= 0)
			fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC);
		execv(self, argv);
		_exit(127);
	}
	return pid;
}

static const char *exit_text(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "status %d", status);
	return buf;
}

/* Waits until every process is in state `want`; -1 when one failed or
 * exited first. */
static int wait_state(tally *t, const pid_t *pids, int n, int want, const char *what, char *err,
		      size_t errlen)
{
	for (int waited = 0; waited < 60000; waited += 2) {
		int ready = 0;
		for (int i = 0; i < n; i++) {
			int st = atomic_load(&t->procs[i].state), status;
			char how[64];
			if (st == -1 || waitpid(pids[i], &status, WNOHANG) == pids[i]) {
				snprintf(err, errlen,
					 "worker process %d stopped before it ran (%s): %s", i,
					 st == -1 ? "failed" : exit_text(status, how, sizeof(how)),
					 t->procs[i].error[0] ? t->procs[i].error : "no message");
				return -1;
			}
			ready += st == want;
		}
		if (ready == n)
			return 0;
		sleep_ms(2);
	}
	snprintf(err, errlen, "worker processes did not %s within 60 s", what);
	return -1;
}

int workerproc_wait_ready(tally *t, const pid_t *pids, int n, char *err, size_t errlen)
{
	return wait_state(t, pids, n, 1, "start", err, errlen);
}

int workerproc_wait_running(tally *t, const pid_t *pids, int n, char *err, size_t errlen)
{
	return wait_state(t, pids, n, 3, "begin their first tick", err, errlen);
}

int workerproc_stop(tally *t, pid_t *pids, int n, double wait_s, char *err, size_t errlen)
{
	int rc = 0, left = n;
	int64_t deadline = mono_us() + (int64_t)(wait_s * 1e6);
	atomic_store(&t->go, 2);
	while (left > 0) {
		for (int i = 0; i < n; i++) {
			int status;
			char how[64];
			if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i])
				continue;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				if (!rc)
					snprintf(err, errlen, "worker process %d ended with %s: %s",
						 i, exit_text(status, how, sizeof(how)),
						 t->procs[i].error[0] ? t->procs[i].error
								      : "no message");
				rc = -1;
			}
			pids[i] = 0;
			left--;
		}
		if (left && mono_us() > deadline) {
			for (int i = 0; i < n; i++)
				if (pids[i] > 0) {
					kill(pids[i], SIGKILL);
					waitpid(pids[i], NULL, 0);
					pids[i] = 0;
				}
			if (!rc)
				snprintf(err, errlen,
					 "worker processes did not stop within %.0f s; killed",
					 wait_s);
			return -1;
		}
		if (left)
			sleep_ms(2);
	}
	return rc;
}

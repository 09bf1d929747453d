/*
 * example_worker.c - a worker written against libshardq's C API.
 *
 * It handles two task types from the config: "email" (fast, 8 at a time)
 * and "resize" (slow, 2 at a time). Handlers run on the runtime's thread
 * pool; the runtime claims, starts, heartbeats and completes for them.
 * SIGTERM or SIGINT stops it gracefully.
 *
 * With shardq installed (cmake --install build):
 *   cc -o example_worker example_worker.c $(pkg-config --cflags --libs shardq)
 * or, in CMake, find_package(shardq) and link shardq::shardq. Then:
 *   ./example_worker conf/shardq.ini
 *
 * (In this repository CMake builds it as build/example_worker.)
 */
#include <shardq.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static sq_job_result send_email(const sq_job *job, void *arg, char *err, size_t errlen)
{
	(void)arg;
	/* job->params is the JSON text the producer gave */
	if (strstr(job->params, "\"to\"") == NULL) {
		snprintf(err, errlen, "params have no \"to\" address");
		return SQ_RESULT_FAIL; /* retrying will not help */
	}
	usleep(2000); /* pretend to talk to a mail server */
	return SQ_RESULT_DONE;
}

static sq_job_result resize_image(const sq_job *job, void *arg, char *err, size_t errlen)
{
	(void)arg;
	(void)job;
	if (access("/tmp", W_OK) != 0) {
		snprintf(err, errlen, "scratch space is not writable");
		return SQ_RESULT_RETRY; /* retried with the type's backoff */
	}
	usleep(200000);
	return SQ_RESULT_DONE;
}

static void report(const sq_worker_stats *st, void *arg)
{
	(void)arg;
	for (int i = 0; i < st->ntypes; i++)
		fprintf(stderr, "%s: done %llu, failed %llu, lost %llu, buffered %d, prefetch %d\n",
			st->types[i].type, (unsigned long long)st->types[i].done,
			(unsigned long long)st->types[i].failed,
			(unsigned long long)st->types[i].lost, st->types[i].buffered,
			st->types[i].prefetch);
}

int main(int argc, char **argv)
{
	sq_config *cfg;
	sq_worker *w;
	sq_worker_opts opts;
	sq_error err;
	int rc = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CONFIG\n", argv[0]);
		return 2;
	}
	if (sq_config_load(argv[1], &cfg, &err) != SQ_OK) {
		fprintf(stderr, "%s\n", err.msg);
		return 3;
	}
	sq_worker_opts_init(&opts);
	opts.handle_signals = 1; /* SIGTERM/SIGINT: graceful; a second: at once */
	opts.listen = 1;         /* wake on NOTIFY when the queue was idle */
	opts.report_ms = 5000;
	opts.report = report;
	if (sq_worker_create(cfg, &opts, &w, &err) != SQ_OK ||
	    sq_worker_add(w, "email", 8, send_email, NULL, &err) != SQ_OK ||
	    sq_worker_add(w, "resize", 2, resize_image, NULL, &err) != SQ_OK) {
		fprintf(stderr, "%s\n", err.msg);
		sq_config_free(cfg);
		return 1;
	}
	fprintf(stderr, "worker %s running; Ctrl-C to stop\n", sq_worker_id(w));
	if (sq_worker_run(w, &err) != SQ_OK) {
		/* stopped at once, or the grace period ran out: leases bring the
		 * unfinished jobs back; do not wait for the handlers */
		fprintf(stderr, "%s\n", err.msg);
		_exit(1);
	}
	sq_worker_destroy(w);
	sq_config_free(cfg);
	return rc;
}

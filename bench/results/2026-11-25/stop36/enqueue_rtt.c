/* enqueue_rtt.c - one sq_enqueue call of N keyless jobs, C calls, back to
 * back or with SLEEP microseconds between them (an idle machine between
 * calls); prints p10 / p50 / p90 / max of the call.
 * Config: lat.ini in the working directory (four shards of a database
 * initialised by `shardq -c lat.ini init`, one [type t]).
 * Build: gcc -O2 -o enqueue_rtt enqueue_rtt.c -I include -L build-bench -lshardq
 * Run: ./enqueue_rtt 1 200; SLEEP=100000 ./enqueue_rtt 1 30 */
#include "shardq.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv)
{
	sq_config *cfg;
	sq_error e;
	sq_client *c;
	if (sq_config_load("lat.ini", &cfg, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	if (sq_client_open(cfg, 0, &c, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	int n = argc > 1 ? atoi(argv[1]) : 100, calls = argc > 2 ? atoi(argv[2]) : 100;
	sq_job_spec *s = calloc(n, sizeof(*s));
	sq_enqueue_result *r = calloc(n, sizeof(*r));
	for (int i = 0; i < n; i++) {
		s[i].type = "t";
		s[i].params = "{\"t\":1}";
	}
	double *d = calloc(calls, sizeof(double));
	for (int k = 0; k < calls; k++) {
		double t0 = now();
		if (sq_enqueue(c, s, n, r, &e)) {
			fprintf(stderr, "%s\n", e.msg);
			return 1;
		}
		d[k] = (now() - t0) * 1000;
		if (getenv("SLEEP"))
			usleep(atoi(getenv("SLEEP")));
	}
	int cmp(const void *a, const void *b)
	{
		double x = *(double *)a, y = *(double *)b;
		return x < y ? -1 : x > y;
	}
	qsort(d, calls, sizeof(double), cmp);
	printf("n=%d p50 %.2f p90 %.2f p99 %.2f p99.9 %.2f max %.2f ms\n", n, d[calls / 2], d[calls * 9 / 10], d[calls * 99 / 100], d[calls * 999 / 1000],
	       d[calls - 1]);
	return 0;
}

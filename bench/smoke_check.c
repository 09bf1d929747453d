/* smoke_check.c - the smoke test's checker: the histogram's arithmetic on
 * known data, then a run's result.json: it parses, every phase ran and
 * accounts for every job, and the figures the docs quote are present. It
 * never checks speed. */
#include "hist.h"
#include "pace.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                  \
	do {                                              \
		if (!(cond)) {                            \
			fprintf(stderr, "bench_check: "); \
			fprintf(stderr, __VA_ARGS__);     \
			fputc('\n', stderr);              \
			failures++;                       \
		}                                         \
	} while (0)

/* The producers' schedule: four producers at 250 jobs/s each in batches of
 * 100 offer one batch every 0.1 s between them, never two at once. */
static void check_pace(void)
{
	pace p;
	pace_init(&p, 4);
	int64_t origin = 1000000, due[8];
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 4; i++)
			due[k * 4 + i] = pace_due(&p, origin, i, (int64_t)k * 100, 250.0, 100);
	for (int j = 0; j < 8; j++)
		CHECK(due[j] == origin + (int64_t)j * 100000,
		      "batch %d of the four producers due at +%lld us, not +%lld", j,
		      (long long)(due[j] - origin), (long long)j * 100000);
	CHECK(pace_due(&p, origin, 2, 500, 0, 100) == 0, "an unlimited producer waits");
	pace_init(&p, 1);
	CHECK(pace_join(&p, NULL) > 0, "a lone producer has no origin");
}

static void check_hist(void)
{
	static hist h;
	/* buckets are contiguous, increasing, and keep values within 1/64 */
	uint64_t prev = 0;
	for (int i = 1; i < HIST_BUCKETS; i++) {
		uint64_t hi = hist_bucket_high(i);
		CHECK(hi > prev, "bucket %d high %llu not above %llu", i, (unsigned long long)hi,
		      (unsigned long long)prev);
		prev = hi;
	}
	for (uint64_t v = 0; v < (1ull << 39); v = v < 200 ? v + 1 : v + v / 7) {
		int b = hist_bucket(v);
		uint64_t hi = hist_bucket_high(b), lo = b ? hist_bucket_high(b - 1) + 1 : 0;
		CHECK(lo <= v && v <= hi, "value %llu outside its bucket %d [%llu, %llu]",
		      (unsigned long long)v, b, (unsigned long long)lo, (unsigned long long)hi);
		CHECK((double)(hi - lo) <= (double)v / 64.0 + 1, "bucket of %llu too wide",
		      (unsigned long long)v);
	}
	/* 1..100000 us once each: p50 = 50000, p99 = 99000, within 1/64 */
	hist_reset(&h);
	for (uint64_t v = 1; v <= 100000; v++)
		hist_record(&h, v);
	struct {
		double p;
		double want;
	} cases[] = {{50, 50000}, {90, 90000}, {99, 99000}, {99.9, 99900}, {100, 100000}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double got = (double)hist_percentile(&h, cases[i].p);
		CHECK(got >= cases[i].want && got <= cases[i].want * (1 + 1.0 / 64),
		      "p%g of 1..100000 is %.0f, want %.0f (+1/64)", cases[i].p, got,
		      cases[i].want);
	}
	CHECK(hist_count(&h) == 100000, "count %llu", (unsigned long long)hist_count(&h));
	CHECK(hist_mean(&h) > 50000 && hist_mean(&h) < 50001, "mean %f", hist_mean(&h));
}

static json_int_t geti(json_t *o, const char *path)
{
	/* "a.b.c" */
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *save = NULL, *t = strtok_r(buf, ".", &save); t && o;
	     t = strtok_r(NULL, ".", &save))
		o = json_object_get(o, t);
	return json_is_integer(o) ? json_integer_value(o) : -1;
}

static double getr(json_t *o, const char *path)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *save = NULL, *t = strtok_r(buf, ".", &save); t && o;
	     t = strtok_r(NULL, ".", &save))
		o = json_object_get(o, t);
	return json_is_number(o) ? json_number_value(o) : -1;
}

static void check_phase(json_t *ph, json_int_t jobs, json_int_t backlog)
{
	const char *name = json_string_value(json_object_get(ph, "phase"));
	name = name ? name : "?";
	CHECK(json_is_true(json_object_get(ph, "ok")), "phase %s not ok: %s", name,
	      json_string_value(json_object_get(ph, "error")));
	json_int_t done = geti(ph, "counts.completed");
	CHECK(done == jobs, "phase %s completed %lld jobs, want %lld", name, (long long)done,
	      (long long)jobs);
	CHECK(geti(ph, "counts.lost") == 0, "phase %s lost jobs", name);
	CHECK(geti(ph, "counts.left_other") == 0, "phase %s left jobs running", name);
	if (strcmp(name, "c")) {
		json_int_t enq = geti(ph, "counts.enqueued"), left = geti(ph, "counts.left_ready");
		CHECK(left + done == enq + backlog,
		      "phase %s: left %lld + completed %lld != enqueued %lld + backlog %lld", name,
		      (long long)left, (long long)done, (long long)enq, (long long)backlog);
		CHECK(getr(ph, "latency_ms.claim_round_trip.p99") > 0,
		      "phase %s has no claim round trip", name);
		if (enq)
			CHECK(getr(ph, "latency_ms.enqueue_to_start.p99") > 0,
			      "phase %s has no enqueue-to-start latency", name);
		/* every enqueued job's pickup is counted once: after the
		 * warm-up or in it ([run] warmup), never in neither (a start
		 * again after a lost lease counts again, so up to handled) */
		json_int_t after = geti(ph, "latency_ms.enqueue_to_start.count"),
			   warm = geti(ph, "latency_ms.enqueue_to_start_warmup.count"),
			   handled = geti(ph, "counts.handled");
		CHECK(after + warm >= enq - left && after + warm <= handled,
		      "phase %s: %lld pickups after the warm-up and %lld in it, for %lld jobs "
		      "enqueued and run (%lld handler calls)",
		      name, (long long)after, (long long)warm, (long long)(enq - left),
		      (long long)handled);
	}
	json_t *shards = json_object_get(ph, "jobs_per_shard");
	json_int_t sum = 0;
	for (size_t i = 0; i < json_array_size(shards); i++)
		sum += json_integer_value(json_array_get(shards, i));
	CHECK(sum == done, "phase %s: jobs per shard add up to %lld, not %lld", name,
	      (long long)sum, (long long)done);
	CHECK(getr(ph, "rates_per_s.end_to_end") > 0, "phase %s has no end-to-end rate", name);
	CHECK(json_array_size(json_object_get(ph, "series")) > 0, "phase %s has no time series",
	      name);
}

int main(int argc, char **argv)
{
	json_error_t jerr;
	check_hist();
	check_pace();
	if (argc != 4) {
		fprintf(stderr, "usage: bench_check RESULT.json JOBS PHASES\n"
				"  (histogram checks always; JOBS: jobs each phase must complete;\n"
				"  PHASES: how many phases must have run)\n");
		return 2;
	}
	json_t *root = json_load_file(argv[1], 0, &jerr);
	if (!root) {
		fprintf(stderr, "bench_check: %s does not parse: line %d: %s\n", argv[1], jerr.line,
			jerr.text);
		return 1;
	}
	json_int_t jobs = atoll(argv[2]);
	size_t nphases = (size_t)atoi(argv[3]);
	CHECK(json_is_true(json_object_get(root, "ok")), "the run is not ok");
	json_t *steps = json_object_get(root, "steps");
	CHECK(json_array_size(steps) >= 1, "no steps");
	for (size_t i = 0; i < json_array_size(steps); i++) {
		json_t *st = json_array_get(steps, i);
		json_int_t backlog = geti(st, "backlog");
		json_t *phs = json_object_get(st, "phases");
		CHECK(json_array_size(phs) == nphases, "step %zu ran %zu phases, want %zu", i,
		      json_array_size(phs), nphases);
		for (size_t p = 0; p < json_array_size(phs); p++)
			check_phase(json_array_get(phs, p), jobs, backlog);
	}
	json_decref(root);
	if (failures) {
		fprintf(stderr, "bench_check: %d check(s) failed\n", failures);
		return 1;
	}
	printf("bench_check: %s: every phase accounts for %lld jobs\n", argv[1], (long long)jobs);
	return 0;
}

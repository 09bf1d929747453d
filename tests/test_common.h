/* test_common.h - small helpers shared by the integration suites. */
#ifndef SQ_TEST_COMMON_H
#define SQ_TEST_COMMON_H

#include "testdb.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OK(call)                                                                   \
	do {                                                                       \
		sq_error e_;                                                       \
		sq_status s_ = (call);                                             \
		(void)e_;                                                          \
		ck_assert_msg(s_ == SQ_OK, "%s -> %s", #call, sq_status_name(s_)); \
	} while (0)

/* Calls that take an sq_error named `err` in scope. */
#define OKE(call) ck_assert_msg((call) == SQ_OK, "%s: %s", #call, err.msg)

static inline int test_shard_count(void)
{
	int ports[16];
	int n = testdb_ports(ports, 16);
	return n >= 4 ? 4 : n;
}

/* One test case per test, named for it, so that CK_RUN_CASE=NAME runs one
 * test alone. */
#define ADD_CASE(suite, fn, timeout_s)               \
	do {                                         \
		TCase *tc_ = tcase_create(#fn);      \
		tcase_set_timeout(tc_, (timeout_s)); \
		tcase_add_test(tc_, fn);             \
		suite_add_tcase((suite), tc_);       \
	} while (0)

/* Line-buffered output, so what a test prints reaches the log even when
 * its forked process dies on a failed assertion. */
static inline int run_suite(Suite *s)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

static inline double test_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Waits for progress: returns 1 once remaining(arg) is 0; returns 0 when its
 * value has not fallen for testdb_stall_s() seconds (a stall, not a slow
 * machine). *left gets the last value.
 */
typedef long long (*test_remaining_fn)(void *arg);

static inline int wait_progress(test_remaining_fn remaining, void *arg, long long *left)
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

/* Enqueues one job and returns its id. */
static inline int64_t enqueue_one(sq_client *c, const char *type, const char *key,
				  const char *params, sq_enqueue_outcome *outcome)
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

/* Claims everything of one type up to limit for worker. */
static inline size_t claim_type(sq_client *c, const char *worker, const char *type, int limit,
				sq_job **jobs)
{
	sq_claim_req rq = {type, limit, 0};
	size_t n;
	sq_error err;
	ck_assert_msg(sq_claim(c, worker, &rq, 1, jobs, &n, &err) == SQ_OK, "claim: %s", err.msg);
	return n;
}

#endif

/* wrap.h - timing of the worker runtime's own claim, start and complete
 * calls. The bench links with -Wl,--wrap=sq_claim (and sq_start,
 * sq_complete): the runtime inside libshardq.a then calls these, which call
 * the real functions and record counts and round trips in the tally. The
 * runtime is not changed; it only reports a moving average itself. */
#ifndef BENCH_WRAP_H
#define BENCH_WRAP_H

#include "tally.h"

#include <shardq.h>

/* Where the wrappers record; NULL: they only pass calls through. */
extern tally *wrap_tally;

sq_status __real_sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs, size_t nreqs,
			  sq_job **jobs, size_t *njobs, sq_error *err);
sq_status __wrap_sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs, size_t nreqs,
			  sq_job **jobs, size_t *njobs, sq_error *err);
sq_status __real_sq_start(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			  sq_status *out, sq_error *err);
sq_status __wrap_sq_start(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			  sq_status *out, sq_error *err);
sq_status __real_sq_complete(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			     sq_status *out, sq_error *err);
sq_status __wrap_sq_complete(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			     sq_status *out, sq_error *err);

#endif

/* wrap.c - counts and round trips of the worker runtime's claim, start and
 * complete calls (see wrap.h for how they are hooked in). */
#include "wrap.h"

tally *wrap_tally;

static void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

sq_status __wrap_sq_claim(sq_client *c, const char *worker, const sq_claim_req *reqs, size_t nreqs,
			  sq_job **jobs, size_t *njobs, sq_error *err)
{
	tally *t = wrap_tally;
	int64_t t0 = mono_us();
	sq_status st = __real_sq_claim(c, worker, reqs, nreqs, jobs, njobs, err);
	int64_t t1 = mono_us();
	if (!t)
		return st;
	hist_record(&t->claim_rtt, (uint64_t)(t1 - t0));
	count(&t->claims, 1);
	if (*njobs) {
		count(&t->claimed, *njobs);
		tally_first(&t->first_claim, t0);
		tally_last(&t->last_claim, t1);
	} else {
		count(&t->claims_empty, 1);
	}
	return st;
}

/* How many refs the shards accepted. */
static uint64_t oks(const sq_status *out, size_t n)
{
	uint64_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += out[i] == SQ_OK;
	return k;
}

sq_status __wrap_sq_start(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			  sq_status *out, sq_error *err)
{
	tally *t = wrap_tally;
	int64_t t0 = mono_us();
	sq_status st = __real_sq_start(c, worker, refs, n, out, err);
	int64_t t1 = mono_us();
	if (!t || st != SQ_OK)
		return st;
	hist_record(&t->start_rtt, (uint64_t)(t1 - t0));
	count(&t->starts, 1);
	count(&t->started, oks(out, n));
	tally_first(&t->first_start, t0);
	tally_last(&t->last_start, t1);
	return st;
}

sq_status __wrap_sq_complete(sq_client *c, const char *worker, const sq_job_ref *refs, size_t n,
			     sq_status *out, sq_error *err)
{
	tally *t = wrap_tally;
	int64_t t0 = mono_us();
	sq_status st = __real_sq_complete(c, worker, refs, n, out, err);
	int64_t t1 = mono_us();
	if (!t || st != SQ_OK)
		return st;
	uint64_t k = oks(out, n);
	hist_record(&t->complete_rtt, (uint64_t)(t1 - t0));
	count(&t->completes, 1);
	count(&t->completed, k);
	count(&t->lost, n - k);
	tally_first(&t->first_complete, t0);
	tally_last(&t->last_complete, t1);
	return st;
}

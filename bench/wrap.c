/* wrap.c - counts and round trips of the worker runtime's ticks, from the
 * runtime's on_tick hook (see wrap.h). */
#include "wrap.h"

static void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void wrap_on_tick(const sq_worker_tick *tk, void *arg)
{
	tally *t = arg;
	uint64_t rtt = (uint64_t)(tk->recv_us - tk->send_us);
	if (!t)
		return;
	/* one round trip carries every part of the tick: each part that was in
	 * it is timed by the whole trip */
	if (tk->claimed >= 0) {
		hist_record(&t->claim_rtt, rtt);
		count(&t->claims, 1);
		if (tk->claimed > 0) {
			count(&t->claimed, (uint64_t)tk->claimed);
			tally_first(&t->first_claim, tk->send_us);
			tally_last(&t->last_claim, tk->recv_us);
		} else {
			count(&t->claims_empty, 1);
		}
	}
	if (tk->started > 0) {
		hist_record(&t->start_rtt, rtt);
		count(&t->starts, 1);
		count(&t->started, (uint64_t)tk->started);
		tally_first(&t->first_start, tk->send_us);
		tally_last(&t->last_start, tk->recv_us);
	}
	if (tk->completed > 0 || tk->lost > 0) {
		hist_record(&t->complete_rtt, rtt);
		count(&t->completes, 1);
		count(&t->completed, (uint64_t)tk->completed);
		count(&t->lost, (uint64_t)tk->lost);
		tally_first(&t->first_complete, tk->send_us);
		tally_last(&t->last_complete, tk->recv_us);
	}
}

/* hist.c - the log-linear latency histogram: bucket arithmetic, recording,
 * snapshots and percentiles. */
#include "hist.h"

#include <string.h>

int hist_bucket(uint64_t us)
{
	if (us < HIST_SUB)
		return (int)us;
	if (us >> HIST_MAX_BITS)
		return HIST_BUCKETS - 1;
	int m = 63 - __builtin_clzll(us); /* HIST_SUB_BITS .. HIST_MAX_BITS-1 */
	int shift = m - HIST_SUB_BITS;
	return (shift + 1) * HIST_SUB + (int)(us >> shift) - HIST_SUB;
}

uint64_t hist_bucket_high(int idx)
{
	if (idx < HIST_SUB)
		return (uint64_t)idx;
	int g = idx / HIST_SUB, off = idx % HIST_SUB, shift = g - 1;
	uint64_t low = (uint64_t)(HIST_SUB + off) << shift;
	return low + ((uint64_t)1 << shift) - 1;
}

void hist_reset(hist *h)
{
	memset(h, 0, sizeof(*h));
}

void hist_record(hist *h, uint64_t us)
{
	atomic_fetch_add_explicit(&h->b[hist_bucket(us)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->n, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum, us, memory_order_relaxed);
	uint64_t m = atomic_load_explicit(&h->max, memory_order_relaxed);
	while (us > m && !atomic_compare_exchange_weak_explicit(
				 &h->max, &m, us, memory_order_relaxed, memory_order_relaxed))
		;
}

static uint64_t ld(const _Atomic uint64_t *p)
{
	return atomic_load_explicit(p, memory_order_relaxed);
}

static void st(_Atomic uint64_t *p, uint64_t v)
{
	atomic_store_explicit(p, v, memory_order_relaxed);
}

void hist_copy(hist *dst, const hist *src)
{
	uint64_t n = 0;
	for (int i = 0; i < HIST_BUCKETS; i++) {
		uint64_t v = ld(&src->b[i]);
		st(&dst->b[i], v);
		n += v;
	}
	/* n from the buckets themselves, so percentiles stay consistent
	 * while others record */
	st(&dst->n, n);
	st(&dst->sum, ld(&src->sum));
	st(&dst->max, ld(&src->max));
}

void hist_diff(hist *dst, const hist *a, const hist *b)
{
	uint64_t n = 0;
	for (int i = 0; i < HIST_BUCKETS; i++) {
		uint64_t x = ld(&a->b[i]), y = ld(&b->b[i]);
		st(&dst->b[i], x > y ? x - y : 0);
		n += x > y ? x - y : 0;
	}
	st(&dst->n, n);
	uint64_t sa = ld(&a->sum), sb = ld(&b->sum);
	st(&dst->sum, sa > sb ? sa - sb : 0);
	st(&dst->max, ld(&a->max));
}

void hist_add(hist *dst, const hist *src)
{
	for (int i = 0; i < HIST_BUCKETS; i++)
		st(&dst->b[i], ld(&dst->b[i]) + ld(&src->b[i]));
	st(&dst->n, ld(&dst->n) + ld(&src->n));
	st(&dst->sum, ld(&dst->sum) + ld(&src->sum));
	if (ld(&src->max) > ld(&dst->max))
		st(&dst->max, ld(&src->max));
}

uint64_t hist_count(const hist *h)
{
	return ld(&h->n);
}

double hist_mean(const hist *h)
{
	uint64_t n = ld(&h->n);
	return n ? (double)ld(&h->sum) / (double)n : 0.0;
}

uint64_t hist_percentile(const hist *h, double p)
{
	uint64_t n = ld(&h->n), seen = 0, rank;
	if (!n)
		return 0;
	if (p >= 100.0)
		return ld(&h->max);
	rank = (uint64_t)((p / 100.0) * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	for (int i = 0; i < HIST_BUCKETS; i++) {
		seen += ld(&h->b[i]);
		if (seen >= rank) {
			uint64_t v = hist_bucket_high(i), mx = ld(&h->max);
			/* never report more than was seen */
			return mx && v > mx ? mx : v;
		}
	}
	return ld(&h->max);
}

/* hist.h - a log-linear latency histogram (HdrHistogram-like): exact below
 * 64 us, then 64 buckets per power of two, so any value is kept within
 * 1/64 (1.6%) of itself in constant memory. Counters are atomic, so handler
 * threads of several processes can record into one histogram placed in
 * shared memory. */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define HIST_SUB_BITS 6
#define HIST_SUB      (1 << HIST_SUB_BITS)
/* values up to 2^40 us (12 days); larger ones land in the last bucket */
#define HIST_MAX_BITS 40
#define HIST_BUCKETS  ((HIST_MAX_BITS - HIST_SUB_BITS + 1) * HIST_SUB)

typedef struct hist {
	_Atomic uint64_t b[HIST_BUCKETS];
	_Atomic uint64_t n, sum, max;
} hist;

/* Zeroes h (a zeroed hist is also a valid empty one). */
void hist_reset(hist *h);
/* Records one value in microseconds; thread-safe, lock-free. */
void hist_record(hist *h, uint64_t us);
/* dst = src (a consistent-enough snapshot while others record). */
void hist_copy(hist *dst, const hist *src);
/* dst = a - b, bucket by bucket (b an earlier snapshot of a); max is a's. */
void hist_diff(hist *dst, const hist *a, const hist *b);
/* dst += src. */
void hist_add(hist *dst, const hist *src);
uint64_t hist_count(const hist *h);
double hist_mean(const hist *h);
/* The value at percentile p (0..100): the highest value of the bucket that
 * holds the ceil(p% * n)-th smallest sample; 0 when empty. */
uint64_t hist_percentile(const hist *h, double p);
/* Bucket of a value and the highest value a bucket stands for (exposed for
 * the unit check in the smoke test). */
int hist_bucket(uint64_t us);
uint64_t hist_bucket_high(int idx);

#endif

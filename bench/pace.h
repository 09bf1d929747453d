/* pace.h - the schedule of rate-limited producers (shardq's and the
 * baselines'). Each producer sends its batches evenly spaced at its share
 * of the rate, and the producers are interleaved: producer i of n is
 * offset by i/n of a batch interval, so n producers offer one batch every
 * interval/n, not n batches at once. The schedule starts when the last
 * producer is connected: the time connecting took is not owed as a burst
 * of catch-up batches at the start. */
#ifndef BENCH_PACE_H
#define BENCH_PACE_H

#include <stdint.h>

typedef struct pace {
	_Atomic int64_t origin; /* monotonic us; 0 until every producer joined */
	_Atomic int joined;
	int n;
} pace;

void pace_init(pace *p, int n);
/* Each producer once, connected or not (a failed one must not hold the
 * others): waits until all have joined or *stop is set; the origin. */
int64_t pace_join(pace *p, const _Atomic int *stop);
/* When producer i (of n) may send the batch after `sent` jobs, at `rate`
 * jobs/s for this producer in batches of `batch` jobs. */
int64_t pace_due(const pace *p, int64_t origin, int i, int64_t sent, double rate, int batch);
/* Sleeps until at_us (mono_us). */
void pace_sleep_until(int64_t at_us);

#endif

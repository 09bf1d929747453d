/* clock.h - the one monotonic clock of shardq: leases, back-offs, waits and
 * the daemon's timings all measure intervals on it, never on the wall clock,
 * which may step. */
#ifndef SQ_CLOCK_H
#define SQ_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin): only differences mean
 * anything. */
double sq_mono_s(void);

#endif

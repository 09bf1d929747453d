/* monitor.h - the live view of a running phase: a progress line (redrawn
 * in place on a terminal, a plain line every few seconds otherwise) and
 * the samples of the time series (rate and latency per interval). */
#ifndef BENCH_MONITOR_H
#define BENCH_MONITOR_H

#include "result.h"
#include "tally.h"

typedef struct monitor {
	phase *ph;
	tally *t;
	const char *label;
	int64_t t0, next_sample, next_print, last_t;
	uint64_t last_done;
	int sample_ms, tty, quiet, printed;
	hist *prev, *cur, *diff; /* snapshots for per-interval percentiles */
} monitor;

/* Starts watching; t0 is the phase's start (monotonic us). quiet: no
 * progress output at all. */
int monitor_start(monitor *m, phase *ph, tally *t, const char *label, int64_t t0, int sample_ms,
		  int quiet);
/* Samples and prints when due; target: jobs the phase will complete (0 if
 * not known yet). */
void monitor_tick(monitor *m, uint64_t target);
/* A last sample; ends the progress line. */
void monitor_end(monitor *m);

#endif

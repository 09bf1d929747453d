/* plot.h - the PNG of a run, drawn by gnuplot from the data files that
 * report_plot_data() wrote: throughput over time, enqueue-to-start latency
 * over time, and the latency percentile spectra. */
#ifndef BENCH_PLOT_H
#define BENCH_PLOT_H

#include "result.h"

/* Writes DIR/plot.gp and runs gnuplot on it to make DIR/plot.png. Returns
 * 0, 1 when gnuplot is not installed (the script is kept), or -1. */
int plot_run(const char *dir, const run_result *r, char *err, size_t errlen);

#endif

/* report.h - the outputs of a run: the human table (every figure also as a
 * ratio to the baselines), the JSON document, the CSV files and the data
 * the plot is drawn from. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include "result.h"

#include <stdio.h>

/* Percentiles reported everywhere. */
#define REPORT_NPCT 5
extern const double report_pcts[REPORT_NPCT];

/* The human table of every step. */
void report_table(FILE *f, const run_result *r);
/* The whole run as JSON; 0, or -1 when it cannot be written. */
int report_json(FILE *f, const run_result *r);
/* One row per (step, phase) with every figure. */
int report_csv(FILE *f, const run_result *r);
/* The time series of every phase, one row per sample. */
int report_series_csv(FILE *f, const run_result *r);
/* Per-phase data files for gnuplot (series and percentile spectra) in dir;
 * 0 or -1. */
int report_plot_data(const char *dir, const run_result *r);

#endif

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

/* One figure of a step: its value for each phase (< 0: none), as the
 * table prints it; `ratios`: shown as shardq / baseline too. */
typedef struct report_fig {
	char label[48];
	double v[PH_N];
	int decimals;
	int ratios;
} report_fig;
#define REPORT_MAX_FIGS 40
/* The table's figures of a step into out (at most max); with `extra`, also
 * one the table prints as a sentence: shardq's completions in the last
 * quarter of the producing time against the first. Returns how many. */
int report_figures(const step *st, int extra, report_fig *out, int max);

/* Repeated runs (--repeat): every run's figures, kept for the summary. */
#define REPORT_MAX_RUNS 20
typedef struct report_runs {
	int nruns, nsteps;
	int ran[SC_MAX_STEPS][PH_N]; /* the phase ran in every run */
	int nfig[SC_MAX_STEPS];
	report_fig fig[REPORT_MAX_RUNS][SC_MAX_STEPS][REPORT_MAX_FIGS];
} report_runs;
/* Adds a finished run; -1 when there is no room for another. */
int report_runs_add(report_runs *rr, const run_result *r);
/* Per step and figure: the median and range over the runs of every phase,
 * and of the ratios of shardq to each baseline taken within each run. */
void report_runs_table(FILE *f, const report_runs *rr, const run_result *last);
/* One row per (step, figure, phase or ratio): every run's value, then the
 * median, minimum and maximum. */
int report_runs_csv(FILE *f, const report_runs *rr);

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

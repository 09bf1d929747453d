/* plot.c - writes the gnuplot script of a run and runs gnuplot. */
#include "plot.h"
#include "hist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const names[PH_N] = {"shardq", "(a) single table", "(b) single table, claim 100",
					"(c) raw limit"};

static void label(const run_result *r, int si, int p, char *out, size_t len)
{
	if (r->nsteps > 1)
		snprintf(out, len, "%s, backlog %lld", names[p], (long long)r->steps[si].backlog);
	else
		snprintf(out, len, "%s", names[p]);
}

/* One "plot" command over every (step, phase) that has the file. */
static void plot_cmd(FILE *f, const char *dir, const run_result *r, const char *kind,
		     const char *using, int only_latency)
{
	int first = 1;
	char lab[128], path[1200];
	for (int i = 0; i < r->nsteps; i++)
		for (int p = 0; p < PH_N; p++) {
			const phase *ph = &r->steps[i].ph[p];
			/* the latency plot: only phases whose jobs carried a time */
			if (!ph->ran || (only_latency && (p == PH_C || !hist_count(ph->e2s))))
				continue;
			snprintf(path, sizeof(path), "%s/%s-%d-%s.dat", dir, kind, i, ph->key);
			if (access(path, R_OK))
				continue;
			label(r, i, p, lab, sizeof(lab));
			fprintf(f, "%s '%s' using %s with linespoints title '%s'",
				first ? "plot" : ", \\\n    ", path, using, lab);
			first = 0;
		}
	if (first)
		fprintf(f, "plot [1:10][1:10] NaN title 'no samples'");
	fprintf(f, "\n");
}

/* The spectra of one latency (e2s or claim) of every phase. */
static void spectrum_cmd(FILE *f, const char *dir, const run_result *r, const char *what)
{
	char kind[32];
	snprintf(kind, sizeof(kind), "pct");
	int first = 1;
	char lab[160], path[1200];
	for (int i = 0; i < r->nsteps; i++)
		for (int p = 0; p < PH_C; p++) {
			const phase *ph = &r->steps[i].ph[p];
			if (!ph->ran)
				continue;
			snprintf(path, sizeof(path), "%s/%s-%d-%s-%s.dat", dir, kind, i, ph->key,
				 what);
			if (access(path, R_OK))
				continue;
			label(r, i, p, lab, sizeof(lab));
			fprintf(f, "%s '%s' using 2:3 with linespoints title '%s'",
				first ? "plot" : ", \\\n    ", path, lab);
			first = 0;
		}
	if (first)
		fprintf(f, "plot [1:10][1:10] NaN title 'no samples'");
	fprintf(f, "\n");
}

int plot_run(const char *dir, const run_result *r, char *err, size_t errlen)
{
	char gp[1100], png[1100], cmd[2400];
	snprintf(gp, sizeof(gp), "%s/plot.gp", dir);
	snprintf(png, sizeof(png), "%s/plot.png", dir);
	FILE *f = fopen(gp, "w");
	if (!f) {
		snprintf(err, errlen, "cannot write %s", gp);
		return -1;
	}
	fprintf(f, "# shardq-bench: scenario %s, %s\n", r->sc->name, r->started_at);
	fprintf(f, "set terminal pngcairo size 1400,1100 font ',10'\nset output '%s'\n", png);
	fprintf(f, "set datafile missing 'nan'\nset grid\nset key below\n");
	fprintf(f, "set multiplot layout 2,2 title 'shardq-bench %s (%s)'\n", r->sc->name,
		r->started_at);
	fprintf(f, "set title 'throughput: jobs completed per second'\nset xlabel 'seconds'\n"
		   "set ylabel 'jobs/s'\nset format y '%%.0s%%c'\nset yrange [0:*]\n");
	plot_cmd(f, dir, r, "series", "1:2", 0);
	fprintf(f, "set title 'enqueue-to-start p99 per interval'\nset ylabel 'ms'\n"
		   "set logscale y\nset format y '%%g'\nset yrange [*:*]\n");
	plot_cmd(f, dir, r, "series", "1:4", 1);
	fprintf(f, "set title 'enqueue-to-start latency by percentile'\n"
		   "set xlabel 'percentile'\nset logscale x\nset xrange [1:*]\n"
		   "set xtics ('0' 1, '50' 2, '90' 10, '99' 100, '99.9' 1000, '99.99' 10000, "
		   "'99.999' 100000, 'max' 1000000)\n");
	spectrum_cmd(f, dir, r, "e2s");
	fprintf(f, "set title 'claim round trip by percentile'\n");
	spectrum_cmd(f, dir, r, "claim");
	fprintf(f, "unset multiplot\n");
	if (fclose(f)) {
		snprintf(err, errlen, "cannot write %s", gp);
		return -1;
	}
	if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
		snprintf(err, errlen,
			 "gnuplot is not installed, so there is no PNG (apt-get install -y "
			 "gnuplot-nox; then gnuplot %s)",
			 gp);
		return 1;
	}
	snprintf(cmd, sizeof(cmd), "gnuplot '%s' 2>'%s/plot.log'", gp, dir);
	int st = system(cmd);
	if (st != 0) {
		snprintf(err, errlen, "gnuplot failed (%d); see %s/plot.log", WEXITSTATUS(st), dir);
		return -1;
	}
	return 0;
}

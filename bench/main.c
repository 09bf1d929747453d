/* main.c - shardq-bench: runs a scenario against the shards (shardq, then
 * the baselines on the same servers with the same job count), and writes
 * the table, JSON, CSV and plot. See docs/benchmarks.md. */
#include "phase.h"
#include "plot.h"
#include "pgutil.h"
#include "report.h"
#include "workerproc.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* runs go under the build directory (CMake defines this), never in the tree */
#ifndef SHARDQ_BENCH_RESULTS
#define SHARDQ_BENCH_RESULTS "bench-results"
#endif

enum { EX_OK = 0, EX_FAIL = 1, EX_USAGE = 2, EX_SCENARIO = 3 };

static volatile sig_atomic_t interrupted;
/* large; static rather than on the stack */
static scenario sc;
static run_result res;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardq-bench [options] SCENARIO.ini\n\n"
		"Runs a scenario against the shards it names: shardq (producers through\n"
		"sq_enqueue, worker processes running the sq_worker runtime), then the\n"
		"baselines on the same servers with the same job count: (a) a single-table\n"
		"queue with one job per claim, (b) the same claiming 100 per query, (c) the\n"
		"raw limit (insert, update, delete 1000 rows per transaction). Prints a\n"
		"table with every figure and its ratio to the baselines, and writes\n"
		"result.json, result.csv, series.csv and plot.png in the output directory.\n\n"
		"options:\n"
		"  --ports P1,P2,...      shards on 127.0.0.1 at these ports ([shards] hosts)\n"
		"  --database NAME        shardq database on every shard ([shards] database);\n"
		"                         dropped and created again by every phase\n"
		"  --baseline-database NAME  database of the baselines ([baselines] database)\n"
		"  --set SECTION.KEY=VALUE  override a scenario key, e.g. --set run.jobs=50000,\n"
		"                         --set producers.rate=20000, --set 'type "
		"noop.threads=64'\n"
		"  --out DIR              output directory (default: the build directory's\n"
		"                         bench-results/DATE/NAME-TIME)\n"
		"  --json                 print the JSON on stdout (the table goes to stderr)\n"
		"  --pgss                 record the top statements per phase "
		"(pg_stat_statements)\n"
		"  --no-plot              do not run gnuplot\n"
		"  --keep                 keep the databases after the run\n"
		"  --quiet                no progress lines\n"
		"  --wait-quiet SECONDS   before each phase, wait up to this long until other\n"
		"                         processes use less than 0.15 cores (shared machines)\n"
		"  --retry-disturbed N    run a phase again (up to N times) when other processes\n"
		"                         took more than 0.25 cores during it\n"
		"  --note TEXT            recorded with the results (bench/run: the source "
		"commit)\n"
		"  --repeat N             run the whole scenario N times (at most 20), each run\n"
		"                         in DIR/run-K; then DIR/summary.txt and repeat.csv give\n"
		"                         every figure's median and range over the runs, and\n"
		"                         of its ratio to each baseline within a run (this\n"
		"                         machine's noise, told apart from a difference)\n"
		"  -h, --help             this text\n\n"
		"exit: 0 every phase ran and every job is accounted for; 1 a phase failed;\n"
		"2 bad usage; 3 bad scenario file.\n");
}

static void machine(const bench_env *env, char *out, size_t len)
{
	char model[256] = "unknown CPU", line[512], pg[128] = "PostgreSQL ?", err[256];
	long long mem_kb = 0;
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10)) {
			char *p = strchr(line, ':');
			if (p) {
				snprintf(model, sizeof(model), "%s", p + 2);
				model[strcspn(model, "\n")] = '\0';
			}
			break;
		}
	if (f)
		fclose(f);
	if ((f = fopen("/proc/meminfo", "r"))) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemTotal: %lld kB", &mem_kb) == 1)
				break;
		fclose(f);
	}
	PGconn *c = pg_connect(env->sc->host[0], env->sc->port[0], "postgres", err, sizeof(err));
	if (c) {
		PGresult *r =
			PQexec(c, "SELECT split_part(version(), ' ', 2), "
				  "current_setting('synchronous_commit'), "
				  "current_setting('shared_buffers'), current_setting('fsync')");
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			snprintf(
				pg, sizeof(pg),
				"PostgreSQL %s (synchronous_commit=%s, fsync=%s, shared_buffers=%s "
				"each)",
				PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 3),
				PQgetvalue(r, 0, 2));
		PQclear(r);
		PQfinish(c);
	}
	uname(&u);
	snprintf(out, len, "%s, %ld cores, %.0f GiB RAM, Linux %s; %s; %d shards on %s:%d..%d",
		 model, sysconf(_SC_NPROCESSORS_ONLN), (double)mem_kb / 1048576.0, u.release, pg,
		 env->sc->nshards, env->sc->host[0], env->sc->port[0],
		 env->sc->port[env->sc->nshards - 1]);
}

/* Other processes' load during a phase, in cores. */
static double other_cores(const phase *ph)
{
	return ph->cpu_other_s >= 0 && ph->wall_s > 0 ? ph->cpu_other_s / ph->wall_s : 0;
}

/* Runs one phase; with retries, runs it again (up to that many times) when
 * other processes took more than DISTURBED cores during it. 0 when the
 * phase ran and accounted for its jobs. */
#define DISTURBED 0.25
static int run_phase(bench_env *env, step *st, int p, uint64_t enq, uint64_t done, int retries)
{
	static const char *const keys[PH_N] = {"shardq", "a", "b", "c"};
	phase *ph = &st->ph[p];
	for (int attempt = 1;; attempt++) {
		if (phase_init(ph, keys[p])) {
			snprintf(ph->error, sizeof(ph->error), "out of memory");
			return -1;
		}
		ph->attempts = attempt;
		if (p == PH_SHARDQ)
			phase_shardq(env, st->backlog, ph);
		else
			phase_baseline(env, p, enq, done, st->backlog, ph);
		if (!ph->ok)
			return -1;
		if (attempt > retries || other_cores(ph) <= DISTURBED || interrupted)
			return 0;
		if (!env->quiet)
			fprintf(stderr,
				"shardq-bench: other processes took %.2f cores during phase %s; "
				"running it again (%d of %d)\n",
				other_cores(ph), keys[p], attempt, retries);
		phase_free(ph);
	}
}

static int mkdirs(const char *path)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) && errno != EEXIST)
				return -1;
			*p = '/';
		}
	return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

static FILE *open_out(const char *dir, const char *name)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "shardq-bench: cannot write %s: %s\n", path, strerror(errno));
	return f;
}

static void copy_file(const char *from, const char *dir, const char *name)
{
	FILE *in = fopen(from, "r"), *out = in ? open_out(dir, name) : NULL;
	char buf[8192];
	size_t n;
	while (in && out && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, n, out);
	if (in)
		fclose(in);
	if (out)
		fclose(out);
}

static int write_outputs(const run_result *r, const bench_env *env, int json, int plot)
{
	FILE *f;
	int rc = 0;
	char err[1024];
	if ((f = open_out(r->out_dir, "summary.txt"))) {
		report_table(f, r);
		fclose(f);
	}
	if ((f = open_out(r->out_dir, "result.json"))) {
		rc |= report_json(f, r);
		fclose(f);
	} else {
		rc = -1;
	}
	if ((f = open_out(r->out_dir, "result.csv"))) {
		rc |= report_csv(f, r);
		fclose(f);
	}
	if ((f = open_out(r->out_dir, "series.csv"))) {
		rc |= report_series_csv(f, r);
		fclose(f);
	}
	if ((f = open_out(r->out_dir, "shardq.ini"))) {
		fputs(env->t->config, f);
		fclose(f);
	}
	copy_file(r->sc->path, r->out_dir, "scenario.ini");
	if (report_plot_data(r->out_dir, r)) {
		fprintf(stderr, "shardq-bench: cannot write the plot data in %s\n", r->out_dir);
		rc = -1;
	} else if (plot) {
		int p = plot_run(r->out_dir, r, err, sizeof(err));
		if (p)
			fprintf(stderr, "shardq-bench: %s\n", err);
	}
	report_table(json ? stderr : stdout, r);
	if (json)
		rc |= report_json(stdout, r);
	return rc;
}

/* One run of every step: shardq, then the baselines wanted. */
static int run_once(bench_env *env, int retries)
{
	int rc = EX_OK;
	for (int i = 0; i < sc.nsteps && !interrupted; i++) {
		step *st = &res.steps[i];
		res.nsteps = i + 1;
		st->backlog = sc.backlog[i];
		if (sc.nrates > 1)
			sc.rate = sc.rates[i]; /* the producers read it when they start */
		st->rate = sc.rate;
		if (run_phase(env, st, PH_SHARDQ, 0, 0, retries)) {
			fprintf(stderr, "shardq-bench: shardq phase failed: %s\n",
				st->ph[PH_SHARDQ].error);
			return EX_FAIL;
		}
		/* the same job count as shardq ran: as many enqueued, as many done */
		uint64_t enq = st->ph[PH_SHARDQ].enqueued, done = st->ph[PH_SHARDQ].completed;
		int want[PH_N] = {0, sc.run_a, sc.run_b, sc.run_c};
		for (int p = PH_A; p < PH_N && !interrupted; p++) {
			if (!want[p])
				continue;
			if (run_phase(env, st, p, enq, done, retries)) {
				fprintf(stderr, "shardq-bench: baseline %s failed: %s\n",
					st->ph[p].key, st->ph[p].error);
				rc = EX_FAIL;
			}
		}
	}
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"ports", required_argument, NULL, 'p'},
		{"database", required_argument, NULL, 'd'},
		{"baseline-database", required_argument, NULL, 'D'},
		{"set", required_argument, NULL, 's'},
		{"out", required_argument, NULL, 'o'},
		{"json", no_argument, NULL, 'j'},
		{"pgss", no_argument, NULL, 'S'},
		{"no-plot", no_argument, NULL, 'P'},
		{"keep", no_argument, NULL, 'k'},
		{"quiet", no_argument, NULL, 'q'},
		{"note", required_argument, NULL, 'n'},
		{"wait-quiet", required_argument, NULL, 'w'},
		{"retry-disturbed", required_argument, NULL, 'r'},
		{"repeat", required_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	if (argc == 4 && !strcmp(argv[1], "--worker-process"))
		return workerproc_main(atoi(argv[2]), atoi(argv[3]));

	const char *ports = NULL, *db = NULL, *bdb = NULL, *out = NULL;
	const char **sets = calloc((size_t)argc, sizeof(char *));
	int nsets = 0, json = 0, pgss = 0, plot = 1, keep = 0, quiet = 0, c;
	double wait_quiet = 0;
	int retries = 0, repeat = 1;
	char err[8192], *end;
	int rc = EX_OK;
	bench_env env;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': ports = optarg; break;
		case 'd': db = optarg; break;
		case 'D': bdb = optarg; break;
		case 's': sets[nsets++] = optarg; break;
		case 'o': out = optarg; break;
		case 'j': json = 1; break;
		case 'S': pgss = 1; break;
		case 'P': plot = 0; break;
		case 'k': keep = 1; break;
		case 'q': quiet = 1; break;
		case 'n': snprintf(res.note, sizeof(res.note), "%s", optarg); break;
		case 'w': wait_quiet = atof(optarg); break;
		case 'r': retries = atoi(optarg); break;
		case 'R':
			repeat = (int)strtol(optarg, &end, 10);
			if (*end || repeat < 1 || repeat > REPORT_MAX_RUNS) {
				fprintf(stderr,
					"shardq-bench: --repeat takes a number of runs from 1 to "
					"%d, "
					"not '%s'\n",
					REPORT_MAX_RUNS, optarg);
				free(sets);
				return EX_USAGE;
			}
			break;
		case 'h':
			usage(stdout);
			free(sets);
			return EX_OK;
		default:
			usage(stderr);
			free(sets);
			return EX_USAGE;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		free(sets);
		return EX_USAGE;
	}
	if (repeat > 1 && json) {
		fprintf(stderr, "shardq-bench: --json prints one run's document; with --repeat, "
				"read each run's result.json (DIR/run-K) or DIR/repeat.csv\n");
		free(sets);
		return EX_USAGE;
	}
	/* --database and friends are overrides like --set */
	char dbset[128], bdbset[128];
	const char **all = calloc((size_t)nsets + 2, sizeof(char *));
	int nall = 0;
	for (int i = 0; i < nsets; i++)
		all[nall++] = sets[i];
	if (db) {
		snprintf(dbset, sizeof(dbset), "shards.database=%s", db);
		all[nall++] = dbset;
	}
	if (bdb) {
		snprintf(bdbset, sizeof(bdbset), "baselines.database=%s", bdb);
		all[nall++] = bdbset;
	}
	int bad = scenario_load(argv[optind], all, nall, &sc, err, sizeof(err));
	free(all);
	free(sets);
	if (bad) {
		fprintf(stderr, "shardq-bench: the scenario is not valid:\n%s\n", err);
		return EX_SCENARIO;
	}
	if (ports && scenario_set_ports(&sc, ports, err, sizeof(err))) {
		fprintf(stderr, "shardq-bench: %s\n", err);
		return EX_USAGE;
	}
	if (!strcmp(sc.database, sc.base_database)) {
		fprintf(stderr,
			"shardq-bench: the shardq and baseline databases are both '%s'; "
			"give them different names\n",
			sc.database);
		return EX_SCENARIO;
	}

	memset(&env, 0, sizeof(env));
	env.sc = &sc;
	env.quiet = quiet;
	env.pgss = pgss;
	env.keep = keep;
	env.interrupted = &interrupted;
	env.quiet_wait_s = wait_quiet;
	env.quiet_cores = 0.15;
	if (!(env.t = tally_create(&env.tally_fd, err, sizeof(err)))) {
		fprintf(stderr, "shardq-bench: %s\n", err);
		return EX_FAIL;
	}
	env.t->sc = sc;
	if (env_find_servers(&env, err, sizeof(err))) {
		fprintf(stderr, "shardq-bench: %s\n", err);
		tally_unmap(env.t);
		close(env.tally_fd);
		return EX_FAIL;
	}

	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	res.sc = &sc;
	strftime(res.started_at, sizeof(res.started_at), "%Y-%m-%dT%H:%M:%SZ", &tm);
	machine(&env, res.machine, sizeof(res.machine));
	size_t k = 0;
	for (int i = 0; i < argc && k < sizeof(res.command) - 2; i++)
		k += (size_t)snprintf(res.command + k, sizeof(res.command) - k, "%s%s",
				      i ? " " : "", argv[i]);
	char top[sizeof(res.out_dir)];
	if (out) {
		snprintf(top, sizeof(top), "%s", out);
	} else {
		char day[16], stamp[16];
		strftime(day, sizeof(day), "%Y-%m-%d", &tm);
		strftime(stamp, sizeof(stamp), "%H%M%S", &tm);
		snprintf(top, sizeof(top), "%s/%s/%s-%s", SHARDQ_BENCH_RESULTS, day, sc.name,
			 stamp);
	}
	if (mkdirs(top)) {
		fprintf(stderr, "shardq-bench: cannot make %s: %s\n", top, strerror(errno));
		tally_unmap(env.t);
		close(env.tally_fd);
		return EX_FAIL;
	}
	signal(SIGINT, on_sigint);
	signal(SIGPIPE, SIG_IGN);

	report_runs *rr = repeat > 1 ? calloc(1, sizeof(*rr)) : NULL;
	if (repeat > 1 && !rr) {
		fprintf(stderr, "shardq-bench: out of memory\n");
		tally_unmap(env.t);
		close(env.tally_fd);
		return EX_FAIL;
	}
	double rates0 = sc.rate;
	for (int run = 1; run <= repeat && rc == EX_OK && !interrupted; run++) {
		/* every run starts from the scenario as given, on fresh databases */
		for (int i = 0; i < SC_MAX_STEPS; i++)
			memset(&res.steps[i], 0, sizeof(res.steps[i]));
		res.nsteps = 0;
		sc.rate = rates0;
		if (run > 1) { /* each run's own start, in its summary and JSON */
			time_t t = time(NULL);
			struct tm rt;
			gmtime_r(&t, &rt);
			strftime(res.started_at, sizeof(res.started_at), "%Y-%m-%dT%H:%M:%SZ", &rt);
		}
		if (repeat > 1) {
			snprintf(res.out_dir, sizeof(res.out_dir), "%s/run-%d", top, run);
			if (mkdirs(res.out_dir)) {
				fprintf(stderr, "shardq-bench: cannot make %s: %s\n", res.out_dir,
					strerror(errno));
				rc = EX_FAIL;
				break;
			}
			if (!quiet)
				fprintf(stderr, "shardq-bench: run %d of %d, in %s\n", run, repeat,
					res.out_dir);
		} else {
			snprintf(res.out_dir, sizeof(res.out_dir), "%s", top);
		}
		env.out_dir = res.out_dir;
		rc = run_once(&env, retries);
		if (interrupted) {
			fprintf(stderr, "shardq-bench: interrupted; writing what was measured\n");
			rc = EX_FAIL;
		}
		if (write_outputs(&res, &env, json, plot))
			rc = EX_FAIL;
		if (rr && rc == EX_OK)
			report_runs_add(rr, &res);
		for (int i = 0; i < res.nsteps; i++)
			for (int p = 0; p < PH_N; p++)
				phase_free(&res.steps[i].ph[p]);
	}
	if (rr && rr->nruns > 0) {
		FILE *f;
		if (rr->nruns < repeat)
			fprintf(stderr,
				"shardq-bench: only %d of %d runs completed; the summary covers "
				"those\n",
				rr->nruns, repeat);
		if ((f = open_out(top, "summary.txt"))) {
			report_runs_table(f, rr, &res);
			fclose(f);
		}
		if ((f = open_out(top, "repeat.csv"))) {
			if (report_runs_csv(f, rr))
				rc = EX_FAIL;
			fclose(f);
		} else {
			rc = EX_FAIL;
		}
		report_runs_table(stdout, rr, &res);
		fprintf(stdout, "\noutput: %s (summary.txt, repeat.csv; each run in run-K)\n", top);
	}
	free(rr);
	tally_unmap(env.t);
	close(env.tally_fd);
	return rc;
}

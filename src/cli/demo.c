/* demo.c - `shardq demo`: the main job end to end on a small scale: enqueue
 * N jobs of three types in batches, claim them with multi-type claims,
 * start and complete them, and print the stats and the rates. */
#include "cli.h"
#include "clock.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_LEN 48

typedef struct demo {
	cli *x;
	int64_t jobs, batch, claim;
	int ntypes, nshards;
	int tty; /* stderr is a terminal: progress rewrites one line */
	char worker[64];
	double t_enq, t_run; /* seconds spent enqueueing, and claiming to completing */
	long completed, lost, claims;
} demo;

/* The options; 0 to go on, or the exit code (with *stop set). */
static int demo_options(demo *d, int argc, char **argv, int *stop)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"jobs", required_argument, NULL, 'n'},   {"batch", required_argument, NULL, 'b'},
		{"claim", required_argument, NULL, 'l'},  {NULL, 0, NULL, 0},
	};
	int c, rc = 0;
	*stop = 1;
	while ((c = getopt_long(argc, argv, ":c:hn:b:l:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': d->x->config_path = optarg; break;
		case 'n': rc = cli_opt_int("demo", "--jobs", optarg, 1, 100000000, &d->jobs); break;
		case 'b': rc = cli_opt_int("demo", "--batch", optarg, 1, 100000, &d->batch); break;
		case 'l': rc = cli_opt_int("demo", "--claim", optarg, 3, 100000, &d->claim); break;
		case 'h':
			printf("usage: shardq [-c FILE] demo [--jobs N] [--batch N] [--claim N]\n\n"
			       "Enqueues N jobs (default 100000) of the first three configured "
			       "task "
			       "types\n"
			       "with random keys, in batches (default 1000), then claims them "
			       "with\n"
			       "multi-type claims of up to --claim jobs (default 1000, shared by "
			       "the\n"
			       "types), starts and completes them, and prints the stats and the "
			       "rates.\n");
			return EX_OK;
		default: return cli_bad_option("demo", c, argv);
		}
		if (rc)
			return rc;
	}
	if ((rc = cli_no_args("demo", argc, argv, NULL)))
		return rc;
	*stop = 0;
	return 0;
}

/* Enqueues the jobs in batches, types in turn, under keys unique to this
 * run; prints the rate and how the jobs spread over the shards. */
static int enqueue_all(demo *d)
{
	cli *x = d->x;
	long *per_shard = calloc((size_t)d->nshards, sizeof(long));
	sq_job_spec *specs = calloc((size_t)d->batch, sizeof(*specs));
	sq_enqueue_result *res = calloc((size_t)d->batch, sizeof(*res));
	char(*keys)[KEY_LEN] = calloc((size_t)d->batch, KEY_LEN);
	unsigned run = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
	long done = 0, last_pct = -1;
	sq_error err;
	int rc = EX_OK;
	if (!per_shard || !specs || !res || !keys) {
		fprintf(stderr, "shardq demo: out of memory\n");
		rc = EX_FAIL;
		goto out;
	}
	double t0 = sq_mono_s();
	while (done < d->jobs) {
		long k = d->jobs - done < d->batch ? d->jobs - done : d->batch;
		for (long i = 0; i < k; i++) {
			snprintf(keys[i], KEY_LEN, "demo:%08x:%ld", run, done + i);
			memset(&specs[i], 0, sizeof(specs[i]));
			specs[i].type = sq_config_type_name(x->cfg, (int)((done + i) % d->ntypes));
			specs[i].key = keys[i];
			specs[i].params = "{\"demo\":true}";
		}
		if (sq_enqueue(x->client, specs, (size_t)k, res, &err) != SQ_OK) {
			rc = cli_fail("demo", &err);
			goto out;
		}
		for (long i = 0; i < k; i++)
			per_shard[res[i].shard]++;
		done += k;
		if (done * 10 / d->jobs != last_pct) {
			last_pct = done * 10 / d->jobs;
			fprintf(stderr, d->tty ? "\renqueued %ld/%ld" : "enqueued %ld/%ld\n", done,
				d->jobs);
		}
	}
	d->t_enq = sq_mono_s() - t0;
	if (d->tty)
		fprintf(stderr, "\n");
	printf("enqueued %ld jobs in %.2fs: %.0f jobs/s; per shard:", d->jobs, d->t_enq,
	       d->jobs / d->t_enq);
	for (int s = 0; s < d->nshards; s++)
		printf(" %s=%ld", sq_config_shard_id(x->cfg, s), per_shard[s]);
	printf("\n");
out:
	free(per_shard);
	free(specs);
	free(res);
	free(keys);
	return rc;
}

/* The ready jobs per shard and type, if the stats can be read. */
static void print_ready(demo *d)
{
	sq_stats *st;
	sq_error err;
	if (sq_stats_get(d->x->client, &st, &err) == SQ_OK) {
		printf("\nready jobs per shard and type:\n");
		for (size_t i = 0; i < st->nrows; i++)
			printf("  %-4s %-10s %7" PRId64 "\n",
			       sq_config_shard_id(d->x->cfg, st->rows[i].shard), st->rows[i].type,
			       st->rows[i].count[SQ_READY]);
		printf("\n");
		sq_stats_free(st);
	}
	fflush(stdout);
}

/* Starts the n jobs claimed, then completes those started; a job refused
 * at either step counts as lost. */
static int start_and_complete(demo *d, const sq_job *js, size_t n)
{
	sq_job_ref *refs = malloc(n * sizeof(*refs));
	sq_status *st = malloc(n * sizeof(*st));
	size_t ok = 0;
	sq_error err;
	int rc = EX_OK;
	if (!refs || !st) {
		fprintf(stderr, "shardq demo: out of memory\n");
		rc = EX_FAIL;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		refs[i].id = js[i].id, refs[i].attempt = js[i].attempt;
	if (sq_start(d->x->client, d->worker, refs, n, st, &err) != SQ_OK) {
		rc = cli_fail("demo", &err);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (st[i] == SQ_OK)
			refs[ok++] = refs[i];
		else
			d->lost++;
	if (ok && sq_complete(d->x->client, d->worker, refs, ok, st, &err) != SQ_OK) {
		rc = cli_fail("demo", &err);
		goto out;
	}
	for (size_t i = 0; i < ok; i++)
		if (st[i] == SQ_OK)
			d->completed++;
		else
			d->lost++;
out:
	free(refs);
	free(st);
	return rc;
}

/* Claims the first types' jobs, --claim at a time shared by the types, and
 * runs them, until all are done or 50 claims in a row came back empty. */
static int claim_all(demo *d)
{
	sq_claim_req reqs[3] = {{0}};
	long empty = 0, last_pct = -1;
	sq_error err;
	int rc;
	for (int t = 0; t < d->ntypes; t++) {
		reqs[t].type = sq_config_type_name(d->x->cfg, t);
		reqs[t].limit = (int32_t)(d->claim / d->ntypes);
	}
	double t1 = sq_mono_s();
	while (d->completed + d->lost < d->jobs && empty < 50) {
		sq_job *js;
		size_t n;
		if (sq_claim(d->x->client, d->worker, reqs, (size_t)d->ntypes, &js, &n, &err) !=
		    SQ_OK) {
			sq_jobs_free(js, n);
			return cli_fail("demo", &err);
		}
		d->claims++;
		if (!n) {
			empty++;
			usleep(20000);
			continue;
		}
		empty = 0;
		rc = start_and_complete(d, js, n);
		sq_jobs_free(js, n);
		if (rc)
			return rc;
		if (d->tty)
			fprintf(stderr, "\rcompleted %ld/%ld", d->completed, d->jobs);
		else if (d->completed * 10 / d->jobs != last_pct)
			fprintf(stderr, "completed %ld/%ld\n", d->completed, d->jobs);
		last_pct = d->completed * 10 / d->jobs;
	}
	d->t_run = sq_mono_s() - t1;
	if (d->tty)
		fprintf(stderr, "\n");
	return EX_OK;
}

/* The rates, then `shardq stats` on a fresh client, as a user would run
 * it next. */
static int report(demo *d)
{
	cli *x = d->x;
	char *av[] = {"stats", NULL};
	int rc;
	printf("claimed, started and completed %ld jobs in %.2fs: %.0f jobs/s (%ld multi-type "
	       "claims, %ld lost)\n",
	       d->completed, d->t_run, d->completed / d->t_run, d->claims, d->lost);
	printf("end to end: %.0f jobs/s\n\n", d->completed / (d->t_enq + d->t_run));
	fflush(stdout);
	sq_client_close(x->client);
	x->client = NULL;
	sq_config_free(x->cfg);
	x->cfg = NULL;
	optind = 1;
	rc = cmd_stats(x, 1, av);
	if (rc == EX_OK && d->completed < d->jobs) {
		fprintf(stderr, "shardq demo: only %ld of %ld jobs completed\n", d->completed,
			d->jobs);
		rc = EX_FAIL;
	}
	return rc;
}

int cmd_demo(cli *x, int argc, char **argv)
{
	demo d = {.x = x, .jobs = 100000, .batch = 1000, .claim = 1000};
	int stop, rc = demo_options(&d, argc, argv, &stop);
	if (stop)
		return rc;
	if ((rc = cli_open(x, "demo", 0)))
		return rc;
	d.ntypes = sq_config_type_count(x->cfg) < 3 ? sq_config_type_count(x->cfg) : 3;
	if (d.ntypes == 0) {
		fprintf(stderr, "shardq demo: the config has no [type NAME] section\n");
		return EX_CONFIG;
	}
	d.nshards = sq_config_shard_count(x->cfg);
	d.tty = isatty(2);
	snprintf(d.worker, sizeof(d.worker), "demo-%d", (int)getpid());

	printf("demo: %ld jobs of %d types (", d.jobs, d.ntypes);
	for (int t = 0; t < d.ntypes; t++)
		printf("%s%s", t ? ", " : "", sq_config_type_name(x->cfg, t));
	printf(") over %d shards, batches of %ld\n", d.nshards, d.batch);

	if ((rc = enqueue_all(&d)))
		return rc;
	print_ready(&d);
	if ((rc = claim_all(&d)))
		return rc;
	return report(&d);
}

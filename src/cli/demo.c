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

int cmd_demo(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"jobs", required_argument, NULL, 'n'},   {"batch", required_argument, NULL, 'b'},
		{"claim", required_argument, NULL, 'l'},  {NULL, 0, NULL, 0},
	};
	int64_t jobs = 100000, batch = 1000, claim = 1000;
	int c, rc = 0;
	while ((c = getopt_long(argc, argv, ":c:hn:b:l:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'n': rc = cli_opt_int("demo", "--jobs", optarg, 1, 100000000, &jobs); break;
		case 'b': rc = cli_opt_int("demo", "--batch", optarg, 1, 100000, &batch); break;
		case 'l': rc = cli_opt_int("demo", "--claim", optarg, 3, 100000, &claim); break;
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
	if ((rc = cli_open(x, "demo", 0)))
		return rc;
	int ntypes = sq_config_type_count(x->cfg) < 3 ? sq_config_type_count(x->cfg) : 3;
	if (ntypes == 0) {
		fprintf(stderr, "shardq demo: the config has no [type NAME] section\n");
		return EX_CONFIG;
	}
	int nshards = sq_config_shard_count(x->cfg);
	long *per_shard = calloc((size_t)nshards, sizeof(long));
	sq_job_spec *specs = calloc((size_t)batch, sizeof(*specs));
	sq_enqueue_result *res = calloc((size_t)batch, sizeof(*res));
	char(*keys)[48] = calloc((size_t)batch, 48);
	char worker[64];
	sq_error err;
	unsigned run = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
	int tty = isatty(2);
	snprintf(worker, sizeof(worker), "demo-%d", (int)getpid());

	printf("demo: %ld jobs of %d types (", jobs, ntypes);
	for (int t = 0; t < ntypes; t++)
		printf("%s%s", t ? ", " : "", sq_config_type_name(x->cfg, t));
	printf(") over %d shards, batches of %ld\n", nshards, batch);

	double t0 = sq_mono_s();
	long done = 0, last_pct = -1;
	while (done < jobs) {
		long k = jobs - done < batch ? jobs - done : batch;
		for (long i = 0; i < k; i++) {
			snprintf(keys[i], 48, "demo:%08x:%ld", run, done + i);
			memset(&specs[i], 0, sizeof(specs[i]));
			specs[i].type = sq_config_type_name(x->cfg, (int)((done + i) % ntypes));
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
		if (done * 10 / jobs != last_pct) {
			last_pct = done * 10 / jobs;
			fprintf(stderr, tty ? "\renqueued %ld/%ld" : "enqueued %ld/%ld\n", done,
				jobs);
		}
	}
	double t_enq = sq_mono_s() - t0;
	if (tty)
		fprintf(stderr, "\n");
	printf("enqueued %ld jobs in %.2fs: %.0f jobs/s; per shard:", jobs, t_enq, jobs / t_enq);
	for (int s = 0; s < nshards; s++)
		printf(" %s=%ld", sq_config_shard_id(x->cfg, s), per_shard[s]);
	printf("\n");

	{
		sq_stats *st;
		if (sq_stats_get(x->client, &st, &err) == SQ_OK) {
			printf("\nready jobs per shard and type:\n");
			for (size_t i = 0; i < st->nrows; i++)
				printf("  %-4s %-10s %7" PRId64 "\n",
				       sq_config_shard_id(x->cfg, st->rows[i].shard),
				       st->rows[i].type, st->rows[i].count[SQ_READY]);
			printf("\n");
			sq_stats_free(st);
		}
		fflush(stdout);
	}
	last_pct = -1;
	sq_claim_req reqs[3] = {{0}};
	for (int t = 0; t < ntypes; t++) {
		reqs[t].type = sq_config_type_name(x->cfg, t);
		reqs[t].limit = (int32_t)(claim / ntypes);
	}
	long completed = 0, lost = 0, claims = 0, empty = 0;
	double t1 = sq_mono_s();
	while (completed + lost < jobs && empty < 50) {
		sq_job *js;
		size_t n;
		if (sq_claim(x->client, worker, reqs, (size_t)ntypes, &js, &n, &err) != SQ_OK) {
			sq_jobs_free(js, n);
			rc = cli_fail("demo", &err);
			goto out;
		}
		claims++;
		if (!n) {
			empty++;
			usleep(20000);
			continue;
		}
		empty = 0;
		sq_job_ref *refs = malloc(n * sizeof(*refs));
		sq_status *st = malloc(n * sizeof(*st));
		size_t ok = 0;
		for (size_t i = 0; i < n; i++)
			refs[i].id = js[i].id, refs[i].attempt = js[i].attempt;
		if (sq_start(x->client, worker, refs, n, st, &err) != SQ_OK) {
			rc = cli_fail("demo", &err);
			free(refs);
			free(st);
			sq_jobs_free(js, n);
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			if (st[i] == SQ_OK)
				refs[ok++] = refs[i];
			else
				lost++;
		if (ok && sq_complete(x->client, worker, refs, ok, st, &err) != SQ_OK) {
			rc = cli_fail("demo", &err);
			free(refs);
			free(st);
			sq_jobs_free(js, n);
			goto out;
		}
		for (size_t i = 0; i < ok; i++)
			if (st[i] == SQ_OK)
				completed++;
			else
				lost++;
		free(refs);
		free(st);
		sq_jobs_free(js, n);
		if (tty)
			fprintf(stderr, "\rcompleted %ld/%ld", completed, jobs);
		else if (completed * 10 / jobs != last_pct)
			fprintf(stderr, "completed %ld/%ld\n", completed, jobs);
		last_pct = completed * 10 / jobs;
	}
	double t_run = sq_mono_s() - t1;
	if (tty)
		fprintf(stderr, "\n");
	printf("claimed, started and completed %ld jobs in %.2fs: %.0f jobs/s (%ld multi-type "
	       "claims, %ld lost)\n",
	       completed, t_run, completed / t_run, claims, lost);
	printf("end to end: %.0f jobs/s\n\n", completed / (t_enq + t_run));
	fflush(stdout);
	free(per_shard);
	free(specs);
	free(res);
	free(keys);
	per_shard = NULL, specs = NULL, res = NULL, keys = NULL;
	{
		char *av[] = {"stats", NULL};
		sq_client_close(x->client);
		x->client = NULL;
		sq_config_free(x->cfg);
		x->cfg = NULL;
		optind = 1;
		rc = cmd_stats(x, 1, av);
	}
	if (rc == EX_OK && completed < jobs) {
		fprintf(stderr, "shardq demo: only %ld of %ld jobs completed\n", completed, jobs);
		rc = EX_FAIL;
	}
out:
	free(per_shard);
	free(specs);
	free(res);
	free(keys);
	return rc;
}

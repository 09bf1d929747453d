/* cmd_admin.c - `shardq init`, `stats` and `map`. */
#include "cli.h"
#include "buf.h"
#include "json.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define COMMON_OPTS                               \
	{"config", required_argument, NULL, 'c'}, \
	{                                         \
		"help", no_argument, NULL, 'h'    \
	}

int cmd_init(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {COMMON_OPTS, {NULL, 0, NULL, 0}};
	sq_error err;
	int c, created = 0, rc;
	while ((c = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'h':
			printf("usage: shardq [-c FILE] init\n\n"
			       "Creates or upgrades the shardq schema on every shard and in the "
			       "meta\n"
			       "database. On the first run it plans the partition map with "
			       "weighted\n"
			       "rendezvous hashing over the configured shards. Safe to run again; "
			       "refused\n"
			       "if the cluster was made with another partition count, or a "
			       "database\n"
			       "belongs to another shard. Then makes the history's day "
			       "partitions\n"
			       "ahead, as `shardq maintain` does.\n");
			return EX_OK;
		default: return cli_bad_option("init", c, argv);
		}
	}
	if ((rc = cli_no_args("init", argc, argv, NULL)))
		return rc;
	if ((rc = cli_open(x, "init", 1)))
		return rc;
	if (sq_init(x->client, &created, &err) != SQ_OK)
		return cli_fail("init", &err);
	printf("%s cluster: %d shards, %u partitions, map version %" PRId64 "\n",
	       created ? "created" : "checked", sq_config_shard_count(x->cfg),
	       sq_config_partitions(x->cfg), sq_client_map_version(x->client));
	/* the history's days ahead, so that no worker waits for its first
	 * maintenance pass (which comes at a random time in its first
	 * maintain_interval); a failure leaves the schema made and is said */
	sq_maintain_report rep;
	size_t made = 0;
	sq_status mst = sq_maintain(x->client, NULL, &rep, &err);
	for (int s = 0; s < rep.nshards; s++)
		made += rep.shards[s].ncreated;
	if (mst == SQ_OK)
		printf("history: %zu day partitions made ahead on %d shards\n", made, rep.nshards);
	else
		fprintf(stderr,
			"shardq init: warning: the history's day partitions were not all made "
			"(%s); run `shardq maintain` (the workers' maintenance pass makes them "
			"too)\n",
			err.msg);
	sq_maintain_report_free(&rep);
	return EX_OK;
}

static void fmt_age(char *out, size_t len, int64_t ms)
{
	if (ms < 0)
		snprintf(out, len, "-");
	else if (ms < 10000)
		snprintf(out, len, "%" PRId64 "ms", ms);
	else if (ms < 600000)
		snprintf(out, len, "%" PRId64 "s", ms / 1000);
	else
		snprintf(out, len, "%" PRId64 "m", ms / 60000);
}

static void print_stats_help(void)
{
	printf("usage: shardq [-c FILE] stats [--exact] [--json]\n\n"
	       "Per shard and task type: ready, starting and running jobs, the "
	       "age of the next\n"
	       "due job in claim order, leases expired; per shard: partitions "
	       "owned and moving.\n"
	       "Index-driven by default, at any queue size: ready is exact up to "
	       "10,000 and\n"
	       "PostgreSQL's estimate above (shown with ~); finished jobs are not "
	       "counted (-).\n"
	       "  --exact  count every job, finished ones too (reads every row: "
	       "slow on a big queue)\n"
	       "  --json   one JSON document instead of the table\n"
	       "A shard that cannot be reached is named on stderr (and as "
	       "\"error\" "
	       "in the JSON);\n"
	       "the others are shown, and the exit code is 4.\n");
}

/* The options; 0 to go on, or the exit code with *stop set. */
static int stats_options(cli *x, int argc, char **argv, int *exact, int *stop)
{
	static const struct option opts[] = {COMMON_OPTS,
					     {"json", no_argument, NULL, 'j'},
					     {"exact", no_argument, NULL, 'e'},
					     {NULL, 0, NULL, 0}};
	int c;
	*stop = 1;
	while ((c = getopt_long(argc, argv, ":c:hje", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'j': x->json = 1; break;
		case 'e': *exact = 1; break;
		case 'h': print_stats_help(); return EX_OK;
		default: return cli_bad_option("stats", c, argv);
		}
	}
	*stop = 0;
	return cli_no_args("stats", argc, argv, NULL);
}

/* Shard s's rows as the JSON array of its types. */
static void print_types_json(const sq_stats *st, int s)
{
	int first = 1;
	printf("\"types\":[");
	for (size_t i = 0; i < st->nrows; i++) {
		const sq_stats_row *r = &st->rows[i];
		if (r->shard != s)
			continue;
		printf("%s{\"type\":\"%s\"", first ? "" : ",", r->type);
		for (int k = 0; k < 6; k++)
			printf(",\"%s\":%" PRId64, sq_job_status_name((sq_job_status)k),
			       r->count[k]);
		printf(",\"ready_estimated\":%s,\"oldest_ready_age_ms\":%" PRId64
		       ",\"expired_leases\":%" PRId64 "}",
		       r->ready_estimated ? "true" : "false", r->oldest_ready_age_ms,
		       r->expired_leases);
		first = 0;
	}
	printf("]");
}

static void print_stats_json(const cli *x, const sq_stats *st)
{
	printf("{\"map_version\":%" PRId64 ",\"shards\":[", st->map_version);
	for (int s = 0; s < st->nshards; s++) {
		printf("%s{\"shard\":\"%s\",\"partitions_owned\":%" PRId64
		       ",\"partitions_moving\":%" PRId64 ",",
		       s ? "," : "", sq_config_shard_id(x->cfg, s), st->partitions_owned[s],
		       st->partitions_moving[s]);
		if (st->shard_error && st->shard_error[s]) {
			sq_buf b;
			sq_buf_init(&b);
			sq_json_put_string(&b, st->shard_error[s]);
			printf("\"error\":%s,", b.data ? b.data : "null");
			sq_buf_free(&b);
		}
		if (st->health && !(st->shard_error && st->shard_error[s])) {
			const sq_shard_health *h = &st->health[s];
			printf("\"oldest_transaction_s\":%.3f,\"xmin_age\":%" PRId64
			       ",\"jobs_live_rows\":%" PRId64 ",\"jobs_dead_rows\":%" PRId64
			       ",\"jobs_autovacuums\":%" PRId64 ",\"jobs_vacuum_age_s\":%.3f,",
			       h->oldest_xact_s, h->xmin_age, h->jobs_live_rows, h->jobs_dead_rows,
			       h->jobs_autovacuums, h->jobs_vacuum_age_s);
		}
		print_types_json(st, s);
		printf("}");
	}
	printf("],\"paused\":[");
	for (int i = 0, np = 0; i < sq_config_type_count(x->cfg); i++)
		if (sq_type_paused(x->client, sq_config_type_name(x->cfg, i))) {
			printf("%s", np++ ? "," : "");
			cli_json_str(sq_config_type_name(x->cfg, i));
		}
	printf("]}\n");
}

/* One table row per shard and type; adds the counts into tot (and whether
 * the READY total holds an estimate into *tot_est). */
static void print_stats_rows(const cli *x, const sq_stats *st, int64_t tot[6], int *tot_est)
{
	for (size_t i = 0; i < st->nrows; i++) {
		const sq_stats_row *r = &st->rows[i];
		char age[16], cnt[6][24];
		fmt_age(age, sizeof(age), r->oldest_ready_age_ms);
		for (int k = 0; k < 6; k++) {
			if (r->count[k] < 0)
				snprintf(cnt[k], sizeof(cnt[k]), "-");
			else
				snprintf(cnt[k], sizeof(cnt[k]), "%s%" PRId64,
					 k == 0 && r->ready_estimated ? "~" : "", r->count[k]);
			if (r->count[k] > 0)
				tot[k] += r->count[k];
			if (k == 0 && r->ready_estimated && r->count[k] >= 0)
				*tot_est = 1;
		}
		printf("%-8s %-16s %9s %9s %9s %9s %9s %9s %8s %7" PRId64 "\n",
		       sq_config_shard_id(x->cfg, r->shard), r->type, cnt[0], cnt[1], cnt[2],
		       cnt[3], cnt[4], cnt[5], age, r->expired_leases);
	}
}

/* The partitions each shard owns, and a note on what the counts mean. */
static void print_partitions(const cli *x, const sq_stats *st, int exact)
{
	int np = 0;
	for (int i = 0; i < sq_config_type_count(x->cfg); i++)
		if (sq_type_paused(x->client, sq_config_type_name(x->cfg, i)))
			printf("%s%s", np++ ? ", " : "\npaused (shardq resume TYPE): ",
			       sq_config_type_name(x->cfg, i));
	if (np)
		printf("\n");
	printf("\npartitions (map version %" PRId64 "):", st->map_version);
	for (int s = 0; s < st->nshards; s++) {
		if (st->shard_error && st->shard_error[s]) {
			printf(" %s=down", sq_config_shard_id(x->cfg, s));
			continue;
		}
		printf(" %s=%" PRId64 "%s", sq_config_shard_id(x->cfg, s), st->partitions_owned[s],
		       st->partitions_moving[s] ? " (moving)" : "");
	}
	for (int s = 0; st->health && s < st->nshards; s++) {
		const sq_shard_health *h = &st->health[s];
		if (st->shard_error[s])
			continue;
		printf("\n%s: oldest transaction %.0fs, xmin horizon %" PRId64
		       " transactions old; jobs table %" PRId64 " live / %" PRId64
		       " dead rows, %" PRId64 " autovacuums",
		       sq_config_shard_id(x->cfg, s), h->oldest_xact_s, h->xmin_age,
		       h->jobs_live_rows, h->jobs_dead_rows, h->jobs_autovacuums);
		if (h->jobs_vacuum_age_s >= 0)
			printf(", last vacuum %.0fs ago", h->jobs_vacuum_age_s);
	}
	if (exact)
		printf("\nDONE(h) counts completed jobs kept in history (types with "
		       "history = true).\n");
	else
		printf("\nREADY is exact up to 10,000 per shard and type, PostgreSQL's "
		       "estimate (~) above;\nfinished jobs are counted with --exact.\n");
}

static void print_stats_table(const cli *x, const sq_stats *st, int exact)
{
	int64_t tot[6] = {0};
	int tot_est = 0; /* the READY total holds an estimate */
	char tready[24];
	printf("%-8s %-16s %9s %9s %9s %9s %9s %9s %8s %7s\n", "SHARD", "TYPE", "READY", "STARTING",
	       "RUNNING", "DONE(h)", "FAILED", "CANCELLED", "OLDEST", "EXPIRED");
	print_stats_rows(x, st, tot, &tot_est);
	snprintf(tready, sizeof(tready), "%s%" PRId64, tot_est ? "~" : "", tot[0]);
	if (exact)
		printf("%-8s %-16s %9s %9" PRId64 " %9" PRId64 " %9" PRId64 " %9" PRId64
		       " %9" PRId64 "\n",
		       "total", "", tready, tot[1], tot[2], tot[3], tot[4], tot[5]);
	else
		printf("%-8s %-16s %9s %9" PRId64 " %9" PRId64 "\n", "total", "", tready, tot[1],
		       tot[2]);
	print_partitions(x, st, exact);
}

int cmd_stats(cli *x, int argc, char **argv)
{
	sq_error err;
	sq_stats *st;
	int stop, exact = 0;
	int rc = stats_options(x, argc, argv, &exact, &stop);
	if (stop || rc)
		return rc;
	/* a shard that is down is named, and the others still shown (exit 4) */
	if ((rc = cli_open(x, "stats", SQ_OPEN_ALLOW_DOWN)))
		return rc;
	if ((exact ? sq_stats_get(x->client, &st, &err) : sq_stats_fast(x->client, 0, &st, &err)) !=
	    SQ_OK)
		return cli_fail("stats", &err);
	int down = 0;
	for (int s = 0; st->shard_error && s < st->nshards; s++)
		if (st->shard_error[s]) {
			fprintf(stderr, "shardq stats: %s\n", st->shard_error[s]);
			down++;
		}
	if (x->json)
		print_stats_json(x, st);
	else
		print_stats_table(x, st, exact);
	sq_stats_free(st);
	return down ? EX_CONN : EX_OK;
}

int cmd_map(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS, {"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
	int c, rc;
	while ((c = getopt_long(argc, argv, ":c:hj", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'j': x->json = 1; break;
		case 'h':
			printf("usage: shardq [-c FILE] map [--json]\n\n"
			       "Partitions per shard by the meta database's map, and its "
			       "version.\n");
			return EX_OK;
		default: return cli_bad_option("map", c, argv);
		}
	}
	if ((rc = cli_no_args("map", argc, argv, NULL)))
		return rc;
	if ((rc = cli_open(x, "map", 0)))
		return rc;
	int n = sq_config_shard_count(x->cfg);
	uint32_t parts = sq_config_partitions(x->cfg);
	long *count = calloc((size_t)n, sizeof(long));
	for (uint32_t p = 0; p < parts; p++)
		count[sq_client_shard_of_partition(x->client, p)]++;
	if (x->json) {
		printf("{\"version\":%" PRId64 ",\"partitions\":%u,\"shards\":{",
		       sq_client_map_version(x->client), parts);
		for (int s = 0; s < n; s++)
			printf("%s\"%s\":%ld", s ? "," : "", sq_config_shard_id(x->cfg, s),
			       count[s]);
		printf("}}\n");
	} else {
		printf("map version %" PRId64 ", %u partitions\n", sq_client_map_version(x->client),
		       parts);
		for (int s = 0; s < n; s++)
			printf("  %-12s %6ld  %5.1f%%\n", sq_config_shard_id(x->cfg, s), count[s],
			       100.0 * (double)count[s] / parts);
	}
	free(count);
	return EX_OK;
}

/* pause TYPE / resume TYPE: the fleet's claims leave a type out, or take
 * it again (sq_type_pause). */
static int pause_cmd(cli *x, int argc, char **argv, int paused)
{
	static const struct option opts[] = {COMMON_OPTS, {NULL, 0, NULL, 0}};
	const char *cmd = paused ? "pause" : "resume";
	int c, rc;
	sq_error err;
	while ((c = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'h':
			if (paused)
				printf("usage: shardq [-c FILE] pause TYPE\n\n"
				       "Pauses a task type fleet-wide: every worker's and "
				       "shardqd's "
				       "claims leave it\nout within [connection] map_poll (1s). "
				       "Its "
				       "jobs are still enqueued, and\nthe ones already claimed run "
				       "to "
				       "their end. `shardq resume TYPE` undoes it;\n`shardq stats` "
				       "lists the paused types.\n");
			else
				printf("usage: shardq [-c FILE] resume TYPE\n\n"
				       "Resumes a type paused with `shardq pause`: claims take it "
				       "again within\n[connection] map_poll (1s).\n");
			return EX_OK;
		default: return cli_bad_option(cmd, c, argv);
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "shardq %s: which type? usage: shardq %s TYPE\n", cmd, cmd);
		return EX_USAGE;
	}
	const char *type = argv[optind++];
	if ((rc = cli_no_args(cmd, argc, argv, "one type at a time")))
		return rc;
	if ((rc = cli_open(x, cmd, 0)))
		return rc;
	if (sq_type_pause(x->client, type, paused, &err) != SQ_OK)
		return cli_fail(cmd, &err);
	fprintf(stderr, "shardq %s: type %s is %s; claims %s within map_poll\n", cmd, type,
		paused ? "paused" : "resumed", paused ? "leave it out" : "take it again");
	return EX_OK;
}

int cmd_pause(cli *x, int argc, char **argv)
{
	return pause_cmd(x, argc, argv, 1);
}

int cmd_resume(cli *x, int argc, char **argv)
{
	return pause_cmd(x, argc, argv, 0);
}

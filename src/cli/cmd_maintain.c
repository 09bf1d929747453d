/* cmd_maintain.c - `shardq maintain`: one history maintenance pass on every
 * shard (sq_maintain), for cron or a systemd timer. */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void json_parts(const char *key, const sq_maintain_part *p, size_t n)
{
	printf(",\"%s\":[", key);
	for (size_t i = 0; i < n; i++) {
		printf("%s{\"name\":", i ? "," : "");
		cli_json_str(p[i].name);
		printf(",\"rows\":%" PRId64 "}", p[i].rows);
	}
	putchar(']');
}

static void print_json(const sq_maintain_report *r)
{
	printf("{\"now_us\":%" PRId64 ",\"max_retention_days\":%d,\"shards\":[", r->now_us,
	       r->max_retention_days);
	for (int s = 0; s < r->nshards; s++) {
		const sq_maintain_shard *sh = &r->shards[s];
		printf("%s{\"shard\":", s ? "," : "");
		cli_json_str(sh->shard);
		printf(",\"result\":\"%s\"", sh->skipped  ? "skipped"
					     : sh->status ? "error"
							  : "done");
		if (sh->status) {
			printf(",\"error\":");
			cli_json_str(sh->error);
		}
		json_parts("created", sh->created, sh->ncreated);
		json_parts("dropped", sh->dropped, sh->ndropped);
		printf(",\"default_rows\":%" PRId64 ",\"default_rows_capped\":%s"
		       ",\"default_moved\":%" PRId64 ",\"default_deleted\":%" PRId64
		       ",\"partitions\":%" PRId64 "}",
		       sh->default_rows, sh->default_rows_capped ? "true" : "false",
		       sh->default_moved, sh->default_deleted, sh->partitions);
	}
	printf("]}\n");
}

static void print_names(const char *what, const sq_maintain_part *p, size_t n, int rows_known)
{
	printf("  %s %zu", what, n);
	for (size_t i = 0; i < n; i++) {
		printf("%s%s", i ? ", " : ": ", p[i].name);
		if (rows_known || p[i].rows > 0)
			printf(" (%s%" PRId64 " rows)", rows_known ? "" : "~", p[i].rows);
		else if (!rows_known && p[i].rows < 0)
			printf(" (rows unknown)");
	}
	putchar('\n');
}

static void print_text(const sq_maintain_report *r)
{
	for (int s = 0; s < r->nshards; s++) {
		const sq_maintain_shard *sh = &r->shards[s];
		if (sh->skipped) {
			printf("shard %s: skipped: another runner\n", sh->shard);
			continue;
		}
		printf("shard %s: %s\n", sh->shard, sh->status ? "stopped" : "done");
		if (sh->status)
			printf("  error: %s\n", sh->error);
		print_names("dropped", sh->dropped, sh->ndropped, 0);
		print_names("created", sh->created, sh->ncreated, 0);
		if (!sh->ran)
			continue;
		printf("  day partitions now: %" PRId64 "\n", sh->partitions);
		printf("  default partition: %s%" PRId64 " rows",
		       sh->default_rows_capped ? ">= " : "", sh->default_rows);
		if (sh->default_moved || sh->default_deleted)
			printf(" (%" PRId64 " moved into their day, %" PRId64 " expired deleted)",
			       sh->default_moved, sh->default_deleted);
		if (sh->default_rows)
			printf("; passes were missed: run maintain more often");
		putchar('\n');
	}
}

int cmd_maintain(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
					     {"help", no_argument, NULL, 'h'},
					     {"json", no_argument, NULL, 'j'},
					     {"lock-timeout", required_argument, NULL, 'l'},
					     {NULL, 0, NULL, 0}};
	sq_maintain_opts mo;
	sq_maintain_report rep;
	sq_error err;
	int c, rc;
	sq_maintain_opts_init(&mo);
	while ((c = getopt_long(argc, argv, ":c:hjl:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'j': x->json = 1; break;
		case 'l':
			if ((rc = cli_opt_dur("maintain", "--lock-timeout", optarg, 1, 600000,
					      &mo.lock_timeout_ms)))
				return rc;
			break;
		case 'h':
			printf("usage: shardq [-c FILE] maintain [--lock-timeout DUR] [--json]\n\n"
			       "One pass of history maintenance on every shard: drops the "
			       "partitions of\n"
			       "shardq.jobs_history whose day has ended (history_retention "
			       "of each type),\n"
			       "creates the days ahead, and reports the rows found in the "
			       "default partition\n"
			       "(which should stay 0). One runner per shard at a time: a shard "
			       "another runner\n"
			       "holds is reported \"skipped: another runner\" (exit 0). For cron "
			       "or a timer;\n"
			       "the worker runtime and shardqd also run it every [cluster] "
			       "maintain_interval.\n"
			       "  --lock-timeout DUR  wait at most this for a table lock (1s); "
			       "on a timeout the\n"
			       "                      shard is retried on the next pass (exit "
			       "9)\n"
			       "  --json              one JSON document instead of the text\n");
			return EX_OK;
		default: return cli_bad_option("maintain", c, argv);
		}
	}
	if ((rc = cli_no_args("maintain", argc, argv, NULL)))
		return rc;
	/* no client: a shard that is down must not keep the others from
	 * their pass */
	if ((rc = cli_load_config(x, "maintain")))
		return rc;
	sq_status st = sq_maintain_cfg(x->cfg, &mo, &rep, &err);
	if (rep.nshards) {
		if (x->json)
			print_json(&rep);
		else
			print_text(&rep);
	}
	sq_maintain_report_free(&rep);
	if (st != SQ_OK)
		return cli_fail("maintain", &err);
	return EX_OK;
}

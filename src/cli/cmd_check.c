/* cmd_check.c - `shardq check`: the cluster's consistency check (sq_check),
 * its findings as text or JSON lines, a progress bar on a terminal, and an
 * exit code for cron. */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Findings of one check printed in text before the rest are only counted. */
#define SHOWN_PER_CHECK 20

typedef struct out {
	int json, tty, all;
	int line_open; /* a progress line is on the terminal */
	struct {
		const char *check;
		int64_t n;
	} per[16];
	int nper;
} out;

static int64_t *count_of(out *o, const char *check)
{
	for (int i = 0; i < o->nper; i++)
		if (!strcmp(o->per[i].check, check))
			return &o->per[i].n;
	if (o->nper == 16)
		return &o->per[15].n;
	o->per[o->nper].check = check;
	o->per[o->nper].n = 0;
	return &o->per[o->nper++].n;
}

static void clear_line(out *o)
{
	if (o->line_open)
		fputs("\r\033[K", stderr);
	o->line_open = 0;
}

static void on_finding(const sq_check_finding *f, void *arg)
{
	out *o = arg;
	int64_t *n = count_of(o, f->check);
	if (o->json) {
		printf("{\"check\":\"%s\",\"shard\":", f->check);
		cli_json_str(f->shard);
		printf(",\"partition\":%" PRId64 ",\"repaired\":%s,\"what\":", f->partition,
		       f->repaired ? "true" : "false");
		cli_json_str(f->what);
		printf(",\"todo\":");
		cli_json_str(f->todo);
		printf("}\n");
		return;
	}
	if (++*n > SHOWN_PER_CHECK && !o->all)
		return;
	clear_line(o);
	printf("%s %s: %s\n  -> %s\n", f->repaired ? "REPAIRED" : "FOUND", f->check, f->what,
	       f->todo);
}

static void on_progress(const char *step, int64_t done, int64_t total, void *arg)
{
	out *o = arg;
	if (!o->tty)
		return;
	int width = 30, filled = total > 0 ? (int)(done * width / total) : width;
	fprintf(stderr, "\r\033[Kchecking %-10s [%.*s%*s] %" PRId64 "/%" PRId64, step, filled,
		"##############################", width - filled, "", done, total);
	o->line_open = 1;
}

static void usage(void)
{
	printf("usage: shardq [-c FILE] check [--repair] [--json] [--all] [--progress]\n\n"
	       "Reads the meta database and every shard, changes nothing, and reports where\n"
	       "the cluster breaks its own invariants: each partition owned by exactly one\n"
	       "shard and named so by the map (unless a move in progress explains it), no\n"
	       "marker or move lock left by a move that ended, no job in a partition its\n"
	       "shard does not own, no (type, key) live on two shards, the id sequence past\n"
	       "every job id, every schema at this shardq's version. Each finding names the\n"
	       "shard, the partition and what to do (docs/operations.md, \"Checking the\n"
	       "cluster\"). The jobs tables are read by index only.\n\n"
	       "  --repair    also make the repairs that are provably safe (the map pointed\n"
	       "              at the sole owner, markers of finished or aborted moves\n"
	       "              forgotten, stray copies of the owner's jobs deleted, stale\n"
	       "              move locks dropped, the id sequence raised); says what it left\n"
	       "  --json      one JSON line per finding instead of the text\n"
	       "  --all       print every finding (the text shows %d per check)\n"
	       "  --progress  a progress bar on stderr even when it is not a terminal\n\n"
	       "Exit: 0 nothing found; 8 findings (repaired or not: run it again to see what\n"
	       "is left); 4 the meta database does not answer; 3 the config is invalid.\n",
	       SHOWN_PER_CHECK);
}

static void summary(out *o, const sq_check_summary *s)
{
	clear_line(o);
	if (o->json)
		return;
	for (int i = 0; i < o->nper; i++)
		if (o->per[i].n > SHOWN_PER_CHECK && !o->all)
			printf("%s: %" PRId64 " findings more (--all shows them)\n",
			       o->per[i].check, o->per[i].n - SHOWN_PER_CHECK);
	printf("checked %" PRId64 " partitions: %" PRId64 " findings, %" PRId64
	       " repaired, %" PRId64 " left; %" PRId64 " stray jobs\n",
	       s->partitions_checked, s->findings, s->repaired, s->findings - s->repaired,
	       s->stray_jobs);
}

int cmd_check(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
					     {"help", no_argument, NULL, 'h'},
					     {"json", no_argument, NULL, 'j'},
					     {"repair", no_argument, NULL, 'r'},
					     {"all", no_argument, NULL, 'a'},
					     {"progress", no_argument, NULL, 'p'},
					     {NULL, 0, NULL, 0}};
	sq_check_opts co;
	sq_check_summary sum;
	sq_error err;
	out o;
	int c, rc;
	memset(&o, 0, sizeof(o));
	o.tty = isatty(2);
	sq_check_opts_init(&co);
	while ((c = getopt_long(argc, argv, ":c:hjrap", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'j': o.json = 1; break;
		case 'r': co.repair = 1; break;
		case 'a': o.all = 1; break;
		case 'p': o.tty = 1; break;
		case 'h': usage(); return EX_OK;
		default: return cli_bad_option("check", c, argv);
		}
	}
	if ((rc = cli_no_args("check", argc, argv, NULL)) || (rc = cli_load_config(x, "check")))
		return rc;
	if (sq_client_open(x->cfg, SQ_OPEN_FOR_INIT | SQ_OPEN_ALLOW_DOWN, &x->client, &err))
		return cli_fail("check", &err);
	co.report = on_finding;
	co.progress = on_progress;
	co.arg = &o;
	sq_status st = sq_check(x->client, &co, &sum, &err);
	if (st != SQ_OK) {
		clear_line(&o);
		return cli_fail("check", &err);
	}
	summary(&o, &sum);
	return sum.findings ? EX_STATE : EX_OK;
}

/* main.c - `shardq`: the command line over libshardq; the global options
 * and the dispatch to a command (common.c holds what the commands share). */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	int (*fn)(cli *, int, char **);
	const char *summary;
} commands[] = {
	{"init", cmd_init, "create or upgrade the schema on every shard; plan the partition map"},
	{"enqueue", cmd_enqueue, "add one job, or a batch from a JSON-lines file"},
	{"claim", cmd_claim, "claim jobs of several types from all shards (JSON lines out)"},
	{"start", cmd_start, "starting -> running for claimed jobs"},
	{"heartbeat", cmd_heartbeat, "extend the lease of running jobs"},
	{"complete", cmd_complete, "running -> completed"},
	{"fail", cmd_fail, "running -> ready with backoff, or failed"},
	{"release", cmd_release, "starting -> ready without counting an attempt"},
	{"cancel", cmd_cancel, "cancel live jobs by id, by type and key, or by type and status"},
	{"purge", cmd_purge, "delete a type's finished history older than a duration"},
	{"retry", cmd_retry, "make failed jobs ready again: by id, or every one of a type"},
	{"get", cmd_get, "show one job as JSON"},
	{"jobs", cmd_jobs, "jobs list: find a type's jobs by status or key, a page at a time"},
	{"work", cmd_work, "run a command for each claimed job (the worker runtime)"},
	{"stats", cmd_stats, "per shard, per type, per status counts"},
	{"map", cmd_map, "partitions per shard and the map version"},
	{"move", cmd_move, "move partitions to another shard, online"},
	{"rebalance", cmd_rebalance, "move partitions to match the config's shards and weights"},
	{"moves", cmd_moves, "list moves; resume or abort one"},
	{"check", cmd_check,
	 "check the cluster's invariants; --repair mends what is provably safe"},
	{"maintain", cmd_maintain, "drop expired history partitions; create the days ahead"},
	{"schedules", cmd_schedules, "list the periodic jobs ([schedule]); --run-once runs a pass"},
	{"pause", cmd_pause, "pause a task type fleet-wide: claims leave it out"},
	{"resume", cmd_resume, "resume a paused task type"},
	{"demo", cmd_demo, "enqueue, claim, start and complete N jobs; print the rates"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: shardq [-c FILE] COMMAND [OPTIONS]\n\n"
		   "A job queue spread over many PostgreSQL shards.\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nOptions:\n"
		   "  -c, --config FILE  the config (default: $SHARDQ_CONFIG, else ./shardq.ini)\n"
		   "  -h, --help         this text; `shardq COMMAND --help` for a command\n"
		   "  --version          the version of shardq\n\n"
		   "Exit codes:\n"
		   "  0 ok            1 other failure    2 bad command line  3 invalid config\n"
		   "  4 unreachable   5 invalid input    6 lease lost        7 not found\n"
		   "  8 cluster state 9 database error  10 partition moving or moved\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	cli x;
	int c;
	memset(&x, 0, sizeof(x));
	/* global options stop at the command name */
	while ((c = getopt_long(argc, argv, "+:c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x.config_path = optarg; break;
		case 'h': usage(stdout); return EX_OK;
		case 'V': printf("shardq %s\n", SHARDQ_VERSION); return EX_OK;
		default:
			if (c == ':')
				fprintf(stderr, "shardq: option '%s' needs a value\n",
					argv[optind - 1]);
			else if (optopt)
				fprintf(stderr, "shardq: unknown option '-%c'; see shardq --help\n",
					optopt);
			else
				fprintf(stderr, "shardq: unknown option '%s'; see shardq --help\n",
					argv[optind - 1]);
			return EX_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EX_USAGE;
	}
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(argv[optind], commands[i].name))
			continue;
		int sub_argc = argc - optind;
		char **sub_argv = argv + optind;
		optind = 1; /* reset getopt for the command's own options */
		int rc = commands[i].fn(&x, sub_argc, sub_argv);
		cli_close(&x);
		return rc;
	}
	fprintf(stderr, "shardq: unknown command '%s'; see shardq --help\n", argv[optind]);
	return EX_USAGE;
}

/* main.c - `shardq`: the command line over libshardq. */
#include "cli.h"
#include "config.h"
#include "buf.h"
#include "json.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	{"cancel", cmd_cancel, "cancel live jobs by id, or by type and key"},
	{"get", cmd_get, "show one job as JSON"},
	{"work", cmd_work, "run a command for each claimed job (the worker runtime)"},
	{"stats", cmd_stats, "per shard, per type, per status counts"},
	{"map", cmd_map, "partitions per shard and the map version"},
	{"move", cmd_move, "move partitions to another shard, online"},
	{"rebalance", cmd_rebalance, "move partitions to match the config's shards and weights"},
	{"moves", cmd_moves, "list moves; resume or abort one"},
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
		   "  -h, --help         this text; `shardq COMMAND --help` for a command\n\n"
		   "Exit codes:\n"
		   "  0 ok            1 other failure    2 bad command line  3 invalid config\n"
		   "  4 unreachable   5 invalid input    6 lease lost        7 not found\n"
		   "  8 cluster state 9 database error  10 partition moving or moved\n");
}

int cli_exit_code(sq_status st)
{
	switch (st) {
	case SQ_OK: return EX_OK;
	case SQ_EINVAL: return EX_INPUT;
	case SQ_ECONFIG: return EX_CONFIG;
	case SQ_ECONN: return EX_CONN;
	case SQ_EDB: return EX_DB;
	case SQ_ESTATE: return EX_STATE;
	case SQ_ELOST: return EX_LOST;
	case SQ_EMOVED:
	case SQ_EMOVING: return EX_MOVED;
	case SQ_ENOTFOUND: return EX_NOTFOUND;
	case SQ_ENOMEM: return EX_FAIL;
	}
	return EX_FAIL;
}

int cli_fail(const char *cmd, const sq_error *err)
{
	fprintf(stderr, "shardq %s: %s\n", cmd, err->msg);
	return cli_exit_code(err->code);
}

int cli_load_config(cli *x, const char *cmd)
{
	sq_error err;
	if (!x->config_path) {
		x->config_path = getenv("SHARDQ_CONFIG");
		if (!x->config_path)
			x->config_path = "shardq.ini";
	}
	if (sq_config_load(x->config_path, &x->cfg, &err) != SQ_OK) {
		if (err.code == SQ_ECONFIG)
			fprintf(stderr, "shardq %s: invalid config:\n%s\n", cmd, err.msg);
		else
			fprintf(stderr, "shardq %s: %s\n", cmd, err.msg);
		return EX_CONFIG;
	}
	return EX_OK;
}

int cli_open(cli *x, const char *cmd, int for_init)
{
	sq_error err;
	int rc = cli_load_config(x, cmd);
	if (rc)
		return rc;
	if (sq_client_open(x->cfg, for_init, &x->client, &err) != SQ_OK)
		return cli_fail(cmd, &err);
	return EX_OK;
}

void cli_close(cli *x)
{
	sq_client_close(x->client);
	sq_config_free(x->cfg);
	x->client = NULL;
	x->cfg = NULL;
}

int cli_parse_ref(const char *s, sq_job_ref *ref)
{
	char *end;
	long long id = strtoll(s, &end, 10);
	if (end == s || *end != ':' || id <= 0)
		return -1;
	s = end + 1;
	long att = strtol(s, &end, 10);
	if (end == s || *end || att < 0)
		return -1;
	ref->id = id;
	ref->attempt = (int32_t)att;
	return 0;
}

long cli_read_refs(const char *cmd, int argc, char **argv, sq_job_ref **out)
{
	size_t n = 0, cap = 16;
	sq_job_ref *refs = malloc(cap * sizeof(*refs));
	char line[1 << 16];
	for (int i = 0; i < argc && refs; i++) {
		if (!strcmp(argv[i], "-")) {
			long lineno = 0;
			while (fgets(line, sizeof(line), stdin)) {
				json_error_t je;
				json_t *o;
				lineno++;
				if (strspn(line, " \t\r\n") == strlen(line))
					continue;
				o = json_loads(line, 0, &je);
				json_t *id = o ? json_object_get(o, "id") : NULL;
				json_t *att = o ? json_object_get(o, "attempt") : NULL;
				if (!json_is_integer(id) || !json_is_integer(att)) {
					fprintf(stderr,
						"shardq %s: stdin line %ld: expected a JSON object "
						"with integer "
						"\"id\" and \"attempt\" (as printed by shardq "
						"claim)\n",
						cmd, lineno);
					json_decref(o);
					free(refs);
					return -1;
				}
				if (n == cap)
					refs = realloc(refs, (cap *= 2) * sizeof(*refs));
				refs[n].id = json_integer_value(id);
				refs[n].attempt = (int32_t)json_integer_value(att);
				n++;
				json_decref(o);
			}
			continue;
		}
		if (n == cap)
			refs = realloc(refs, (cap *= 2) * sizeof(*refs));
		if (cli_parse_ref(argv[i], &refs[n])) {
			fprintf(stderr,
				"shardq %s: '%s' is not a job reference; expected ID:ATTEMPT "
				"(as printed by shardq claim), or - for JSON lines on stdin\n",
				cmd, argv[i]);
			free(refs);
			return -1;
		}
		n++;
	}
	if (!refs) {
		fprintf(stderr, "shardq %s: out of memory\n", cmd);
		return -1;
	}
	*out = refs;
	return (long)n;
}

static void iso_time(char *out, size_t len, int64_t us)
{
	time_t t = (time_t)(us / 1000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	size_t k = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + k, len - k, ".%03dZ", (int)((us % 1000000) / 1000));
}

void cli_print_job_json(FILE *f, const sq_job *j, const sq_config *cfg)
{
	sq_buf b;
	char t[40];
	sq_buf_init(&b);
	sq_buf_printf(&b, "{\"id\":%" PRId64 ",\"attempt\":%d,\"tries\":%d,\"type\":", j->id,
		      j->attempt, j->tries);
	sq_json_put_string(&b, j->type);
	sq_buf_puts(&b, ",\"key\":");
	if (j->key)
		sq_json_put_string(&b, j->key);
	else
		sq_buf_puts(&b, "null");
	sq_buf_printf(&b, ",\"status\":\"%s\",\"priority\":%d,\"max_attempts\":%d,\"shard\":",
		      sq_job_status_name(j->status), j->priority, j->max_attempts);
	sq_json_put_string(&b, sq_config_shard_id(cfg, j->shard));
	sq_buf_puts(&b, ",\"worker\":");
	if (j->worker)
		sq_json_put_string(&b, j->worker);
	else
		sq_buf_puts(&b, "null");
	if (j->schedule_time_us) {
		iso_time(t, sizeof(t), j->schedule_time_us);
		sq_buf_printf(&b, ",\"schedule_time\":\"%s\"", t);
	}
	if (j->delay_tolerance_time_us) {
		iso_time(t, sizeof(t), j->delay_tolerance_time_us);
		sq_buf_printf(&b, ",\"delay_tolerance_time\":\"%s\"", t);
	}
	if (j->lease_until_us) {
		iso_time(t, sizeof(t), j->lease_until_us);
		sq_buf_printf(&b, ",\"lease_until\":\"%s\"", t);
	}
	sq_buf_printf(&b, ",\"params\":%s}\n", j->params ? j->params : "{}");
	fputs(b.data, f);
	sq_buf_free(&b);
}

int64_t cli_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	cli x;
	int c;
	memset(&x, 0, sizeof(x));
	/* global options stop at the command name */
	while ((c = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x.config_path = optarg; break;
		case 'h': usage(stdout); return EX_OK;
		default: usage(stderr); return EX_USAGE;
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

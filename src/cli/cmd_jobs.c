/* cmd_jobs.c - `shardq enqueue`, `claim`, the fenced transitions, `cancel`
 * and `get`. */
#include "cli.h"
#include "config.h"
#include "json.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define COMMON_OPTS                               \
	{"config", required_argument, NULL, 'c'}, \
	{                                         \
		"help", no_argument, NULL, 'h'    \
	}

static int parse_int(const char *cmd, const char *what, const char *s, long long lo, long long hi,
		     long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi) {
		fprintf(stderr, "shardq %s: %s '%s' must be an integer in [%lld, %lld]\n", cmd,
			what, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_dur(const char *cmd, const char *what, const char *s, int64_t *out)
{
	int64_t ms = sq_parse_duration_ms(s);
	if (ms < 0) {
		fprintf(stderr,
			"shardq %s: %s '%s' is not a duration; use e.g. 500ms, 30s, 5m, 1h\n", cmd,
			what, s);
		return -1;
	}
	*out = ms;
	return 0;
}

/* ---- enqueue ------------------------------------------------------------ */

typedef struct line_job {
	sq_job_spec spec;
	char *type, *key, *params;
} line_job;

static void line_jobs_free(line_job *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].type);
		free(v[i].key);
		free(v[i].params);
	}
	free(v);
}

/* One JSON-lines job: {"type", "key", "params", "priority", "delay_ms",
 * "run_at_us", "delay_tolerance_ms", "max_attempts"}. Returns an error text
 * or NULL. */
static const char *parse_line(const sq_config *cfg, json_t *o, line_job *lj, char *why, size_t len)
{
	json_t *v;
	const char *k;
	memset(lj, 0, sizeof(*lj));
	if (!json_is_object(o))
		return "expected a JSON object";
	json_object_foreach(o, k, v)
	{
		if (!strcmp(k, "type") && json_is_string(v))
			lj->type = strdup(json_string_value(v));
		else if (!strcmp(k, "key") && json_is_string(v))
			lj->key = strdup(json_string_value(v));
		else if (!strcmp(k, "key") && json_is_null(v))
			;
		else if (!strcmp(k, "params") && json_is_object(v))
			lj->params = json_dumps(v, JSON_COMPACT);
		else if (!strcmp(k, "priority") && json_is_integer(v))
			lj->spec.has_priority = 1,
			lj->spec.priority = (int32_t)json_integer_value(v);
		else if (!strcmp(k, "delay_ms") && json_is_integer(v) && json_integer_value(v) >= 0)
			lj->spec.delay_ms = json_integer_value(v);
		else if (!strcmp(k, "run_at_us") && json_is_integer(v) && json_integer_value(v) > 0)
			lj->spec.run_at_us = json_integer_value(v);
		else if (!strcmp(k, "delay_tolerance_ms") && json_is_integer(v) &&
			 json_integer_value(v) >= 0)
			lj->spec.delay_tolerance_ms = json_integer_value(v) ? json_integer_value(v)
									  : SQ_NO_DELAY_TOLERANCE;
		else if (!strcmp(k, "max_attempts") && json_is_integer(v) &&
			 json_integer_value(v) > 0 && json_integer_value(v) < 1000000)
			lj->spec.max_attempts = (int32_t)json_integer_value(v);
		else {
			snprintf(why, len,
				 "field \"%s\" is unknown or of the wrong kind (known: type, key, "
				 "params "
				 "(object), priority, delay_ms, run_at_us, delay_tolerance_ms, "
				 "max_attempts)",
				 k);
			return why;
		}
	}
	if (!lj->type)
		return "\"type\" (a string) is required";
	if (!sq_config_type(cfg, lj->type)) {
		snprintf(why, len,
			 "unknown task type '%.64s'; add a [type %.64s] section to the config",
			 lj->type, lj->type);
		return why;
	}
	if (lj->key && (strlen(lj->key) > SQ_MAX_KEY_LEN || !*lj->key)) {
		snprintf(why, len, "key must be 1-%d bytes", SQ_MAX_KEY_LEN);
		return why;
	}
	if (lj->params && strlen(lj->params) > SQ_MAX_PARAMS_LEN) {
		snprintf(why, len, "params are larger than %d bytes", SQ_MAX_PARAMS_LEN);
		return why;
	}
	lj->spec.type = lj->type;
	lj->spec.key = lj->key;
	lj->spec.params = lj->params;
	return NULL;
}

/* Reads and checks the whole file before anything is written, so a bad line
 * costs nothing. */
static int read_job_file(cli *x, const char *path, line_job **out, size_t *nout)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	size_t n = 0, cap = 1024;
	line_job *v;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t got;
	long lineno = 0;
	if (!f) {
		fprintf(stderr, "shardq enqueue: cannot open %s: %s\n", path, strerror(errno));
		return EX_INPUT;
	}
	v = malloc(cap * sizeof(*v));
	while (v && (got = getline(&line, &lcap, f)) >= 0) {
		json_error_t je;
		char why[512];
		const char *bad;
		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)got)
			continue;
		json_t *o = json_loadb(line, (size_t)got, JSON_REJECT_DUPLICATES, &je);
		if (!o) {
			fprintf(stderr,
				"shardq enqueue: %s:%ld: invalid JSON: %s (column %d); nothing was "
				"enqueued\n",
				path, lineno, je.text, je.column);
			goto fail;
		}
		if (n == cap)
			v = realloc(v, (cap *= 2) * sizeof(*v));
		bad = parse_line(x->cfg, o, &v[n], why, sizeof(why));
		json_decref(o);
		n++;
		if (bad) {
			fprintf(stderr, "shardq enqueue: %s:%ld: %s; nothing was enqueued\n", path,
				lineno, bad);
			goto fail;
		}
	}
	free(line);
	if (f != stdin)
		fclose(f);
	*out = v;
	*nout = n;
	return EX_OK;
fail:
	free(line);
	if (f != stdin)
		fclose(f);
	line_jobs_free(v, n);
	return EX_INPUT;
}

int cmd_enqueue(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"key", required_argument, NULL, 'k'},
		{"params", required_argument, NULL, 'p'},
		{"priority", required_argument, NULL, 'P'},
		{"delay", required_argument, NULL, 'd'},
		{"tolerance", required_argument, NULL, 'T'},
		{"max-attempts", required_argument, NULL, 'm'},
		{"file", required_argument, NULL, 'f'},
		{"batch", required_argument, NULL, 'b'},
		{"quiet", no_argument, NULL, 'q'},
		{NULL, 0, NULL, 0},
	};
	sq_job_spec one;
	const char *file = NULL;
	long long batch = 1000, v;
	int c, rc, quiet = 0;
	memset(&one, 0, sizeof(one));
	while ((c = getopt_long(argc, argv, "c:ht:k:p:P:d:T:m:f:b:q", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': one.type = optarg; break;
		case 'k': one.key = optarg; break;
		case 'p': one.params = optarg; break;
		case 'P':
			if (parse_int("enqueue", "--priority", optarg, -1000000, 1000000, &v))
				return EX_USAGE;
			one.has_priority = 1, one.priority = (int32_t)v;
			break;
		case 'd':
			if (parse_dur("enqueue", "--delay", optarg, &one.delay_ms))
				return EX_USAGE;
			break;
		case 'T':
			if (parse_dur("enqueue", "--tolerance", optarg, &one.delay_tolerance_ms))
				return EX_USAGE;
			if (one.delay_tolerance_ms == 0)
				one.delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE; /* explicit 0: none */
			break;
		case 'm':
			if (parse_int("enqueue", "--max-attempts", optarg, 1, 1000000, &v))
				return EX_USAGE;
			one.max_attempts = (int32_t)v;
			break;
		case 'f': file = optarg; break;
		case 'b':
			if (parse_int("enqueue", "--batch", optarg, 1, 100000, &batch))
				return EX_USAGE;
			break;
		case 'q': quiet = 1; break;
		case 'h':
			printf("usage: shardq [-c FILE] enqueue --type T [--key K] [--params "
			       "JSON]\n"
			       "                [--priority N] [--delay D] [--tolerance D] "
			       "[--max-attempts N]\n"
			       "       shardq [-c FILE] enqueue --file F [--batch N] [--quiet]\n\n"
			       "Adds one job, or every job of F (one JSON object per line; - for "
			       "stdin):\n"
			       "  "
			       "{\"type\":\"email\",\"key\":\"user:42\",\"params\":{...},"
			       "\"priority\":"
			       "0,\n"
			       "   "
			       "\"delay_ms\":0,\"run_at_us\":0,\"delay_tolerance_ms\":1000,\"max_"
			       "attempts\":5}\n"
			       "The whole file is checked before anything is written; a bad line "
			       "is\n"
			       "reported with its number and nothing is enqueued. Jobs go in "
			       "batches "
			       "of N\n"
			       "(default 1000): one statement per shard per batch, all shards at "
			       "once.\n"
			       "Prints one JSON line per job: "
			       "{\"id\":...,\"outcome\":...,\"shard\":...}\n"
			       "(outcomes: inserted, duplicate, replaced, merged, rerun).\n"
			       "Durations: 500ms, 30s, 5m, 1h.\n");
			return EX_OK;
		default: return EX_USAGE;
		}
	}
	if (!file && !one.type) {
		fprintf(stderr,
			"shardq enqueue: give --type (one job) or --file (a batch); see --help\n");
		return EX_USAGE;
	}
	if (file && one.type) {
		fprintf(stderr, "shardq enqueue: --file and --type cannot be combined\n");
		return EX_USAGE;
	}
	if ((rc = cli_open(x, "enqueue", 0)))
		return rc;
	line_job *jobs = NULL;
	size_t n = 1;
	if (file && (rc = read_job_file(x, file, &jobs, &n)))
		return rc;
	sq_job_spec *specs = malloc(sizeof(*specs) * (n ? n : 1));
	sq_enqueue_result *res = malloc(sizeof(*res) * (n ? n : 1));
	size_t done = 0;
	for (size_t i = 0; i < n; i++)
		specs[i] = file ? jobs[i].spec : one;
	rc = EX_OK;
	while (done < n) {
		size_t k = n - done < (size_t)batch ? n - done : (size_t)batch;
		sq_error err;
		if (sq_enqueue(x->client, specs + done, k, res + done, &err) != SQ_OK) {
			rc = cli_fail("enqueue", &err);
			fprintf(stderr,
				"shardq enqueue: %zu of %zu jobs were enqueued before the "
				"error%s\n",
				done, n, file ? " (lines before that batch)" : "");
			break;
		}
		for (size_t i = done; !quiet && i < done + k; i++)
			printf("{\"id\":%" PRId64 ",\"outcome\":\"%s\",\"shard\":\"%s\"}\n",
			       res[i].id, sq_enqueue_outcome_name(res[i].outcome),
			       sq_config_shard_id(x->cfg, res[i].shard));
		done += k;
	}
	if (quiet && rc == EX_OK)
		fprintf(stderr, "enqueued %zu jobs\n", n);
	free(specs);
	free(res);
	line_jobs_free(jobs, file ? n : 0);
	return rc;
}

/* ---- claim -------------------------------------------------------------- */

int cmd_claim(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"types", required_argument, NULL, 't'},
		{"worker", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	const char *types = NULL, *worker = NULL;
	sq_claim_req reqs[SQ_MAX_TYPES];
	char *names = NULL;
	size_t nreqs = 0;
	int c, rc;
	while ((c = getopt_long(argc, argv, "c:ht:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': types = optarg; break;
		case 'w': worker = optarg; break;
		case 'h':
			printf("usage: shardq [-c FILE] claim --types TYPE:LIMIT[,TYPE:LIMIT...] "
			       "--worker W\n\n"
			       "Claims due ready jobs (and jobs whose lease expired) of each type, "
			       "up to\n"
			       "its limit, from all shards at once, one statement per shard. They "
			       "become\n"
			       "'starting' with the type's starting lease. Prints one JSON line "
			       "per job,\n"
			       "ordered by priority, then delay tolerance. Pass the output to\n"
			       "`shardq start --worker W -` to start them.\n");
			return EX_OK;
		default: return EX_USAGE;
		}
	}
	if (!types || !worker) {
		fprintf(stderr, "shardq claim: --types and --worker are required; see --help\n");
		return EX_USAGE;
	}
	names = strdup(types);
	for (char *save = NULL, *tok = strtok_r(names, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');
		long long lim;
		if (!colon || nreqs == SQ_MAX_TYPES) {
			fprintf(stderr, "shardq claim: '%s' must be TYPE:LIMIT, e.g. email:10\n",
				tok);
			free(names);
			return EX_USAGE;
		}
		*colon = '\0';
		if (parse_int("claim", "limit", colon + 1, 0, 100000, &lim)) {
			free(names);
			return EX_USAGE;
		}
		reqs[nreqs].type = tok;
		reqs[nreqs].limit = (int32_t)lim;
		reqs[nreqs].start = 0;
		nreqs++;
	}
	if ((rc = cli_open(x, "claim", 0))) {
		free(names);
		return rc;
	}
	sq_job *jobs;
	size_t n;
	sq_error err;
	sq_status st = sq_claim(x->client, worker, reqs, nreqs, &jobs, &n, &err);
	for (size_t i = 0; i < n; i++)
		cli_print_job_json(stdout, &jobs[i], x->cfg);
	sq_jobs_free(jobs, n);
	free(names);
	return st == SQ_OK ? EX_OK : cli_fail("claim", &err);
}

/* ---- fenced transitions --------------------------------------------------- */

typedef sq_status (*fenced_fn)(sq_client *, const char *, const sq_job_ref *, size_t, sq_status *,
			       sq_error *);

static int fenced_cmd(cli *x, const char *cmd, fenced_fn fn, int is_fail, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"worker", required_argument, NULL, 'w'},
		{"error", required_argument, NULL, 'e'},
		{"permanent", no_argument, NULL, 'p'},
		{NULL, 0, NULL, 0},
	};
	const char *worker = NULL, *error = NULL;
	int c, rc, permanent = 0;
	while ((c = getopt_long(argc, argv, "c:hw:e:p", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'w': worker = optarg; break;
		case 'e': error = optarg; break;
		case 'p': permanent = 1; break;
		case 'h':
			printf("usage: shardq [-c FILE] %s --worker W%s ID:ATTEMPT... | -\n\n", cmd,
			       is_fail ? " [--error TEXT] [--permanent]" : "");
			printf("Fenced by (id, attempt, worker): a job whose row no longer matches "
			       "is\n"
			       "reported 'lost' and left alone (exit code 6). Jobs are named "
			       "ID:ATTEMPT, or\n"
			       "read as JSON lines (as printed by shardq claim) from stdin with "
			       "'-'.\n");
			if (is_fail)
				printf("A failed job is retried with its type's backoff while "
				       "attempts remain,\n"
				       "else it is marked failed; --permanent fails it at once.\n");
			return EX_OK;
		default: return EX_USAGE;
		}
	}
	if (!worker || optind >= argc) {
		fprintf(stderr,
			"shardq %s: --worker and at least one ID:ATTEMPT are required; see "
			"--help\n",
			cmd);
		return EX_USAGE;
	}
	if (!is_fail && (error || permanent)) {
		fprintf(stderr, "shardq %s: --error and --permanent are for 'fail' only\n", cmd);
		return EX_USAGE;
	}
	sq_job_ref *refs;
	long n = cli_read_refs(cmd, argc - optind, argv + optind, &refs);
	if (n < 0)
		return EX_INPUT;
	if ((rc = cli_open(x, cmd, 0))) {
		free(refs);
		return rc;
	}
	sq_status *out = calloc((size_t)n + 1, sizeof(*out));
	sq_error err;
	sq_status st;
	if (is_fail) {
		sq_fail_req *fr = calloc((size_t)n + 1, sizeof(*fr));
		for (long i = 0; i < n; i++)
			fr[i].ref = refs[i], fr[i].error = error, fr[i].permanent = permanent;
		st = sq_fail(x->client, worker, fr, (size_t)n, out, &err);
		free(fr);
	} else {
		st = fn(x->client, worker, refs, (size_t)n, out, &err);
	}
	rc = st == SQ_OK ? EX_OK : cli_fail(cmd, &err);
	for (long i = 0; st == SQ_OK && i < n; i++) {
		printf("%" PRId64 ":%d %s\n", refs[i].id, refs[i].attempt, sq_status_name(out[i]));
		if (out[i] != SQ_OK && rc == EX_OK)
			rc = cli_exit_code(out[i]);
	}
	free(out);
	free(refs);
	return rc;
}

int cmd_start(cli *x, int argc, char **argv)
{
	return fenced_cmd(x, "start", sq_start, 0, argc, argv);
}
int cmd_heartbeat(cli *x, int argc, char **argv)
{
	return fenced_cmd(x, "heartbeat", sq_heartbeat, 0, argc, argv);
}
int cmd_complete(cli *x, int argc, char **argv)
{
	return fenced_cmd(x, "complete", sq_complete, 0, argc, argv);
}
int cmd_release(cli *x, int argc, char **argv)
{
	return fenced_cmd(x, "release", sq_release, 0, argc, argv);
}
int cmd_fail(cli *x, int argc, char **argv)
{
	return fenced_cmd(x, "fail", NULL, 1, argc, argv);
}

/* ---- cancel, get ---------------------------------------------------------- */

int cmd_cancel(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"key", required_argument, NULL, 'k'},
		{NULL, 0, NULL, 0},
	};
	const char *type = NULL, *key = NULL;
	int c, rc;
	while ((c = getopt_long(argc, argv, "c:ht:k:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': type = optarg; break;
		case 'k': key = optarg; break;
		case 'h':
			printf("usage: shardq [-c FILE] cancel ID...\n"
			       "       shardq [-c FILE] cancel --type T --key K\n\n"
			       "Cancels live (ready, starting or running) jobs. A running job's "
			       "worker\n"
			       "then gets 'lost' when it completes. Exit 7 if a job was not "
			       "live.\n");
			return EX_OK;
		default: return EX_USAGE;
		}
	}
	if (!!type != !!key || (type && optind < argc) || (!type && optind >= argc)) {
		fprintf(stderr, "shardq cancel: give job ids, or --type and --key; see --help\n");
		return EX_USAGE;
	}
	size_t n = (size_t)(argc - optind);
	int64_t *ids = calloc(n + 1, sizeof(*ids));
	for (size_t i = 0; i < n; i++) {
		long long v;
		if (parse_int("cancel", "job id", argv[optind + (int)i], 1, INT64_MAX, &v)) {
			free(ids);
			return EX_USAGE;
		}
		ids[i] = v;
	}
	if ((rc = cli_open(x, "cancel", 0))) {
		free(ids);
		return rc;
	}
	sq_error err;
	if (type) {
		int64_t id;
		sq_status st = sq_cancel_key(x->client, type, key, &id, &err);
		free(ids);
		if (st != SQ_OK)
			return cli_fail("cancel", &err);
		printf("%" PRId64 " cancelled\n", id);
		return EX_OK;
	}
	sq_status *out = calloc(n, sizeof(*out));
	sq_status st = sq_cancel(x->client, ids, n, out, &err);
	rc = st == SQ_OK ? EX_OK : cli_fail("cancel", &err);
	for (size_t i = 0; st == SQ_OK && i < n; i++) {
		printf("%" PRId64 " %s\n", ids[i], out[i] == SQ_OK ? "cancelled" : "not live");
		if (out[i] != SQ_OK)
			rc = EX_NOTFOUND;
	}
	free(out);
	free(ids);
	return rc;
}

int cmd_get(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {COMMON_OPTS, {NULL, 0, NULL, 0}};
	int c, rc;
	long long id;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'h':
			printf("usage: shardq [-c FILE] get ID\n\nPrints the job as one JSON "
			       "line.\n");
			return EX_OK;
		default: return EX_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "shardq get: give exactly one job id\n");
		return EX_USAGE;
	}
	if (parse_int("get", "job id", argv[optind], 1, INT64_MAX, &id))
		return EX_USAGE;
	if ((rc = cli_open(x, "get", 0)))
		return rc;
	sq_job j;
	sq_error err;
	if (sq_get_job(x->client, id, &j, &err) != SQ_OK)
		return cli_fail("get", &err);
	cli_print_job_json(stdout, &j, x->cfg);
	sq_job_clear(&j);
	return EX_OK;
}

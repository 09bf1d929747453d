/* cmd_jobs.c - `shardq enqueue`, `claim`, the fenced transitions, `cancel`
 * and `get`. */
#include "buf.h"
#include "cli.h"
#include "json.h"
#include "parse.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define COMMON_OPTS                               \
	{"config", required_argument, NULL, 'c'}, \
	{                                         \
		"help", no_argument, NULL, 'h'    \
	}

/* ---- enqueue ------------------------------------------------------------ */

/* Reads and checks the whole file before anything is sent, so a bad line
 * costs nothing. */
static int read_job_file(cli *x, const char *path, line_job **out, size_t *nout)
{
	int is_stdin = !strcmp(path, "-");
	const char *name = is_stdin ? "stdin" : path;
	FILE *f = is_stdin ? stdin : fopen(path, "r");
	struct stat sb;
	size_t n = 0, cap = 1024, lcap = 0;
	line_job *v = NULL;
	char *line = NULL;
	ssize_t got;
	long lineno = 0;
	int rc = EX_INPUT;
	if (!f) {
		fprintf(stderr, "shardq enqueue: cannot open %s: %s\n", path, strerror(errno));
		return EX_INPUT;
	}
	if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "shardq enqueue: %s is a directory, not a file of jobs\n", path);
		goto out;
	}
	if (!(v = calloc(cap, sizeof(*v))))
		goto oom;
	while ((got = getline(&line, &lcap, f)) >= 0) {
		char why[1200];
		const char *bad;
		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)got)
			continue;
		if (n == cap) {
			line_job *w = realloc(v, (cap *= 2) * sizeof(*v));
			if (!w)
				goto oom;
			v = w;
		}
		memset(&v[n], 0, sizeof(v[n]));
		v[n].line = lineno;
		bad = cli_parse_job_line(x->cfg, line, (size_t)got, &v[n], why, sizeof(why));
		n++;
		if (bad) {
			fprintf(stderr, "shardq enqueue: %s:%ld: %s; nothing was enqueued\n", name,
				lineno, bad);
			goto out;
		}
	}
	if (ferror(f)) {
		fprintf(stderr, "shardq enqueue: cannot read %s: %s; nothing was enqueued\n", name,
			strerror(errno));
		goto out;
	}
	*out = v;
	*nout = n;
	v = NULL;
	n = 0;
	rc = EX_OK;
	goto out;
oom:
	fprintf(stderr, "shardq enqueue: out of memory reading %s; nothing was enqueued\n", name);
	rc = EX_FAIL;
out:
	free(line);
	if (!is_stdin)
		fclose(f);
	cli_line_jobs_free(v, n);
	return rc;
}

static void print_result(const cli *x, const sq_enqueue_result *r, long line)
{
	if (r->id > 0)
		printf("{\"id\":%" PRId64 ",\"outcome\":\"%s\",\"shard\":\"%s\"", r->id,
		       sq_enqueue_outcome_name(r->outcome), sq_config_shard_id(x->cfg, r->shard));
	else
		printf("{\"outcome\":\"%s\"", sq_enqueue_outcome_name(r->outcome));
	if (line)
		printf(",\"line\":%ld", line);
	printf("}\n");
}

/* Appends "3-7, 9" for the lines of the jobs with outcome o not written. */
static size_t line_list(sq_buf *b, const line_job *jobs, const sq_enqueue_result *res, size_t n,
			sq_enqueue_outcome o)
{
	size_t count = 0, shown = 0;
#define MATCH(i) (res[i].id <= 0 && res[i].outcome == o)
	for (size_t i = 0; i < n; i++) {
		size_t j = i;
		if (!MATCH(i))
			continue;
		while (j + 1 < n && MATCH(j + 1) && jobs[j + 1].line == jobs[j].line + 1)
			j++;
		count += j - i + 1;
		if (shown++ < 20)
			sq_buf_printf(b, "%s%ld", shown > 1 ? ", " : "", jobs[i].line);
		if (shown <= 20 && j > i)
			sq_buf_printf(b, "-%ld", jobs[j].line);
		if (shown == 21)
			sq_buf_puts(b, ", ... (stdout lists each)");
		i = j;
	}
#undef MATCH
	return count;
}

/* After a failed batch: one line that says, beside the error, exactly which
 * jobs were written and which were not, so they can be sent again. */
static void report_failure(const sq_error *err, const line_job *jobs, const sq_enqueue_result *res,
			   size_t n)
{
	sq_buf b, nw, unk;
	size_t written = 0, n_nw, n_unk;
	sq_buf_init(&b);
	sq_buf_init(&nw);
	sq_buf_init(&unk);
	for (size_t i = 0; i < n; i++)
		written += res[i].id > 0;
	sq_buf_printf(&b, "shardq enqueue: %s; ", err->msg);
	if (!jobs) {
		sq_buf_puts(&b, res[0].id > 0 ? "the job was written"
				: res[0].outcome == SQ_ENQ_UNKNOWN
					? "whether the job was written is not known (its shard's "
					  "connection broke at the commit)"
					: "the job was not written; enqueue it again");
	} else {
		n_nw = line_list(&nw, jobs, res, n, SQ_ENQ_NOT_WRITTEN);
		n_unk = line_list(&unk, jobs, res, n, SQ_ENQ_UNKNOWN);
		sq_buf_printf(&b, "%zu of %zu jobs were written", written, n);
		if (n_nw)
			sq_buf_printf(&b, "; %zu were not (lines %s): enqueue those again", n_nw,
				      nw.data);
		if (n_unk)
			sq_buf_printf(&b,
				      "; for %zu it is not known (lines %s: their shard's "
				      "connection broke at the commit)",
				      n_unk, unk.data);
	}
	fprintf(stderr, "%s\n", b.data ? b.data : "shardq enqueue: out of memory");
	sq_buf_free(&b);
	sq_buf_free(&nw);
	sq_buf_free(&unk);
}

static int send_jobs(cli *x, const sq_job_spec *specs, const line_job *jobs, size_t n, size_t batch,
		     int quiet)
{
	sq_enqueue_result *res = malloc(sizeof(*res) * n);
	sq_error err;
	size_t done = 0;
	int rc = EX_OK;
	if (!res) {
		fprintf(stderr, "shardq enqueue: out of memory\n");
		return EX_FAIL;
	}
	while (done < n) {
		size_t k = n - done < batch ? n - done : batch;
		sq_status st = sq_enqueue(x->client, specs + done, k, res + done, &err);
		if (st != SQ_OK) {
			for (size_t i = st == SQ_EINVAL ? done : done + k; i < n; i++)
				res[i].id = -1, res[i].outcome = SQ_ENQ_NOT_WRITTEN;
			for (size_t i = done; !quiet && i < n; i++)
				print_result(x, &res[i], jobs ? jobs[i].line : 0);
			fflush(stdout);
			report_failure(&err, jobs, res, n);
			rc = cli_exit_code(err.code);
			break;
		}
		for (size_t i = done; !quiet && i < done + k; i++)
			print_result(x, &res[i], jobs ? jobs[i].line : 0);
		done += k;
	}
	if (quiet && rc == EX_OK)
		fprintf(stderr, "enqueued %zu jobs\n", n);
	free(res);
	return rc;
}

static void print_enqueue_help(void)
{
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
	       "The whole file is checked before anything is sent; a bad line is\n"
	       "reported with its number and nothing is enqueued. Jobs go in "
	       "batches of N\n"
	       "(default 1000): one statement per shard per batch, all shards at "
	       "once.\n"
	       "Prints one JSON line per job: "
	       "{\"id\":...,\"outcome\":...,\"shard\":...} (with \"line\" for "
	       "--file)\n"
	       "(outcomes: inserted, duplicate, replaced, merged, rerun). If a "
	       "shard fails,\n"
	       "the jobs not written are printed as {\"outcome\":\"not_written\"} "
	       "(or \"unknown\")\n"
	       "and named by line on stderr: send exactly those again.\n"
	       "Durations: 500ms, 30s, 5m, 1h, 2d; --tolerance 0: none.\n");
}

/* What `shardq enqueue` was asked to send: one job, or a file's. */
typedef struct enqueue_args {
	sq_job_spec one;
	const char *file;
	int64_t batch; /* 0: the default */
	int quiet;
	int single; /* an option of the one job was given */
} enqueue_args;

/* An option of the one job: the spec's fields, checked for range. */
static int job_option(enqueue_args *a, int c)
{
	int64_t v = 0;
	int rc = 0;
	switch (c) {
	case 't': a->one.type = optarg; break;
	case 'k': a->one.key = optarg; break;
	case 'p': a->one.params = optarg; break;
	case 'P':
		rc = cli_opt_int("enqueue", "--priority", optarg, SQ_MIN_PRIORITY, SQ_MAX_PRIORITY,
				 &v);
		a->one.has_priority = 1, a->one.priority = (int32_t)v;
		break;
	case 'd':
		rc = cli_opt_dur("enqueue", "--delay", optarg, 0, SQ_MAX_DELAY_MS,
				 &a->one.delay_ms);
		break;
	case 'T':
		rc = cli_opt_dur("enqueue", "--tolerance", optarg, 0, SQ_MAX_DELAY_TOLERANCE_MS,
				 &a->one.delay_tolerance_ms);
		if (!rc && a->one.delay_tolerance_ms == 0)
			a->one.delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE; /* explicit 0: none */
		break;
	case 'm':
		rc = cli_opt_int("enqueue", "--max-attempts", optarg, 1, SQ_MAX_ATTEMPTS, &v);
		a->one.max_attempts = (int32_t)v;
		break;
	}
	return rc;
}

/* The options; 0 to go on, or the exit code with *stop set. */
static int enqueue_options(cli *x, enqueue_args *a, int argc, char **argv, int *stop)
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
	int c, rc;
	*stop = 1;
	while ((c = getopt_long(argc, argv, ":c:ht:k:p:P:d:T:m:f:b:q", opts, NULL)) != -1) {
		rc = 0;
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't':
		case 'k':
		case 'p':
		case 'P':
		case 'd':
		case 'T':
		case 'm':
			a->single = 1;
			rc = job_option(a, c);
			break;
		case 'f': a->file = optarg; break;
		case 'b':
			rc = cli_opt_int("enqueue", "--batch", optarg, 1, 100000, &a->batch);
			break;
		case 'q': a->quiet = 1; break;
		case 'h': print_enqueue_help(); return EX_OK;
		default: return cli_bad_option("enqueue", c, argv);
		}
		if (rc)
			return rc;
	}
	*stop = 0;
	return cli_no_args("enqueue", argc, argv,
			   "params go in --params '{...}', jobs of a file in --file F");
}

/* One job or a file, and --batch only with a file. */
static int check_enqueue_args(const enqueue_args *a)
{
	if (!a->file && !a->one.type) {
		fprintf(stderr,
			"shardq enqueue: give --type (one job) or --file (a batch); see --help\n");
		return EX_USAGE;
	}
	if (a->file && a->single) {
		fprintf(stderr, "shardq enqueue: --file takes every setting from its lines; "
				"--type, --key, --params, --priority, --delay, --tolerance and "
				"--max-attempts are for one job\n");
		return EX_USAGE;
	}
	if (!a->file && a->batch) {
		fprintf(stderr, "shardq enqueue: --batch is for --file\n");
		return EX_USAGE;
	}
	return 0;
}

/* Every job of the file, read and checked before the first is sent. */
static int enqueue_file(cli *x, const enqueue_args *a)
{
	line_job *jobs = NULL;
	size_t n = 0;
	int rc = read_job_file(x, a->file, &jobs, &n);
	if (rc)
		return rc;
	sq_job_spec *specs = malloc(sizeof(*specs) * (n ? n : 1));
	if (!specs) {
		cli_line_jobs_free(jobs, n);
		fprintf(stderr, "shardq enqueue: out of memory\n");
		return EX_FAIL;
	}
	for (size_t i = 0; i < n; i++)
		specs[i] = jobs[i].spec;
	rc = n ? cli_connect(x, "enqueue", SQ_OPEN_ALLOW_DOWN) : EX_OK;
	if (n && !rc)
		rc = send_jobs(x, specs, jobs, n, a->batch ? (size_t)a->batch : 1000, a->quiet);
	free(specs);
	cli_line_jobs_free(jobs, n);
	return rc;
}

/* The one job of the options, checked before connecting. */
static int enqueue_one(cli *x, const enqueue_args *a)
{
	sq_error err;
	int rc;
	if (sq_job_spec_check(x->cfg, &a->one, &err) != SQ_OK)
		return cli_fail("enqueue", &err);
	if ((rc = cli_connect(x, "enqueue", SQ_OPEN_ALLOW_DOWN)))
		return rc;
	return send_jobs(x, &a->one, NULL, 1, 1000, a->quiet);
}

int cmd_enqueue(cli *x, int argc, char **argv)
{
	enqueue_args a;
	int stop, rc;
	memset(&a, 0, sizeof(a));
	rc = enqueue_options(x, &a, argc, argv, &stop);
	if (stop || rc)
		return rc;
	if ((rc = check_enqueue_args(&a)))
		return rc;
	if ((rc = cli_load_config(x, "enqueue")))
		return rc;
	return a.file ? enqueue_file(x, &a) : enqueue_one(x, &a);
}

/* ---- claim -------------------------------------------------------------- */

static void print_claim_help(void)
{
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
}

/* --types TYPE:LIMIT,...: one request per type, each type named once. The
 * requests point into names (the option's copy, cut up here). */
static int parse_claim_types(char *names, sq_claim_req *reqs, size_t *nreqs)
{
	int rc;
	for (char *save = NULL, *tok = strtok_r(names, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');
		int64_t lim;
		if (!colon || colon == tok || *nreqs == SQ_MAX_TYPES) {
			fprintf(stderr,
				"shardq claim: '%s' must be TYPE:LIMIT, e.g. email:10 (at most %d "
				"types)\n",
				tok, SQ_MAX_TYPES);
			return EX_USAGE;
		}
		*colon = '\0';
		if ((rc = cli_opt_int("claim", "the limit", colon + 1, 1, 100000, &lim)))
			return rc;
		for (size_t k = 0; k < *nreqs; k++)
			if (!strcmp(reqs[k].type, tok)) {
				fprintf(stderr,
					"shardq claim: type '%s' is named twice in --types; name "
					"each "
					"type once, with the limit you want\n",
					tok);
				return EX_USAGE;
			}
		reqs[*nreqs] = (sq_claim_req){.type = tok, .limit = (int32_t)lim, .start = 0};
		(*nreqs)++;
	}
	return 0;
}

/* Claims and prints the jobs (those claimed before a shard failed too). */
static int claim_and_print(cli *x, const char *worker, const sq_claim_req *reqs, size_t nreqs)
{
	sq_job *jobs;
	size_t n;
	sq_error err;
	sq_status st = sq_claim(x->client, worker, reqs, nreqs, &jobs, &n, &err);
	for (size_t i = 0; i < n; i++)
		cli_print_job_json(stdout, &jobs[i], x->cfg);
	sq_jobs_free(jobs, n);
	return st == SQ_OK ? EX_OK : cli_fail("claim", &err);
}

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
	while ((c = getopt_long(argc, argv, ":c:ht:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': types = optarg; break;
		case 'w': worker = optarg; break;
		case 'h': print_claim_help(); return EX_OK;
		default: return cli_bad_option("claim", c, argv);
		}
	}
	if ((rc = cli_no_args("claim", argc, argv, NULL)))
		return rc;
	if (!types || !worker) {
		fprintf(stderr, "shardq claim: --types and --worker are required; see --help\n");
		return EX_USAGE;
	}
	if ((rc = cli_check_text("claim", "--worker", worker, 200)))
		return rc;
	if (!(names = strdup(types))) {
		fprintf(stderr, "shardq claim: out of memory\n");
		return EX_FAIL;
	}
	if ((rc = parse_claim_types(names, reqs, &nreqs)) == 0 && !nreqs) {
		fprintf(stderr, "shardq claim: --types '%s' names no TYPE:LIMIT\n", types);
		rc = EX_USAGE;
	}
	if (!rc)
		rc = cli_open(x, "claim", SQ_OPEN_ALLOW_DOWN);
	if (!rc)
		rc = claim_and_print(x, worker, reqs, nreqs);
	free(names);
	return rc;
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
	while ((c = getopt_long(argc, argv, ":c:hw:e:p", opts, NULL)) != -1) {
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
		default: return cli_bad_option(cmd, c, argv);
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
	if ((rc = cli_check_text(cmd, "--worker", worker, 200)) ||
	    (error && (rc = cli_check_text(cmd, "--error", error, SQ_MAX_PARAMS_LEN))))
		return rc;
	sq_job_ref *refs;
	long n = cli_read_refs(cmd, argc - optind, argv + optind, &refs, &rc);
	if (n < 0)
		return rc;
	if ((rc = cli_open(x, cmd, SQ_OPEN_ALLOW_DOWN))) {
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

static int parse_id(const char *cmd, const char *s, int64_t *id)
{
	int e = cli_int(s, strlen(s), 1, INT64_MAX, id);
	if (e)
		fprintf(stderr, "shardq %s: job id '%s' %s; ids are 1..9223372036854775807\n", cmd,
			s, e == -1 ? "is not an integer" : "is out of range");
	return e ? EX_USAGE : 0;
}

/* --created-within D (c 'C') and --created-older-than D ('O'): the
 * filter's creation window, D before now. */
static int created_opt(const char *cmd, int c, const char *arg, sq_job_filter *f)
{
	int64_t ms;
	int rc = cli_opt_dur(cmd, c == 'C' ? "--created-within" : "--created-older-than", arg,
			     c == 'C', INT64_C(315360000000), &ms);
	if (rc)
		return rc;
	if (c == 'C')
		f->created_after_us = cli_now_us() - ms * 1000;
	else
		f->created_before_us = cli_now_us() - ms * 1000;
	return 0;
}

/* --created-within D1 with --created-older-than D2: D1 must be the
 * longer, or no time is left between them. */
static int created_window_check(const char *cmd, const sq_job_filter *f)
{
	if (!f->created_after_us || !f->created_before_us ||
	    f->created_after_us < f->created_before_us)
		return 0;
	fprintf(stderr,
		"shardq %s: --created-within and --created-older-than leave no time between "
		"them: the first must be the longer (say --created-within 2h "
		"--created-older-than 1h)\n",
		cmd);
	return EX_USAGE;
}

static void cancel_progress(int64_t cancelled, void *arg)
{
	(void)arg;
	fprintf(stderr, "shardq cancel: %" PRId64 " cancelled\n", cancelled);
}

/* cancel --type T --status S: every job of T in S, a page at a time. */
static int cancel_matching(cli *x, sq_job_filter *f)
{
	const char *type = f->type, *status = f->status;
	sq_error err;
	int64_t n = 0;
	sq_status st = sq_cancel_matching(x->client, f, 0, cancel_progress, NULL, &n, &err);
	if (st == SQ_OK || n) { /* what was done, also before an error */
		printf("{\"type\":");
		cli_json_str(type);
		printf(",\"status\":\"%s\",\"cancelled\":%" PRId64 "}\n", status, n);
	}
	return st == SQ_OK ? EX_OK : cli_fail("cancel", &err);
}

static int cancel_usage(void)
{
	printf("usage: shardq [-c FILE] cancel ID...\n"
	       "       shardq [-c FILE] cancel --type T --key K\n"
	       "       shardq [-c FILE] cancel --type T --status S [--created-within D]\n"
	       "                               [--created-older-than D]\n\n"
	       "Cancels live (ready, starting or running) jobs. A running job's worker\n"
	       "then gets 'lost' when it completes. Exit 7 if a job was not live.\n"
	       "With --status: every job of T in status S (ready, starting or running) that\n"
	       "was enqueued before the call, a page at a time with progress on stderr,\n"
	       "then one JSON line with the count; --created-within D and "
	       "--created-older-than D\n"
	       "keep to the jobs created in the last D, or before it.\n");
	return EX_OK;
}

/* cancel --type T --key K: the type's live job with that key. */
static int cancel_key(cli *x, const char *type, const char *key)
{
	int64_t id;
	sq_error err;
	int rc = cli_check_text("cancel", "--key", key, SQ_MAX_KEY_LEN);
	if (rc || (rc = cli_open(x, "cancel", SQ_OPEN_ALLOW_DOWN)))
		return rc;
	if (sq_cancel_key(x->client, type, key, &id, &err) != SQ_OK)
		return cli_fail("cancel", &err);
	printf("%" PRId64 " cancelled\n", id);
	return EX_OK;
}

/* cancel ID...: a line per id; exit 7 if one was not live. */
static int cancel_ids(cli *x, char *const *args, size_t n)
{
	int64_t *ids = calloc(n + 1, sizeof(*ids));
	sq_status *out = calloc(n + 1, sizeof(*out));
	sq_error err;
	int rc = ids && out ? 0 : EX_FAIL;
	for (size_t i = 0; !rc && i < n; i++)
		rc = parse_id("cancel", args[i], &ids[i]);
	if (!rc && !(rc = cli_open(x, "cancel", SQ_OPEN_ALLOW_DOWN))) {
		sq_status st = sq_cancel(x->client, ids, n, out, &err);
		rc = st == SQ_OK ? EX_OK : cli_fail("cancel", &err);
		for (size_t i = 0; st == SQ_OK && i < n; i++) {
			printf("%" PRId64 " %s\n", ids[i],
			       out[i] == SQ_OK ? "cancelled" : "not live");
			if (out[i] != SQ_OK)
				rc = EX_NOTFOUND;
		}
	}
	free(out);
	free(ids);
	return rc;
}

int cmd_cancel(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"key", required_argument, NULL, 'k'},
		{"status", required_argument, NULL, 's'},
		{"created-within", required_argument, NULL, 'C'},
		{"created-older-than", required_argument, NULL, 'O'},
		{NULL, 0, NULL, 0},
	};
	const char *key = NULL;
	sq_job_filter f = {NULL, NULL, NULL, -1, 0, 0, 0, 0};
	int c, rc;
	while ((c = getopt_long(argc, argv, ":c:ht:k:s:C:O:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': f.type = optarg; break;
		case 'k': key = optarg; break;
		case 's': f.status = optarg; break;
		case 'C':
		case 'O':
			if ((rc = created_opt("cancel", c, optarg, &f)))
				return rc;
			break;
		case 'h': return cancel_usage();
		default: return cli_bad_option("cancel", c, argv);
		}
	}
	if (f.type && optind < argc)
		return cli_no_args("cancel", argc, argv, "give job ids, or --type and --key");
	if (!f.status && (f.created_after_us || f.created_before_us)) {
		fprintf(stderr, "shardq cancel: --created-within and --created-older-than go "
				"with --type T --status S\n");
		return EX_USAGE;
	}
	if ((f.status && (key || !f.type)) ||
	    (!f.status && (!!f.type != !!key || (!f.type && optind >= argc)))) {
		fprintf(stderr, "shardq cancel: give job ids, --type and --key, or --type and "
				"--status; see --help\n");
		return EX_USAGE;
	}
	if (key)
		return cancel_key(x, f.type, key);
	if (!f.status)
		return cancel_ids(x, argv + optind, (size_t)(argc - optind));
	if ((rc = created_window_check("cancel", &f)) ||
	    (rc = cli_open(x, "cancel", SQ_OPEN_ALLOW_DOWN)))
		return rc;
	return cancel_matching(x, &f);
}

/* A page of jobs, one JSON line each, with its last error (as `get`). */
static void print_page(cli *x, const sq_job *jobs, size_t n)
{
	char **errors = n ? calloc(n, sizeof(*errors)) : NULL;
	sq_error err;
	if (errors && sq_jobs_errors(x->client, jobs, n, errors, &err) != SQ_OK)
		fprintf(stderr, "shardq jobs list: the jobs' last errors could not be read: %s\n",
			err.msg);
	for (size_t i = 0; i < n; i++) {
		cli_print_job_detail(stdout, &jobs[i], x->cfg, errors ? errors[i] : NULL);
		free(errors ? errors[i] : NULL);
	}
	free(errors);
}

static int jobs_list_usage(void)
{
	printf("usage: shardq [-c FILE] jobs list --type T [--status S] [--key K] [--shard ID]\n"
	       "                            [--limit N] [--after CURSOR] [--all]\n"
	       "                            [--finished-within D] [--created-within D]\n"
	       "                            [--created-older-than D]\n\n"
	       "Finds jobs: one type's, in one status (ready, the default; starting;\n"
	       "running; failed; cancelled; completed: the history of a type that keeps it, those\n"
	       "that finished within D with --finished-within), or its live job with a\n"
	       "key; --created-within D and --created-older-than D keep to the jobs\n"
	       "created in the last D, or before it (say, ready jobs waiting an hour).\n"
	       "One JSON line per job (as `shardq get`, with its last_error), in the\n"
	       "status's order:\n"
	       "ready jobs in claim order, starting and running ones by the end of\n"
	       "their lease, failed and cancelled ones as they got there, completed ones\n"
	       "as they finished.\n"
	       "A page of N (100; at most 1000); when there is more, stderr says how to\n"
	       "ask for the next page (--after CURSOR); --all follows them to the end.\n"
	       "Each shard reads the status's index from the cursor on: no scan. A\n"
	       "creation window filters that order, reading at most 100,000 jobs\n"
	       "of each shard a page, so a page may be short, or empty, with more.\n");
	return EX_OK;
}

int cmd_jobs(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"status", required_argument, NULL, 's'},
		{"key", required_argument, NULL, 'k'},
		{"shard", required_argument, NULL, 'S'},
		{"limit", required_argument, NULL, 'n'},
		{"after", required_argument, NULL, 'a'},
		{"all", no_argument, NULL, 'A'},
		{"finished-within", required_argument, NULL, 'W'},
		{"created-within", required_argument, NULL, 'C'},
		{"created-older-than", required_argument, NULL, 'O'},
		{NULL, 0, NULL, 0},
	};
	sq_job_filter f = {NULL, NULL, NULL, -1, 0, 0, 0, 0};
	int64_t within_ms = 0;
	const char *shard = NULL, *after = "";
	int64_t limit = 100;
	int c, rc, all = 0;
	if (argc < 2 || strcmp(argv[1], "list")) {
		if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
			return jobs_list_usage();
		fprintf(stderr, "shardq jobs: give a subcommand: `shardq jobs list --type T`\n");
		return EX_USAGE;
	}
	argc--, argv++;
	while ((c = getopt_long(argc, argv, ":c:ht:s:k:S:n:a:AW:C:O:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': f.type = optarg; break;
		case 's': f.status = optarg; break;
		case 'k': f.key = optarg; break;
		case 'S': shard = optarg; break;
		case 'a': after = optarg; break;
		case 'A': all = 1; break;
		case 'W':
			if ((rc = cli_opt_dur("jobs list", "--finished-within", optarg, 1,
					      INT64_C(315360000000), &within_ms)))
				return rc;
			break;
		case 'C':
		case 'O':
			if ((rc = created_opt("jobs list", c, optarg, &f)))
				return rc;
			break;
		case 'n':
			if ((rc = cli_opt_int("jobs list", "--limit", optarg, 1, 1000, &limit)))
				return rc;
			break;
		case 'h': return jobs_list_usage();
		default: return cli_bad_option("jobs list", c, argv);
		}
	}
	if ((rc = cli_no_args("jobs list", argc, argv, NULL)))
		return rc;
	if (!f.type) {
		fprintf(stderr, "shardq jobs list: give --type T (a [type] of the config)\n");
		return EX_USAGE;
	}
	if ((rc = created_window_check("jobs list", &f)))
		return rc;
	if (within_ms)
		f.finished_after_us = cli_now_us() - within_ms * 1000;
	if ((rc = cli_open(x, "jobs list", 0)))
		return rc;
	if (shard && (f.shard = sq_config_shard_index(x->cfg, shard)) < 0) {
		fprintf(stderr, "shardq jobs list: no shard '%s' in the config\n", shard);
		return EX_USAGE;
	}
	char next[64], cur[64];
	snprintf(cur, sizeof(cur), "%s", after);
	do {
		sq_job *jobs;
		size_t n;
		sq_error err;
		if (sq_jobs_list(x->client, &f, cur, (int)limit, &jobs, &n, next, sizeof(next),
				 &err) != SQ_OK)
			return cli_fail("jobs list", &err);
		print_page(x, jobs, n);
		sq_jobs_free(jobs, n);
		snprintf(cur, sizeof(cur), "%s", next);
	} while (all && next[0]);
	if (next[0])
		fprintf(stderr, "shardq jobs list: more: --after %s\n", next);
	return EX_OK;
}

static void purge_progress(int64_t purged, void *arg)
{
	(void)arg;
	static int64_t said = -1; /* once per total: a shard with none says nothing */
	if (purged != said)
		fprintf(stderr, "shardq purge: %" PRId64 " history rows deleted\n", purged);
	said = purged;
}

int cmd_purge(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"older-than", required_argument, NULL, 'o'},
		{"batch", required_argument, NULL, 'b'},
		{NULL, 0, NULL, 0},
	};
	const char *type = NULL;
	int64_t older_ms = -1, batch = 10000, purged = 0;
	int c, rc;
	while ((c = getopt_long(argc, argv, ":c:ht:o:b:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': type = optarg; break;
		case 'o':
			if ((rc = cli_opt_dur("purge", "--older-than", optarg, 0,
					      INT64_C(315360000000), &older_ms)))
				return rc;
			break;
		case 'b':
			if ((rc = cli_opt_int("purge", "--batch", optarg, 1, 100000, &batch)))
				return rc;
			break;
		case 'h':
			printf("usage: shardq [-c FILE] purge --type T --older-than D [--batch "
			       "N]\n\n"
			       "Deletes the history rows of type T that finished more than D ago "
			       "(0s: all),\noldest first, N (10000) at a time on each shard, with "
			       "progress on stderr,\nthen prints how many. Retention drops "
			       "whole days by itself (shardq\nmaintain); this is for a type's "
			       "rows before that.\n");
			return EX_OK;
		default: return cli_bad_option("purge", c, argv);
		}
	}
	if ((rc = cli_no_args("purge", argc, argv, NULL)))
		return rc;
	if (!type || older_ms < 0) {
		fprintf(stderr, "shardq purge: give --type T and --older-than D (0s: every row "
				"of T); see --help\n");
		return EX_USAGE;
	}
	if ((rc = cli_open(x, "purge", 0)))
		return rc;
	sq_error err;
	sq_status st = sq_history_purge(x->client, type, cli_now_us() - older_ms * 1000, (int)batch,
					purge_progress, NULL, &purged, &err);
	if (st == SQ_OK || purged) { /* what was done, also before an error */
		printf("{\"type\":");
		cli_json_str(type);
		printf(",\"purged\":%" PRId64 "}\n", purged);
	}
	return st == SQ_OK ? EX_OK : cli_fail("purge", &err);
}

static void retry_progress(int64_t retried, int64_t not_allowed, void *arg)
{
	(void)arg;
	fprintf(stderr,
		"shardq retry: %" PRId64 " made ready, %" PRId64 " left (a live job holds "
		"their key)\n",
		retried, not_allowed);
}

/* retry --type T: every failed job of T, in batches with progress. */
static int retry_type(cli *x, const char *type, int batch)
{
	sq_error err;
	int64_t ok = 0, na = 0;
	sq_status st =
		sq_retry_type(x->client, type, 0, batch, retry_progress, NULL, &ok, &na, &err);
	if (st == SQ_OK || ok || na) { /* what was done, also before an error */
		printf("{\"type\":");
		cli_json_str(type);
		printf(",\"retried\":%" PRId64 ",\"not_allowed\":%" PRId64 "}\n", ok, na);
	}
	return st == SQ_OK ? EX_OK : cli_fail("retry", &err);
}

int cmd_retry(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{"type", required_argument, NULL, 't'},
		{"batch", required_argument, NULL, 'b'},
		{NULL, 0, NULL, 0},
	};
	const char *type = NULL;
	int64_t batch = 1000;
	int c, rc;
	while ((c = getopt_long(argc, argv, ":c:ht:b:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': type = optarg; break;
		case 'b':
			if ((rc = cli_opt_int("retry", "--batch", optarg, 1, 10000, &batch)))
				return rc;
			break;
		case 'h':
			printf("usage: shardq [-c FILE] retry ID...\n"
			       "       shardq [-c FILE] retry --type T [--batch N]\n\n"
			       "Makes failed jobs ready again, due now, with a fresh budget of "
			       "tries (their\nlast error is kept). With ids: one line each, "
			       "'ID ready', 'ID not found' or\n'ID not allowed' (not failed, or "
			       "a live job of its type holds its key); exit 7 if\nany was not made "
			       "ready. With --type: every job of T that has failed so far,\nin "
			       "batches of N (1000) with progress on stderr, then one JSON line.\n"
			       "A job a worker holds is never touched.\n");
			return EX_OK;
		default: return cli_bad_option("retry", c, argv);
		}
	}
	if (type && optind < argc)
		return cli_no_args("retry", argc, argv, "give job ids, or --type");
	if (!type && optind >= argc) {
		fprintf(stderr, "shardq retry: give job ids, or --type T; see --help\n");
		return EX_USAGE;
	}
	size_t n = (size_t)(argc - optind);
	int64_t *ids = calloc(n + 1, sizeof(*ids));
	for (size_t i = 0; i < n; i++) {
		if ((rc = parse_id("retry", argv[optind + (int)i], &ids[i]))) {
			free(ids);
			return rc;
		}
	}
	if ((rc = cli_open(x, "retry", 0))) {
		free(ids);
		return rc;
	}
	if (type) {
		free(ids);
		return retry_type(x, type, (int)batch);
	}
	sq_error err;
	sq_status *out = calloc(n, sizeof(*out));
	sq_status st = sq_retry(x->client, ids, n, out, &err);
	rc = st == SQ_OK ? EX_OK : cli_fail("retry", &err);
	for (size_t i = 0; st == SQ_OK && i < n; i++) {
		printf("%" PRId64 " %s\n", ids[i],
		       out[i] == SQ_OK ? "ready"
		       : out[i] == SQ_ESTATE
			       ? "not allowed (not failed, or a live job holds its key)"
			       : "not found (finished, or never existed)");
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
	int64_t id;
	while ((c = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'h':
			printf("usage: shardq [-c FILE] get ID\n\nPrints the job as one JSON "
			       "line.\n");
			return EX_OK;
		default: return cli_bad_option("get", c, argv);
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "shardq get: give one job id\n");
		return EX_USAGE;
	}
	if ((rc = parse_id("get", argv[optind], &id)))
		return rc;
	optind++;
	if ((rc = cli_no_args("get", argc, argv, "get takes one job id")))
		return rc;
	if ((rc = cli_open(x, "get", SQ_OPEN_ALLOW_DOWN)))
		return rc;
	sq_job j;
	sq_error err;
	char *last_error = NULL;
	if (sq_get_job(x->client, id, &j, &err) != SQ_OK ||
	    sq_get_job_error(x->client, id, &last_error, &err) != SQ_OK) {
		sq_job_clear(&j);
		return cli_fail("get", &err);
	}
	cli_print_job_detail(stdout, &j, x->cfg, last_error);
	free(last_error);
	sq_job_clear(&j);
	return EX_OK;
}

/* cmd_schedules.c - `shardq schedules`: the [schedule NAME] sections with
 * their state in the meta database; --run-once runs one scheduler pass. */
#include "buf.h"
#include "cli.h"
#include "json.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void utc(char *out, size_t len, int64_t us)
{
	time_t t = (time_t)(us / 1000000);
	struct tm tm;
	if (!us) {
		snprintf(out, len, "-");
		return;
	}
	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void json_time(sq_buf *b, const char *name, int64_t us)
{
	char t[40];
	utc(t, sizeof(t), us);
	sq_buf_printf(b, ",\"%s\":", name);
	if (us)
		sq_buf_printf(b, "\"%s\"", t);
	else
		sq_buf_printf(b, "null");
}

static void print_json(const sq_schedule_info *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const sq_schedule_info *s = &v[i];
		sq_buf b;
		sq_buf_init(&b);
		sq_buf_printf(&b, "{\"name\":");
		sq_json_put_string(&b, s->name);
		sq_buf_printf(&b, ",\"spec\":");
		sq_json_put_string(&b, s->spec);
		sq_buf_printf(&b, ",\"timezone\":");
		sq_json_put_string(&b, s->timezone);
		sq_buf_printf(&b, ",\"type\":");
		sq_json_put_string(&b, s->type);
		sq_buf_printf(&b, ",\"missed\":\"%s\"", s->missed_skip ? "skip" : "once");
		json_time(&b, "last_slot", s->known ? s->last_slot_us : 0);
		sq_buf_printf(&b, ",\"pending\":%s", s->pending ? "true" : "false");
		json_time(&b, "enqueued_slot", s->enqueued_slot_us);
		sq_buf_printf(&b, ",\"job_id\":");
		if (s->job_id)
			sq_buf_printf(&b, "%" PRId64, s->job_id);
		else
			sq_buf_printf(&b, "null");
		sq_buf_printf(&b, ",\"claimed_by\":");
		if (s->claimed_by[0])
			sq_json_put_string(&b, s->claimed_by);
		else
			sq_buf_printf(&b, "null");
		sq_buf_printf(&b,
			      ",\"enqueues\":%" PRId64 ",\"retries\":%" PRId64
			      ",\"skipped\":%" PRId64,
			      s->enqueues, s->retries, s->skipped);
		json_time(&b, "next_slot", s->next_slot_us);
		sq_buf_printf(&b, "}\n");
		if (b.data)
			fputs(b.data, stdout);
		sq_buf_free(&b);
	}
}

static void print_table(const sq_schedule_info *v, size_t n)
{
	printf("%-20s %-20s %-16s %-16s %-30s %s\n", "NAME", "SPEC", "TIMEZONE", "TYPE",
	       "LAST SLOT", "NEXT RUN");
	for (size_t i = 0; i < n; i++) {
		const sq_schedule_info *s = &v[i];
		char last[48], next[40];
		utc(last, sizeof(last), s->known ? s->last_slot_us : 0);
		if (s->pending)
			strncat(last, " (pending)", sizeof(last) - strlen(last) - 1);
		else if (s->known && s->last_slot_us != s->enqueued_slot_us)
			strncat(last, s->enqueued_slot_us ? " (skipped)" : " (start)",
				sizeof(last) - strlen(last) - 1);
		utc(next, sizeof(next), s->next_slot_us);
		printf("%-20s %-20s %-16s %-16s %-30s %s\n", s->name, s->spec, s->timezone, s->type,
		       last, next);
	}
}

int cmd_schedules(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"json", no_argument, NULL, 'j'},         {"run-once", no_argument, NULL, 'r'},
		{"now", required_argument, NULL, 'n'},    {NULL, 0, NULL, 0}};
	int c, rc, run = 0;
	int64_t now_s = 0;
	sq_error err;
	while ((c = getopt_long(argc, argv, ":c:hj", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'j': x->json = 1; break;
		case 'r': run = 1; break;
		case 'n':
			if ((rc = cli_opt_int("schedules", "--now", optarg, 1,
					      INT64_C(253402300799), &now_s)))
				return rc;
			break;
		case 'h':
			printf("usage: shardq [-c FILE] schedules [--json] [--run-once] [--now "
			       "UNIXSECONDS]\n\n"
			       "Lists the [schedule NAME] sections of the config: name, cron "
			       "expression or\n"
			       "interval, time zone, type, the latest slot claimed (in UTC), and "
			       "the next run.\n"
			       "A slot marked (pending) is claimed and its enqueue not yet "
			       "confirmed;\n"
			       "(skipped) was passed over by missed = skip; (start) is where a new "
			       "schedule began.\n\n"
			       "  --json       one JSON object per schedule and line\n"
			       "  --run-once   first run one scheduler pass (as workers and "
			       "shardqd "
			       "do every\n"
			       "               [scheduler] interval), e.g. from cron where no "
			       "worker "
			       "runs;\n"
			       "               prints what it did on stderr\n"
			       "  --now SEC    the pass's and the listing's clock, in unix seconds "
			       "(for tests)\n");
			return EX_OK;
		default: return cli_bad_option("schedules", c, argv);
		}
	}
	if ((rc = cli_no_args("schedules", argc, argv, NULL)))
		return rc;
	if ((rc = cli_open(x, "schedules", 0)))
		return rc;
	if (run) {
		sq_schedule_pass p;
		sq_status st = sq_schedules_run(x->client, NULL, now_s * 1000000, &p, &err);
		fprintf(stderr,
			"shardq schedules: pass: %d enqueued (%d taken over), %d skipped, %d "
			"busy, %d failed\n",
			p.enqueued, p.retried, p.skipped, p.busy, p.errors);
		if (st != SQ_OK)
			return cli_fail("schedules", &err);
	}
	sq_schedule_info *v;
	size_t n;
	sq_status st = sq_schedules_list(x->client, now_s * 1000000, &v, &n, &err);
	if (st != SQ_OK)
		return cli_fail("schedules", &err);
	if (x->json)
		print_json(v, n);
	else if (n == 0)
		printf("no [schedule NAME] sections in %s\n",
		       x->config_path ? x->config_path : "the config");
	else
		print_table(v, n);
	free(v);
	return EX_OK;
}

/* common.c - what every command of `shardq` shares: the config and the
 * connection, the exit codes and error messages, the option parsers, job
 * references in and jobs out. The commands call down into it; it calls no
 * command (main.c dispatches). */
#include "cli.h"
#include "buf.h"
#include "json.h"
#include "parse.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
		/* one problem on one line; several, one line each below */
		if (err.code == SQ_ECONFIG)
			fprintf(stderr, "shardq %s: invalid config:%s%s\n", cmd,
				strchr(err.msg, '\n') ? "\n" : " ", err.msg);
		else
			fprintf(stderr, "shardq %s: %s\n", cmd, err.msg);
		return EX_CONFIG;
	}
	return EX_OK;
}

int cli_connect(cli *x, const char *cmd, int for_init)
{
	sq_error err;
	if (sq_client_open(x->cfg, for_init, &x->client, &err) != SQ_OK)
		return cli_fail(cmd, &err);
	return EX_OK;
}

int cli_open(cli *x, const char *cmd, int for_init)
{
	int rc = cli_load_config(x, cmd);
	return rc ? rc : cli_connect(x, cmd, for_init);
}

void cli_close(cli *x)
{
	sq_client_close(x->client);
	sq_config_free(x->cfg);
	x->client = NULL;
	x->cfg = NULL;
}

int cli_opt_int(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
		int64_t *out)
{
	int e = cli_int(s, strlen(s), lo, hi, out);
	if (!e)
		return 0;
	fprintf(stderr, "shardq %s: %s '%s' %s; it takes an integer in %" PRId64 "..%" PRId64 "\n",
		cmd, opt, s, e == -1 ? "is not an integer" : "is out of range", lo, hi);
	return EX_USAGE;
}

/* A duration in its largest whole unit: 36525d, 90s, 250ms. */
static void fmt_ms(char *out, size_t len, int64_t ms)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} u[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (ms && ms % u[i].ms == 0) {
			snprintf(out, len, "%" PRId64 "%s", ms / u[i].ms, u[i].unit);
			return;
		}
	snprintf(out, len, "%" PRId64 "ms", ms);
}

int cli_opt_dur(const char *cmd, const char *opt, const char *s, int64_t lo_ms, int64_t hi_ms,
		int64_t *out)
{
	char lo[32], hi[32];
	int64_t ms = sq_parse_duration_ms(s);
	if (ms == -1) {
		fprintf(stderr,
			"shardq %s: %s '%s' is not a duration; use e.g. 500ms, 30s, 5m, 1h, 2d\n",
			cmd, opt, s);
		return EX_USAGE;
	}
	if (ms < lo_ms || ms > hi_ms) {
		fmt_ms(lo, sizeof(lo), lo_ms);
		fmt_ms(hi, sizeof(hi), hi_ms);
		fprintf(stderr, "shardq %s: %s '%s' is out of range; it takes %s..%s\n", cmd, opt,
			s, lo, hi);
		return EX_USAGE;
	}
	*out = ms;
	return 0;
}

int cli_check_text(const char *cmd, const char *what, const char *s, size_t max)
{
	size_t len = strlen(s), where;
	if (!len || len > max) {
		fprintf(stderr, "shardq %s: %s must be 1-%zu bytes, not %zu\n", cmd, what, max,
			len);
		return EX_INPUT;
	}
	if (!sq_json_utf8_valid(s, len, &where)) {
		fprintf(stderr, "shardq %s: %s is not valid UTF-8 (at byte %zu)\n", cmd, what,
			where + 1);
		return EX_INPUT;
	}
	return 0;
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "?";
	/* an option that took its value as the next word: name the option */
	if (c != ':' && c != '?' && optarg && optind >= 2 && optarg == argv[optind - 1])
		arg = argv[optind - 2];
	if (c == ':')
		fprintf(stderr, "shardq %s: option '%s' needs a value; see shardq %s --help\n", cmd,
			arg, cmd);
	else if (c == '?' && optopt)
		fprintf(stderr, "shardq %s: unknown option '-%c'; see shardq %s --help\n", cmd,
			optopt, cmd);
	else if (c == '?')
		fprintf(stderr, "shardq %s: unknown option '%s'; see shardq %s --help\n", cmd, arg,
			cmd);
	else
		fprintf(stderr, "shardq %s: option '%s' is not one of %s's; see shardq %s --help\n",
			cmd, arg, cmd, cmd);
	return EX_USAGE;
}

int cli_no_args(const char *cmd, int argc, char **argv, const char *hint)
{
	if (optind >= argc)
		return 0;
	fprintf(stderr, "shardq %s: unexpected argument '%s'%s%s\n", cmd, argv[optind],
		hint ? "; " : "", hint ? hint : "");
	return EX_USAGE;
}

/* Doubles the array; on failure frees it and returns NULL. */
static sq_job_ref *grow_refs(sq_job_ref *refs, size_t *cap)
{
	sq_job_ref *more = realloc(refs, *cap * 2 * sizeof(*refs));
	if (!more)
		free(refs);
	else
		*cap *= 2;
	return more;
}

long cli_read_refs(const char *cmd, int argc, char **argv, sq_job_ref **out, int *rc)
{
	size_t n = 0, cap = 16, lcap = 0;
	sq_job_ref *refs = malloc(cap * sizeof(*refs));
	char *line = NULL, why[256];
	ssize_t got;
	*rc = EX_OK;
	for (int i = 0; i < argc && refs && !*rc; i++) {
		if (strcmp(argv[i], "-")) {
			if (n == cap && !(refs = grow_refs(refs, &cap)))
				break;
			if (cli_parse_ref(argv[i], &refs[n])) {
				fprintf(stderr,
					"shardq %s: '%s' is not a job reference; expected "
					"ID:ATTEMPT "
					"(ID 1..9223372036854775807, ATTEMPT 0..2147483647, as "
					"printed by shardq claim), or - for JSON lines on stdin\n",
					cmd, argv[i]);
				*rc = EX_USAGE;
				break;
			}
			n++;
			continue;
		}
		long lineno = 0;
		while ((got = getline(&line, &lcap, stdin)) >= 0) {
			const char *bad;
			lineno++;
			if (strspn(line, " \t\r\n") == (size_t)got)
				continue;
			if (n == cap && !(refs = grow_refs(refs, &cap)))
				break;
			if ((bad = cli_ref_of_line(line, (size_t)got, &refs[n], why,
						   sizeof(why)))) {
				fprintf(stderr, "shardq %s: stdin line %ld: %s\n", cmd, lineno,
					bad);
				*rc = EX_INPUT;
				break;
			}
			n++;
		}
		if (!*rc && ferror(stdin)) {
			fprintf(stderr, "shardq %s: cannot read stdin: %s\n", cmd, strerror(errno));
			*rc = EX_INPUT;
		}
	}
	free(line);
	if (!refs && !*rc) {
		fprintf(stderr, "shardq %s: out of memory\n", cmd);
		*rc = EX_FAIL;
	}
	if (*rc) {
		free(refs);
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
	cli_print_job_detail(f, j, cfg, NULL);
}

void cli_print_job_detail(FILE *f, const sq_job *j, const sq_config *cfg, const char *last_error)
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
	if (j->created_us) {
		iso_time(t, sizeof(t), j->created_us);
		sq_buf_printf(&b, ",\"created\":\"%s\"", t);
	}
	if (last_error) {
		sq_buf_puts(&b, ",\"last_error\":");
		sq_json_put_string(&b, last_error);
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

void cli_json_str(const char *s)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_json_put_string(&b, s);
	fputs(b.data ? b.data : "null", stdout);
	sq_buf_free(&b);
}

/* test_badinput.c - bad input through the CLI (the ASan build): configs, job
 * files, options, references. Every case asserts its exit code, one line on
 * stderr naming the problem, no sanitizer report, and that no row changed
 * on any shard (a fingerprint of every shard's jobs, history, partition
 * markers and the meta tables, taken before and after each case). Then: a
 * batch whose shard fails half-way reports exactly what was written (the
 * library and the CLI, checked against the shards), and a zeroed
 * sq_job_spec takes its type's delay tolerance. */
#define _GNU_SOURCE /* memmem */
#include "buf.h"
#include "client.h"
#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *types = "[type t]\n"
			   "[type tol]\ndelay_tolerance = 5s\n"
			   "[type big]\n";

static testdb t;
static char good[1024]; /* the cluster's config */
static PGconn *fp[2];   /* for fingerprints */

/* Files live in this process's directory (testdb_tmpdir, from mkdtemp). */
#define path_in testdb_path

/* The libpq string of shard i of this cluster. */
static void shard_dsn(char *out, size_t len, int i, int port)
{
	snprintf(out, len, "host=127.0.0.1 port=%d dbname=%s user=postgres",
		 port ? port : t.ports[i], t.db);
}

/* Replaces @S1@, @S2@ (the shards' dsns) and @DIR@ in text. */
static char *subst(const char *text)
{
	sq_buf b;
	char dsn[256];
	sq_buf_init(&b);
	sq_buf_append(&b, "", 0);
	for (const char *p = text; *p;) {
		if (!strncmp(p, "@S1@", 4) || !strncmp(p, "@S2@", 4)) {
			shard_dsn(dsn, sizeof(dsn), p[2] - '1', 0);
			sq_buf_puts(&b, dsn);
			p += 4;
		} else if (!strncmp(p, "@DIR@", 5)) {
			sq_buf_puts(&b, testdb_tmpdir());
			p += 5;
		} else {
			sq_buf_putc(&b, *p++);
		}
	}
	return sq_buf_steal(&b);
}

/* Every shard's rows, as one string: jobs, history, partition markers,
 * node; and on the meta shard the meta tables and the id allocator. */
static char *fingerprint(void)
{
	static const char shard_sql[] =
		"SELECT md5(concat_ws('#',"
		" (SELECT string_agg(j::text, '|' ORDER BY id) FROM shardq.jobs j),"
		" (SELECT string_agg(h::text, '|' ORDER BY id, finished_at) FROM "
		"shardq.jobs_history h),"
		" (SELECT string_agg(p::text, '|' ORDER BY partition) FROM "
		"shardq.partition_state p),"
		" (SELECT string_agg(n::text, '|') FROM shardq.node n)))";
	static const char meta_sql[] =
		"SELECT md5(concat_ws('#',"
		" (SELECT string_agg(c::text, '|') FROM shardq_meta.cluster c),"
		" (SELECT string_agg(s::text, '|' ORDER BY shard_id) FROM shardq_meta.shards s),"
		" (SELECT string_agg(m::text, '|' ORDER BY partition) FROM "
		"shardq_meta.partition_map m),"
		" (SELECT string_agg(m::text, '|' ORDER BY move_id) FROM shardq_meta.moves m),"
		" (SELECT string_agg(l::text, '|' ORDER BY partition) FROM "
		"shardq_meta.move_lock l),"
		" (SELECT last_value::text || is_called::text FROM shardq_meta.id_block)))";
	sq_buf b;
	sq_buf_init(&b);
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < (i ? 1 : 2); k++) {
			PGresult *r = PQexec(fp[i], k ? meta_sql : shard_sql);
			ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "fingerprint: %s",
				      PQerrorMessage(fp[i]));
			sq_buf_printf(&b, "%s/", PQgetvalue(r, 0, 0));
			PQclear(r);
		}
	return sq_buf_steal(&b);
}

/* ---- the cases ------------------------------------------------------------ */

/* Content made by code: written to the job file, stdin, the config, or put
 * in place of an "@GEN@" argument. */
enum { TO_NONE, TO_FILE, TO_IN, TO_CFG, TO_ARG };

typedef struct bad_case {
	const char *args[12]; /* "@CFG@", "@FILE@", "@DIR@", "@GEN@" are replaced;
	                         "-c @CFG@" goes first unless args start with -c */
	const char *config;   /* NULL: the cluster's own config */
	const char *file;     /* the job file @FILE@ (jobs.jsonl) */
	const char *in;       /* stdin */
	int code;             /* the exit code */
	const char *err;      /* in the one line on stderr */
	void (*gen)(sq_buf *b);
	int gen_to;
} bad_case;

#define CL "[cluster]\npartitions = 64\n"
#define SH "[shard s1]\ndsn = @S1@\n[shard s2]\ndsn = @S2@\n"
#define TY "[type t]\n"
/* a config that is good but for the last lines; CL SH TY is lines 1-7 */
#define CFG(extra) CL SH TY extra
#define ENQ                              \
	{                                \
		"enqueue", "--type", "t" \
	}
#define FILE_ENQ                              \
	{                                     \
		"enqueue", "--file", "@FILE@" \
	}

static void gen_1001_lines(sq_buf *b)
{
	for (int i = 1; i <= 1000; i++)
		sq_buf_printf(b, "{\"type\":\"t\",\"params\":{\"n\":%d}}\n", i);
	sq_buf_puts(b, "{\"type\":\"t\",\"delay_ms\":9000000000000000000}\n");
}

static void gen_key_513(sq_buf *b)
{
	sq_buf_puts(b, "{\"type\":\"t\",\"key\":\"");
	for (int i = 0; i < SQ_MAX_KEY_LEN + 1; i++)
		sq_buf_putc(b, 'k');
	sq_buf_puts(b, "\"}\n");
}

static void gen_key_513_arg(sq_buf *b)
{
	for (int i = 0; i < SQ_MAX_KEY_LEN + 1; i++)
		sq_buf_putc(b, 'k');
}

static void nested(sq_buf *b, int depth)
{
	sq_buf_puts(b, "{\"a\":");
	for (int i = 0; i < depth; i++)
		sq_buf_putc(b, '[');
	for (int i = 0; i < depth; i++)
		sq_buf_putc(b, ']');
	sq_buf_putc(b, '}');
}

static void gen_deep_line(sq_buf *b)
{
	sq_buf_puts(b, "{\"type\":\"t\",\"params\":");
	nested(b, 600);
	sq_buf_puts(b, "}\n");
}

static void gen_deep_arg(sq_buf *b)
{
	nested(b, 600);
}

static void gen_params_big(sq_buf *b)
{
	sq_buf_puts(b, "{\"type\":\"t\",\"params\":{\"s\":\"");
	for (int i = 0; i < SQ_MAX_PARAMS_LEN; i++)
		sq_buf_putc(b, 'a');
	sq_buf_puts(b, "\"}}\n");
}

/* 2 MB on line 1, bad only at its very end: a reader that cuts lines would
 * report another line, or none */
static void gen_long_bad_line(sq_buf *b)
{
	sq_buf_puts(b, "{\"type\":\"t\",\"params\":{\"s\":\"");
	for (int i = 0; i < 2 * 1024 * 1024; i++)
		sq_buf_putc(b, 'a');
	sq_buf_puts(b, "\"}\n{\"type\":\"t\"}\n");
}

static void gen_nul_line(sq_buf *b)
{
	sq_buf_puts(b, "{\"type\":\"t\"}\n{\"type\":\"t\",\"key\":\"a");
	sq_buf_append(b, "\0", 1);
	sq_buf_puts(b, "b\"}\n");
}

static void gen_long_ref(sq_buf *b)
{
	sq_buf_puts(b, "{\"id\":5,\"params\":{\"s\":\"");
	for (int i = 0; i < 100 * 1024; i++)
		sq_buf_putc(b, 'a');
	sq_buf_puts(b, "\"},\"attempt\":4294967297}\n");
}

static void gen_cfg_nul(sq_buf *b)
{
	char *c = subst(CFG(""));
	sq_buf_puts(b, c);
	sq_buf_puts(b, "[type u]\nhistory = tr");
	sq_buf_append(b, "\0", 1);
	sq_buf_puts(b, "ue\n");
	free(c);
}

/* the table leaves gen and gen_to out where no content is generated */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const bad_case cases[] = {
	/* ---- configs: exit 3, FILE:LINE naming the key -------------------- */
	{ENQ, CFG("[shard s1]\nweight = 2\n"), NULL, NULL, 3,
	 ":8: [shard s1]: shard s1 appears a second time (first at line 3)"},
	{ENQ, CL SH "[type t]\n[type t]\n", NULL, NULL, 3,
	 ":8: [type t]: type t appears a second time (first at line 7)"},
	{ENQ, CL "[shard s1]\ndsn = @S1@\ndsn = @S1@\n[shard s2]\ndsn = @S2@\n" TY, NULL, NULL, 3,
	 ":5: [shard s1] dsn: set a second time (first at line 4)"},
	{ENQ, CL "[cluster]\n" SH TY, NULL, NULL, 3,
	 ":3: [cluster]: the section appears a second time (first at line 1)"},
	{ENQ, CL "partitions = 64\n" SH TY, NULL, NULL, 3,
	 ":3: [cluster] partitions: set a second time (first at line 2)"},
	{ENQ, CFG("[connection]\n[connection]\n"), NULL, NULL, 3,
	 ":9: [connection]: the section appears a second time"},
	{ENQ, CFG("retries = 2\n"), NULL, NULL, 3, ":8: [type t] retries: unknown key"},
	{ENQ, CFG("[typo]\nx = 1\n"), NULL, NULL, 3, ":9: [typo] x: unknown section"},
	{ENQ, CFG("[typo]\n"), NULL, NULL, 3, ":8: [typo]: unknown section"},
	{ENQ, "partitions = 64\n" SH TY, NULL, NULL, 3,
	 ":1: [-] partitions: a key before any section"},
	{ENQ, CFG("just words\n"), NULL, NULL, 3, ":8: [?]: syntax error"},
	{ENQ, CFG("[type u\n"), NULL, NULL, 3, ":8: [?]: syntax error: a section header needs"},
	{ENQ, CFG("[type u] x\n"), NULL, NULL, 3, ":8: [?]: syntax error: text after"},
	{ENQ, "[cluster]\npartitions = 3\n" SH TY, NULL, NULL, 3,
	 "[cluster] partitions: 3 is not a power of two"},
	{ENQ, "[cluster]\npartitions = 99999999999999999999\n" SH TY, NULL, NULL, 3,
	 ":2: [cluster] partitions: expected an integer"},
	{ENQ, "[cluster]\npartitions = 0\n" SH TY, NULL, NULL, 3,
	 ":2: [cluster] partitions: 0 is out of range"},
	{ENQ, "[cluster]\npartitions = 131072\n" SH TY, NULL, NULL, 3,
	 ":2: [cluster] partitions: 131072 is out of range"},
	{ENQ, CFG("[shard s3]\ndsn = @S1@\nweight = -1\n"), NULL, NULL, 3,
	 ":10: [shard s3] weight: -1 is out of range"},
	{ENQ, CFG("[shard s3]\ndsn = @S1@\nweight = nan\n"), NULL, NULL, 3,
	 ":10: [shard s3] weight: expected a number"},
	{ENQ, CFG("[shard s3]\ndsn = @S1@\nweight = 1e400\n"), NULL, NULL, 3,
	 ":10: [shard s3] weight: expected a number"},
	{ENQ, CFG("[shard s3]\ndsn = @S1@\nweight = 2x\n"), NULL, NULL, 3,
	 ":10: [shard s3] weight: expected a number"},
	{ENQ, CFG("[connection]\nconnect_timeout = 1000000000d\n"), NULL, NULL, 3,
	 ":9: [connection] connect_timeout: 1000000000d is out of range"},
	{ENQ, CFG("[connection]\nconnect_timeout = 0.5s\n"), NULL, NULL, 3,
	 ":9: [connection] connect_timeout: 0.5s is out of range"},
	{ENQ, CFG("[connection]\nstatement_timeout = 5\n"), NULL, NULL, 3,
	 ":9: [connection] statement_timeout: expected a duration"},
	{ENQ, CFG("[connection]\nstatement_timeout = -5s\n"), NULL, NULL, 3,
	 ":9: [connection] statement_timeout: expected a duration"},
	{ENQ, CFG("[connection]\nstatement_timeout = 1e3s\n"), NULL, NULL, 3,
	 ":9: [connection] statement_timeout: expected a duration"},
	{ENQ, CFG("[connection]\npool_size = 4\n"), NULL, NULL, 3,
	 ":9: [connection] pool_size: no longer a key: it was never used"},
	{ENQ, CFG("max_attempts = 0\n"), NULL, NULL, 3,
	 ":8: [type t] max_attempts: 0 is out of range"},
	{ENQ, CFG("max_attempts = 4294967297\n"), NULL, NULL, 3,
	 ":8: [type t] max_attempts: 4294967297 is out of range"},
	{ENQ, CFG("priority = 1099511627781\n"), NULL, NULL, 3,
	 ":8: [type t] priority: 1099511627781 is out of range"},
	{ENQ, CFG("delay_tolerance = 400d\n"), NULL, NULL, 3,
	 ":8: [type t] delay_tolerance: 400d is out of range"},
	{ENQ, CFG("backoff = fibonacci\n"), NULL, NULL, 3,
	 ":8: [type t] backoff: 'fibonacci' is not one of"},
	{ENQ, CFG("dedup = maybe\n"), NULL, NULL, 3, ":8: [type t] dedup: 'maybe' is not one of"},
	{ENQ, CFG("history = perhaps\n"), NULL, NULL, 3,
	 ":8: [type t] history: expected true or false"},
	{ENQ, "[cluster]\npartitions = 64\nnotify = 2\n" SH TY, NULL, NULL, 3,
	 ":3: [cluster] notify: expected true or false"},
	{ENQ, CFG("backoff_base = 10s\nbackoff_cap = 1s\n"), NULL, NULL, 3,
	 ":7: [type t] backoff_cap: is below backoff_base"},
	{ENQ, CFG("backoff_jitter = 2\n"), NULL, NULL, 3,
	 ":8: [type t] backoff_jitter: 2 is out of range"},
	{ENQ, CFG("starting_timeout = 50ms\n"), NULL, NULL, 3,
	 ":8: [type t] starting_timeout: 50ms is out of range"},
	{ENQ, CFG("execution_timeout = 1000000000000000000000d\n"), NULL, NULL, 3,
	 ":8: [type t] execution_timeout: 1000000000000000000000d is out of range"},
	{ENQ, "[cluster]\npartitions = 64\nmeta_shard = nosuch\n" SH TY, NULL, NULL, 3,
	 ":3: [cluster] meta_shard: 'nosuch' is not a configured shard"},
	{ENQ, "[cluster]\npartitions = 64\nmeta_shard = s1\nmeta_dsn = @S1@\n" SH TY, NULL, NULL, 3,
	 ":4: [cluster] meta_dsn: set either meta_shard or meta_dsn, not both"},
	{ENQ, "[cluster]\npartitions = 64\nmeta_dsn = host='x\n" SH TY, NULL, NULL, 3,
	 ":3: [cluster] meta_dsn: not a libpq connection string"},
	{ENQ, CL "[shard s1]\nweight = 1\n[shard s2]\ndsn = @S2@\n" TY, NULL, NULL, 3,
	 ":3: [shard s1] dsn: missing"},
	{ENQ, CL "[shard s1]\ndsn = host='oops\n[shard s2]\ndsn = @S2@\n" TY, NULL, NULL, 3,
	 ":4: [shard s1] dsn: not a libpq connection string"},
	{ENQ, CFG("[shard a b]\ndsn = @S1@\n"), NULL, NULL, 3,
	 ":8: [shard a b]: shard id must be 1-32 letters"},
	{ENQ, CFG("[type xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]\n"),
	 NULL, NULL, 3, ":8: [type xxxxxxxxxx"},
	{ENQ, CL, NULL, NULL, 3, "no shard configured"},
	{ENQ, NULL, NULL, NULL, 3, ":9: a NUL byte; is this a text file?", gen_cfg_nul, TO_CFG},
	{{"-c", "@DIR@", "enqueue", "--type", "t"},
	 NULL,
	 NULL,
	 NULL,
	 3,
	 "is a directory, not a config file"},
	{{"-c", "@DIR@/missing.ini", "enqueue", "--type", "t"},
	 NULL,
	 NULL,
	 NULL,
	 3,
	 "missing.ini: cannot open the config file: No such file"},

	/* ---- job files: exit 5, FILE:LINE and nothing enqueued -------------- */
	{FILE_ENQ, NULL,
	 "{\"type\":\"t\"}\n{\"type\":\"t\"}\n{\"type\":\"t\",\"params\":{\"x\":}}\n", NULL, 5,
	 "jobs.jsonl:3: invalid JSON: unexpected character (column 27)"},
	{FILE_ENQ, NULL, "[1]\n", NULL, 5, "jobs.jsonl:1: invalid JSON: expected a JSON object"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"colour\":\"red\"}\n", NULL, 5,
	 "jobs.jsonl:1: unknown field \"colour\""},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"type\":\"t\"}\n", NULL, 5,
	 "jobs.jsonl:1: field \"type\" appears twice"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"key\":\"a\",\"key\":\"b\"}\n", NULL, 5,
	 "jobs.jsonl:1: field \"key\" appears twice"},
	{FILE_ENQ, NULL, "{\"key\":\"a\"}\n", NULL, 5,
	 "jobs.jsonl:1: \"type\" (a string) is required"},
	{FILE_ENQ, NULL, "{\"type\":5}\n", NULL, 5, "jobs.jsonl:1: \"type\" must be a string"},
	{FILE_ENQ, NULL, "{\"type\":\"\"}\n", NULL, 5, "jobs.jsonl:1: no task type given"},
	{FILE_ENQ, NULL, "{\"type\":\"t\"}\n{\"type\":\"nosuch\"}\n", NULL, 5,
	 "jobs.jsonl:2: unknown task type 'nosuch'; configured types: t, tol, big"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"key\":\"\"}\n", NULL, 5, "jobs.jsonl:1: key is empty"},
	{FILE_ENQ, NULL, NULL, NULL, 5,
	 "jobs.jsonl:1: key is 513 bytes, more than the limit of 512", gen_key_513, TO_FILE},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"key\":\"a\xff\"}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: invalid UTF-8"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"key\":\"a\\u0000b\"}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: \\u0000 is not allowed"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"key\":5}\n", NULL, 5,
	 "jobs.jsonl:1: \"key\" must be a string or null"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":[1]}\n", NULL, 5,
	 "jobs.jsonl:1: \"params\" must be a JSON object"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":\"{}\"}\n", NULL, 5,
	 "jobs.jsonl:1: \"params\" must be a JSON object ({...}) or null"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"a\":1e1000000}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: number out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"a\":1e-16384}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: number out of range: more than 16383 digits after"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"a\":\"\\ud800\"}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: high surrogate not followed by a low one"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"a\":\"\\udc00x\"}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: lone low surrogate"},
	{FILE_ENQ, NULL, NULL, NULL, 5, "jobs.jsonl:1: invalid JSON: nested too deeply",
	 gen_deep_line, TO_FILE},
	{FILE_ENQ, NULL, NULL, NULL, 5, "jobs.jsonl:1: params are 1048584 bytes", gen_params_big,
	 TO_FILE},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"\xc3\":1}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: invalid UTF-8"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"priority\":1099511627781}\n", NULL, 5,
	 "jobs.jsonl:1: \"priority\" 1099511627781 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"priority\":1.5}\n", NULL, 5,
	 "jobs.jsonl:1: \"priority\" 1.5 is not an integer"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"priority\":\"5\"}\n", NULL, 5,
	 "jobs.jsonl:1: \"priority\" \"5\" is not an integer"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"priority\":-1000001}\n", NULL, 5,
	 "jobs.jsonl:1: \"priority\" -1000001 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"priority\":01}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: expected ',' or '}'"},
	{FILE_ENQ, NULL, NULL, NULL, 5,
	 "jobs.jsonl:1001: \"delay_ms\" 9000000000000000000 is out of range", gen_1001_lines,
	 TO_FILE},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"delay_ms\":-1}\n", NULL, 5,
	 "jobs.jsonl:1: \"delay_ms\" -1 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"delay_ms\":1e3}\n", NULL, 5,
	 "jobs.jsonl:1: \"delay_ms\" 1e3 is not an integer"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_us\":-5}\n", NULL, 5,
	 "jobs.jsonl:1: \"run_at_us\" -5 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_us\":99999999999999999999}\n", NULL, 5,
	 "jobs.jsonl:1: \"run_at_us\" 99999999999999999999 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_us\":1,\"delay_ms\":5}\n", NULL, 5,
	 "jobs.jsonl:1: give run_at_us or delay_ms, not both"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_ms\":1,\"delay_ms\":5}\n", NULL, 5,
	 "jobs.jsonl:1: give run_at_ms or delay_ms, not both"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_us\":5,\"run_at_ms\":5}\n", NULL, 5,
	 "jobs.jsonl:1: give run_at_us or run_at_ms, not both"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"run_at_ms\":0}\n", NULL, 5,
	 "jobs.jsonl:1: \"run_at_ms\" 0 is out of range; it takes an integer in "
	 "1..253402300799999"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"delay_tolerance_ms\":\"x\"}\n", NULL, 5,
	 "jobs.jsonl:1: \"delay_tolerance_ms\" \"x\" is not an integer"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"delay_tolerance_ms\":99999999999999}\n", NULL, 5,
	 "jobs.jsonl:1: \"delay_tolerance_ms\" 99999999999999 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"delay_tolerance_ms\":-1}\n", NULL, 5,
	 "jobs.jsonl:1: \"delay_tolerance_ms\" -1 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"max_attempts\":0}\n", NULL, 5,
	 "jobs.jsonl:1: \"max_attempts\" 0 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"max_attempts\":4294967297}\n", NULL, 5,
	 "jobs.jsonl:1: \"max_attempts\" 4294967297 is out of range"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"max_attempts\":true}\n", NULL, 5,
	 "jobs.jsonl:1: \"max_attempts\" true is not an integer"},
	{FILE_ENQ, NULL, "{\"type\":\"t\"} x\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: trailing characters after the object"},
	{FILE_ENQ, NULL, "{\"type\":\"t\",\"params\":{\"a\":1,}}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: trailing comma"},
	{FILE_ENQ, NULL, NULL, NULL, 5, "jobs.jsonl:2: invalid JSON: control character in string",
	 gen_nul_line, TO_FILE},
	{FILE_ENQ, NULL, "{\n", NULL, 5, "jobs.jsonl:1: invalid JSON: unexpected end of input"},
	{FILE_ENQ, NULL, "{\"type\":\"t\tx\"}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: control character in string"},
	{FILE_ENQ, NULL, "\xef\xbb\xbf{\"type\":\"t\"}\n", NULL, 5,
	 "jobs.jsonl:1: invalid JSON: expected a JSON object"},
	{FILE_ENQ, NULL, "{\"\\u0074ype\":\"t\",\"colour\":1}\n", NULL, 5,
	 "jobs.jsonl:1: unknown field \"colour\""},
	{FILE_ENQ, NULL, NULL, NULL, 5, "jobs.jsonl:1: invalid JSON: unexpected end of input",
	 gen_long_bad_line, TO_FILE},
	{{"enqueue", "--file", "@DIR@"}, NULL, NULL, NULL, 5, "is a directory, not a file of jobs"},
	{{"enqueue", "--file", "@DIR@/nope.jsonl"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "cannot open @DIR@/nope.jsonl: No such file"},
	{{"enqueue", "--file", "-"},
	 NULL,
	 NULL,
	 "{\"type\":\"t\"}\n\n{\"type\":\"t\",\"x\":1}\n",
	 5,
	 "stdin:3: unknown field \"x\""},

	/* ---- job data on the command line: exit 5 ----------------------------- */
	{{"enqueue", "--type", "t", "--params", "{\"a\":1e1000000}"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "params are not valid JSON: number out of range"},
	{{"enqueue", "--type", "t", "--params", "{x"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "params are not valid JSON: expected a string key at byte 1"},
	{{"enqueue", "--type", "t", "--params", "[1]"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "params must be a JSON object ({...}), not an array"},
	{{"enqueue", "--type", "t", "--params", "42"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "params must be a JSON object ({...}), not a number"},
	{{"enqueue", "--type", "t", "--params", "[1,"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "params are not valid JSON"},
	{{"enqueue", "--type", "t", "--params", "{\"a\":\"\\u0000\"}"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "\\u0000 is not allowed"},
	{{"enqueue", "--type", "t", "--params", "{\"a\":\"\\udc00\"}"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "lone low surrogate"},
	{{"enqueue", "--type", "t", "--params", "@GEN@"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "nested too deeply",
	 gen_deep_arg,
	 TO_ARG},
	{{"enqueue", "--type", "t", "--params", "{\"a\":1}x"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "trailing characters after the object"},
	{{"enqueue", "--type", "t", "--params", "{\"a\":\"x\ty\"}"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "control character in string"},
	{{"enqueue", "--type", "t", "--key", "a\xff"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "key is not valid UTF-8 (at byte 2)"},
	{{"enqueue", "--type", "t", "--key", "a\xed\xa0\x80"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "key is not valid UTF-8"},
	{{"enqueue", "--type", "t", "--key", "@GEN@"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "key is 513 bytes",
	 gen_key_513_arg,
	 TO_ARG},
	{{"enqueue", "--type", "t", "--key", ""}, NULL, NULL, NULL, 5, "key is empty"},
	{{"enqueue", "--type", "nosuch"}, NULL, NULL, NULL, 5, "unknown task type 'nosuch'"},
	{{"claim", "--types", "t:1", "--worker", "w\xff"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "--worker is not valid UTF-8"},
	{{"start", "--worker", "", "5:1"}, NULL, NULL, NULL, 5, "--worker must be 1-200 bytes"},
	{{"fail", "--worker", "w", "--error", "bad\xc3", "5:1"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "--error is not valid UTF-8"},
	{{"cancel", "--type", "t", "--key", "\xfe"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "--key is not valid UTF-8"},

	/* ---- options: exit 2 --------------------------------------------------- */
	{{"enqueue", "--type", "t", "--key", "k", "{\"a\":1}"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "unexpected argument '{\"a\":1}'"},
	{{"enqueue", "--type", "t", "--delay", "200000000d"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--delay '200000000d' is out of range; it takes 0ms..36525d"},
	{{"enqueue", "--type", "t", "--delay", "5"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--delay '5' is not a duration"},
	{{"enqueue", "--type", "t", "--delay", "-5s"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--delay '-5s' is not a duration"},
	{{"enqueue", "--type", "t", "--delay", "1e3s"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--delay '1e3s' is not a duration"},
	{{"enqueue", "--type", "t", "--delay", "1e999999d"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--delay '1e999999d' is not a duration"},
	{{"enqueue", "--type", "t", "--delay", "99999999999999999999999999999d"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "is out of range"},
	{{"enqueue", "--type", "t", "--tolerance", "400d"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--tolerance '400d' is out of range; it takes 0ms..365d"},
	{{"enqueue", "--type", "t", "--priority", "1099511627781"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--priority '1099511627781' is out of range"},
	{{"enqueue", "--type", "t", "--priority", "abc"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--priority 'abc' is not an integer"},
	{{"enqueue", "--type", "t", "--priority", " 5"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--priority ' 5' is not an integer"},
	{{"enqueue", "--type", "t", "--priority", "0x10"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--priority '0x10' is not an integer"},
	{{"enqueue", "--type", "t", "--max-attempts", "0"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--max-attempts '0' is out of range"},
	{{"enqueue", "--type", "t", "--max-attempts", "4294967297"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--max-attempts '4294967297' is out of range"},
	{{"enqueue", "--file", "@FILE@", "--batch", "0"},
	 NULL,
	 "{\"type\":\"t\"}\n",
	 NULL,
	 2,
	 "--batch '0' is out of range"},
	{{"enqueue", "--file", "@FILE@", "--batch", "100001"},
	 NULL,
	 "{\"type\":\"t\"}\n",
	 NULL,
	 2,
	 "--batch '100001' is out of range"},
	{{"enqueue", "--file", "@FILE@", "--type", "t"},
	 NULL,
	 "{\"type\":\"t\"}\n",
	 NULL,
	 2,
	 "--file takes every setting from its lines"},
	{{"enqueue", "--type", "t", "--batch", "5"}, NULL, NULL, NULL, 2, "--batch is for --file"},
	{{"enqueue"}, NULL, NULL, NULL, 2, "give --type (one job) or --file (a batch)"},
	{{"enqueue", "--type", "t", "--frob"}, NULL, NULL, NULL, 2, "unknown option '--frob'"},
	{{"enqueue", "--type"}, NULL, NULL, NULL, 2, "option '--type' needs a value"},
	{{"enqueue", "--type", "t", "-z"}, NULL, NULL, NULL, 2, "unknown option '-z'"},
	{{"claim", "--types", "t:x", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the limit 'x' is not an integer"},
	{{"claim", "--types", "t:100001", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the limit '100001' is out of range"},
	{{"claim", "--types", "t:-1", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the limit '-1' is out of range"},
	{{"claim", "--types", "t", "--worker", "w"}, NULL, NULL, NULL, 2, "'t' must be TYPE:LIMIT"},
	{{"claim", "--types", ",", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--types ',' names no TYPE:LIMIT"},
	{{"claim", "--types", "t:1", "--worker", "w", "extra"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "unexpected argument 'extra'"},
	{{"claim", "--types", "t:1"}, NULL, NULL, NULL, 2, "--types and --worker are required"},
	{{"claim", "--types", "t:0", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the limit '0' is out of range"},
	{{"claim", "--types", "t:1,t:2", "--worker", "w"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "type 't' is named twice in --types"},
	{{"move", "--partitions", "0-3000000000", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'0-3000000000' is out of range; the cluster's partitions are 0..63"},
	{{"move", "--partitions", "0-99999999999999999999", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "is out of range; the cluster's partitions are 0..63"},
	{{"move", "--partitions", "64", "--to", "s2"}, NULL, NULL, NULL, 2, "'64' is out of range"},
	{{"move", "--partitions", "1,1", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "partition 1 is named twice"},
	{{"move", "--partitions", "5-2", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the range '5-2' runs backwards"},
	{{"move", "--partitions", "a", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'a' is not a partition or a range"},
	{{"move", "--partitions", "1,", "--to", "s2"}, NULL, NULL, NULL, 2, "ends with a comma"},
	/* what the command line names is refused as a bad command line (it
	 * once exited 5, "invalid input"), with and without --dry-run */
	{{"move", "--count", "1", "--from", "s1", "--to", "s1", "--dry-run"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the partitions are on s1 already"},
	{{"move", "--count", "1", "--from", "s1", "--to", "s1"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "the partitions are on s1 already"},
	{{"move", "--dry-run"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "give --to and either --partitions or --count with --from"},
	{{"move", "--partitions", "1", "--to", "s2", "--count", "3"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "give --to and either --partitions or --count with --from"},
	{{"move", "--partitions", "1", "--to", "nosuch"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--to: no shard 'nosuch' in the config"},
	{{"move", "--count", "0", "--from", "s1", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--count '0' is out of range"},
	{{"move", "--count", "5", "--from", "nosuch", "--to", "s2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--from: no shard 'nosuch' in the config"},
	{{"move", "--partitions", "1", "--to", "s2", "--set-size", "0"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--set-size '0' is out of range"},
	{{"move", "--partitions", "1", "--to", "s2", "--lock-timeout", "2h"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--lock-timeout '2h' is out of range; it takes 1ms..1h"},
	{{"move", "--partitions", "1", "--to", "s2", "--pause", "abc"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--pause 'abc' is not a duration"},
	{{"move", "--partitions", "1", "--to", "s2", "extra"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "unexpected argument 'extra'"},
	{{"moves", "--resume", "abc"}, NULL, NULL, NULL, 2, "--resume 'abc' is not an integer"},
	{{"moves", "--abort", "0"}, NULL, NULL, NULL, 2, "--abort '0' is out of range"},
	{{"moves", "--abort", "99999999999999999999"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--abort '99999999999999999999' is out of range"},
	{{"moves", "--resume", "1", "--abort", "2"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "give one of --all, --resume and --abort"},
	{{"moves", "extra"}, NULL, NULL, NULL, 2, "unexpected argument 'extra'"},
	{{"rebalance", "extra"}, NULL, NULL, NULL, 2, "unexpected argument 'extra'"},
	{{"rebalance", "--set-size", "65537"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--set-size '65537' is out of range"},
	{{"rebalance", "--partitions", "1"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "option '--partitions' is not one of rebalance's"},
	{{"stats", "extra"}, NULL, NULL, NULL, 2, "unexpected argument 'extra'"},
	{{"stats", "--frob"}, NULL, NULL, NULL, 2, "unknown option '--frob'"},
	{{"map", "extra"}, NULL, NULL, NULL, 2, "unexpected argument 'extra'"},
	{{"init", "extra"}, NULL, NULL, NULL, 2, "unexpected argument 'extra'"},
	{{"get"}, NULL, NULL, NULL, 2, "give one job id"},
	{{"get", "abc"}, NULL, NULL, NULL, 2, "job id 'abc' is not an integer"},
	{{"get", "0"}, NULL, NULL, NULL, 2, "job id '0' is out of range"},
	{{"get", "99999999999999999999"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "job id '99999999999999999999' is out of range"},
	{{"get", "1", "2"}, NULL, NULL, NULL, 2, "unexpected argument '2'"},
	{{"cancel", "abc"}, NULL, NULL, NULL, 2, "job id 'abc' is not an integer"},
	{{"cancel", "--type", "t"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "give job ids, --type and --key, or --type and --status"},
	{{"cancel", "--type", "t", "--key", "k", "5"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "unexpected argument '5'"},
	{{"demo", "--jobs", "0"}, NULL, NULL, NULL, 2, "--jobs '0' is out of range"},
	{{"demo", "--batch", "abc"}, NULL, NULL, NULL, 2, "--batch 'abc' is not an integer"},
	{{"demo", "--claim", "2"}, NULL, NULL, NULL, 2, "--claim '2' is out of range"},
	{{"frobnicate"}, NULL, NULL, NULL, 2, "unknown command 'frobnicate'"},
	{{"--bogus"}, NULL, NULL, NULL, 2, "unknown option '--bogus'"},
	{{"heartbeat", "--worker", "w"}, NULL, NULL, NULL, 2, "at least one ID:ATTEMPT"},
	{{"start", "--worker", "w", "--error", "x", "5:1"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "--error and --permanent are for 'fail' only"},

	/* ---- job references: exit 2 on the command line, 5 on stdin ----------- */
	{{"complete", "--worker", "w", "5:4294967297"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'5:4294967297' is not a job reference"},
	{{"complete", "--worker", "w", "99999999999999999999:1"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'99999999999999999999:1' is not a job reference"},
	{{"complete", "--worker", "w", "5:99999999999"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'5:99999999999' is not a job reference"},
	{{"complete", "--worker", "w", "0:1"}, NULL, NULL, NULL, 2, "'0:1' is not a job reference"},
	{{"complete", "--worker", "w", "5"}, NULL, NULL, NULL, 2, "'5' is not a job reference"},
	{{"complete", "--worker", "w", "5:x"}, NULL, NULL, NULL, 2, "'5:x' is not a job reference"},
	/* a negative id reads as an option */
	{{"complete", "--worker", "w", "-5:1"}, NULL, NULL, NULL, 2, "unknown option '-5'"},
	{{"complete", "--worker", "w", " 5:1"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "' 5:1' is not a job reference"},
	{{"complete", "--worker", "w", "5:1:"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'5:1:' is not a job reference"},
	{{"complete", "--worker", "w", "5:1", "abc"},
	 NULL,
	 NULL,
	 NULL,
	 2,
	 "'abc' is not a job reference"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5,\"attempt\":4294967297}\n",
	 5,
	 "stdin line 1: \"attempt\" 4294967297 is out of range"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":99999999999999999999,\"attempt\":1}\n",
	 5,
	 "stdin line 1: \"id\" 99999999999999999999 is out of range"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":\"5\",\"attempt\":1}\n",
	 5,
	 "stdin line 1: \"id\" \"5\" is not an integer"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5}\n",
	 5,
	 "stdin line 1: expected a JSON object with integer \"id\" and \"attempt\""},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "hello\n",
	 5,
	 "stdin line 1: invalid JSON: expected a JSON object"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5,\"attempt\":1.0}\n",
	 5,
	 "stdin line 1: \"attempt\" 1.0 is not an integer"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5,\"id\":6,\"attempt\":1}\n",
	 5,
	 "stdin line 1: \"id\" appears twice"},
	{{"complete", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5,\"attempt\":1}\n{\"id\":0,\"attempt\":1}\n",
	 5,
	 "stdin line 2: \"id\" 0 is out of range"},
	{{"heartbeat", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 NULL,
	 5,
	 "stdin line 1: \"attempt\" 4294967297 is out of range",
	 gen_long_ref,
	 TO_IN},
	{{"release", "--worker", "w", "-"},
	 NULL,
	 NULL,
	 "{\"id\":5,\"attempt\":-1}\n",
	 5,
	 "stdin line 1: \"attempt\" -1 is out of range"},
};
#pragma GCC diagnostic pop

/* Runs one case in this run's directory. */
static void run_case(size_t k, const bad_case *bc)
{
	char cfg[1024], file[1024], *ccfg = NULL;
	const char *args[32];
	char *argbuf[16] = {0};
	int n = 0, nb = 0;
	sq_buf gen;
	sq_buf_init(&gen);
	sq_buf_append(&gen, "", 0);
	if (bc->gen)
		bc->gen(&gen);
	path_in(cfg, sizeof(cfg), "case.ini");
	path_in(file, sizeof(file), "jobs.jsonl");
	if (bc->gen_to == TO_CFG) {
		test_write_bytes(cfg, gen.data, gen.len);
	} else if (bc->config) {
		ccfg = subst(bc->config);
		test_write_bytes(cfg, ccfg, strlen(ccfg));
	} else {
		snprintf(cfg, sizeof(cfg), "%s", good);
	}
	if (bc->gen_to == TO_FILE)
		test_write_bytes(file, gen.data, gen.len);
	else if (bc->file)
		test_write_bytes(file, bc->file, strlen(bc->file));
	else
		unlink(file);
	if (!bc->args[0] || strcmp(bc->args[0], "-c")) {
		args[n++] = "-c";
		args[n++] = cfg;
	}
	for (int i = 0; bc->args[i]; i++) {
		const char *a = bc->args[i];
		if (!strcmp(a, "@FILE@"))
			a = file;
		else if (!strcmp(a, "@GEN@"))
			a = gen.data;
		else if (strstr(a, "@DIR@"))
			a = argbuf[nb++] = subst(a);
		args[n++] = a;
	}
	args[n] = NULL;
	char *before = fingerprint(), *out, *err, *want = subst(bc->err);
	const char *in = bc->gen_to == TO_IN ? gen.data : bc->in;
	size_t inlen = bc->gen_to == TO_IN ? gen.len : in ? strlen(in) : 0;
	int code = test_cli_argv(args, in, inlen, &out, &err);
	char *after = fingerprint();
	char what[160];
	snprintf(what, sizeof(what), "case %zu (%s %s %s)", k + 1, bc->args[0],
		 bc->args[1] ? bc->args[1] : "", bc->args[1] && bc->args[2] ? bc->args[2] : "");
	ck_assert_msg(!strstr(err, "runtime error") && !strstr(err, "AddressSanitizer") &&
			      !strstr(err, "LeakSanitizer"),
		      "%s: sanitizer report:\n%s", what, err);
	ck_assert_msg(code == bc->code, "%s: exit %d, expected %d; stderr: %s", what, code,
		      bc->code, err);
	size_t len = strlen(err);
	ck_assert_msg(len > 0 && err[len - 1] == '\n' && !memchr(err, '\n', len - 1),
		      "%s: stderr is not one line:\n%s", what, err);
	ck_assert_msg(!strncmp(err, "shardq", 6), "%s: stderr does not start with shardq: %s", what,
		      err);
	ck_assert_msg(strstr(err, want) != NULL, "%s: stderr lacks \"%s\": %s", what, want, err);
	ck_assert_msg(!strcmp(before, after), "%s: a shard changed", what);
	free(before);
	free(after);
	free(out);
	free(err);
	free(want);
	free(ccfg);
	for (int i = 0; i < nb; i++)
		free(argbuf[i]);
	sq_buf_free(&gen);
}

static void setup(void)
{
	testdb_open(&t, "sqt_badinput", 2, 64, types);
	path_in(good, sizeof(good), "good.ini");
	test_write_bytes(good, t.ini, strlen(t.ini));
	fp[0] = testdb_pg(&t, 0);
	fp[1] = testdb_pg(&t, 1);
}

static void teardown(void)
{
	PQfinish(fp[0]);
	PQfinish(fp[1]);
	testdb_tmpdir_remove();
	testdb_close(&t);
}

START_TEST(bad_input_changes_nothing)
{
	size_t n = sizeof(cases) / sizeof(cases[0]);
	ck_assert_uint_ge(n, 100);
	/* something to change: one job on each shard, so a stray write shows */
	for (int i = 0; i < 8; i++) {
		char key[16];
		snprintf(key, sizeof(key), "seed%d", i);
		enqueue_one(t.client, "t", key, "{\"seed\":true}", NULL);
	}
	for (size_t k = 0; k < n; k++)
		run_case(k, &cases[k]);
	fprintf(stderr, "badinput: %zu cases\n", n);
}
END_TEST

/* ---- good input that the old code cut or broke ------------------------------ */

START_TEST(good_input_passes_whole)
{
	char *out, *err, cfg[1024], file[1024], claimed[1024];
	int64_t id;
	path_in(cfg, sizeof(cfg), "long.ini");
	path_in(file, sizeof(file), "jobs.jsonl");
	path_in(claimed, sizeof(claimed), "claimed");

	/* a 1,000-byte dsn (inih cut lines at 200 bytes) */
	char *ini = malloc(strlen(t.ini) + 2048);
	char pad[1001];
	memset(pad, 'x', 1000);
	pad[1000] = '\0';
	const char *dsn = strstr(t.ini, "dsn = ");
	const char *eol = strchr(dsn, '\n');
	sprintf(ini, "%.*s application_name=%s%s", (int)(eol - t.ini), t.ini, pad, eol);
	test_write_bytes(cfg, ini, strlen(ini));
	free(ini);
	const char *a1[] = {"-c", cfg, "enqueue", "--type", "t", "--key", "long-dsn", NULL};
	ck_assert_msg(test_cli_argv(a1, NULL, 0, &out, &err) == 0, "long dsn: %s", err);
	ck_assert_ptr_nonnull(strstr(out, "\"outcome\":\"inserted\""));
	free(out);
	free(err);

	/* params exactly as written (no trip through a double), and the
	 * documented example line, run_at_us 0 and all */
	const char *jobs =
		"{\"type\":\"t\",\"key\":\"exact\",\"params\":{\"x\":0.1,"
		"\"big\":123456789012345678901234567890,\"e\":\"caf\\u00e9\"}}\n"
		"{\"type\":\"t\",\"key\":\"user:42\",\"params\":{\"to\":\"a@b.c\"},\"priority\":0,"
		"\n"
		"\"delay_ms\":0,\"run_at_us\":0,\"delay_tolerance_ms\":1000,\"max_attempts\":5}\n";
	/* (the example is one line in the file) */
	char *one = strdup(jobs);
	char *nl = strstr(one, ",\n\"delay_ms\"");
	memmove(nl + 1, nl + 2, strlen(nl + 2) + 1);
	test_write_bytes(file, one, strlen(one));
	free(one);
	const char *a2[] = {"-c", good, "enqueue", "--file", file, NULL};
	ck_assert_msg(test_cli_argv(a2, NULL, 0, &out, &err) == 0, "exact: %s", err);
	ck_assert_int_eq(sscanf(out, "{\"id\":%" SCNd64, &id), 1);
	free(out);
	free(err);
	sq_job j;
	sq_error e;
	ck_assert_int_eq(sq_get_job(t.client, id, &j, &e), SQ_OK);
	ck_assert_msg(strstr(j.params, "\"x\": 0.1") &&
			      strstr(j.params, "123456789012345678901234567890") &&
			      strstr(j.params, "caf\xc3\xa9"),
		      "params: %s", j.params);
	sq_job_clear(&j);

	/* a line as HTTP takes it: run_at_ms, a null tolerance for none, null
	 * params for {} */
	int64_t at_ms = (int64_t)time(NULL) * 1000 + 3600 * 1000 + 123;
	char http_line[256];
	snprintf(http_line, sizeof(http_line),
		 "{\"type\":\"tol\",\"key\":\"http-line\",\"run_at_ms\":%" PRId64
		 ",\"delay_tolerance_ms\":null,\"params\":null}\n",
		 at_ms);
	test_write_bytes(file, http_line, strlen(http_line));
	ck_assert_msg(test_cli_argv(a2, NULL, 0, &out, &err) == 0, "http line: %s", err);
	ck_assert_int_eq(sscanf(out, "{\"id\":%" SCNd64, &id), 1);
	free(out);
	free(err);
	ck_assert_int_eq(sq_get_job(t.client, id, &j, &e), SQ_OK);
	ck_assert_int_eq(j.schedule_time_us, at_ms * 1000);
	ck_assert_str_eq(j.params, "{}");
	ck_assert_msg(j.delay_tolerance_time_us == 0,
		      "a null delay_tolerance_ms gave a tolerance (the type's is 5s): %" PRId64,
		      j.delay_tolerance_time_us);
	sq_job_clear(&j);

	/* a claimed job with 100 KiB of params goes through `start -` (the
	 * reader took 64 KiB lines) */
	sq_buf big;
	sq_buf_init(&big);
	sq_buf_puts(&big, "{\"s\":\"");
	for (int i = 0; i < 100 * 1024; i++)
		sq_buf_putc(&big, 'p');
	sq_buf_puts(&big, "\"}");
	enqueue_one(t.client, "big", NULL, big.data, NULL);
	sq_buf_free(&big);
	const char *a3[] = {"-c", good, "claim", "--types", "big:5", "--worker", "w", NULL};
	ck_assert_msg(test_cli_argv(a3, NULL, 0, &out, &err) == 0, "claim: %s", err);
	ck_assert_uint_gt(strlen(out), 100 * 1024);
	test_write_bytes(claimed, out, strlen(out));
	const char *a4[] = {"-c", good, "start", "--worker", "w", "-", NULL};
	char *claim_out = out;
	free(err);
	ck_assert_msg(test_cli_argv(a4, claim_out, strlen(claim_out), &out, &err) == 0, "start: %s",
		      err);
	ck_assert_msg(strstr(out, ":1 ok\n") != NULL, "start: %s", out);
	free(claim_out);
	free(out);
	free(err);
}
END_TEST

/* ---- a shard lost half-way through a batch ----------------------------------- */

/* This cluster's config with shard 2 reached through port `port`. */
static char *ini_via(int port)
{
	return testdb_ini_via(t.ini, t.ports[1], port);
}

/* How many jobs carry params key `k` (on every shard), and whether the job
 * with each reported id is there. */
static long long jobs_with(const char *k)
{
	char sql[160];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM shardq.jobs WHERE params ? '%s'", k);
	return testdb_sum(&t, sql);
}

/* Ends the client's session on shard s2 from the server's side, and waits
 * until it is gone. */
static void terminate_session(sq_client *c)
{
	PGconn *pg = testdb_pg(&t, 1);
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d, 10000)",
		 PQbackendPID(c->shards[1].conn));
	PGresult *r = PQexec(pg, sql);
	ck_assert_str_eq(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
	PQfinish(pg);
}

/* How many of the n ids are jobs on the shards (one query per shard). */
static long long jobs_there(const int64_t *ids, int n)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_buf_printf(&b, "SELECT count(*) FROM shardq.jobs WHERE id = ANY('{");
	for (int i = 0; i < n; i++)
		sq_buf_printf(&b, "%s%" PRId64, i ? "," : "", ids[i]);
	sq_buf_printf(&b, "}'::bigint[])");
	long long found = testdb_sum(&t, b.data);
	sq_buf_free(&b);
	return found;
}

/* Through the library: (a) the shard commits but its answer is lost: the
 * jobs are reported written, with their ids; (b) the shard ended the
 * session while it was idle: the client connects again before it sends,
 * and the whole batch is written; (c) the same, but the shard cannot be
 * reached then: its jobs are reported not written, and sending exactly
 * those again leaves every job once. */
START_TEST(lost_shard_reports_exact_set)
{
	testdb_proxy px;
	sq_config *cfg;
	sq_client *c;
	sq_error err;
	/* keyless jobs go in runs of 256 that share a partition: 8 runs, so
	 * that the batch reaches both shards */
	enum { N = 8 * 256 };
	sq_job_spec js[N];
	sq_enqueue_result rs[N];
	char params[N][24];
	testdb_proxy_start(&px, t.ports[1]);
	char *ini = ini_via(px.port);
	ck_assert_int_eq(sq_config_parse(ini, "via-proxy", &cfg, &err), SQ_OK);
	ck_assert_msg(sq_client_open(cfg, 0, &c, &err) == SQ_OK, "%s", err.msg);
	enqueue_one(c, "t", "warm", NULL, NULL);

	/* (a) committed, answer lost */
	memset(js, 0, sizeof(js));
	for (int i = 0; i < N; i++) {
		snprintf(params[i], sizeof(params[i]), "{\"a\":%d}", i);
		js[i].type = "t", js[i].params = params[i];
	}
	atomic_store(&px.armed, 1);
	ck_assert_int_eq(sq_enqueue(c, js, N, rs, &err), SQ_ECONN);
	ck_assert_int_eq(atomic_load(&px.cuts), 1);
	ck_assert_msg(strstr(err.msg, "shard s2") != NULL, "%s", err.msg);
	int on_s2 = 0;
	static int64_t ids[N];
	for (int i = 0; i < N; i++) {
		ck_assert_msg(rs[i].id > 0 && rs[i].outcome == SQ_ENQ_INSERTED,
			      "job %d: id %" PRId64 " %s", i, rs[i].id,
			      sq_enqueue_outcome_name(rs[i].outcome));
		ids[i] = rs[i].id;
		on_s2 += rs[i].shard == 1;
	}
	ck_assert_int_eq(jobs_there(ids, N), N);
	ck_assert_msg(on_s2 > 0 && on_s2 < N, "%d of the batch's %d jobs went to shard s2", on_s2,
		      N);
	ck_assert_int_eq(jobs_with("a"), N);

	/* (b) the shard's session ended while idle: connected again, written */
	terminate_session(c);
	for (int i = 0; i < N; i++) {
		snprintf(params[i], sizeof(params[i]), "{\"b\":%d}", i);
		js[i].params = params[i];
	}
	ck_assert_msg(sq_enqueue(c, js, N, rs, &err) == SQ_OK, "%s", err.msg);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(rs[i].outcome, SQ_ENQ_INSERTED);
	ck_assert_int_eq(jobs_with("b"), N);

	/* (c) ended, and the shard cannot be reached: not written */
	atomic_store(&px.refuse, 1);
	terminate_session(c);
	for (int i = 0; i < N; i++) {
		snprintf(params[i], sizeof(params[i]), "{\"c\":%d}", i);
		js[i].params = params[i];
	}
	ck_assert_int_eq(sq_enqueue(c, js, N, rs, &err), SQ_ECONN);
	sq_job_spec again[N];
	int nagain = 0, written = 0;
	for (int i = 0; i < N; i++) {
		if (rs[i].shard == 1) {
			ck_assert_int_eq(rs[i].outcome, SQ_ENQ_NOT_WRITTEN);
			ck_assert_int_eq(rs[i].id, -1);
			again[nagain++] = js[i];
		} else {
			ck_assert_int_eq(rs[i].outcome, SQ_ENQ_INSERTED);
			ids[written++] = rs[i].id;
		}
	}
	ck_assert_int_eq(jobs_there(ids, written), written);
	ck_assert_int_gt(nagain, 0);
	ck_assert_int_eq(jobs_with("c"), written);
	atomic_store(&px.refuse, 0);
	/* after a failed connect the client waits before it tries that shard
	 * again (0.25 s, doubling to 2 s): until then its part of a call fails
	 * at once, sending nothing; exactly the jobs not written are sent
	 * again (keyless: each call may put them elsewhere) */
	double since = test_now_s();
	while (sq_enqueue(c, again, (size_t)nagain, rs, &err) == SQ_ECONN) {
		ck_assert_msg(strstr(err.msg, "tried again in"), "%s", err.msg);
		int left = 0;
		for (int i = 0; i < nagain; i++)
			if (rs[i].outcome == SQ_ENQ_NOT_WRITTEN)
				again[left++] = again[i];
			else
				ck_assert_int_eq(rs[i].outcome, SQ_ENQ_INSERTED);
		nagain = left;
		ck_assert_msg(test_now_s() - since < testdb_stall_s(), "%s", err.msg);
		usleep(50000);
	}
	ck_assert_int_eq(jobs_with("c"), N);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT params->>'c') FROM shardq.jobs "
					"WHERE params ? 'c'"),
			 N);
	sq_client_close(c);
	sq_config_free(cfg);
	free(ini);
	testdb_proxy_stop(&px);
}
END_TEST

/* Through the CLI: the first batch's shard-2 part commits but its answer is
 * lost; the CLI names exactly the lines written (with ids) and the lines
 * not written, and sending those again leaves each line's job once. */
START_TEST(cli_names_the_lines_written)
{
	testdb_proxy px;
	char cfg[1024], file[1024], again[1024];
	char *out, *err;
	/* batches of 8 keyless runs of 256 (a run shares a partition), so that
	 * the first reaches both shards */
	enum { B = 8 * 256, N = 3 * B };
	testdb_proxy_start(&px, t.ports[1]);
	char *ini = ini_via(px.port);
	path_in(cfg, sizeof(cfg), "lost.ini");
	path_in(file, sizeof(file), "jobs.jsonl");
	path_in(again, sizeof(again), "again.jsonl");
	test_write_bytes(cfg, ini, strlen(ini));
	free(ini);
	sq_buf b;
	sq_buf_init(&b);
	for (int i = 1; i <= N; i++)
		sq_buf_printf(&b, "{\"type\":\"t\",\"params\":{\"line\":%d}}\n", i);
	test_write_bytes(file, b.data, b.len);
	sq_buf_free(&b);

	atomic_store(&px.armed, 1);
	char batch[16];
	snprintf(batch, sizeof(batch), "%d", B);
	const char *a1[] = {"-c", cfg, "enqueue", "--file", file, "--batch", batch, NULL};
	int code = test_cli_argv(a1, NULL, 0, &out, &err);
	ck_assert_int_eq(atomic_load(&px.cuts), 1);
	ck_assert_msg(code == 4, "exit %d: %s", code, err);
	size_t elen = strlen(err);
	ck_assert_msg(elen && !memchr(err, '\n', elen - 1), "not one line: %s", err);
	char want[128];
	snprintf(want, sizeof(want), "%d of %d jobs were written; %d were not (lines %d-%d)", B, N,
		 N - B, B + 1, N);
	ck_assert_msg(strstr(err, "shard s2") && strstr(err, want), "%s", err);
	/* stdout: one line per job, in order, with its line number */
	int line = 0, written = 0;
	static int64_t ids[N];
	sq_buf_init(&b);
	for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
		int64_t id;
		int ln;
		*nl = '\0';
		line++;
		if (sscanf(p,
			   "{\"id\":%" SCNd64
			   ",\"outcome\":\"inserted\",\"shard\":\"s%*d\",\"line\":%d}",
			   &id, &ln) == 2) {
			ck_assert_int_eq(ln, line);
			ck_assert_int_le(ln, B);
			ids[written++] = id;
		} else {
			ck_assert_msg(sscanf(p, "{\"outcome\":\"not_written\",\"line\":%d}", &ln) ==
					      1,
				      "%s", p);
			ck_assert_int_eq(ln, line);
			ck_assert_int_gt(ln, B);
			sq_buf_printf(&b, "{\"type\":\"t\",\"params\":{\"line\":%d}}\n", ln);
		}
	}
	ck_assert_int_eq(line, N);
	ck_assert_int_eq(written, B);
	ck_assert_int_eq(jobs_there(ids, written), B);
	/* the shards hold exactly the lines reported written */
	ck_assert_int_eq(jobs_with("line"), B);
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM shardq.jobs WHERE params ? 'line' "
		 "AND (params->>'line')::int BETWEEN 1 AND %d",
		 B);
	ck_assert_int_eq(testdb_sum(&t, sql), B);
	free(out);
	free(err);
	/* send exactly those again: every line once */
	test_write_bytes(again, b.data, b.len);
	sq_buf_free(&b);
	const char *a2[] = {"-c", cfg, "enqueue", "--file", again, "--quiet", NULL};
	ck_assert_msg(test_cli_argv(a2, NULL, 0, &out, &err) == 0, "%s", err);
	ck_assert_int_eq(jobs_with("line"), N);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(DISTINCT params->>'line') FROM shardq.jobs "
					"WHERE params ? 'line'"),
			 N);
	free(out);
	free(err);
	testdb_proxy_stop(&px);
}
END_TEST

/* ---- a zeroed sq_job_spec takes its type's delay tolerance ------------------ */

static int64_t tolerance_of(int64_t id)
{
	sq_job j;
	sq_error err;
	ck_assert_int_eq(sq_get_job(t.client, id, &j, &err), SQ_OK);
	int64_t tol =
		j.delay_tolerance_time_us ? j.delay_tolerance_time_us - j.schedule_time_us : 0;
	sq_job_clear(&j);
	return tol;
}

START_TEST(zeroed_spec_takes_type_tolerance)
{
	sq_job_spec js[4];
	sq_enqueue_result rs[4];
	sq_error err;
	memset(js, 0, sizeof(js));
	for (int i = 0; i < 4; i++)
		js[i].type = "tol";
	js[1].delay_tolerance_ms = SQ_NO_DELAY_TOLERANCE;
	js[2].delay_tolerance_ms = 2000;
	ck_assert_int_eq(sq_enqueue(t.client, js, 3, rs, &err), SQ_OK);
	ck_assert_int_eq(tolerance_of(rs[0].id), 5000000); /* [type tol] delay_tolerance = 5s */
	ck_assert_int_eq(tolerance_of(rs[1].id), 0);
	ck_assert_int_eq(tolerance_of(rs[2].id), 2000000);
	/* a type without one: none */
	js[3].type = "t";
	ck_assert_int_eq(sq_enqueue(t.client, &js[3], 1, rs, &err), SQ_OK);
	ck_assert_int_eq(tolerance_of(rs[0].id), 0);
	/* -1 meant "the type's default" before; now it is refused, so an old
	 * caller fails loudly instead of quietly getting another meaning */
	long long before = testdb_sum(&t, "SELECT count(*) FROM shardq.jobs");
	js[0].delay_tolerance_ms = -1;
	ck_assert_int_eq(sq_enqueue(t.client, js, 1, rs, &err), SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "job 1: delay_tolerance_ms -1") != NULL, "%s", err.msg);
	/* and a bad job in a big batch: nothing of the batch is written */
	sq_job_spec many[1001];
	sq_enqueue_result mr[1001];
	memset(many, 0, sizeof(many));
	for (int i = 0; i < 1001; i++)
		many[i].type = "t";
	many[656].delay_ms = INT64_C(9000000000000000000);
	ck_assert_int_eq(sq_enqueue(t.client, many, 1001, mr, &err), SQ_EINVAL);
	ck_assert_msg(strstr(err.msg, "job 657: delay_ms 9000000000000000000 is outside") != NULL,
		      "%s", err.msg);
	ck_assert_int_eq(testdb_sum(&t, "SELECT count(*) FROM shardq.jobs"), before);

	/* the CLI: a type's default, --tolerance 0 for none, a file's 0 too */
	char *out, *err2, file[1024];
	int64_t id;
	const char *a1[] = {"-c", good, "enqueue", "--type", "tol", NULL};
	ck_assert_int_eq(test_cli_argv(a1, NULL, 0, &out, &err2), 0);
	ck_assert_int_eq(sscanf(out, "{\"id\":%" SCNd64, &id), 1);
	ck_assert_int_eq(tolerance_of(id), 5000000);
	free(out);
	free(err2);
	const char *a2[] = {"-c", good, "enqueue", "--type", "tol", "--tolerance", "0", NULL};
	ck_assert_int_eq(test_cli_argv(a2, NULL, 0, &out, &err2), 0);
	ck_assert_int_eq(sscanf(out, "{\"id\":%" SCNd64, &id), 1);
	ck_assert_int_eq(tolerance_of(id), 0);
	free(out);
	free(err2);
	path_in(file, sizeof(file), "jobs.jsonl");
	const char *lines = "{\"type\":\"tol\",\"delay_tolerance_ms\":0}\n{\"type\":\"tol\"}\n";
	test_write_bytes(file, lines, strlen(lines));
	const char *a3[] = {"-c", good, "enqueue", "--file", file, NULL};
	ck_assert_int_eq(test_cli_argv(a3, NULL, 0, &out, &err2), 0);
	char *second = strchr(out, '\n') + 1;
	ck_assert_int_eq(sscanf(out, "{\"id\":%" SCNd64, &id), 1);
	ck_assert_int_eq(tolerance_of(id), 0);
	ck_assert_int_eq(sscanf(second, "{\"id\":%" SCNd64, &id), 1);
	ck_assert_int_eq(tolerance_of(id), 5000000);
	free(out);
	free(err2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("badinput");
	TCase *tc = tcase_create("badinput");
	tcase_set_timeout(tc, 3600);
	tcase_add_checked_fixture(tc, setup, teardown);
	ADD_TEST(tc, bad_input_changes_nothing);
	ADD_TEST(tc, good_input_passes_whole);
	ADD_TEST(tc, lost_shard_reports_exact_set);
	ADD_TEST(tc, cli_names_the_lines_written);
	ADD_TEST(tc, zeroed_spec_takes_type_tolerance);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

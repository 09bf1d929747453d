/* test_unit.c - pure parts: hash golden vectors, rendezvous placement,
 * config validation, the JSON validator, durations, the handler pool.
 * No database. */
#include "buf.h"
#include "clock.h"
#include "config.h"
#include "framing.h"
#include "hrw.h"
#include "json.h"
#include "maintain.h"
#include "pool.h"
#include "shardq.h"
#include "testdb.h"

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Strings in statement arrays: quotes and backslashes escaped, the runs
 * between them copied whole; NULL as the literal NULL. Checked against a
 * character-at-a-time escaper over enough elements that the buffer grows
 * many times mid-element. */
static void naive_arr_str(sq_buf *b, const char *s)
{
	if (!s) {
		sq_buf_puts(b, "NULL,");
		return;
	}
	sq_buf_putc(b, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			sq_buf_putc(b, '\\');
		sq_buf_putc(b, *s);
	}
	sq_buf_puts(b, "\",");
}

START_TEST(array_strings)
{
	static const char *const v[] = {"",       "a",         "a\"b", "\\",     "\"\\\"",
					"x\\\\y", "{\"t\":1}", NULL,   "tail\\", "\"head"};
	sq_buf b, want;
	sq_buf_init(&b);
	sq_arr_open(&b);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		sq_arr_str(&b, v[i]);
	sq_arr_close(&b);
	ck_assert_str_eq(b.data,
			 "{\"\",\"a\",\"a\\\"b\",\"\\\\\",\"\\\"\\\\\\\"\","
			 "\"x\\\\\\\\y\",\"{\\\"t\\\":1}\",NULL,\"tail\\\\\",\"\\\"head\"}");
	sq_buf_free(&b);

	char s[300];
	sq_buf_init(&b);
	sq_buf_init(&want);
	sq_arr_open(&b);
	sq_buf_putc(&want, '{');
	for (int i = 0; i < 2000; i++) {
		int n = (i * 37) % (int)(sizeof(s) - 1);
		for (int k = 0; k < n; k++)
			s[k] = "ab\"c\\d"[(i + k) % 6];
		s[n] = '\0';
		sq_arr_str(&b, i % 97 == 0 ? NULL : s);
		naive_arr_str(&want, i % 97 == 0 ? NULL : s);
	}
	sq_arr_close(&b);
	want.data[want.len - 1] = '}';
	ck_assert_uint_eq(b.len, want.len);
	ck_assert_str_eq(b.data, want.data);
	sq_buf_free(&b);
	sq_buf_free(&want);
}
END_TEST

/* XXH3_64bits output is frozen since xxHash 0.8.0: a change here would remap
 * every partition of every cluster. */
/* Integers in statement arrays are written by hand, not by printf: the
 * extremes, zero and signs must still come out as printf has them. */
START_TEST(array_integers)
{
	static const int64_t v[] = {0,
				    1,
				    -1,
				    9,
				    10,
				    -10,
				    65535,
				    INT32_MAX,
				    INT32_MIN,
				    INT64_MAX,
				    INT64_MIN,
				    INT64_MIN + 1,
				    1234567890123456789};
	sq_buf b, want;
	sq_buf_init(&b);
	sq_buf_init(&want);
	sq_arr_open(&b);
	sq_buf_putc(&want, '{');
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		sq_arr_i64(&b, v[i]);
		sq_buf_printf(&want, "%s%lld", i ? "," : "", (long long)v[i]);
	}
	sq_arr_close(&b);
	sq_buf_putc(&want, '}');
	ck_assert_str_eq(b.data, want.data);
	ck_assert_str_eq(b.data, "{0,1,-1,9,10,-10,65535,2147483647,-2147483648,"
				 "9223372036854775807,-9223372036854775808,-9223372036854775807,"
				 "1234567890123456789}");
	sq_buf_free(&b);
	sq_buf_free(&want);
}
END_TEST

START_TEST(hash_golden)
{
	static const struct {
		const char *in;
		uint64_t out;
	} v[] = {
		{"", 0x2D06800538D394C2ull},
		{"a", 0xE6C632B61E964E1Full},
		{"abc", 0x78AF5F94892F3950ull},
		{"user:42", 0x9FC1E605FA7174AAull},
		{"The quick brown fox jumps over the lazy dog", 0xCE7D19A5418FB365ull},
	};
	char longer[241];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		ck_assert_uint_eq(sq_hash_key(v[i].in, strlen(v[i].in)), v[i].out);
	for (int i = 0; i < 240; i++)
		longer[i] = (char)('0' + i % 10);
	longer[240] = '\0';
	ck_assert_uint_eq(sq_hash_key(longer, 240), 0x73697F089085EABDull);
	ck_assert_uint_eq(sq_partition_of_key("user:42", 7, 16384), 0x9FC1E605FA7174AAull & 16383);
}
END_TEST

static int count_of(const int *plan, uint32_t n, int s)
{
	int c = 0;
	for (uint32_t p = 0; p < n; p++)
		c += plan[p] == s;
	return c;
}

START_TEST(hrw_weights_and_minimal_moves)
{
	enum { P = 16384 };
	const char *ids4[] = {"s1", "s2", "s3", "s4"};
	const char *ids5[] = {"s1", "s2", "s3", "s4", "s5"};
	double w4[] = {1, 1, 1, 1}, w5[] = {1, 1, 1, 1, 1}, wskew[] = {1, 1, 1, 2};
	int *a = malloc(sizeof(int) * P), *b = malloc(sizeof(int) * P),
	    *c = malloc(sizeof(int) * P);
	ck_assert_int_eq(sq_hrw_plan(P, 4, ids4, w4, a), 0);
	for (int s = 0; s < 4; s++)
		ck_assert_int_lt(abs(count_of(a, P, s) - P / 4), P / 4 / 10);
	/* adding a fifth shard: only partitions that go to it move */
	ck_assert_int_eq(sq_hrw_plan(P, 5, ids5, w5, b), 0);
	int moved = 0;
	for (int p = 0; p < P; p++) {
		if (a[p] != b[p]) {
			ck_assert_int_eq(b[p], 4);
			moved++;
		}
	}
	ck_assert_int_lt(abs(moved - P / 5), P / 5 / 10);
	/* weights are honoured: s4 with weight 2 gets about 2/5 */
	ck_assert_int_eq(sq_hrw_plan(P, 4, ids4, wskew, c), 0);
	ck_assert_int_lt(abs(count_of(c, P, 3) - 2 * P / 5), P / 50);
	/* removing (weight 0) moves only that shard's partitions */
	double wdrain[] = {1, 1, 0, 1};
	ck_assert_int_eq(sq_hrw_plan(P, 4, ids4, wdrain, b), 0);
	for (int p = 0; p < P; p++)
		if (a[p] != 2)
			ck_assert_int_eq(b[p], a[p]);
	ck_assert_int_eq(count_of(b, P, 2), 0);
	double zero[] = {0, 0, 0, 0};
	ck_assert_int_eq(sq_hrw_plan(P, 4, ids4, zero, b), -1);
	free(a);
	free(b);
	free(c);
}
END_TEST

START_TEST(config_good)
{
	sq_config *cfg;
	sq_error err;
	const char *ini = "[cluster]\npartitions = 1024\n"
			  "[connection]\nstatement_timeout = 10s\n"
			  "[shard a]\ndsn = host=x\nweight = 2.5\n"
			  "[shard b]\ndsn = host=y\n"
			  "[type email]\nbackoff = linear\nbackoff_base = 250ms\ndedup = rerun\n"
			  "history = true\nmax_attempts = 7\n";
	ck_assert_int_eq(sq_config_parse(ini, "good.ini", &cfg, &err), SQ_OK);
	ck_assert_uint_eq(cfg->partitions, 1024);
	ck_assert_int_eq(cfg->statement_timeout_ms, 10000);
	ck_assert_int_eq(cfg->nshards, 2);
	ck_assert(cfg->shards[0].weight == 2.5);
	ck_assert(cfg->shards[1].weight == 1.0);
	const sq_type_conf *t = sq_config_type(cfg, "email");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->backoff, SQ_BACKOFF_LINEAR);
	ck_assert_int_eq(t->backoff_base_ms, 250);
	ck_assert_int_eq(t->dedup, SQ_DEDUP_RERUN);
	ck_assert_int_eq(t->history, 1);
	ck_assert_int_eq(t->max_attempts, 7);
	ck_assert_int_eq(t->starting_timeout_ms, 30000); /* default */
	ck_assert_str_eq(sq_config_meta_dsn(cfg), "host=x");
	sq_config_free(cfg);
}
END_TEST

/* Every bad key is reported, each with its line, and nothing is returned. */
START_TEST(config_every_bad_key_with_line)
{
	sq_config *cfg = (sq_config *)1;
	sq_error err;
	const char *ini = "[cluster]\n"             /* 1 */
			  "partitions = 1000\n"     /* 2: not a power of two */
			  "[shard s1]\n"            /* 3 */
			  "dsn = host=x\n"          /* 4 */
			  "weight = heavy\n"        /* 5: not a number */
			  "[type email]\n"          /* 6 */
			  "backoff = fibonacci\n"   /* 7: not a choice */
			  "starting_timeout = 30\n" /* 8: no unit */
			  "colour = blue\n"         /* 9: unknown key */
			  "[typo]\n"                /* 10 */
			  "x = 1\n"                 /* 11: unknown section */
			  "[shard s2]\n"            /* 12: no dsn */
			  "weight = 1\n";           /* 13 */
	ck_assert_int_eq(sq_config_parse(ini, "bad.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_ptr_null(cfg);
	ck_assert_ptr_nonnull(strstr(err.msg, "bad.ini:5: [shard s1] weight: expected a number"));
	ck_assert_ptr_nonnull(
		strstr(err.msg, "bad.ini:7: [type email] backoff: 'fibonacci' is not one of"));
	ck_assert_ptr_nonnull(
		strstr(err.msg, "bad.ini:8: [type email] starting_timeout: expected a duration"));
	ck_assert_ptr_nonnull(strstr(err.msg, "bad.ini:9: [type email] colour: unknown key"));
	ck_assert_ptr_nonnull(strstr(err.msg, "bad.ini:11: [typo] x: unknown section"));
	ck_assert_ptr_nonnull(strstr(err.msg, "bad.ini:12: [shard s2] dsn: missing"));
	ck_assert_ptr_nonnull(strstr(err.msg, "[cluster] partitions: 1000 is not a power of two"));
	/* one line per problem */
	int lines = 1;
	for (const char *p = err.msg; *p; p++)
		lines += *p == '\n';
	ck_assert_int_eq(lines, 7);
}
END_TEST

/* claim_wait_max not below request_timeout: the line and key the file set,
 * and the value it conflicts with, a default named as one. */
START_TEST(config_claim_wait_conflict_names_the_key_set)
{
	sq_config *cfg;
	sq_error err;
	const char *base = "[cluster]\npartitions = 64\n[shard s1]\ndsn = host=x\n[daemon]\n";
	char ini[512];
	/* only request_timeout set: below the default claim_wait_max (20s) */
	snprintf(ini, sizeof(ini), "%slisten = 127.0.0.1:1\nrequest_timeout = 10s\n", base);
	ck_assert_int_eq(sq_config_parse(ini, "d.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "d.ini:7: [daemon] request_timeout: 10s must be above "
				      "claim_wait_max (20s, its default)") != NULL,
		      "%s", err.msg);
	/* only claim_wait_max set: above the default request_timeout (30s) */
	snprintf(ini, sizeof(ini), "%sclaim_wait_max = 40s\n", base);
	ck_assert_int_eq(sq_config_parse(ini, "d.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "d.ini:6: [daemon] claim_wait_max: 40s must be below "
				      "request_timeout (30s, its default)") != NULL,
		      "%s", err.msg);
	/* both set */
	snprintf(ini, sizeof(ini), "%sclaim_wait_max = 5s\nrequest_timeout = 5s\n", base);
	ck_assert_int_eq(sq_config_parse(ini, "d.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "d.ini:6: [daemon] claim_wait_max: 5s must be below "
				      "request_timeout (5s)") != NULL,
		      "%s", err.msg);
	snprintf(ini, sizeof(ini), "%sclaim_wait_max = 4s\nrequest_timeout = 5s\n", base);
	ck_assert_int_eq(sq_config_parse(ini, "d.ini", &cfg, &err), SQ_OK);
	sq_config_free(cfg);
}
END_TEST

START_TEST(config_missing_file)
{
	sq_config *cfg;
	sq_error err;
	ck_assert_int_eq(sq_config_load("/nonexistent/shardq.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/shardq.ini"));
	ck_assert_ptr_nonnull(strstr(err.msg, "No such file"));
}
END_TEST

START_TEST(config_no_shard)
{
	sq_config *cfg;
	sq_error err;
	ck_assert_int_eq(sq_config_parse("[cluster]\npartitions = 64\n", "x.ini", &cfg, &err),
			 SQ_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "no shard configured"));
}
END_TEST

static int json_ok(const char *s)
{
	return sq_json_validate_object(s, strlen(s), NULL, NULL) == 0;
}

START_TEST(json_validator)
{
	ck_assert(json_ok("{}"));
	ck_assert(json_ok(
		" {\"a\": [1, -2.5e3, true, false, null, {\"b\": \"\\u00e9\\ud83d\\ude00\"}]} "));
	ck_assert(json_ok("{\"k\":\"caf\xc3\xa9\"}"));
	ck_assert(!json_ok(""));
	ck_assert(!json_ok("[1,2]"));      /* not an object */
	ck_assert(!json_ok("{\"a\":1,}")); /* trailing comma */
	ck_assert(!json_ok("{\"a\":01}")); /* leading zero: trailing chars */
	ck_assert(!json_ok("{a:1}"));      /* unquoted key */
	ck_assert(!json_ok("{\"a\":\"\\u0000\"}"));
	ck_assert(!json_ok("{\"a\":\"\\ud800\"}"));
	ck_assert(!json_ok("{\"a\":\"\xff\"}"));
	ck_assert(!json_ok("{\"a\":1} x"));
	ck_assert(!json_ok("{\"a\":tru}"));
	size_t where;
	const char *what;
	ck_assert_int_eq(sq_json_validate_object("{\"a\": nope}", 11, &where, &what), -1);
	ck_assert_uint_eq(where, 6);
	ck_assert_str_eq(what, "unexpected character");
}
END_TEST

START_TEST(durations)
{
	ck_assert_int_eq(sq_parse_duration_ms("0"), 0);
	ck_assert_int_eq(sq_parse_duration_ms("250ms"), 250);
	ck_assert_int_eq(sq_parse_duration_ms("1.5s"), 1500);
	ck_assert_int_eq(sq_parse_duration_ms(".5s"), 500);
	ck_assert_int_eq(sq_parse_duration_ms("5m"), 300000);
	ck_assert_int_eq(sq_parse_duration_ms("5min"), 300000);
	ck_assert_int_eq(sq_parse_duration_ms("5 min"), 300000);
	ck_assert_int_eq(sq_parse_duration_ms("2h"), 7200000);
	ck_assert_int_eq(sq_parse_duration_ms("1d"), 86400000);
	ck_assert_int_eq(sq_parse_duration_ms("36525d"), SQ_MAX_DURATION_MS);
	ck_assert_int_eq(sq_parse_duration_ms("30"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("-1s"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("+1s"), -1);
	ck_assert_int_eq(sq_parse_duration_ms(" 1s"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("soon"), -1);
	ck_assert_int_eq(sq_parse_duration_ms(""), -1);
	ck_assert_int_eq(sq_parse_duration_ms("."), -1);
	ck_assert_int_eq(sq_parse_duration_ms("1e3s"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("0x10s"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("infs"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("nan"), -1);
	ck_assert_int_eq(sq_parse_duration_ms("1sec"), -1);
	/* too long: refused before any conversion to an integer (found by
	 * fuzzing: a double beyond int64 converted is undefined behaviour) */
	ck_assert_int_eq(sq_parse_duration_ms("36526d"), -2);
	ck_assert_int_eq(sq_parse_duration_ms("200000000d"), -2);
	ck_assert_int_eq(sq_parse_duration_ms("9223372036854775808ms"), -2);
	char huge[400];
	memset(huge, '9', sizeof(huge) - 3);
	strcpy(huge + sizeof(huge) - 3, "ms");
	ck_assert_int_eq(sq_parse_duration_ms(huge), -2);
}
END_TEST

/* jsonb stores numbers as numeric: what numeric refuses, the validator
 * refuses (checked against PostgreSQL 15 by hand, one by one). */
START_TEST(json_numbers_numeric_accepts)
{
	static const struct {
		const char *num;
		int ok;
	} v[] = {
		{"1e131071", 1},
		{"9.99e131071", 1},
		{"1e131072", 0},
		{"10e131071", 0},
		{"0.0001e131075", 1},
		{"1e-16383", 1},
		{"1e-16384", 0},
		{"0.1e-16382", 1},
		{"0.1e-16383", 0},
		{"0e1073741822", 1},
		{"0e1073741823", 0},
		{"0e-1073741822", 0},
		{"1e-1073741823", 0},
		{"0e-16383", 1},
		{"0e-16384", 0},
		{"0.0e-16383", 0},
		{"1e1000000", 0},
		{"-1e1000000", 0},
		{"1E+5", 1},
		{"-0", 1},
		{"1e99999999999999999999", 0},
	};
	char doc[128];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		snprintf(doc, sizeof(doc), "{\"a\":[%s]}", v[i].num);
		size_t where;
		const char *what = NULL;
		int got = sq_json_validate_object(doc, strlen(doc), &where, &what) == 0;
		ck_assert_msg(got == v[i].ok, "%s: %s", v[i].num, what ? what : "accepted");
		if (!got) {
			ck_assert_uint_eq(where, 6); /* the number's start */
			ck_assert_ptr_nonnull(strstr(what, "number out of range"));
		}
	}
	/* digits in the thousands, either side of the point */
	size_t n = 16383 + 16;
	char *d = malloc(n + 1);
	memcpy(d, "{\"a\":0.", 7);
	memset(d + 7, '1', 16383);
	strcpy(d + 7 + 16383, "}");
	ck_assert_int_eq(sq_json_validate_object(d, strlen(d), NULL, NULL), 0);
	free(d);
	d = malloc(n + 2);
	memcpy(d, "{\"a\":0.", 7);
	memset(d + 7, '1', 16384);
	strcpy(d + 7 + 16384, "}");
	ck_assert_int_eq(sq_json_validate_object(d, strlen(d), NULL, NULL), -1);
	free(d);
	d = malloc(131072 + 16);
	memcpy(d, "{\"a\":", 5);
	memset(d + 5, '9', 131072);
	strcpy(d + 5 + 131072, "}");
	ck_assert_int_eq(sq_json_validate_object(d, strlen(d), NULL, NULL), 0);
	memset(d + 5, '9', 131073);
	strcpy(d + 5 + 131073, "}");
	ck_assert_int_eq(sq_json_validate_object(d, strlen(d), NULL, NULL), -1);
	free(d);
}
END_TEST

START_TEST(json_depth_and_strings)
{
	char doc[2 * 600 + 16];
	size_t k = 5;
	/* 512 levels: the object and 511 arrays */
	memcpy(doc, "{\"a\":", 5);
	for (int i = 0; i < 511; i++)
		doc[k++] = '[';
	for (int i = 0; i < 511; i++)
		doc[k++] = ']';
	doc[k++] = '}';
	ck_assert_int_eq(sq_json_validate_object(doc, k, NULL, NULL), 0);
	k = 5;
	for (int i = 0; i < 512; i++)
		doc[k++] = '[';
	for (int i = 0; i < 512; i++)
		doc[k++] = ']';
	doc[k++] = '}';
	const char *what;
	size_t where;
	ck_assert_int_eq(sq_json_validate_object(doc, k, &where, &what), -1);
	ck_assert_ptr_nonnull(strstr(what, "nested too deeply"));
	/* strings: escapes decode, bad UTF-8 and lone surrogates do not pass,
	 * in keys as in values */
	ck_assert(!json_ok("{\"\xc3\":1}"));
	ck_assert(!json_ok("{\"\xed\xa0\x80\":1}"));         /* an encoded surrogate */
	ck_assert(!json_ok("{\"a\":\"\xc0\xaf\"}"));         /* overlong */
	ck_assert(!json_ok("{\"a\":\"\xf4\x90\x80\x80\"}")); /* above U+10FFFF */
	ck_assert(!json_ok("{\"a\":\"\\udc00\"}"));
	ck_assert(!json_ok("{\"a\":\"\\ud800\\u0041\"}"));
	ck_assert(!json_ok("{\"\\u0000\":1}"));
	ck_assert(!json_ok("{\"a\":\"x\ty\"}")); /* a raw control character */
	ck_assert(!json_ok("{\"a\":1,\"b\"}"));
	ck_assert(!json_ok("{\"a\":[1,]}"));
	ck_assert(!json_ok("{\"a\":1"));
	ck_assert(!json_ok("\xef\xbb\xbf{}"));
	const char *raw = "a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00";
	char out[64];
	size_t n = sq_json_unescape(raw, strlen(raw), out);
	ck_assert_str_eq(out, "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80");
	ck_assert_uint_eq(n, strlen(out));
	/* members, raw */
	const char *obj = " { \"type\" : \"t\", \"params\":{\"x\":[1,{}]} ,\"n\":-5 } ";
	ck_assert_int_eq(sq_json_validate_object(obj, strlen(obj), NULL, NULL), 0);
	size_t pos = 0;
	sq_json_member m;
	ck_assert_int_eq(sq_json_next_member(obj, strlen(obj), &pos, &m), 1);
	ck_assert_int_eq((int)m.key_len, 4);
	ck_assert_int_eq(m.kind, SQ_JSON_STRING);
	ck_assert_int_eq(sq_json_next_member(obj, strlen(obj), &pos, &m), 1);
	ck_assert_int_eq(m.kind, SQ_JSON_OBJECT);
	ck_assert(m.val_len == strlen("{\"x\":[1,{}]}") &&
		  !memcmp(m.val, "{\"x\":[1,{}]}", m.val_len));
	ck_assert_int_eq(sq_json_next_member(obj, strlen(obj), &pos, &m), 1);
	ck_assert_int_eq(m.kind, SQ_JSON_NUMBER);
	ck_assert(m.val_len == 2 && !memcmp(m.val, "-5", 2));
	ck_assert_int_eq(sq_json_next_member(obj, strlen(obj), &pos, &m), 0);
	/* UTF-8 of keys */
	ck_assert(sq_json_utf8_valid("user:\xc3\xa9", 7, NULL));
	ck_assert(!sq_json_utf8_valid("a\xff", 2, &where));
	ck_assert_uint_eq(where, 1);
	ck_assert(!sq_json_utf8_valid("a\0b", 3, &where));
	ck_assert_uint_eq(where, 1);
}
END_TEST

/* inih's Debian build cuts lines at 200 bytes; ours takes any length. */
START_TEST(config_long_lines_and_repeats)
{
	sq_config *cfg;
	sq_error err;
	char *ini = malloc(4096);
	char app[1001];
	memset(app, 'x', 1000);
	app[1000] = '\0';
	snprintf(ini, 4096,
		 "[shard s1]\ndsn = host=127.0.0.1 port=5432 dbname=shardq user=postgres "
		 "application_name=%s\n",
		 app);
	ck_assert_int_eq(sq_config_parse(ini, "long.ini", &cfg, &err), SQ_OK);
	ck_assert_uint_eq(strlen(cfg->shards[0].dsn),
			  strlen(ini) - 18); /* "[shard s1]\ndsn = " and "\n" */
	sq_config_free(cfg);
	/* a second [shard s1] or [type t], a key given twice, [cluster] twice */
	const char *dup = "[shard s1]\n"      /* 1 */
			  "dsn = host=a\n"    /* 2 */
			  "[type t]\n"        /* 3 */
			  "[shard s1]\n"      /* 4 */
			  "weight = 2\n"      /* 5 */
			  "[type t]\n"        /* 6 */
			  "[cluster]\n"       /* 7 */
			  "partitions = 8\n"  /* 8 */
			  "partitions = 16\n" /* 9 */
			  "[cluster]\n"       /* 10 */
			  "[shard s2]\n"      /* 11 */
			  "dsn = host=b\n"    /* 12 */
			  "dsn = host=c\n";   /* 13 */
	ck_assert_int_eq(sq_config_parse(dup, "dup.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "dup.ini:4: [shard s1]: shard s1 appears a second time "
				      "(first at line 1)"),
		      "%s", err.msg);
	ck_assert_ptr_nonnull(strstr(err.msg, "dup.ini:6: [type t]: type t appears a second time"));
	ck_assert_ptr_nonnull(strstr(
		err.msg, "dup.ini:9: [cluster] partitions: set a second time (first at line 8)"));
	ck_assert_ptr_nonnull(strstr(err.msg, "dup.ini:10: [cluster]: the section appears"));
	ck_assert_ptr_nonnull(strstr(err.msg, "dup.ini:13: [shard s2] dsn: set a second time"));
	ck_assert_ptr_null(strstr(err.msg, ":5:")); /* the repeat's keys are not read */
	/* syntax, comments, a key before any section, an empty unknown section,
	 * a dsn libpq cannot parse */
	const char *odd = "\xef\xbb\xbf; comment\n"                   /* 1 */
			  "partitions = 8\n"                          /* 2 */
			  "[shard s1\n"                               /* 3 */
			  "[shard s1] x\n"                            /* 4 */
			  "[shard s1] ; fine\n"                       /* 5 */
			  "dsn = host='a ; not a comment for libpq\n" /* 6 */
			  "# another\n"                               /* 7 */
			  "just words\n"                              /* 8 */
			  "[nowhere]\n";                              /* 9 */
	ck_assert_int_eq(sq_config_parse(odd, "odd.ini", &cfg, &err), SQ_ECONFIG);
	ck_assert_ptr_nonnull(
		strstr(err.msg, "odd.ini:2: [-] partitions: a key before any section"));
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.ini:3: [?]: syntax error: a section header"));
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.ini:4: [?]: syntax error: text after"));
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.ini:6: [shard s1] dsn: not a libpq connection"));
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.ini:8: [?]: syntax error"));
	ck_assert_ptr_nonnull(strstr(err.msg, "odd.ini:9: [nowhere]: unknown section"));
	free(ini);
}
END_TEST

START_TEST(config_file_is_a_directory)
{
	sq_config *cfg;
	sq_error err;
	char path[1024];
	const char *dir = testdb_tmpdir();
	ck_assert_int_eq(sq_config_load(dir, &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "is a directory"), "%s", err.msg);
	testdb_path(path, sizeof(path), "nul.ini");
	FILE *f = fopen(path, "w");
	fwrite("[shard s1]\ndsn = a\0b\n", 1, 21, f);
	fclose(f);
	ck_assert_int_eq(sq_config_load(path, &cfg, &err), SQ_ECONFIG);
	ck_assert_msg(strstr(err.msg, "nul.ini:2: a NUL byte"), "%s", err.msg);
	testdb_tmpdir_remove();
}
END_TEST

/* The worker's handler pool (src/pool.c), driven as the worker's loop
 * drives it: tasks in, a byte on the pipe, finished tasks out. */
enum { POOL_THREADS = 8, POOL_SHORT = 5000 };

typedef struct {
	atomic_int ran[POOL_SHORT];
	atomic_int inside; /* meeting tasks running now */
	atomic_int most;   /* the most ever running at once */
	int need;          /* a meeting task returns once this many are inside */
	double give_up;    /* monotonic seconds */
} pool_probe;

static sq_job_result probe_short(const sq_job *job, void *arg, char *err, size_t n)
{
	pool_probe *p = arg;
	(void)err;
	(void)n;
	atomic_fetch_add(&p->ran[job->id], 1);
	return SQ_RESULT_DONE;
}

/* Returns only when `need` tasks are inside at once: a pool that leaves a
 * queued task without a thread while threads sleep never gets there. */
static sq_job_result probe_meet(const sq_job *job, void *arg, char *err, size_t n)
{
	pool_probe *p = arg;
	(void)job;
	int in = atomic_fetch_add(&p->inside, 1) + 1, most = atomic_load(&p->most);
	while (in > most && !atomic_compare_exchange_weak(&p->most, &most, in))
		;
	while (atomic_load(&p->most) < p->need && sq_mono_s() < p->give_up)
		usleep(200);
	atomic_fetch_sub(&p->inside, 1);
	if (atomic_load(&p->most) < p->need) {
		snprintf(err, n, "gave up");
		return SQ_RESULT_RETRY;
	}
	return SQ_RESULT_DONE;
}

/* The loop's side: waits on the pipe, then takes what finished, until
 * `n` tasks are back; fails on a stall, saying what is missing. */
static void pool_collect(sq_pool *p, int fd, int n, const char *what)
{
	int back = 0;
	double stall = testdb_stall_s();
	while (back < n) {
		char buf[256];
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		for (sq_task *t = sq_pool_take_done(p, NULL, NULL), *next; t; t = next) {
			next = t->next;
			ck_assert_msg(t->result == SQ_RESULT_DONE && !t->err,
				      "%s: task %lld %s: fewer than %d tasks ran at once", what,
				      (long long)t->job.id, t->err ? t->err : "(no message)",
				      POOL_THREADS);
			free(t->err);
			free(t);
			back++;
		}
		if (back == n)
			break;
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ck_assert_msg(poll(&pf, 1, (int)(stall * 1000)) == 1,
			      "%s: %d of %d tasks back, and no word from the pool for %.0f s: "
			      "a finished task was not told to the loop, or a queued one never ran",
			      what, back, n, stall);
	}
}

static void pool_submit_n(sq_pool *p, int n, sq_handler fn, pool_probe *probe)
{
	for (int i = 0; i < n; i++) {
		sq_task *t = calloc(1, sizeof(*t));
		ck_assert_ptr_nonnull(t);
		t->job.id = i;
		t->fn = fn;
		t->arg = probe;
		sq_pool_submit(p, t);
	}
}

/* The first maintenance pass of each runner comes at its own point of
 * [5 s, the interval], at most an hour: a fleet started together does not
 * open its connections to every shard in the same second. */
START_TEST(maintain_first_pass_is_spread)
{
	const int64_t hour = 3600000;
	int buckets[10] = {0};
	for (uint64_t i = 0; i < 10000; i++) {
		int64_t f = sq_maintain_first_ms(hour, sq_hash_key((const char *)&i, sizeof(i)));
		ck_assert_int_ge(f, SQ_MAINTAIN_FIRST_MS);
		ck_assert_int_le(f, hour);
		buckets[(f - SQ_MAINTAIN_FIRST_MS) * 10 / (hour - SQ_MAINTAIN_FIRST_MS + 1)]++;
	}
	for (int b = 0; b < 10; b++)
		ck_assert_msg(buckets[b] > 800, "tenth %d of the hour has %d first passes of 10000",
			      b, buckets[b]);
	/* a longer interval: still within the first hour */
	ck_assert_int_eq(sq_maintain_first_ms(24 * hour, 0), SQ_MAINTAIN_FIRST_MS);
	ck_assert_int_eq(sq_maintain_first_ms(24 * hour, UINT64_MAX - 1) <= hour, 1);
	/* a short one: after one interval, as before */
	ck_assert_int_eq(sq_maintain_first_ms(1000, 12345), 1000);
	ck_assert_int_eq(sq_maintain_first_ms(5000, 12345), 5000);
	ck_assert_int_eq(sq_maintain_first_ms(6000, 0), 5000);
	ck_assert_int_eq(sq_maintain_first_ms(6000, 1000), 6000);
}
END_TEST

/* Every task runs once and comes back; a burst of short tasks does not
 * leave queued tasks behind sleeping threads (short tasks wake one thread
 * at a time), nor do long ones (one each). */
START_TEST(pool_runs_each_task_once_and_wakes_threads)
{
	int fds[2];
	sq_pool p;
	static pool_probe probe;
	memset(&probe, 0, sizeof(probe));
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(sq_pool_start(&p, POOL_THREADS, 1, fds[1]), 0);

	pool_submit_n(&p, POOL_SHORT, probe_short, &probe);
	pool_collect(&p, fds[0], POOL_SHORT, "5000 short tasks");
	for (int i = 0; i < POOL_SHORT; i++)
		ck_assert_msg(atomic_load(&probe.ran[i]) == 1, "task %d ran %d times", i,
			      atomic_load(&probe.ran[i]));

	/* as many tasks as threads, each needing all the others running: with
	 * the pool taking its tasks for short ones, then for long ones */
	const double modes[2] = {0, 1};
	const char *names[2] = {"tasks taken for short", "tasks taken for long"};
	for (int m = 0; m < 2; m++) {
		pthread_mutex_lock(&p.mu);
		p.avg_run_s = modes[m];
		pthread_mutex_unlock(&p.mu);
		atomic_store(&probe.most, 0);
		probe.need = POOL_THREADS;
		probe.give_up = sq_mono_s() + testdb_stall_s();
		pool_submit_n(&p, POOL_THREADS, probe_meet, &probe);
		pool_collect(&p, fds[0], POOL_THREADS, names[m]);
		printf("pool: %s: %d of %d ran at once\n", names[m], atomic_load(&probe.most),
		       POOL_THREADS);
	}
	sq_pool_stop(&p);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* ---- the framing of HTTP requests (src/daemon/framing.c) ---------------- */

/* in fed whole, then split in two at every byte, then a byte at a time: the
 * same verdict and the same bad_at each way. Returns the verdict; *f as fed
 * whole. */
static int frame(const char *in, sqd_framing *f)
{
	size_t n = strlen(in);
	sqd_framing_init(f);
	int v = sqd_framing_feed(f, in, n);
	for (size_t cut = 0; cut <= n; cut++) {
		sqd_framing g;
		sqd_framing_init(&g);
		int w = sqd_framing_feed(&g, in, cut);
		if (w == SQD_FRAMING_OK)
			w = sqd_framing_feed(&g, in + cut, n - cut);
		ck_assert_msg(w == v, "split at %zu of %s: %d, whole: %d", cut, in, w, v);
		if (v == SQD_FRAMING_BAD)
			ck_assert_msg(g.bad_at == f->bad_at,
				      "split at %zu: bad at %llu, whole: %llu", cut,
				      (unsigned long long)g.bad_at, (unsigned long long)f->bad_at);
	}
	sqd_framing g;
	sqd_framing_init(&g);
	int w = SQD_FRAMING_OK;
	for (size_t i = 0; i < n && w == SQD_FRAMING_OK; i++)
		w = sqd_framing_feed(&g, in + i, 1);
	ck_assert_msg(w == v, "a byte at a time: %d, whole: %d (%s)", w, v, in);
	return v;
}

#define POST_CHUNKED "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"

/* bad at the start of `at` in `in`, with `why` in the reason */
static void expect_bad(const char *in, const char *at, const char *why)
{
	sqd_framing f;
	ck_assert_msg(frame(in, &f) == SQD_FRAMING_BAD, "not refused: %s", in);
	const char *p = strstr(in, at);
	ck_assert_ptr_nonnull(p);
	ck_assert_msg(f.bad_at == (uint64_t)(p - in), "bad at %llu, want %zu: %s (%s)",
		      (unsigned long long)f.bad_at, (size_t)(p - in), in, f.why);
	ck_assert_msg(strstr(f.why, why) != NULL, "'%s' does not say '%s'", f.why, why);
}

START_TEST(framing_valid_requests_pipelined)
{
	sqd_framing f;
	/* lower and upper case hex, a bare LF, spaces after the size, trailers,
	 * leading zeros in the last chunk, then a GET, a Content-Length body that
	 * holds what would be a bad chunk, a HEAD whose chunked header brings no
	 * body, and a chunked body again */
	const char *in =
		POST_CHUNKED "a\r\n0123456789\r\nB\r\nabcdefghijk\r\n1f  \n"
			     "0123456789012345678901234567890\n"
			     "0000\r\nX-Sum: 1\r\nX-Other:\r\n\r\n"
			     "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
			     "POST /v1/jobs HTTP/1.1\r\ncontent-length:  6 \r\n\r\nzz\r\nxx"
			     "HEAD / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			     "PUT /x HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n"
			     "3\r\nabc\r\n0\r\n\r\n";
	ck_assert_int_eq(frame(in, &f), SQD_FRAMING_OK);
	ck_assert_uint_eq(f.pos, strlen(in));
	/* and the next request is followed: a bad chunk after all of these */
	char *more = malloc(strlen(in) + 200);
	sprintf(more, "%s" POST_CHUNKED "2\r\nab\r\nzq\r\n", in);
	expect_bad(more, "zq\r\n", "the chunk size 'zq' is not hexadecimal");
	free(more);
	/* a chunk's size as large as a signed 64-bit number waits for its data */
	ck_assert_int_eq(frame(POST_CHUNKED "7fffffffffffffff\r\nabc", &f), SQD_FRAMING_OK);
	ck_assert_int_eq(frame(POST_CHUNKED "00000000000000000000"
					    "7FFFFFFFFFFFFFFF\r\n",
			       &f),
			 SQD_FRAMING_OK);
}
END_TEST

START_TEST(framing_malformed_chunks)
{
	expect_bad(POST_CHUNKED "zz\r\n", "zz", "the chunk size 'zz' is not hexadecimal");
	expect_bad(POST_CHUNKED "5\r\nhello\r\n1g\r\n", "1g", "the chunk size '1g' is not");
	expect_bad(POST_CHUNKED "0x5\r\nhello\r\n0\r\n\r\n", "0x5", "'0x5' is not hexadecimal");
	expect_bad(POST_CHUNKED " 5\r\nhello\r\n0\r\n\r\n", " 5", "is not hexadecimal");
	expect_bad(POST_CHUNKED "-5\r\n", "-5", "is not hexadecimal");
	expect_bad(POST_CHUNKED "5\r\nhelloXY\r\n0\r\n\r\n", "XY",
		   "the chunk of 5 bytes is not followed by CRLF but by 'XY'");
	expect_bad(POST_CHUNKED "5\r\nhello\rX\r\n", "\rX", "not followed by CRLF");
	expect_bad(POST_CHUNKED "5\r\nhello\r\n\r\n0\r\n\r\n", "\r\n0\r\n\r\n",
		   "a chunk size is missing");
	expect_bad(POST_CHUNKED "5\r\r\nhello", "5\r\r", "a CR not followed by LF");
	expect_bad(POST_CHUNKED "5 x\r\nhello", "5 x", "has more than a size");
	/* chunk extensions: valid HTTP that libevent 2.1 cannot read */
	expect_bad(POST_CHUNKED "0;ext\r\n\r\n", "0;ext", "chunk extension");
	expect_bad(POST_CHUNKED "5;name=value\r\nhello\r\n0\r\n\r\n", "5;name", "extension");
	/* trailers */
	expect_bad(POST_CHUNKED "0\r\nno colon here\r\n\r\n", "no colon",
		   "the trailer line 'no colon here' has no ':'");
	expect_bad(POST_CHUNKED "0\r\nX-A: 1\r\n folded\r\n\r\n", " folded", "folded");
	expect_bad(POST_CHUNKED "0\r\nX-A: 1\rx\r\n\r\n", "X-A", "CR not followed by LF");
	expect_bad(POST_CHUNKED "0\r\n\rx", "\rx", "CR not followed by LF");
	/* a line that never ends */
	char *in = malloc(4096);
	int n = sprintf(in, POST_CHUNKED);
	memset(in + n, '0', 2000);
	in[n + 2000] = '\0';
	sqd_framing f;
	sqd_framing_init(&f);
	ck_assert_int_eq(sqd_framing_feed(&f, in, strlen(in)), SQD_FRAMING_BAD);
	ck_assert_uint_eq(f.bad_at, (uint64_t)n);
	ck_assert_ptr_nonnull(strstr(f.why, "longer than"));
	free(in);
	/* the quote shows no quote, control byte or byte over 0x7e as it is */
	expect_bad(POST_CHUNKED "'\x01\xff\"\r\n", "'", "the chunk size '???\"'");
}
END_TEST

START_TEST(framing_leaves_the_rest_to_libevent)
{
	sqd_framing f;
	/* a size no max_body allows: libevent answers 413 */
	ck_assert_int_eq(frame(POST_CHUNKED "8000000000000000\r\n", &f), SQD_FRAMING_OFF);
	ck_assert_int_eq(frame(POST_CHUNKED "fffffffffffffffff\r\n", &f), SQD_FRAMING_OFF);
	/* heads that libevent may read otherwise, or refuses itself */
	const char *off[] = {
		"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\nzz\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
		"\r\nzz\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\nab",
		"POST / HTTP/1.1\r\nX-A: 1\r\n folded: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nno colon\r\n\r\n",
		"POST / HTTP/1.1\r\nExpect: something\r\n\r\n",
		"POST / HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\n\r\n",
		"OPTIONSX / HTTP/1.1\r\n\r\n",
		"BREW / HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
		ck_assert_msg(frame(off[i], &f) == SQD_FRAMING_OFF, "followed: %s", off[i]);
	/* once off, nothing more is judged */
	ck_assert_int_eq(sqd_framing_feed(&f, "zz\r\n", 4), SQD_FRAMING_OFF);
	/* a name with a space before its ':' is another header, for libevent too:
	 * the body is then empty, and the bad chunk is the next request line */
	ck_assert_int_eq(frame("POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", &f),
			 SQD_FRAMING_OK);
	ck_assert_int_eq(frame("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &f),
			 SQD_FRAMING_OK);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("unit");
	TCase *tc = tcase_create("unit");
	tcase_add_test(tc, hash_golden);
	tcase_add_test(tc, array_integers);
	tcase_add_test(tc, array_strings);
	tcase_add_test(tc, hrw_weights_and_minimal_moves);
	tcase_add_test(tc, config_good);
	tcase_add_test(tc, config_every_bad_key_with_line);
	tcase_add_test(tc, config_claim_wait_conflict_names_the_key_set);
	tcase_add_test(tc, config_missing_file);
	tcase_add_test(tc, config_no_shard);
	tcase_add_test(tc, json_validator);
	tcase_add_test(tc, durations);
	tcase_add_test(tc, json_numbers_numeric_accepts);
	tcase_add_test(tc, json_depth_and_strings);
	tcase_add_test(tc, config_long_lines_and_repeats);
	tcase_add_test(tc, config_file_is_a_directory);
	tcase_add_test(tc, maintain_first_pass_is_spread);
	tcase_add_test(tc, framing_valid_requests_pipelined);
	tcase_add_test(tc, framing_malformed_chunks);
	tcase_add_test(tc, framing_leaves_the_rest_to_libevent);
	suite_add_tcase(s, tc);
	/* waits for threads, not for a database: its own stall limit */
	TCase *tp = tcase_create("pool");
	tcase_set_timeout(tp, 0);
	tcase_add_test(tp, pool_runs_each_task_once_and_wakes_threads);
	suite_add_tcase(s, tp);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

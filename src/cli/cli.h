/* cli.h - shared pieces of the shardq command line. */
#ifndef SQ_CLI_H
#define SQ_CLI_H

#include "shardq.h"

#include <stdio.h>

/* Exit codes, documented in `shardq --help` and docs/cli.md. */
enum {
	EX_OK = 0,
	EX_FAIL = 1,     /* anything not below */
	EX_USAGE = 2,    /* bad command line: options, numbers, durations, refs, words left */
	EX_CONFIG = 3,   /* the config file is invalid */
	EX_CONN = 4,     /* a shard or the meta database is unreachable */
	EX_INPUT = 5,    /* invalid input data (files, stdin, params, keys, text):
	                    JSON, UTF-8, type, sizes, ranges; nothing written */
	EX_LOST = 6,     /* a fenced transition found the job no longer ours */
	EX_NOTFOUND = 7, /* no such job */
	EX_STATE = 8,    /* cluster not initialised or made differently */
	EX_DB = 9,       /* the database refused a statement */
	EX_MOVED = 10,   /* a partition is moving or moved; retry */
};

typedef struct cli {
	const char *config_path;
	sq_config *cfg;
	sq_client *client;
	int json;
	int verbose;
} cli;

int cli_exit_code(sq_status st);
/* Prints "shardq CMD: message" to stderr and returns the exit code. */
int cli_fail(const char *cmd, const sq_error *err);
/* Loads the config (-c, $SHARDQ_CONFIG, ./shardq.ini); prints why not. */
int cli_load_config(cli *x, const char *cmd);
/* Loads the config and opens a client (for_init: cluster may be new). */
int cli_open(cli *x, const char *cmd, int for_init);
/* Opens the client on a config already loaded. */
int cli_connect(cli *x, const char *cmd, int for_init);
void cli_close(cli *x);

/* A strict integer: an optional '-' and decimal digits, nothing else (no
 * spaces, '+', hex or exponent). Returns 0; -1 when s[0..len) is not such an
 * integer; -2 when it is outside [lo, hi] (or int64). */
int cli_int(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out);
/* An option's integer in [lo, hi], or a message and EX_USAGE. */
int cli_opt_int(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
		int64_t *out);
/* An option's duration in [lo_ms, hi_ms], or a message and EX_USAGE. */
int cli_opt_dur(const char *cmd, const char *opt, const char *s, int64_t lo_ms, int64_t hi_ms,
		int64_t *out);
/* Text from the command line that reaches the database: 1..max bytes of
 * valid UTF-8, or a message and EX_INPUT. */
int cli_check_text(const char *cmd, const char *what, const char *s, size_t max);
/* For the default case of a command's getopt_long loop, whose option string
 * starts with ':' (getopt then prints nothing): says what was wrong with the
 * option just read and returns EX_USAGE. */
int cli_bad_option(const char *cmd, int c, char **argv);
/* Refuses words left after the options: names the first, returns EX_USAGE
 * (0 when there are none). */
int cli_no_args(const char *cmd, int argc, char **argv, const char *hint);

/* Parses "ID:ATTEMPT" strictly; returns 0 or -1. */
int cli_parse_ref(const char *s, sq_job_ref *ref);
/* Reads refs from argv (ID:ATTEMPT) or, for "-", from JSON lines on stdin
 * (as printed by `shardq claim`; lines of any length). Returns the count,
 * or -1 with the message printed and *rc set (EX_USAGE for a bad argument,
 * EX_INPUT for bad input on stdin). */
long cli_read_refs(const char *cmd, int argc, char **argv, sq_job_ref **out, int *rc);
void cli_print_job_json(FILE *f, const sq_job *j, const sq_config *cfg);
/* The same with the job's last error (NULL: none). */
void cli_print_job_detail(FILE *f, const sq_job *j, const sq_config *cfg, const char *last_error);
/* s as a JSON string on stdout ("null" when it cannot be written). */
void cli_json_str(const char *s);
int64_t cli_now_us(void);

int cmd_init(cli *x, int argc, char **argv);
int cmd_stats(cli *x, int argc, char **argv);
int cmd_map(cli *x, int argc, char **argv);
int cmd_enqueue(cli *x, int argc, char **argv);
int cmd_claim(cli *x, int argc, char **argv);
int cmd_start(cli *x, int argc, char **argv);
int cmd_heartbeat(cli *x, int argc, char **argv);
int cmd_complete(cli *x, int argc, char **argv);
int cmd_release(cli *x, int argc, char **argv);
int cmd_fail(cli *x, int argc, char **argv);
int cmd_cancel(cli *x, int argc, char **argv);
int cmd_get(cli *x, int argc, char **argv);
int cmd_demo(cli *x, int argc, char **argv);
int cmd_work(cli *x, int argc, char **argv);
int cmd_move(cli *x, int argc, char **argv);
int cmd_rebalance(cli *x, int argc, char **argv);
int cmd_moves(cli *x, int argc, char **argv);
int cmd_maintain(cli *x, int argc, char **argv);
int cmd_check(cli *x, int argc, char **argv);
int cmd_schedules(cli *x, int argc, char **argv);
int cmd_pause(cli *x, int argc, char **argv);
int cmd_retry(cli *x, int argc, char **argv);
int cmd_jobs(cli *x, int argc, char **argv);
int cmd_purge(cli *x, int argc, char **argv);
int cmd_resume(cli *x, int argc, char **argv);

#endif

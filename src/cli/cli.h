/* cli.h - shared pieces of the shardq command line. */
#ifndef SQ_CLI_H
#define SQ_CLI_H

#include "shardq.h"

#include <stdio.h>

/* Exit codes, documented in `shardq --help` and docs/cli.md. */
enum {
	EX_OK = 0,
	EX_FAIL = 1,     /* anything not below */
	EX_USAGE = 2,    /* bad command line */
	EX_CONFIG = 3,   /* the config file is invalid */
	EX_CONN = 4,     /* a shard or the meta database is unreachable */
	EX_INPUT = 5,    /* invalid input: JSON, type, sizes; nothing written */
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
void cli_close(cli *x);
/* Parses "ID:ATTEMPT"; returns 0 or -1. */
int cli_parse_ref(const char *s, sq_job_ref *ref);
/* Reads refs from argv (ID:ATTEMPT) or, for "-", from JSON lines on stdin
 * (as printed by `shardq claim`). Returns the count or -1 (message printed). */
long cli_read_refs(const char *cmd, int argc, char **argv, sq_job_ref **out);
void cli_print_job_json(FILE *f, const sq_job *j, const sq_config *cfg);
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

#endif

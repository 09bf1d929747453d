/* parse.h - the command line's pure parsers (parse.c): what a job-file line
 * and a job reference may be, checked before anything is sent. */
#ifndef SQ_CLI_PARSE_H
#define SQ_CLI_PARSE_H

#include "cli.h"

#include <stddef.h>
#include <stdint.h>

/* One job of a JSON-lines file: the spec points into the strings, which the
 * line_job owns. */
typedef struct line_job {
	sq_job_spec spec;
	char *type, *key, *params;
	long line;
} line_job;

/*
 * Parses one JSON-lines job ({"type", "key", "params", "priority",
 * "delay_ms", "run_at_us", "delay_tolerance_ms", "max_attempts"}) into *lj
 * (zeroed by the caller) and checks it as sq_enqueue will. params are kept
 * byte for byte. Returns NULL, or what is wrong (a constant, or why). What
 * was allocated stays in *lj either way: free it with cli_line_jobs_free.
 */
const char *cli_parse_job_line(const sq_config *cfg, const char *text, size_t len, line_job *lj,
			       char *why, size_t wlen);
/* Frees the strings of n line_jobs, then the array. */
void cli_line_jobs_free(line_job *v, size_t n);

/* One line of `shardq claim` output: its integer "id" and "attempt" (other
 * members ignored). Returns NULL or what is wrong. */
const char *cli_ref_of_line(const char *line, size_t len, sq_job_ref *ref, char *why, size_t wlen);

#endif

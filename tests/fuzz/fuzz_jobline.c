/* fuzz_jobline.c - libFuzzer target: one line of an `shardq enqueue --file`
 * job file (cli_parse_job_line). Whatever it accepts must pass the
 * library's own check of a job, and its params must be valid JSON. */
#include "json.h"
#include "parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *ini = "[cluster]\npartitions = 64\n"
			 "[shard s1]\ndsn = host=127.0.0.1 port=1 dbname=x\n"
			 "[type email]\n"
			 "[type report]\ndelay_tolerance = 10s\nmax_attempts = 3\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sq_config *cfg;
	sq_error err;
	if (!cfg && sq_config_parse(ini, "fuzz.ini", &cfg, &err) != SQ_OK)
		abort();
	line_job *lj = calloc(1, sizeof(*lj));
	char why[256];
	if (!lj)
		return 0;
	const char *bad = cli_parse_job_line(cfg, (const char *)data, size, lj, why, sizeof(why));
	if (!bad) {
		size_t where;
		const char *what;
		if (sq_job_spec_check(cfg, &lj->spec, &err) != SQ_OK)
			abort(); /* accepted here, refused by the library */
		if (lj->params &&
		    sq_json_validate_object(lj->params, strlen(lj->params), &where, &what))
			abort();
	} else if (!*bad) {
		abort(); /* a refusal always says why */
	}
	cli_line_jobs_free(lj, 1);
	return 0;
}

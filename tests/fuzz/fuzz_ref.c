/* fuzz_ref.c - libFuzzer target: job references, as ID:ATTEMPT words
 * (cli_parse_ref) and as `shardq claim` JSON lines (cli_ref_of_line). An
 * accepted reference is always in range: id >= 1, attempt >= 0. */
#include "parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sq_job_ref ref;
	char why[256];
	const char *bad = cli_ref_of_line((const char *)data, size, &ref, why, sizeof(why));
	if (!bad && (ref.id < 1 || ref.attempt < 0))
		abort();
	char *word = malloc(size + 1);
	if (!word)
		return 0;
	memcpy(word, data, size);
	word[size] = '\0';
	if (cli_parse_ref(word, &ref) == 0 && (ref.id < 1 || ref.attempt < 0))
		abort();
	free(word);
	return 0;
}

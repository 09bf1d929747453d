/* fuzz_config.c - libFuzzer target: the config loader (sq_config_parse) on
 * any text. It must return an error or a config, never crash or leak. */
#include "shardq.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	sq_config *cfg = NULL;
	sq_error err;
	if (sq_config_parse(text, "fuzz.ini", &cfg, &err) == SQ_OK) {
		/* what was accepted can be asked about */
		(void)sq_config_shard_count(cfg);
		sq_config_free(cfg);
	} else if (cfg) {
		abort(); /* an error leaves no config behind */
	}
	free(text);
	return 0;
}

/* hash.c - keys to partitions: XXH3_64bits, whose output is frozen. */
#include "shardq.h"

#include <xxhash.h>

uint64_t sq_hash_key(const char *key, size_t len)
{
	return XXH3_64bits(key, len);
}

uint32_t sq_partition_of_key(const char *key, size_t len, uint32_t partitions)
{
	return (uint32_t)(XXH3_64bits(key, len) & (uint64_t)(partitions - 1));
}

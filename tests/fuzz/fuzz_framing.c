/* fuzz_framing.c - libFuzzer target: shardqd's following of the framing of
 * HTTP requests (src/daemon/framing.c). The input is fed whole, then cut in
 * two at a point its first byte picks, then a byte at a time: the verdict,
 * the bytes read and where a malformed chunked body went wrong must be the
 * same each way; a bad line starts at or before the byte that was read
 * last, and its reason is a NUL-ended string. */
#include "daemon/framing.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const sqd_framing *f, size_t size)
{
	if (f->pos > size || (f->verdict == SQD_FRAMING_OK && f->pos != size))
		abort();
	if (f->verdict == SQD_FRAMING_BAD &&
	    (f->bad_at > f->pos || !f->why[0] || !memchr(f->why, 0, sizeof(f->why))))
		abort();
	if (!memchr(f->quote, 0, sizeof(f->quote)))
		abort();
}

/* The same verdict, bytes read and bad line; the same reason too unless it
 * quotes the bad line, of which a piece cut short shows less. */
static void same(const sqd_framing *a, const sqd_framing *b)
{
	if (a->verdict != b->verdict || a->pos != b->pos)
		abort();
	if (a->verdict == SQD_FRAMING_BAD &&
	    (a->bad_at != b->bad_at || (!strchr(a->why, '\'') && strcmp(a->why, b->why))))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sqd_framing whole, cut, bytes;
	sqd_framing_init(&whole);
	sqd_framing_feed(&whole, data, size);
	check(&whole, size);
	size_t at = size ? data[0] % (size + 1) : 0;
	sqd_framing_init(&cut);
	if (sqd_framing_feed(&cut, data, at) == SQD_FRAMING_OK)
		sqd_framing_feed(&cut, data + at, size - at);
	check(&cut, size);
	sqd_framing_init(&bytes);
	for (size_t i = 0; i < size && bytes.verdict == SQD_FRAMING_OK; i++)
		sqd_framing_feed(&bytes, data + i, 1);
	check(&bytes, size);
	same(&whole, &cut);
	same(&whole, &bytes);
	return 0;
}

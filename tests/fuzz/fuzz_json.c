/* fuzz_json.c - libFuzzer target: the JSON validator, and on what it
 * accepts, the member walk and the string decoder (whose output must be
 * valid UTF-8 with no NUL, as json.h promises). */
#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	size_t where = 0;
	const char *what = NULL;
	(void)sq_json_utf8_valid(s, size, NULL);
	if (sq_json_validate_object(s, size, &where, &what) != 0) {
		if (where > size || !what)
			abort(); /* the offset of the problem is inside the input */
		return 0;
	}
	size_t pos = 0;
	sq_json_member m;
	while (sq_json_next_member(s, size, &pos, &m)) {
		if (m.key < s || m.key + m.key_len > s + size || m.val < s ||
		    m.val + m.val_len > s + size)
			abort();
		char *out = malloc(m.key_len + 1);
		if (!out)
			return 0;
		size_t n = sq_json_unescape(m.key, m.key_len, out);
		if (n > m.key_len || !sq_json_utf8_valid(out, n, NULL))
			abort();
		free(out);
	}
	return 0;
}

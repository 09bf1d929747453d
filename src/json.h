/* json.h - a validating JSON scanner: no allocation, no I/O. */
#ifndef SQ_JSON_H
#define SQ_JSON_H

#include <stddef.h>

/*
 * Checks that s[0..len) is one JSON object that PostgreSQL's jsonb will
 * accept (valid UTF-8, no \u0000, paired surrogates, nesting at most 512).
 * Returns 0, or -1 with *where set to the byte offset of the first problem
 * and *what to a constant description.
 */
int sq_json_validate_object(const char *s, size_t len, size_t *where, const char **what);

/* Appends s as a JSON string literal (with quotes) to out; see buf.h. */
struct sq_buf;
void sq_json_put_string(struct sq_buf *out, const char *s);

#endif

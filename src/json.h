/* json.h - a validating JSON scanner that accepts only what PostgreSQL's
 * jsonb accepts: no allocation, no I/O. */
#ifndef SQ_JSON_H
#define SQ_JSON_H

#include <stddef.h>

/* Deepest nesting accepted (jsonb's own limit is the server's stack). */
#define SQ_JSON_MAX_DEPTH 512

/*
 * Checks that s[0..len) is one JSON object that PostgreSQL's jsonb will
 * accept: valid UTF-8 everywhere, no \u0000, paired surrogates, nesting at
 * most SQ_JSON_MAX_DEPTH, and every number within the range of numeric (at
 * most 131072 digits before the decimal point and 16383 after it, exponent
 * included). Returns 0, or -1 with *where set to the byte offset of the
 * first problem and *what to a constant description.
 */
int sq_json_validate_object(const char *s, size_t len, size_t *where, const char **what);
/* Whether s (len bytes) is one JSON value of any kind, with white space
 * around it allowed (for saying what a document that is not an object is). */
int sq_json_is_value(const char *s, size_t len);

typedef enum sq_json_kind {
	SQ_JSON_OBJECT,
	SQ_JSON_ARRAY,
	SQ_JSON_STRING,
	SQ_JSON_NUMBER,
	SQ_JSON_TRUE,
	SQ_JSON_FALSE,
	SQ_JSON_NULL,
} sq_json_kind;

/* One member of an object: raw text, pointing into the document. */
typedef struct sq_json_member {
	const char *key; /* between the key's quotes, escapes not decoded */
	size_t key_len;
	const char *val; /* the value's text (a string's with its quotes) */
	size_t val_len;
	sq_json_kind kind;
} sq_json_member;

/*
 * Steps through the top-level members of an object that
 * sq_json_validate_object accepted. *pos starts at 0; returns 1 with *m
 * filled, 0 after the last member.
 */
int sq_json_next_member(const char *s, size_t len, size_t *pos, sq_json_member *m);

/* Same for the elements of an array (s[0..len) is the array's text, as a
 * member's val); m->key is NULL. */
int sq_json_next_element(const char *s, size_t len, size_t *pos, sq_json_member *m);

/*
 * Decodes the raw text of a validated string (between its quotes) into out,
 * which must have room for len + 1 bytes: decoding never makes it longer.
 * The result is NUL-terminated valid UTF-8 with no NUL inside; returns its
 * length.
 */
size_t sq_json_unescape(const char *raw, size_t len, char *out);

/* 1 if s[0..len) is valid UTF-8 (no overlong forms, no surrogates) with no
 * NUL byte; else 0, with *where (if not NULL) at the first bad byte. */
int sq_json_utf8_valid(const char *s, size_t len, size_t *where);

/* Appends s as a JSON string literal (with quotes) to out; see buf.h. */
struct sq_buf;
void sq_json_put_string(struct sq_buf *out, const char *s);

#endif

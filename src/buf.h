/* buf.h - a growable byte buffer, and the PostgreSQL array-literal writer. */
#ifndef SQ_BUF_H
#define SQ_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct sq_buf {
	char *data; /* always NUL-terminated once anything was added */
	size_t len;
	size_t cap;
	int oom; /* set when an allocation failed; later appends are no-ops */
} sq_buf;

void sq_buf_init(sq_buf *b);
void sq_buf_free(sq_buf *b);
void sq_buf_reset(sq_buf *b);
/* Appends n bytes; the part that may grow the buffer is out of line, the
 * common case (room enough) is a copy (arrays of a batch's rows are built
 * an element at a time). After a failed allocation (oom) cap is 0, so every
 * append takes the slow path, which does nothing. */
void sq_buf_append_slow(sq_buf *b, const char *s, size_t n);
static inline void sq_buf_append(sq_buf *b, const char *s, size_t n)
{
	if (b->len + n < b->cap) {
		memcpy(b->data + b->len, s, n);
		b->len += n;
		b->data[b->len] = '\0';
		return;
	}
	sq_buf_append_slow(b, s, n);
}
void sq_buf_puts(sq_buf *b, const char *s);
void sq_buf_putc(sq_buf *b, char c);
void sq_buf_printf(sq_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sq_buf_i64(sq_buf *b, int64_t v);
/* Returns the data and leaves the buffer empty; the caller frees it. */
char *sq_buf_steal(sq_buf *b);

/*
 * Array literals ("{1,2,"a \"b\"",NULL}") for text-format array parameters.
 * Start with sq_arr_open, add elements, close with sq_arr_close.
 */
void sq_arr_open(sq_buf *b);
void sq_arr_close(sq_buf *b);
void sq_arr_i64(sq_buf *b, int64_t v);
void sq_arr_f64(sq_buf *b, double v);
void sq_arr_str(sq_buf *b, const char *s); /* NULL adds NULL */

/*
 * Text the shards store must be valid UTF-8 without NUL, or PostgreSQL
 * refuses the whole statement. sq_utf8_clean copies src[0..n) to dst: each
 * byte that does not begin a well-formed sequence (stray continuation bytes,
 * overlong forms, surrogates, beyond U+10FFFF, a sequence cut short) becomes
 * U+FFFD, and NUL bytes are dropped. It writes at most dstlen - 1 bytes, cut
 * on a character boundary, and a NUL; returns the length written.
 */
size_t sq_utf8_clean(char *dst, size_t dstlen, const char *src, size_t n);
/* 1 if the NUL-terminated s is well-formed UTF-8. */
int sq_utf8_valid(const char *s);

#endif

/* buf.c - growable byte buffer used to build statement parameters. */
#include "buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sq_buf_init(sq_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void sq_buf_free(sq_buf *b)
{
	free(b->data);
	sq_buf_init(b);
}

void sq_buf_reset(sq_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static int grow(sq_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1, cap;
	char *p;
	if (b->oom)
		return -1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p) {
		b->oom = 1;
		b->cap = 0; /* so that sq_buf_append's fast path is never taken again */
		return -1;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

void sq_buf_append_slow(sq_buf *b, const char *s, size_t n)
{
	if (grow(b, n))
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void sq_buf_puts(sq_buf *b, const char *s)
{
	sq_buf_append(b, s, strlen(s));
}

void sq_buf_putc(sq_buf *b, char c)
{
	sq_buf_append(b, &c, 1);
}

void sq_buf_printf(sq_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* v in decimal, ending at end (exclusive); returns where it starts */
static char *i64_text(char *end, int64_t v)
{
	/* by hand: snprintf was a tenth of a worker's own CPU (every id of
	 * every batch goes through here) */
	char *p = end;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	return p;
}

void sq_buf_i64(sq_buf *b, int64_t v)
{
	char tmp[24], *p = i64_text(tmp + sizeof(tmp), v);
	sq_buf_append(b, p, (size_t)(tmp + sizeof(tmp) - p));
}

char *sq_buf_steal(sq_buf *b)
{
	char *p = b->data;
	if (!p && !b->oom)
		p = calloc(1, 1);
	sq_buf_init(b);
	return p;
}

void sq_arr_open(sq_buf *b)
{
	sq_buf_putc(b, '{');
}

void sq_arr_close(sq_buf *b)
{
	if (b->len && b->data[b->len - 1] == ',')
		b->data[b->len - 1] = '}';
	else
		sq_buf_putc(b, '}');
}

void sq_arr_i64(sq_buf *b, int64_t v)
{
	char tmp[24], *p;
	tmp[sizeof(tmp) - 1] = ',';
	p = i64_text(tmp + sizeof(tmp) - 1, v);
	sq_buf_append(b, p, (size_t)(tmp + sizeof(tmp) - p));
}

void sq_arr_f64(sq_buf *b, double v)
{
	sq_buf_printf(b, "%.17g,", v);
}

void sq_arr_str(sq_buf *b, const char *s)
{
	if (!s) {
		sq_buf_append(b, "NULL,", 5);
		return;
	}
	sq_buf_putc(b, '"');
	/* the runs between the characters to escape, each in one append */
	for (;;) {
		size_t run = strcspn(s, "\"\\");
		sq_buf_append(b, s, run);
		s += run;
		if (!*s)
			break;
		char esc[2] = {'\\', *s++};
		sq_buf_append(b, esc, 2);
	}
	sq_buf_append(b, "\",", 2);
}

/* Length of the well-formed UTF-8 sequence at s (n bytes there), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char lo = 0x80, hi = 0xBF;
	size_t len;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF) {
		len = 2;
	} else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
		len = 3;
		if (s[0] == 0xE0)
			lo = 0xA0; /* no overlong form */
		else if (s[0] == 0xED)
			hi = 0x9F; /* no surrogate */
	} else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
		len = 4;
		if (s[0] == 0xF0)
			lo = 0x90; /* no overlong form */
		else if (s[0] == 0xF4)
			hi = 0x8F; /* nothing beyond U+10FFFF */
	} else {
		return 0;
	}
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return len;
}

size_t sq_utf8_clean(char *dst, size_t dstlen, const char *src, size_t n)
{
	static const char repl[] = "\xEF\xBF\xBD"; /* U+FFFD */
	size_t o = 0;
	if (!dstlen)
		return 0;
	for (size_t i = 0; src && i < n;) {
		const unsigned char *s = (const unsigned char *)src + i;
		size_t k, len;
		const char *from;
		if (!*s) {
			i++;
			continue;
		}
		k = utf8_seq(s, n - i);
		from = k ? (const char *)s : repl;
		len = k ? k : sizeof(repl) - 1;
		if (o + len > dstlen - 1)
			break;
		memcpy(dst + o, from, len);
		o += len;
		i += k ? k : 1;
	}
	dst[o] = '\0';
	return o;
}

int sq_utf8_valid(const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_seq((const unsigned char *)s + i, n - i)))
			return 0;
	return 1;
}

/* json.c - validates job params before anything is sent, so a bad document
 * fails the whole batch on the client and nothing of it is written. */
#include "json.h"
#include "buf.h"

#include <stdint.h>
#include <stdio.h>

typedef struct scan {
	const unsigned char *s;
	size_t len, pos;
	const char *what;
	int depth;
} scan;

static void ws(scan *x)
{
	while (x->pos < x->len) {
		unsigned char c = x->s[x->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		x->pos++;
	}
}

static int fail(scan *x, const char *what)
{
	x->what = what;
	return -1;
}

static int hex4(scan *x, unsigned *out)
{
	unsigned v = 0;
	if (x->len - x->pos < 4)
		return fail(x, "truncated \\u escape");
	for (int i = 0; i < 4; i++) {
		unsigned char c = x->s[x->pos++];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return fail(x, "bad hex digit in \\u escape");
	}
	*out = v;
	return 0;
}

/* One UTF-8 sequence starting at x->pos (already known >= 0x80). */
static int utf8(scan *x)
{
	const unsigned char *p = x->s + x->pos;
	size_t left = x->len - x->pos;
	unsigned c = p[0], n, cp;
	if (c >= 0xC2 && c <= 0xDF)
		n = 1, cp = c & 0x1F;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 2, cp = c & 0x0F;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 3, cp = c & 0x07;
	else
		return fail(x, "invalid UTF-8");
	if (left < n + 1)
		return fail(x, "truncated UTF-8 sequence");
	for (unsigned i = 1; i <= n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return fail(x, "invalid UTF-8");
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
	    (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
		return fail(x, "invalid UTF-8");
	x->pos += n + 1;
	return 0;
}

static int string(scan *x)
{
	x->pos++; /* opening quote */
	while (x->pos < x->len) {
		unsigned char c = x->s[x->pos];
		if (c == '"') {
			x->pos++;
			return 0;
		}
		if (c < 0x20)
			return fail(x, "control character in string");
		if (c >= 0x80) {
			if (utf8(x))
				return -1;
			continue;
		}
		x->pos++;
		if (c != '\\')
			continue;
		if (x->pos >= x->len)
			return fail(x, "unterminated string");
		c = x->s[x->pos++];
		if (c == 'u') {
			unsigned u, lo;
			if (hex4(x, &u))
				return -1;
			if (u == 0)
				return fail(x, "\\u0000 is not allowed (PostgreSQL rejects it)");
			if (u >= 0xDC00 && u <= 0xDFFF)
				return fail(x, "lone low surrogate in \\u escape");
			if (u >= 0xD800 && u <= 0xDBFF) {
				if (x->len - x->pos < 6 || x->s[x->pos] != '\\' ||
				    x->s[x->pos + 1] != 'u')
					return fail(x, "high surrogate not followed by a low one");
				x->pos += 2;
				if (hex4(x, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(x, "high surrogate not followed by a low one");
			}
		} else if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' &&
			   c != 'r' && c != 't') {
			return fail(x, "bad escape in string");
		}
	}
	return fail(x, "unterminated string");
}

static int digits(scan *x)
{
	size_t start = x->pos;
	while (x->pos < x->len && x->s[x->pos] >= '0' && x->s[x->pos] <= '9')
		x->pos++;
	return x->pos > start ? 0 : fail(x, "bad number");
}

static int number(scan *x)
{
	if (x->s[x->pos] == '-')
		x->pos++;
	if (x->pos < x->len && x->s[x->pos] == '0')
		x->pos++;
	else if (digits(x))
		return -1;
	if (x->pos < x->len && x->s[x->pos] == '.') {
		x->pos++;
		if (digits(x))
			return -1;
	}
	if (x->pos < x->len && (x->s[x->pos] == 'e' || x->s[x->pos] == 'E')) {
		x->pos++;
		if (x->pos < x->len && (x->s[x->pos] == '+' || x->s[x->pos] == '-'))
			x->pos++;
		if (digits(x))
			return -1;
	}
	return 0;
}

static int word(scan *x, const char *w)
{
	size_t i = 0;
	for (; w[i]; i++)
		if (x->pos + i >= x->len || x->s[x->pos + i] != (unsigned char)w[i])
			return fail(x, "unexpected character");
	x->pos += i;
	return 0;
}

static int value(scan *x);

static int container(scan *x, unsigned char close)
{
	int first = 1;
	if (++x->depth > 512)
		return fail(x, "nested too deeply");
	x->pos++;
	for (;;) {
		ws(x);
		if (x->pos >= x->len)
			return fail(x, "unexpected end of input");
		if (x->s[x->pos] == close) {
			if (!first && x->s[x->pos - 1] == ',')
				return fail(x, "trailing comma");
			x->pos++;
			x->depth--;
			return 0;
		}
		if (!first) {
			if (x->s[x->pos] != ',')
				return fail(x, close == '}' ? "expected ',' or '}'"
							    : "expected ',' or ']'");
			x->pos++;
			ws(x);
		}
		first = 0;
		if (close == '}') {
			if (x->pos >= x->len || x->s[x->pos] != '"')
				return fail(x, "expected a string key");
			if (string(x))
				return -1;
			ws(x);
			if (x->pos >= x->len || x->s[x->pos] != ':')
				return fail(x, "expected ':'");
			x->pos++;
			ws(x);
		}
		if (value(x))
			return -1;
		ws(x);
		if (x->pos < x->len && x->s[x->pos] == close)
			continue;
	}
}

static int value(scan *x)
{
	if (x->pos >= x->len)
		return fail(x, "unexpected end of input");
	switch (x->s[x->pos]) {
	case '{': return container(x, '}');
	case '[': return container(x, ']');
	case '"': return string(x);
	case 't': return word(x, "true");
	case 'f': return word(x, "false");
	case 'n': return word(x, "null");
	default:
		if (x->s[x->pos] == '-' || (x->s[x->pos] >= '0' && x->s[x->pos] <= '9'))
			return number(x);
		return fail(x, "unexpected character");
	}
}

int sq_json_validate_object(const char *s, size_t len, size_t *where, const char **what)
{
	scan x = {(const unsigned char *)s, len, 0, NULL, 0};
	ws(&x);
	if (x.pos >= len || x.s[x.pos] != '{') {
		x.what = "params must be a JSON object ({...})";
	} else if (!container(&x, '}')) {
		ws(&x);
		if (x.pos == len)
			return 0;
		x.what = "trailing characters after the object";
	}
	if (where)
		*where = x.pos;
	if (what)
		*what = x.what;
	return -1;
}

void sq_json_put_string(sq_buf *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	sq_buf_putc(out, '"');
	for (; *p; p++) {
		char esc[8];
		switch (*p) {
		case '"': sq_buf_append(out, "\\\"", 2); break;
		case '\\': sq_buf_append(out, "\\\\", 2); break;
		case '\n': sq_buf_append(out, "\\n", 2); break;
		case '\r': sq_buf_append(out, "\\r", 2); break;
		case '\t': sq_buf_append(out, "\\t", 2); break;
		default:
			if (*p < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", *p);
				sq_buf_puts(out, esc);
			} else {
				sq_buf_putc(out, (char)*p);
			}
		}
	}
	sq_buf_putc(out, '"');
}

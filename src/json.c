/* json.c - validates job params before anything is sent, so a bad document
 * fails the whole batch on the client and nothing of it is written. The
 * rules are jsonb's (PostgreSQL 15): what passes here, the shard accepts. */
#include "json.h"
#include "buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* numeric's limits (src/backend/utils/adt/numeric.c): the weight of a
 * value's first base-10000 digit fits int16, its display scale 14 bits,
 * and an input exponent must stay below INT_MAX / 2. */
#define NUMERIC_MAX_DIGITS_BEFORE_POINT 131072 /* 4 * 32768 */
#define NUMERIC_MAX_DSCALE              16383
#define NUMERIC_MAX_EXPONENT            1073741822LL

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

/* A number, by JSON's grammar, that numeric can also hold: jsonb stores
 * every number as numeric, and refuses the document when one overflows. */
static int number(scan *x)
{
	size_t start = x->pos, int_at, int_len, frac_at = 0, frac_len = 0;
	long long e10 = 0, dscale, dweight;
	if (x->s[x->pos] == '-')
		x->pos++;
	int_at = x->pos;
	if (x->pos < x->len && x->s[x->pos] == '0')
		x->pos++;
	else if (digits(x))
		return -1;
	int_len = x->pos - int_at;
	if (x->pos < x->len && x->s[x->pos] == '.') {
		x->pos++;
		frac_at = x->pos;
		if (digits(x))
			return -1;
		frac_len = x->pos - frac_at;
	}
	if (x->pos < x->len && (x->s[x->pos] == 'e' || x->s[x->pos] == 'E')) {
		int neg = 0;
		size_t e_at;
		x->pos++;
		if (x->pos < x->len && (x->s[x->pos] == '+' || x->s[x->pos] == '-'))
			neg = x->s[x->pos++] == '-';
		e_at = x->pos;
		if (digits(x))
			return -1;
		for (size_t i = e_at; i < x->pos; i++) {
			e10 = e10 * 10 + (x->s[i] - '0');
			if (e10 > NUMERIC_MAX_EXPONENT) {
				x->pos = start;
				return fail(x, "number out of range: its exponent is too large "
					       "for PostgreSQL numeric");
			}
		}
		if (neg)
			e10 = -e10;
	}
	dscale = (long long)frac_len - e10;
	if (dscale > NUMERIC_MAX_DSCALE) {
		x->pos = start;
		return fail(x, "number out of range: more than 16383 digits after the "
			       "decimal point (PostgreSQL numeric's limit)");
	}
	/* the decimal exponent of the first non-zero digit; none: zero */
	for (size_t i = 0; i < int_len + frac_len; i++) {
		unsigned char d = i < int_len ? x->s[int_at + i] : x->s[frac_at + i - int_len];
		if (d == '0')
			continue;
		dweight = (long long)int_len - 1 - (long long)i + e10;
		if (dweight >= NUMERIC_MAX_DIGITS_BEFORE_POINT) {
			x->pos = start;
			return fail(x, "number out of range: more than 131072 digits before "
				       "the decimal point (PostgreSQL numeric's limit)");
		}
		break;
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
	if (++x->depth > SQ_JSON_MAX_DEPTH)
		return fail(x, "nested too deeply (more than 512 levels)");
	x->pos++;
	ws(x);
	if (x->pos < x->len && x->s[x->pos] == close) {
		x->pos++;
		x->depth--;
		return 0;
	}
	for (;;) {
		if (x->pos >= x->len)
			return fail(x, "unexpected end of input");
		if (close == '}') {
			if (x->s[x->pos] != '"')
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
		if (x->pos >= x->len)
			return fail(x, "unexpected end of input");
		if (x->s[x->pos] == close) {
			x->pos++;
			x->depth--;
			return 0;
		}
		if (x->s[x->pos] != ',')
			return fail(x,
				    close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
		x->pos++;
		ws(x);
		if (x->pos < x->len && x->s[x->pos] == close)
			return fail(x, "trailing comma");
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

int sq_json_is_value(const char *s, size_t len)
{
	scan x = {(const unsigned char *)s, len, 0, NULL, 0};
	ws(&x);
	if (value(&x))
		return 0;
	ws(&x);
	return x.pos == len;
}

int sq_json_validate_object(const char *s, size_t len, size_t *where, const char **what)
{
	scan x = {(const unsigned char *)s, len, 0, NULL, 0};
	ws(&x);
	if (x.pos >= len || x.s[x.pos] != '{') {
		x.what = "expected a JSON object ({...})";
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

/* The kind of a validated value, from its first byte. */
static sq_json_kind kind_of(char c)
{
	switch (c) {
	case '{': return SQ_JSON_OBJECT;
	case '[': return SQ_JSON_ARRAY;
	case '"': return SQ_JSON_STRING;
	case 't': return SQ_JSON_TRUE;
	case 'f': return SQ_JSON_FALSE;
	case 'n': return SQ_JSON_NULL;
	default: return SQ_JSON_NUMBER;
	}
}

int sq_json_next_member(const char *s, size_t len, size_t *pos, sq_json_member *m)
{
	scan x = {(const unsigned char *)s, len, *pos, NULL, 1};
	size_t at;
	ws(&x);
	if (x.pos < len && (x.s[x.pos] == (*pos ? ',' : '{'))) {
		x.pos++;
		ws(&x);
	}
	if (x.pos >= len || x.s[x.pos] != '"')
		return 0; /* the closing brace */
	at = x.pos;
	if (string(&x))
		return 0;
	m->key = s + at + 1;
	m->key_len = x.pos - at - 2;
	ws(&x);
	x.pos++; /* ':' */
	ws(&x);
	at = x.pos;
	if (value(&x))
		return 0;
	m->val = s + at;
	m->val_len = x.pos - at;
	m->kind = kind_of(s[at]);
	*pos = x.pos;
	return 1;
}

int sq_json_next_element(const char *s, size_t len, size_t *pos, sq_json_member *m)
{
	scan x = {(const unsigned char *)s, len, *pos, NULL, 1};
	size_t at;
	ws(&x);
	if (x.pos < len && (x.s[x.pos] == (*pos ? ',' : '['))) {
		x.pos++;
		ws(&x);
	}
	if (x.pos >= len || x.s[x.pos] == ']')
		return 0;
	at = x.pos;
	if (value(&x))
		return 0;
	m->key = NULL;
	m->key_len = 0;
	m->val = s + at;
	m->val_len = x.pos - at;
	m->kind = kind_of(s[at]);
	*pos = x.pos;
	return 1;
}

static unsigned hexval(const char *p)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v = (v << 4) | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	return v;
}

size_t sq_json_unescape(const char *raw, size_t len, char *out)
{
	size_t o = 0, i = 0;
	while (i < len) {
		unsigned cp;
		if (raw[i] != '\\') {
			out[o++] = raw[i++];
			continue;
		}
		i += 2;
		switch (raw[i - 1]) {
		case 'b': out[o++] = '\b'; continue;
		case 'f': out[o++] = '\f'; continue;
		case 'n': out[o++] = '\n'; continue;
		case 'r': out[o++] = '\r'; continue;
		case 't': out[o++] = '\t'; continue;
		case 'u': break;
		default: out[o++] = raw[i - 1]; continue; /* " \ / */
		}
		cp = hexval(raw + i);
		i += 4;
		if (cp >= 0xD800 && cp <= 0xDBFF) { /* validated: a low one follows */
			cp = 0x10000 + ((cp - 0xD800) << 10) + (hexval(raw + i + 2) - 0xDC00);
			i += 6;
		}
		if (cp < 0x80) {
			out[o++] = (char)cp;
		} else if (cp < 0x800) {
			out[o++] = (char)(0xC0 | (cp >> 6));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		} else if (cp < 0x10000) {
			out[o++] = (char)(0xE0 | (cp >> 12));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		} else {
			out[o++] = (char)(0xF0 | (cp >> 18));
			out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		}
	}
	out[o] = '\0';
	return o;
}

int sq_json_utf8_valid(const char *s, size_t len, size_t *where)
{
	scan x = {(const unsigned char *)s, len, 0, NULL, 0};
	while (x.pos < len) {
		if (x.s[x.pos] == 0)
			break;
		if (x.s[x.pos] < 0x80)
			x.pos++;
		else if (utf8(&x))
			break;
	}
	if (where)
		*where = x.pos;
	return x.pos == len;
}

void sq_json_put_string(sq_buf *out, const char *s)
{
	/* JSON text is UTF-8: a byte that begins no well-formed sequence (a
	 * message cut inside a character, a path sent in another encoding)
	 * goes out as U+FFFD, not as itself */
	char *clean = NULL;
	if (!sq_utf8_valid(s)) {
		size_t n = strlen(s), cap = n * 3 + 1;
		if (!(clean = malloc(cap))) {
			out->oom = 1;
			return;
		}
		sq_utf8_clean(clean, cap, s, n);
		s = clean;
	}
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
	free(clean);
}

/* framing.c - where each request on an HTTP/1.1 connection ends, and
 * whether its chunked body is well formed (framing.h).
 *
 * The head is read as libevent 2.1's evhttp reads it (a line ends at LF,
 * with or without CR; a header's name is all before its first ':', compared
 * without case; its value starts after the spaces that follow the ':', its
 * trailing spaces and tabs left out; the first Transfer-Encoding equal to
 * "chunked" makes the body chunked, else the first Content-Length gives its
 * length; HEAD and TRACE have no body), so that both see the same requests.
 * Whatever the two could read differently stops the following (OFF).
 *
 * The chunked body is judged by RFC 9112, section 7.1, and by what libevent
 * can read: a chunk-size line is hex digits, then spaces at most, then CRLF
 * (or LF, which libevent takes too); a chunk's data is followed by CRLF (or
 * LF); the last chunk (size 0) by trailer lines, each with a ':', and an
 * empty line. A chunk extension (";name=value") is valid HTTP, but libevent
 * 2.1 cannot read one (it would answer 413): it is refused here, with a
 * message that says so. A size over 16 significant hex digits stops the
 * following: libevent answers it 413, as a body over max_body. */
#include "framing.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum {
	F_REQLINE,  /* the request line */
	F_HEADLINE, /* the start of a header line (or of the empty line) */
	F_HEADER,   /* in a header line */
	F_HEAD_CR,  /* a CR in the head: LF must follow */
	F_BODY,     /* a Content-Length body */
	F_SIZE,     /* a chunk-size line */
	F_SIZE_SP,  /* the spaces after the size */
	F_SIZE_CR,
	F_DATA,     /* a chunk's data */
	F_DATA_END, /* the CRLF after it */
	F_DATA_CR,
	F_TRAILER, /* the start of a trailer line, or the empty line */
	F_TRAILER_LINE,
	F_TRAILER_CR,
	F_END_CR /* the CR of the empty line that ends the body */
};

#define SIZE_LINE_MAX    1024 /* a chunk-size line (leading zeros, spaces) */
#define TRAILER_LINE_MAX 8192 /* longer: libevent's max_headers judges */

void sqd_framing_init(sqd_framing *f)
{
	memset(f, 0, sizeof(*f));
	f->state = F_REQLINE;
}

static void next_request(sqd_framing *f)
{
	uint64_t pos = f->pos;
	sqd_framing_init(f);
	f->pos = pos;
}

static void off(sqd_framing *f)
{
	f->verdict = SQD_FRAMING_OFF;
}

/* The byte c of a chunk line, shown in f->quote: printable ASCII as it is,
 * CR and LF as \r and \n, any other byte as '?'. */
static void quote_add(sqd_framing *f, int c)
{
	char s[3] = {(char)c, 0, 0};
	if (c == '\r' || c == '\n')
		s[0] = '\\', s[1] = c == '\r' ? 'r' : 'n';
	else if (c < 0x20 || c > 0x7e || c == '\'')
		s[0] = '?';
	size_t k = strlen(s);
	if (f->qlen + k <= 32) {
		memcpy(f->quote + f->qlen, s, k);
		f->qlen += (unsigned)k;
	} else if (f->qlen < sizeof(f->quote) - 4) {
		memcpy(f->quote + f->qlen, "...", 3);
		f->qlen = sizeof(f->quote) - 4;
	}
	f->quote[f->qlen] = '\0';
}

/* The chunked body is malformed at the current line (p: its bad byte, shown
 * with what follows it in this piece, up to the line's end). */
static void bad(sqd_framing *f, const unsigned char *p, const unsigned char *end, const char *fmt,
		...) __attribute__((format(printf, 4, 5)));

static void bad(sqd_framing *f, const unsigned char *p, const unsigned char *end, const char *fmt,
		...)
{
	for (const unsigned char *q = p; q < end && q - p < 24 && *q != '\n'; q++)
		if (*q != '\r' || q + 1 == end || q[1] != '\n')
			quote_add(f, *q);
	f->verdict = SQD_FRAMING_BAD;
	f->bad_at = f->line_at;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
}

static int eq_nocase(const char *s, unsigned len, unsigned cap, const char *want)
{
	return len < cap && len == strlen(want) && !strncasecmp(s, want, len);
}

/* The end of a header line: the three headers that frame the body. */
static void header_done(sqd_framing *f)
{
	if (!f->colon) {
		off(f); /* libevent refuses it: 400 */
		return;
	}
	while (f->vlen && f->vlen < sizeof(f->value) &&
	       (f->value[f->vlen - 1] == ' ' || f->value[f->vlen - 1] == '\t'))
		f->vlen--;
	unsigned nc = sizeof(f->name), vc = sizeof(f->value);
	if (eq_nocase(f->name, f->nlen, nc, "transfer-encoding")) {
		if (f->has_te || !eq_nocase(f->value, f->vlen, vc, "chunked"))
			off(f);
		f->has_te = f->chunked = 1;
	} else if (eq_nocase(f->name, f->nlen, nc, "content-length")) {
		if (f->has_cl || f->vlen == 0 || f->vlen >= vc)
			off(f);
		f->has_cl = 1;
		for (unsigned i = 0; i < f->vlen && f->verdict == SQD_FRAMING_OK; i++) {
			if (f->value[i] < '0' || f->value[i] > '9')
				off(f);
			f->cl = f->cl * 10 + (uint64_t)(f->value[i] - '0');
		}
	} else if (eq_nocase(f->name, f->nlen, nc, "expect")) {
		if (!eq_nocase(f->value, f->vlen, vc, "100-continue"))
			off(f); /* libevent answers 417 */
	}
	f->state = F_HEADLINE;
}

/* The end of the request line: the method says whether a body may come. */
static void request_line_done(sqd_framing *f)
{
	static const char *const with_body[] = {"GET",     "POST",    "PUT",  "DELETE",
						"OPTIONS", "CONNECT", "PATCH"};
	f->method[f->mlen < sizeof(f->method) ? f->mlen : 0] = '\0';
	if (!f->in_value || f->mlen >= sizeof(f->method)) {
		off(f);
		return;
	}
	for (size_t i = 0; i < sizeof(with_body) / sizeof(with_body[0]); i++)
		if (!strcmp(f->method, with_body[i]))
			f->body_ok = 1;
	if (!f->body_ok && strcmp(f->method, "HEAD") && strcmp(f->method, "TRACE"))
		off(f);
	f->in_value = 0;
	f->state = F_HEADLINE;
}

static void line_start(sqd_framing *f, int state, uint64_t at)
{
	f->state = state;
	f->line_at = at;
	f->qlen = 0;
	f->quote[0] = '\0';
	f->size = 0;
	f->digits = f->hex = 0;
	f->colon = 0;
}

static void head_done(sqd_framing *f)
{
	if (f->body_ok && f->chunked) {
		line_start(f, F_SIZE, f->pos + 1);
	} else if (f->body_ok && f->has_cl && f->cl > 0) {
		uint64_t cl = f->cl;
		next_request(f);
		f->state = F_BODY;
		f->left = cl;
	} else {
		next_request(f);
	}
}

/* The line (request line, header, empty line) a LF ends. */
static void head_line_done(sqd_framing *f, int kind)
{
	if (kind == F_REQLINE)
		request_line_done(f);
	else if (kind == F_HEADLINE)
		head_done(f);
	else
		header_done(f);
}

static void head_byte(sqd_framing *f, int c)
{
	int s = f->state;
	if (s == F_HEAD_CR) {
		if (c != '\n')
			off(f);
		else
			head_line_done(f, f->cr_of);
		return;
	}
	if (c == '\r' || c == '\n') {
		if (s == F_REQLINE && f->mlen == 0 && !f->in_value) {
			off(f); /* an empty line before the request */
		} else if (c == '\r') {
			f->cr_of = s;
			f->state = F_HEAD_CR;
		} else {
			head_line_done(f, s);
		}
		return;
	}
	if ((c < 0x20 && c != '\t') || (s == F_HEADLINE && (c == ' ' || c == '\t'))) {
		off(f); /* a control byte; a header folded over lines */
		return;
	}
	if (s == F_REQLINE) {
		if (c == ' ')
			f->in_value = 1;
		else if (!f->in_value && f->mlen < sizeof(f->method))
			f->method[f->mlen++] = (char)c;
		return;
	}
	if (s == F_HEADLINE) {
		f->nlen = f->vlen = 0;
		f->colon = f->in_value = 0;
		f->state = F_HEADER;
	}
	if (!f->colon) {
		if (c == ':')
			f->colon = 1;
		else if (f->nlen < sizeof(f->name))
			f->name[f->nlen++] = (char)c;
	} else if (f->in_value || c != ' ') {
		f->in_value = 1;
		if (f->vlen < sizeof(f->value))
			f->value[f->vlen++] = (char)c;
	}
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The end of a chunk-size line: the chunk's data, or the trailer. */
static void size_done(sqd_framing *f)
{
	uint64_t size = f->size;
	if (size == 0) {
		line_start(f, F_TRAILER, f->pos + 1);
	} else {
		f->state = F_DATA;
		f->left = size;
	}
}

static void size_byte(sqd_framing *f, const unsigned char *p, const unsigned char *end)
{
	int c = *p, d = hexval(c);
	if (f->pos - f->line_at >= SIZE_LINE_MAX) {
		bad(f, p, p, "a chunk-size line is longer than %d bytes", SIZE_LINE_MAX);
	} else if (f->state == F_SIZE_CR) {
		if (c == '\n')
			size_done(f);
		else
			bad(f, p, end, "the chunk-size line '%s' has a CR not followed by LF",
			    f->quote);
	} else if (c == '\n' || c == '\r') {
		if (f->hex == 0)
			bad(f, p, end,
			    "a chunk size is missing: an empty line came where one was expected");
		else if (c == '\n')
			size_done(f);
		else
			f->state = F_SIZE_CR;
	} else if (d >= 0 && f->state == F_SIZE) {
		quote_add(f, c);
		f->hex++;
		if (f->digits || d)
			f->digits++;
		f->size = f->size * 16 + (uint64_t)d;
		if (f->digits > 15 && (f->digits > 16 || f->size > INT64_MAX))
			off(f); /* larger than any max_body: libevent answers 413 */
	} else if (c == ' ' && f->hex) {
		quote_add(f, c);
		f->state = F_SIZE_SP;
	} else if (c != ';' && f->state == F_SIZE_SP) {
		bad(f, p, end, "the chunk-size line '%s' has more than a size", f->quote);
	} else if (c == ';' && f->hex) {
		bad(f, p, end,
		    "the chunk-size line '%s' has a chunk extension (';'), which shardqd does not "
		    "take",
		    f->quote);
	} else {
		bad(f, p, end, "the chunk size '%s' is not hexadecimal", f->quote);
	}
}

/* The end of a trailer line. */
static void trailer_line_done(sqd_framing *f, const unsigned char *p, const unsigned char *end)
{
	if (!f->colon)
		bad(f, p, end, "the trailer line '%s' has no ':'", f->quote);
	else
		line_start(f, F_TRAILER, f->pos + 1);
}

static void trailer_byte(sqd_framing *f, const unsigned char *p, const unsigned char *end)
{
	int c = *p, s = f->state;
	if (s == F_END_CR || s == F_TRAILER_CR) {
		if (c != '\n')
			bad(f, p, end, "the trailer line '%s' has a CR not followed by LF",
			    f->quote);
		else if (s == F_END_CR)
			next_request(f);
		else
			trailer_line_done(f, p, end);
	} else if (s == F_TRAILER && (c == '\r' || c == '\n')) {
		if (c == '\n')
			next_request(f);
		else
			f->state = F_END_CR;
	} else if (s == F_TRAILER && (c == ' ' || c == '\t')) {
		bad(f, p, end, "a trailer line begins with a space or a tab (a folded line)");
	} else if (c == '\r' || c == '\n') {
		if (c == '\n')
			trailer_line_done(f, p, end);
		else
			f->state = F_TRAILER_CR;
	} else if (f->pos - f->line_at >= TRAILER_LINE_MAX) {
		off(f);
	} else {
		f->state = F_TRAILER_LINE;
		if (c == ':')
			f->colon = 1;
		quote_add(f, c);
	}
}

/* The CRLF after a chunk's data. */
static void data_end_byte(sqd_framing *f, const unsigned char *p, const unsigned char *end)
{
	int c = *p;
	if (c == '\n') {
		line_start(f, F_SIZE, f->pos + 1);
	} else if (c == '\r' && f->state == F_DATA_END) {
		quote_add(f, c);
		f->state = F_DATA_CR;
	} else {
		bad(f, p, end, "the chunk of %llu bytes is not followed by CRLF but by '%s'",
		    (unsigned long long)f->size, f->quote);
	}
}

int sqd_framing_feed(sqd_framing *f, const void *data, size_t n)
{
	const unsigned char *p = data, *end = p + n;
	while (p < end && f->verdict == SQD_FRAMING_OK) {
		int s = f->state;
		if (s == F_BODY || s == F_DATA) {
			size_t take =
				(uint64_t)(end - p) < f->left ? (size_t)(end - p) : (size_t)f->left;
			p += take;
			f->pos += take;
			f->left -= take;
			if (f->left == 0 && s == F_BODY) {
				next_request(f);
			} else if (f->left == 0) {
				uint64_t size = f->size;
				line_start(f, F_DATA_END, f->pos);
				f->size = size; /* for the message */
			}
			continue;
		}
		if (s <= F_HEAD_CR)
			head_byte(f, *p);
		else if (s <= F_SIZE_CR)
			size_byte(f, p, end);
		else if (s <= F_DATA_CR)
			data_end_byte(f, p, end);
		else
			trailer_byte(f, p, end);
		if (f->verdict == SQD_FRAMING_OK)
			f->pos++;
		p++;
	}
	return f->verdict;
}

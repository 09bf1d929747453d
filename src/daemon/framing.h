/* framing.h - where each request on an HTTP/1.1 connection ends, followed
 * over the connection's input as it is read, so that shardqd can answer a
 * malformed chunked body itself (400, JSON) before libevent reads it and
 * answers its own HTML 413 (docs/http.md, "Errors").
 *
 * Pure C: fed the connection's bytes in order, in pieces of any size. It
 * reads each request's line and headers only as far as libevent 2.1 does to
 * find the body's length (Content-Length, or Transfer-Encoding: chunked;
 * no body for HEAD and TRACE), skips the body, and goes on with the next
 * request. It judges only a chunked body: its chunk-size lines, the CRLF
 * after each chunk's data, the last chunk and the trailer lines. Anything
 * else it is not sure of (a header folded over lines, a second
 * Content-Length, a Transfer-Encoding other than chunked, a chunk size
 * beyond 2^63, ...) ends the following: SQD_FRAMING_OFF, and libevent
 * judges that connection alone, as before. */
#ifndef SQD_FRAMING_H
#define SQD_FRAMING_H

#include <stddef.h>
#include <stdint.h>

enum sqd_framing_verdict {
	SQD_FRAMING_OK,  /* valid so far */
	SQD_FRAMING_OFF, /* not followed any more: libevent judges the rest */
	SQD_FRAMING_BAD  /* a malformed chunked body: bad_at and why say where and what */
};

typedef struct sqd_framing {
	int verdict;
	int state;
	uint64_t pos;     /* bytes fed so far */
	uint64_t line_at; /* where the current line of the chunked body began */
	uint64_t bad_at;  /* BAD: the first byte of the line (or the CRLF) at fault */
	uint64_t left;    /* bytes of the body or of the chunk's data still to come */
	uint64_t size;    /* the chunk size being read */
	int digits;       /* its significant hex digits */
	int hex;          /* its hex digits, leading zeros too */
	int cr_of;        /* the head's line a CR ended: only LF may follow */
	/* the head being read */
	int body_ok; /* its method may have a body (all but HEAD, TRACE) */
	int chunked, has_te, has_cl, colon, in_value;
	uint64_t cl;
	unsigned mlen, nlen, vlen;
	char method[8];
	char name[20];  /* the header's name, cut (only three names matter) */
	char value[16]; /* its value after the leading spaces, cut */
	char quote[40]; /* the start of the current chunk line, for why */
	unsigned qlen;
	char why[256];
} sqd_framing;

void sqd_framing_init(sqd_framing *f);

/* Feeds the next n bytes of the connection; returns the verdict (f->verdict).
 * Once OFF or BAD, it stays so and reads nothing more. */
int sqd_framing_feed(sqd_framing *f, const void *data, size_t n);

#endif

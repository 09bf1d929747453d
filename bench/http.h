/* http.h - a small blocking HTTP/1.1 client for shardqd: one keep-alive
 * connection to 127.0.0.1, one request at a time, replies with a
 * Content-Length (what shardqd sends). Used by the HTTP workers and
 * producers and to scrape /metrics. */
#ifndef BENCH_HTTP_H
#define BENCH_HTTP_H

#include <stddef.h>

typedef struct hconn {
	int fd; /* -1: not connected */
	int port;
	char *buf; /* the last reply (head and body) */
	size_t cap;
} hconn;

/* A growable text buffer for request bodies. */
typedef struct hbuf {
	char *p;
	size_t len, cap;
} hbuf;

void hbuf_reset(hbuf *b);
/* Appends; -1 when out of memory. */
int hbuf_put(hbuf *b, const char *s, size_t n);
int hbuf_printf(hbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hbuf_free(hbuf *b);

void hconn_init(hconn *c, int port);
void hconn_close(hconn *c);

/*
 * Sends one request (body may be NULL) and reads the reply. Returns the
 * status, with *body (NUL-terminated, inside c->buf: valid until the next
 * request) and *len; or -1 with a message when the connection failed. A
 * connection the daemon closed while idle is opened again once, before
 * anything of the request was sent.
 */
int hconn_request(hconn *c, const char *method, const char *path, const char *token,
		  const char *body, size_t blen, char **rbody, size_t *rlen, char *err,
		  size_t errlen);

#endif

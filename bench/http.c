/* http.c - the bench's HTTP/1.1 client (see http.h). */
#define _GNU_SOURCE
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

void hbuf_reset(hbuf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

int hbuf_put(hbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int hbuf_printf(hbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -1;
	return hbuf_put(b, tmp, (size_t)n);
}

void hbuf_free(hbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

void hconn_init(hconn *c, int port)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->port = port;
}

void hconn_close(hconn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

static int open_fd(hconn *c, char *err, size_t errlen)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)c->port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		snprintf(err, errlen, "connect to 127.0.0.1:%d: %s", c->port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	return 0;
}

static int send_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Reads one reply into c->buf; the status, or -1 (0 when the connection
 * closed before any byte came). */
static int read_reply(hconn *c, char **rbody, size_t *rlen, int *closing)
{
	size_t have = 0, body_at = 0, clen = 0;
	int status = 0;
	for (;;) {
		if (have + 1 >= c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 65536;
			char *p = realloc(c->buf, cap);
			if (!p)
				return -1;
			c->buf = p;
			c->cap = cap;
		}
		ssize_t n = recv(c->fd, c->buf + have, c->cap - have - 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return have ? -1 : 0;
		have += (size_t)n;
		c->buf[have] = '\0';
		if (!body_at) {
			char *eoh = strstr(c->buf, "\r\n\r\n");
			if (!eoh)
				continue;
			*eoh = '\0';
			const char *sp = strchr(c->buf, ' ');
			status = sp ? atoi(sp + 1) : 0;
			const char *cl = strcasestr(c->buf, "\r\nContent-Length:");
			clen = cl ? strtoul(cl + 17, NULL, 10) : 0;
			*closing = strcasestr(c->buf, "\r\nConnection: close") != NULL;
			*eoh = '\r';
			body_at = (size_t)(eoh - c->buf) + 4;
			if (body_at + clen + 1 > c->cap) {
				char *p = realloc(c->buf, body_at + clen + 1);
				if (!p)
					return -1;
				c->buf = p;
				c->cap = body_at + clen + 1;
			}
		}
		if (have - body_at >= clen) {
			c->buf[body_at + clen] = '\0';
			*rbody = c->buf + body_at;
			*rlen = clen;
			return status > 0 ? status : -1;
		}
	}
}

int hconn_request(hconn *c, const char *method, const char *path, const char *token,
		  const char *body, size_t blen, char **rbody, size_t *rlen, char *err,
		  size_t errlen)
{
	char head[512];
	int hl = snprintf(head, sizeof(head),
			  "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
			  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			  method, path, token, blen);
	for (int attempt = 0; attempt < 2; attempt++) {
		int fresh = c->fd < 0;
		if (fresh && open_fd(c, err, errlen))
			return -1;
		struct iovec iov[2] = {{head, (size_t)hl}, {(void *)body, blen}};
		int closing = 0, st = 0;
		errno = 0;
		if (send_all(c->fd, iov, blen ? 2 : 1) == 0)
			st = read_reply(c, rbody, rlen, &closing);
		if (st > 0) {
			if (closing) {
				close(c->fd);
				c->fd = -1;
			}
			return st;
		} else {
			int e = errno;
			close(c->fd);
			c->fd = -1;
			/* a kept connection the daemon had closed: once more, anew */
			if (fresh || st < 0) {
				snprintf(err, errlen,
					 "%s %s: the connection to 127.0.0.1:%d failed: %s", method,
					 path, c->port, e ? strerror(e) : "closed");
				return -1;
			}
		}
	}
	snprintf(err, errlen, "%s %s: the connection to 127.0.0.1:%d was closed", method, path,
		 c->port);
	return -1;
}

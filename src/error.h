/* error.h - the one error convention of libshardq: a status and a message. */
#ifndef SQ_ERROR_H
#define SQ_ERROR_H

#include "shardq.h"

/* Sets err (if not NULL) and returns code, so callers can `return sq_err(...)`. */
sq_status sq_err(sq_error *err, sq_status code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefixes err->msg with a context string ("shard s1 (host:port): ..."). */
void sq_err_prefix(sq_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

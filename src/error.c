/* error.c - status names and the error-message helpers. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *sq_status_name(sq_status st)
{
	switch (st) {
	case SQ_OK: return "ok";
	case SQ_EINVAL: return "invalid";
	case SQ_ECONFIG: return "config";
	case SQ_ECONN: return "connection";
	case SQ_EDB: return "database";
	case SQ_ESTATE: return "state";
	case SQ_ELOST: return "lost";
	case SQ_EMOVED: return "moved";
	case SQ_EMOVING: return "moving";
	case SQ_ENOMEM: return "out of memory";
	case SQ_ENOTFOUND: return "not found";
	}
	return "unknown";
}

sq_status sq_err(sq_error *err, sq_status code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

void sq_err_prefix(sq_error *err, const char *fmt, ...)
{
	char pre[512], old[sizeof(err->msg)];
	va_list ap;
	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", pre, old);
}

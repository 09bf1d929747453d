/* log.c - shardqd's log: one line per problem on stderr (log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

void sqd_log(const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* one line per problem: a library message may hold newlines */
	for (char *p = line; *p; p++)
		if (*p == '\n')
			*p = ' ';
	fprintf(stderr, "shardqd: %s\n", line);
}

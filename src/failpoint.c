/* failpoint.c - crash points named by $SHARDQ_FAILPOINT, for the tests of
 * the mover's recovery. */
#include "failpoint.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sq_failpoint(const char *name)
{
	const char *fp = getenv("SHARDQ_FAILPOINT");
	if (fp && !strcmp(fp, name))
		_exit(99); /* no cleanup, no flush: like a crash */
}

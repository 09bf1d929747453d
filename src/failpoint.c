/* failpoint.c - crash points named by $SHARDQ_FAILPOINT, for the tests of
 * the mover's recovery; compiled in only with SHARDQ_FAILPOINTS (see
 * failpoint.h). */
#include "failpoint.h"

#ifdef SHARDQ_FAILPOINTS
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sq_failpoint(const char *name)
{
	const char *fp = getenv("SHARDQ_FAILPOINT");
	const char *sl = getenv("SHARDQ_FAILPOINT_SLEEP");
	size_t n = strlen(name);
	if (fp && !strcmp(fp, name))
		_exit(99); /* no cleanup, no flush: like a crash */
	const char *wt = getenv("SHARDQ_FAILPOINT_WAIT");
	/* "name:ms" holds the process there, to widen a window in tests */
	if (sl && !strncmp(sl, name, n) && sl[n] == ':')
		usleep((useconds_t)atoi(sl + n + 1) * 1000);
	/* "name:PATH" holds it there until the test makes PATH; it first makes
	 * PATH.reached, so the test knows it is there */
	if (wt && !strncmp(wt, name, n) && wt[n] == ':') {
		/* copied: the test clears the setting while this waits */
		char go[1024], reached[1040];
		snprintf(go, sizeof(go), "%s", wt + n + 1);
		snprintf(reached, sizeof(reached), "%s.reached", go);
		int fd = open(reached, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		if (fd >= 0)
			close(fd);
		/* a test that failed before its word does not hold this for good */
		for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++)
			usleep(10000);
	}
}

int64_t sq_test_clock_offset_s(void)
{
	const char *v = getenv("SHARDQ_TEST_CLOCK_OFFSET");
	return v ? strtoll(v, NULL, 10) : 0;
}

const char *sq_test_lookup(const char *host)
{
	const char *v = getenv("SHARDQ_TEST_LOOKUP");
	size_t n = strlen(host);
	return v && !strncmp(v, host, n) && v[n] == '=' ? v + n + 1 : NULL;
}
#else
/* a translation unit may not be empty */
typedef int sq_failpoints_not_built;
#endif

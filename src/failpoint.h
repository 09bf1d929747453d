/* failpoint.h - named crash points for tests: when $SHARDQ_FAILPOINT names
 * this point, the process exits at once (code 99), as a kill -9 would;
 * when $SHARDQ_FAILPOINT_SLEEP is "name:MS", it sleeps MS milliseconds there;
 * when $SHARDQ_FAILPOINT_WAIT is "name:PATH", it makes PATH.reached and
 * waits there until PATH exists (the test's word to go on), 10 minutes
 * at most.
 *
 * Only a test build has them (cmake -DSHARDQ_FAILPOINTS=ON, as scripts/test
 * builds build-asan): in any other build sq_failpoint is an empty inline and
 * the variables are never read, so no environment can stop a production
 * mover half-way. tests/test_robust.c (failpoints_only_where_built_in)
 * checks both builds. */
#ifndef SQ_FAILPOINT_H
#define SQ_FAILPOINT_H

#include <stddef.h>
#include <stdint.h>

/* The test clock: seconds ($SHARDQ_TEST_CLOCK_OFFSET, may be negative)
 * added to now() where a completion writes finished_at and expires_at, so
 * a test can fill history over several days. 0 in any other build. */
/* What a name lookup finds for `host` in the tests: the addresses of
 * $SHARDQ_TEST_LOOKUP ("HOST=ADDR,ADDR,...", for a name with several
 * addresses on a machine without one); NULL: look it up. NULL in any other
 * build. */
#ifdef SHARDQ_FAILPOINTS
void sq_failpoint(const char *name);
int64_t sq_test_clock_offset_s(void);
const char *sq_test_lookup(const char *host);
#else
static inline void sq_failpoint(const char *name)
{
	(void)name;
}
static inline int64_t sq_test_clock_offset_s(void)
{
	return 0;
}
static inline const char *sq_test_lookup(const char *host)
{
	(void)host;
	return NULL;
}
#endif

#endif

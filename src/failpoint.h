/* failpoint.h - named crash points for tests: when $SHARDQ_FAILPOINT names
 * this point, the process exits at once (code 99), as a kill -9 would;
 * when $SHARDQ_FAILPOINT_SLEEP is "name:MS", it sleeps MS milliseconds there. */
#ifndef SQ_FAILPOINT_H
#define SQ_FAILPOINT_H

void sq_failpoint(const char *name);

#endif

/* log.h - shardqd's log: one line per problem on stderr. The bottom layer
 * of the daemon: every other file may call it, it calls none of them. */
#ifndef SQD_LOG_H
#define SQD_LOG_H

/* Writes "shardqd: " and the message as one line: a library message's
 * newlines become spaces. Safe from any thread (one fprintf per line). */
void sqd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

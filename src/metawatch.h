/* metawatch.h - a long-running process's watch on the meta database: a
 * thread that asks it whether it answers, every [connection] map_poll, on
 * a connection of its own, and says when it stops answering and when it
 * answers again (shardqd logs both). */
#ifndef SQ_METAWATCH_H
#define SQ_METAWATCH_H

#include "config.h"

typedef struct sq_metawatch sq_metawatch;
typedef void (*sq_metawatch_log)(const char *line, void *arg);

/* Starts the thread; its first question comes at once. log (not NULL) gets
 * one line at each change (on the thread): the outage with why, and its
 * end with how long it lasted. NULL if the thread could not be made. cfg
 * must outlive it. */
sq_metawatch *sq_metawatch_start(const sq_config *cfg, sq_metawatch_log log, void *log_arg);
/* Stops the thread (a question under way is given up at once) and frees
 * it; NULL does nothing. */
void sq_metawatch_stop(sq_metawatch *m);

#endif

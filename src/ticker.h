/* ticker.h - a thread that runs one function periodically until stopped:
 * the history maintenance (maintain.c) and the scheduler (schedule.c) in
 * the worker runtime and shardqd. */
#ifndef SQ_TICKER_H
#define SQ_TICKER_H

#include <stdint.h>

typedef struct sq_ticker sq_ticker;

/* Starts a thread that calls fn(arg) first after first_ms, then each time
 * as many ms after the end of the previous call as that call returned (on
 * CLOCK_MONOTONIC, so a change of the wall clock moves nothing). NULL if
 * the thread could not be made. */
sq_ticker *sq_ticker_start(int64_t (*fn)(void *arg), void *arg, int64_t first_ms);
/* Stops it: a wait is cut short, a call in progress is waited for; then
 * frees it. NULL does nothing. */
void sq_ticker_stop(sq_ticker *t);

#endif

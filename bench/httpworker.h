/* httpworker.h - the HTTP workers of a phase with `[workers] via = http`:
 * a worker process of the bench runs its share of the scenario's clients,
 * one thread and one keep-alive connection to shardqd each. A client
 * loops: POST /v1/claim (every type, `limit` = its claim_batch, wait_ms,
 * start: true), runs the jobs one after another with the bench's handler
 * (a client is one slot), then POST /v1/jobs/complete with their fences. */
#ifndef BENCH_HTTPWORKER_H
#define BENCH_HTTPWORKER_H

#include "tally.h"

/* The worker process's body (from workerproc_main); the exit code. */
int httpworker_main(tally *t, int idx);

#endif

/* workerproc.h - a worker process of the bench: libshardq's worker runtime
 * (sq_worker) with the scenario's handlers, started by the bench with
 * fork + exec of itself and steered through the shared tally. */
#ifndef BENCH_WORKERPROC_H
#define BENCH_WORKERPROC_H

#include "tally.h"

#include <sys/types.h>

/* The child's side: `shardq-bench --worker-process FD INDEX`. Returns the
 * exit code. */
int workerproc_main(int fd, int idx);

/* The parent's side: starts worker process idx (exec of this binary);
 * returns its pid, or -1 with a message. */
pid_t workerproc_spawn(int fd, int idx, char *err, size_t errlen);

/* Waits until every process reported ready (0), or one failed or exited
 * (-1 with its message). */
int workerproc_wait_ready(tally *t, const pid_t *pids, int n, char *err, size_t errlen);
/* After go: waits until every library worker's loop has done its first
 * tick (its handler threads started, its statements prepared), so that the
 * producers meet running workers; -1 as above. */
int workerproc_wait_running(tally *t, const pid_t *pids, int n, char *err, size_t errlen);

/* Asks every process to stop gracefully and waits (up to wait_s, then
 * SIGKILL); 0 if all exited cleanly, else -1 with a message. */
int workerproc_stop(tally *t, pid_t *pids, int n, double wait_s, char *err, size_t errlen);

/* The buffer the runtime is given: the jobs the types' claim batches hold
 * beyond their threads. */
int workerproc_buffer(const scenario *sc);

#endif

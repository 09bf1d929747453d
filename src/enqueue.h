/* enqueue.h - sq_enqueue's two halves, for the enqueuer (enqueuer.c): it
 * checks a batch when it is handed over and sends it later on a lane,
 * without checking it twice. */
#ifndef SQ_ENQUEUE_H
#define SQ_ENQUEUE_H

#include "shardq.h"

/* Every job checked as sq_job_spec_check does; SQ_EINVAL names the first
 * bad one ("job K: ..."). */
sq_status sq_enqueue_check(const sq_config *cfg, const sq_job_spec *jobs, size_t n, sq_error *err);
/* sq_enqueue of jobs that passed sq_enqueue_check. */
sq_status sq_enqueue_checked(sq_client *c, const sq_job_spec *jobs, size_t n,
			     sq_enqueue_result *res, sq_error *err);

#endif

/* jobrow.h - turning a shard's job row into an sq_job. */
#ifndef SQ_JOBROW_H
#define SQ_JOBROW_H

#include "shardq.h"

#include <libpq-fe.h>

/* Fills *job from row `row` of r (columns as the fragment job_columns of
 * sql/queries/lifecycle.sql). Returns 0, or -1 when out of memory (then
 * *job holds nothing to free). */
int sq_jobrow_parse(PGresult *r, int row, int shard, sq_job *job);

/* NULL when r has the claim's columns (the fragment job_columns_bin of
 * sql/queries/claim.sql) in binary format, else what is wrong (a shard
 * whose schema differs). */
const char *sq_jobrow_check_bin(const PGresult *r);
/* As sq_jobrow_parse, for a result sq_jobrow_check_bin accepted; the job's
 * worker is a copy of `worker`. */
int sq_jobrow_parse_bin(const PGresult *r, int row, int shard, const char *worker, sq_job *job);

#endif

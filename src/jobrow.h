/* jobrow.h - turning a shard's job row into an sq_job. */
#ifndef SQ_JOBROW_H
#define SQ_JOBROW_H

#include "shardq.h"

#include <libpq-fe.h>

/* Fills *job from row `row` of r (columns as the fragment job_columns of
 * sql/queries/lifecycle.sql). Returns 0, or -1 when out of memory (then
 * *job holds nothing to free). */
int sq_jobrow_parse(PGresult *r, int row, int shard, sq_job *job);

/* A history row keeps no max_attempts (get_history, list_completed give
 * the attempt in its place): the job's type's, from cfg, if it has one. */
void sq_job_history_budget(const sq_config *cfg, sq_job *job);

/* NULL when r has the claim's columns (the fragment job_columns_bin of
 * sql/queries/claim.sql) in binary format, else what is wrong (a shard
 * whose schema differs). */
const char *sq_jobrow_check_bin(const PGresult *r);
/* As sq_jobrow_parse, for a result sq_jobrow_check_bin accepted; the job's
 * worker is a copy of `worker`. */
int sq_jobrow_parse_bin(const PGresult *r, int row, int shard, const char *worker, sq_job *job);
/* The id of row `row` of such a result: negative for a cursor row
 * (claim_cursor_rows), whose priority and order key (µs since PostgreSQL's
 * epoch, as the claim takes it back) sq_jobrow_bin_cursor reads. */
int64_t sq_jobrow_bin_id(const PGresult *r, int row);
void sq_jobrow_bin_cursor(const PGresult *r, int row, int32_t *prio, int64_t *key_us);

#endif

/* jobrow.c - job rows as returned by claims and lookups. */
#include "jobrow.h"

#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {"ready",     "starting", "running",
					   "completed", "failed",   "cancelled"};

const char *sq_job_status_name(sq_job_status s)
{
	return (unsigned)s < 6 ? status_names[s] : "unknown";
}

static char *dup_or_null(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : strdup(PQgetvalue(r, row, col));
}

static int64_t i64(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : atoll(PQgetvalue(r, row, col));
}

int sq_jobrow_parse(PGresult *r, int row, int shard, sq_job *job)
{
	const char *st = PQgetvalue(r, row, 5);
	memset(job, 0, sizeof(*job));
	job->id = i64(r, row, 0);
	job->attempt = (int32_t)i64(r, row, 1);
	job->tries = (int32_t)i64(r, row, 2);
	job->max_attempts = (int32_t)i64(r, row, 3);
	job->priority = (int32_t)i64(r, row, 4);
	job->shard = shard;
	for (int i = 0; i < 6; i++)
		if (!strcmp(st, status_names[i]))
			job->status = (sq_job_status)i;
	job->type = dup_or_null(r, row, 6);
	job->key = dup_or_null(r, row, 7);
	job->params = dup_or_null(r, row, 8);
	job->worker = dup_or_null(r, row, 9);
	job->schedule_time_us = i64(r, row, 10);
	job->delay_tolerance_time_us = i64(r, row, 11);
	job->lease_until_us = i64(r, row, 12);
	job->created_us = i64(r, row, 13);
	if (!job->type || !job->params || (!job->key && !PQgetisnull(r, row, 7)) ||
	    (!job->worker && !PQgetisnull(r, row, 9))) {
		sq_job_clear(job);
		return -1;
	}
	return 0;
}

void sq_job_clear(sq_job *job)
{
	free(job->type);
	free(job->key);
	free(job->params);
	free(job->worker);
	memset(job, 0, sizeof(*job));
}

void sq_jobs_free(sq_job *jobs, size_t n)
{
	for (size_t i = 0; jobs && i < n; i++)
		sq_job_clear(&jobs[i]);
	free(jobs);
}

/* jobrow.c - job rows as returned by claims and lookups. */
#include "jobrow.h"
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {"ready",     "starting", "running",
					   "completed", "failed",   "cancelled"};

_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == SQ_JOB_STATUS_COUNT,
	       "a name per sq_job_status");

const char *sq_job_status_name(sq_job_status s)
{
	return (unsigned)s < SQ_JOB_STATUS_COUNT ? status_names[s] : "unknown";
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
	for (int i = 0; i < SQ_JOB_STATUS_COUNT; i++)
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

/* Type oids of the claim's columns (sql/queries/claim.sql, job_columns_bin;
 * pg_type.h: int8, int4, text, timestamptz). */
enum { OID_INT8 = 20, OID_INT4 = 23, OID_TEXT = 25, OID_TSTZ = 1184 };
static const unsigned bin_oid[] = {OID_INT8, OID_INT4, OID_INT4, OID_INT4, OID_INT4,
				   OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT, OID_TSTZ,
				   OID_TSTZ, OID_TSTZ, OID_TSTZ};
#define BIN_COLS ((int)(sizeof(bin_oid) / sizeof(bin_oid[0])))
/* microseconds from the Unix epoch to PostgreSQL's (2000-01-01) */
#define PG_EPOCH_US INT64_C(946684800000000)

const char *sq_jobrow_check_bin(const PGresult *r)
{
	if (PQnfields(r) != BIN_COLS)
		return "the claim answered an unexpected number of columns";
	for (int c = 0; c < BIN_COLS; c++)
		if (PQfformat(r, c) != 1 || PQftype(r, c) != bin_oid[c])
			return "the claim answered a column of an unexpected type";
	return NULL;
}

static uint64_t be(const char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | (unsigned char)p[i];
	return v;
}

/* An int8, int4 or timestamptz (µs since 2000-01-01, as an int8); 0 for
 * NULL or a value of the wrong size. */
static int64_t bin_int(const PGresult *r, int row, int col)
{
	int n = PQgetlength(r, row, col);
	if (PQgetisnull(r, row, col) || (n != 4 && n != 8))
		return 0;
	uint64_t v = be(PQgetvalue(r, row, col), n);
	return n == 8 ? (int64_t)v : (int64_t)(int32_t)(uint32_t)v;
}

int64_t sq_jobrow_bin_id(const PGresult *r, int row)
{
	return bin_int(r, row, 0);
}

void sq_jobrow_bin_cursor(const PGresult *r, int row, int32_t *prio, int64_t *key_us)
{
	*prio = (int32_t)bin_int(r, row, 4);
	*key_us = bin_int(r, row, 9);
}

static int64_t bin_time(const PGresult *r, int row, int col)
{
	int64_t v = bin_int(r, row, col);
	if (PQgetisnull(r, row, col))
		return 0;
	/* 'infinity' (never stored here) stays the largest value */
	return v > INT64_MAX - PG_EPOCH_US ? INT64_MAX : v + PG_EPOCH_US;
}

/* A text value (libpq ends binary values with a zero byte too; text has
 * no other) */
static char *bin_text(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	size_t n = (size_t)PQgetlength(r, row, col);
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, PQgetvalue(r, row, col), n);
		s[n] = '\0';
	}
	return s;
}

int sq_jobrow_parse_bin(const PGresult *r, int row, int shard, const char *worker, sq_job *job)
{
	const char *st = PQgetvalue(r, row, 5);
	int stlen = PQgetlength(r, row, 5);
	memset(job, 0, sizeof(*job));
	job->id = bin_int(r, row, 0);
	job->attempt = (int32_t)bin_int(r, row, 1);
	job->tries = (int32_t)bin_int(r, row, 2);
	job->max_attempts = (int32_t)bin_int(r, row, 3);
	job->priority = (int32_t)bin_int(r, row, 4);
	job->shard = shard;
	for (int i = 0; i < SQ_JOB_STATUS_COUNT; i++)
		if ((size_t)stlen == strlen(status_names[i]) &&
		    !memcmp(st, status_names[i], (size_t)stlen))
			job->status = (sq_job_status)i;
	job->type = bin_text(r, row, 6);
	job->key = bin_text(r, row, 7);
	job->params = bin_text(r, row, 8);
	job->worker = worker ? strdup(worker) : NULL;
	job->schedule_time_us = bin_time(r, row, 9);
	job->delay_tolerance_time_us = bin_time(r, row, 10);
	job->lease_until_us = bin_time(r, row, 11);
	job->created_us = bin_time(r, row, 12);
	if (!job->type || !job->params || (!job->key && !PQgetisnull(r, row, 7)) ||
	    (worker && !job->worker)) {
		sq_job_clear(job);
		return -1;
	}
	return 0;
}

void sq_job_clear(sq_job *job)
{
	if (!job)
		return;
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

void sq_job_history_budget(const sq_config *cfg, sq_job *job)
{
	const sq_type_conf *t = job->type ? sq_config_type(cfg, job->type) : NULL;
	if (t)
		job->max_attempts = t->max_attempts;
}

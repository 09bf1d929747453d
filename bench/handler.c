/* handler.c - the benchmark job: latency bookkeeping and a sleep drawn from
 * the type's execution-time distribution. */
#include "handler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

int64_t job_enqueued_at(const char *params)
{
	/* params come back as jsonb text: {"t": 1700000000000000} */
	const char *p = params ? strstr(params, "\"t\"") : NULL;
	if (!p)
		return 0;
	p += 3;
	while (*p == ' ' || *p == ':')
		p++;
	return strtoll(p, NULL, 10);
}

void job_started(tally *t, const char *params, int shard, int type_idx)
{
	int64_t at = job_enqueued_at(params), now = wall_us();
	if (at > 0)
		hist_record(at < atomic_load_explicit(&t->e2s_from, memory_order_relaxed)
				    ? &t->e2s_warm
				    : &t->e2s,
			    (uint64_t)(now > at ? now - at : 0));
	else
		atomic_fetch_add_explicit(&t->handled_backlog, 1, memory_order_relaxed);
	if (shard >= 0 && shard < SC_MAX_SHARDS)
		atomic_fetch_add_explicit(&t->per_shard[shard], 1, memory_order_relaxed);
	if (type_idx >= 0 && type_idx < SC_MAX_TYPES)
		atomic_fetch_add_explicit(&t->per_type[type_idx], 1, memory_order_relaxed);
}

void job_execute(const sc_type *type, int64_t id)
{
	double us;
	if (type->exec == EXEC_NOOP)
		return;
	if (type->exec == EXEC_FIXED) {
		us = (double)type->exec_us;
	} else {
		/* the same job always draws the same time, run after run */
		uint64_t h = XXH3_64bits(&id, sizeof(id));
		double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
		us = -log(u) * (double)type->exec_us;
	}
	if (us < 1)
		return;
	struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1000.0)};
	while (nanosleep(&ts, &ts) != 0)
		;
}

sq_job_result bench_handler(const sq_job *job, void *arg, char *errbuf, size_t errlen)
{
	handler_arg *a = arg;
	(void)errbuf;
	(void)errlen;
	job_started(a->t, job->params, job->shard, a->type_idx);
	if (job->attempt > 1)
		atomic_fetch_add_explicit(&a->t->reruns, 1, memory_order_relaxed);
	job_execute(a->type, job->id);
	atomic_fetch_add_explicit(&a->t->handled, 1, memory_order_relaxed);
	return SQ_RESULT_DONE;
}

/* task.c - a request's task and its way through the daemon: the replies
 * written into it (an error, a job's JSON), the refs of the jobs handed to
 * its client, the queue to the request threads and the way back to the
 * main thread. Below api.c, claimer.c and server.c, which all use it; it
 * calls none of them. */
#include "daemon.h"

#include "json.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sqd_error(sqd_task *t, int status, const char *code, const char *fmt, ...)
{
	char msg[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	t->status = status;
	sq_buf_reset(&t->resp);
	sq_buf_puts(&t->resp, "{\"error\":{\"code\":");
	sq_json_put_string(&t->resp, code);
	sq_buf_puts(&t->resp, ",\"message\":");
	sq_json_put_string(&t->resp, msg);
	sq_buf_puts(&t->resp, "}}");
}

void sqd_task_add_ref(sqd_task *t, int64_t id, int32_t attempt)
{
	if (t->nrefs == t->refcap) {
		size_t cap = t->refcap ? t->refcap * 2 : 16;
		sq_job_ref *v = realloc(t->refs, cap * sizeof(*v));
		if (!v)
			return;
		t->refs = v;
		t->refcap = cap;
	}
	t->refs[t->nrefs].id = id;
	t->refs[t->nrefs].attempt = attempt;
	t->nrefs++;
}

static void put_ms(sq_buf *b, const char *name, int64_t us)
{
	if (us)
		sq_buf_printf(b, ",\"%s\":%lld", name, (long long)(us / 1000));
	else
		sq_buf_printf(b, ",\"%s\":null", name);
}

void sqd_put_job(sq_buf *b, const sq_config *cfg, const sq_job *j)
{
	sq_buf_printf(b, "{\"id\":%lld,\"attempt\":%d,\"worker\":", (long long)j->id, j->attempt);
	if (j->worker)
		sq_json_put_string(b, j->worker);
	else
		sq_buf_puts(b, "null");
	sq_buf_puts(b, ",\"type\":");
	sq_json_put_string(b, j->type ? j->type : "");
	sq_buf_puts(b, ",\"key\":");
	if (j->key)
		sq_json_put_string(b, j->key);
	else
		sq_buf_puts(b, "null");
	sq_buf_puts(b, ",\"params\":");
	sq_buf_puts(b, j->params && *j->params ? j->params : "{}");
	sq_buf_printf(b, ",\"status\":\"%s\",\"priority\":%d,\"tries\":%d,\"max_attempts\":%d",
		      sq_job_status_name(j->status), j->priority, j->tries, j->max_attempts);
	sq_buf_puts(b, ",\"shard\":");
	const char *sid = sq_config_shard_id(cfg, j->shard);
	sq_json_put_string(b, sid ? sid : "");
	put_ms(b, "schedule_ms", j->schedule_time_us);
	put_ms(b, "delay_tolerance_ms", j->delay_tolerance_time_us);
	put_ms(b, "lease_until_ms", j->lease_until_us);
	put_ms(b, "created_ms", j->created_us);
	sq_buf_putc(b, '}');
}

void sqd_task_free(sqd_task *t)
{
	if (t->claim) {
		sq_buf_free(&t->claim->jobs);
		free(t->claim);
	}
	free(t->body);
	free(t->query);
	free(t->refs);
	sq_buf_free(&t->resp);
	free(t);
}

void sqd_submit(sqd *d, sqd_task *t)
{
	pthread_mutex_lock(&d->work.mu);
	t->next = NULL;
	if (d->work.tail)
		d->work.tail->next = t;
	else
		d->work.head = t;
	d->work.tail = t;
	d->work.n++;
	atomic_store(&d->m.queue_len, d->work.n);
	pthread_cond_signal(&d->work.cv);
	pthread_mutex_unlock(&d->work.mu);
}

void sqd_done(sqd *d, sqd_task *t)
{
	pthread_mutex_lock(&d->done_mu);
	t->next = NULL;
	if (d->done_tail)
		d->done_tail->next = t;
	else
		d->done_head = t;
	d->done_tail = t;
	pthread_mutex_unlock(&d->done_mu);
	event_active(d->done_ev, EV_READ, 0);
}

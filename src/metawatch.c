/* metawatch.c - the watch on the meta database (metawatch.h). */
#include "metawatch.h"

#include "client.h"
#include "clock.h"
#include "ticker.h"
#include "watch.h"

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sq_metawatch {
	const sq_config *cfg;
	sq_metawatch_log log;
	void *log_arg;
	PGconn *conn;
	int known;         /* a question has been answered or failed */
	double down_since; /* monotonic s; 0 while it answers */
	atomic_int stop;
	sq_ticker *ticker;
};

/* Whether the meta database answers, as one (the map's version), on the
 * watch's connection (made again when it is gone); why not, in why. */
static int answers(sq_metawatch *m, char *why, size_t len)
{
	if (m->conn && PQstatus(m->conn) != CONNECTION_OK) {
		PQfinish(m->conn);
		m->conn = NULL;
	}
	if (!m->conn &&
	    !(m->conn = sq_connect_plain_stop(m->cfg, sq_config_meta_dsn(m->cfg), "meta",
					      "meta-watch", &m->stop, why, len)))
		return 0;
	int fired = 0;
	PGresult *r = sq_watch_exec(m->conn, "SELECT map_version FROM shardq_meta.cluster", 0, NULL,
				    sq_plain_answer_wait_s(m->cfg, m->cfg->statement_timeout_ms),
				    &m->stop, &fired);
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok) {
		snprintf(why, len, "%s",
			 fired ? "no answer within the answer wait" : PQerrorMessage(m->conn));
		why[strcspn(why, "\n")] = '\0';
		PQfinish(m->conn); /* made again for the next question */
		m->conn = NULL;
	}
	PQclear(r);
	return ok;
}

/* The wait between two questions: map_poll, but at least 100 ms (map_poll
 * 0 makes clients ask at every call; here it would be a busy loop). */
static int64_t period_ms(const sq_config *cfg)
{
	return cfg->map_poll_ms >= 100 ? cfg->map_poll_ms : 100;
}

/* One question; a line when the answer differs from the last one. The
 * next comes map_poll later. */
static int64_t watch_pass(void *arg)
{
	sq_metawatch *m = arg;
	char why[512] = "", line[900];
	int ok = answers(m, why, sizeof(why));
	if (atomic_load(&m->stop))
		return period_ms(m->cfg);
	double now = sq_mono_s();
	if (!ok && (m->down_since == 0 || !m->known)) {
		m->down_since = now;
		snprintf(line, sizeof(line),
			 "meta database: not answering (%s); claims, starts and completions go on "
			 "with the cached map, enqueues while their id blocks last (then a "
			 "retryable error), moves and schedules wait for it",
			 why);
		m->log(line, m->log_arg);
	} else if (ok && m->down_since > 0) {
		snprintf(line, sizeof(line), "meta database: answering again after %.1fs",
			 now - m->down_since);
		m->log(line, m->log_arg);
		m->down_since = 0;
	}
	m->known = 1;
	return period_ms(m->cfg);
}

sq_metawatch *sq_metawatch_start(const sq_config *cfg, sq_metawatch_log log, void *log_arg)
{
	sq_metawatch *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cfg = cfg;
	m->log = log;
	m->log_arg = log_arg;
	if (!(m->ticker = sq_ticker_start(watch_pass, m, 0))) {
		free(m);
		return NULL;
	}
	return m;
}

void sq_metawatch_stop(sq_metawatch *m)
{
	if (!m)
		return;
	atomic_store(&m->stop, 1);
	sq_ticker_stop(m->ticker);
	PQfinish(m->conn);
	free(m);
}

/* mover.c - online partition moves with move markers (design section 6):
 * prepare, freeze, drain, copy and take ownership, switch, clean up. Every
 * step is recorded in shardq_meta.moves and is idempotent, so a mover killed
 * anywhere is resumed by running the move again, or (before the copy
 * commits) aborted. The mover uses its own plain connections: explicit
 * transactions and COPY, apart from the client's pipelines. */
#include "buf.h"
#include "client.h"
#include "clock.h"
#include "error.h"
#include "failpoint.h"
#include "hrw.h"
#include "schema.h"
#include "sql_queries.h"
#include "watch.h"

#include <libpq-events.h>

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The statements of every step, and why each is shaped as it is:
 * sql/queries/mover.sql. */

/* A job's id and row version (its xmin) on the source. */
typedef struct rowver {
	int64_t id;
	uint32_t xmin;
} rowver;

typedef struct move {
	int64_t id;
	int from, to; /* config indices */
	uint32_t *parts;
	size_t n;
	char *lit; /* the partitions as an int[] literal */
	char step[16];
	int64_t rows;
	double stall_ms;
	double t0;
	PGconn *meta, *src, *dst;
	sq_client *c;
	const sq_move_opts *o;
	int lock_pid; /* the meta session that took the move's lock */
	/* the pre-copy (this process's, not recorded): the source's rows it
	 * copied, by id, and its transaction on the destination as an xmin */
	rowver *pre;
	size_t npre;
	char pre_xid[24];
} move;

void sq_move_opts_init(sq_move_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->lock_timeout_ms = 2000;
	o->freeze_tries = 5;
	o->delete_batch = 10000;
	o->set_size = 256;
	o->meta_wait_ms = 300000;
}

/* How long a statement on one of the mover's connections may go
 * unanswered (watch.h): a shard whose host was cut off without a reset, or
 * is stuck, never answers, and the move would wait for good. It is the
 * connection's statement_timeout (which bulk_timeout moves) plus
 * connect_timeout, or [connection] answer_timeout; kept with the
 * connection as libpq's instance data. */
static int conn_event(PGEventId id, void *info, void *pass)
{
	(void)pass;
	if (id == PGEVT_CONNDESTROY)
		free(PQinstanceData(((PGEventConnDestroy *)info)->conn, conn_event));
	return 1;
}

typedef struct conn_wait {
	double now;     /* the wait of the next statement */
	double normal;  /* outside bulk statements */
	int local_bulk; /* now is a bulk wait that ends with the transaction */
} conn_wait;

/* Sets pc's wait; normal >= 0 also sets its normal wait. */
static void set_wait(PGconn *pc, double wait_s, double normal, int local_bulk)
{
	conn_wait *w = PQinstanceData(pc, conn_event);
	if (!w) {
		if (!(w = calloc(1, sizeof(*w))))
			return; /* unbounded, as before */
		if (!PQregisterEventProc(pc, conn_event, "shardq mover", NULL) ||
		    !PQsetInstanceData(pc, conn_event, w)) {
			free(w);
			return;
		}
	}
	w->now = wait_s;
	if (normal >= 0)
		w->normal = normal;
	w->local_bulk = local_bulk;
}

static double wait_of(PGconn *pc)
{
	conn_wait *w = PQinstanceData(pc, conn_event);
	return w ? w->now : 0;
}

/* After a statement: a LOCAL bulk timeout ended with its transaction. */
static void wait_after(PGconn *pc)
{
	conn_wait *w = PQinstanceData(pc, conn_event);
	if (w && w->local_bulk && PQtransactionStatus(pc) == PQTRANS_IDLE) {
		w->now = w->normal;
		w->local_bulk = 0;
	}
}

/* The wait of a bulk statement (bulk_timeout): move_statement_timeout +
 * connect_timeout, and never less than the other statements' (an
 * answer_timeout set shorter than a copy may rightly take does not cut
 * the copy); 0, no bound, when move_statement_timeout is 0. */
static double bulk_wait(const sq_config *cfg)
{
	double w = sq_plain_answer_wait_s(cfg, cfg->move_statement_timeout_ms);
	double a = sq_plain_answer_wait_s(cfg, cfg->statement_timeout_ms);
	if (cfg->move_statement_timeout_ms <= 0)
		return 0;
	if (cfg->answer_timeout_ms > 0)
		w = (double)(cfg->move_statement_timeout_ms + cfg->connect_timeout_ms) / 1000.0;
	return a > w ? a : w;
}

/* err for a statement the watch gave up on */
static sq_status unanswered(PGconn *pc, const char *who, sq_error *err)
{
	return sq_err(err, SQ_ECONN,
		      "%s: no answer within %.1fs (its host gone or cut off?); nothing more "
		      "is sent there, resume the move once it answers",
		      who, wait_of(pc));
}

/* The mover's connections take the [connection] settings like every other
 * (statement_timeout, idle_in_transaction_session_timeout, connect_timeout):
 * a mover that stalls cannot hold a shard's gate, or anything else, for
 * longer. Its bulk statements get move_statement_timeout (bulk_timeout). */
static PGconn *connect_to(sq_client *c, const char *what, const char *dsn, sq_error *err)
{
	char msg[512];
	PGconn *pc = sq_connect_plain(c->cfg, dsn, "mover", -1, msg, sizeof(msg));
	if (!pc)
		sq_err(err, SQ_ECONN, "%s: %s", what, msg);
	else {
		double w = sq_plain_answer_wait_s(c->cfg, c->cfg->statement_timeout_ms);
		set_wait(pc, w, w, 0);
	}
	return pc;
}

/* Runs one statement; NULL and err on failure (the transaction, if any,
 * is rolled back so the connection stays usable). */
static PGresult *run(PGconn *c, const char *who, const char *sql, int n, const char *const *v,
		     sq_error *err)
{
	int fired;
	PGresult *r = sq_watch_exec(c, sql, n, v, wait_of(c), NULL, &fired);
	if (fired) {
		PQclear(r);
		unanswered(c, who, err);
		return NULL;
	}
	wait_after(c);
	ExecStatusType s = PQresultStatus(r);
	if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
		return r;
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
	sq_err(err, state && !strcmp(state, "42P01") ? SQ_ESTATE : SQ_EDB, "%s: %s%s", who,
	       msg ? msg : PQerrorMessage(c),
	       state && !strcmp(state, "42P01") ? " (is the shard initialised? run shardq init)"
						: "");
	if (state && !strcmp(state, "55P03"))
		err->code = SQ_EMOVING; /* lock_timeout: try again */
	PQclear(r);
	if (PQtransactionStatus(c) == PQTRANS_INERROR ||
	    PQtransactionStatus(c) == PQTRANS_INTRANS) {
		PQclear(sq_watch_exec(c, "ROLLBACK", 0, NULL, wait_of(c), NULL, NULL));
		wait_after(c);
	}
	return NULL;
}

static sq_status run_ok(PGconn *c, const char *who, const char *sql, int n, const char *const *v,
			sq_error *err)
{
	PGresult *r = run(c, who, sql, n, v, err);
	if (!r)
		return err->code;
	PQclear(r);
	return SQ_OK;
}

/* The bulk statements (a destination's leftovers deleted, a set's rows
 * counted and copied, the moved rows deleted) may run longer than
 * [connection] statement_timeout on a big set: they run under
 * [connection] move_statement_timeout, set just around them (LOCAL inside
 * a transaction). None of them runs under the gate: the freeze and the
 * drain keep the normal timeouts. */
static sq_status bulk_timeout(sq_client *c, PGconn *pc, const char *who, int local, int on,
			      sq_error *err)
{
	char sql[96];
	int64_t ms = on ? c->cfg->move_statement_timeout_ms : c->cfg->statement_timeout_ms;
	snprintf(sql, sizeof(sql), "SET %sstatement_timeout = %lld", local ? "LOCAL " : "",
		 (long long)ms);
	/* the longer wait from this statement on; a LOCAL one ends with its
	 * transaction (wait_after) */
	if (on)
		set_wait(pc, bulk_wait(c->cfg), -1, local);
	sq_status st = run_ok(pc, who, sql, 0, NULL, err);
	if (!on && st == SQ_OK)
		set_wait(pc, sq_plain_answer_wait_s(c->cfg, ms), -1, 0);
	return st;
}

static const char *sid(sq_client *c, int s)
{
	return c->cfg->shards[s].id;
}

static void move_close(move *m)
{
	if (m->meta)
		PQfinish(m->meta);
	if (m->src)
		PQfinish(m->src);
	if (m->dst)
		PQfinish(m->dst);
	free(m->parts);
	free(m->lit);
	free(m->pre);
	memset(m, 0, sizeof(*m));
}

static sq_status move_connect(sq_client *c, move *m, sq_error *err)
{
	char who[96];
	if (!m->meta && !(m->meta = connect_to(c, "meta", sq_config_meta_dsn(c->cfg), err)))
		return err->code;
	snprintf(who, sizeof(who), "shard %s (source)", sid(c, m->from));
	if (!m->src && !(m->src = connect_to(c, who, c->cfg->shards[m->from].dsn, err)))
		return err->code;
	snprintf(who, sizeof(who), "shard %s (destination)", sid(c, m->to));
	if (!m->dst && !(m->dst = connect_to(c, who, c->cfg->shards[m->to].dsn, err)))
		return err->code;
	return SQ_OK;
}

static void set_lit(move *m)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_arr_open(&b);
	for (size_t i = 0; i < m->n; i++)
		sq_arr_i64(&b, m->parts[i]);
	sq_arr_close(&b);
	free(m->lit);
	m->lit = sq_buf_steal(&b);
}

/* ---- waiting for the meta database ---------------------------------- */

/* A round trip of a step to the meta database (the step's record, the
 * switch's transaction, the plan's), run again whole after a wait. */
typedef sq_status (*meta_fn)(move *m, const void *arg, sq_error *err);

/* Set by SIGTERM/SIGINT while a mover waits for the meta database with
 * handle_signals (lock-free: a signal handler may store it). */
static atomic_int meta_wait_stop;

static void on_stop_signal(int sig)
{
	(void)sig;
	atomic_store(&meta_wait_stop, 1);
}

/* Whether a meta round trip failed because the meta database cannot be
 * reached (refused, lost, no answer), not for what it was asked. */
static int meta_unreachable(const move *m, const sq_error *err)
{
	return err->code == SQ_ECONN || !m->meta || PQstatus(m->meta) != CONNECTION_OK;
}

static void meta_note(const move *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void meta_note(const move *m, const char *fmt, ...)
{
	char line[900];
	int k = m->id ? snprintf(line, sizeof(line), "move %lld: ", (long long)m->id)
		      : snprintf(line, sizeof(line), "the next move: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + k, sizeof(line) - (size_t)k, fmt, ap);
	va_end(ap);
	if (m->o->meta_note)
		m->o->meta_note(line, m->o->progress_arg);
}

/* The move's step as the meta database has it, into step (16 bytes). */
static sq_status meta_step_now(move *m, char *step, sq_error *err)
{
	char ids[24];
	const char *v[1] = {ids};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	PGresult *r = run(m->meta, "meta", sq_sql_move_load, 1, v, err);
	if (!r)
		return err->code;
	if (PQntuples(r) != 1) {
		PQclear(r);
		return sq_err(err, SQ_ENOTFOUND, "move %lld is gone from the meta database",
			      (long long)m->id);
	}
	snprintf(step, 16, "%s", PQgetvalue(r, 0, 3));
	PQclear(r);
	return SQ_OK;
}

static sq_status lock_move(move *m, sq_error *err);

/* The move's lock taken again on a new meta connection. A session of this
 * mover's from before the outage that still holds it (its connection died
 * unseen) is ended, and the lock taken at the next try (SQ_ECONN: the
 * wait goes on); another mover's lock stops this one. */
static sq_status relock(move *m, sq_error *err)
{
	int old = m->lock_pid;
	sq_status st = lock_move(m, err);
	if (st != SQ_ESTATE || !old)
		return st;
	char ids[24], pid[16];
	const char *v[2] = {ids, pid};
	sq_error e2;
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(pid, sizeof(pid), "%d", old);
	PGresult *r = run(m->meta, "meta", sq_sql_move_lock_end_own, 2, v, &e2);
	int ended = r && !strcmp(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
	if (!ended)
		return st; /* another mover's */
	return sq_err(err, SQ_ECONN,
		      "meta: this mover's session from before (pid %d) still held the move's "
		      "lock; it is ended",
		      old);
}

/* After a wait: a new meta connection, and (for a move that has one) its
 * lock and its step, which must be `from` (the round trip did not land:
 * run it again) or `to` (it landed; *done), else another mover carried
 * the move on meanwhile and this one stops. from NULL: the plan, which
 * runs again whole. */
static sq_status reattach(move *m, const char *from, const char *to, int *done, sq_error *err)
{
	char msg[512], step[16];
	*done = 0;
	PQfinish(m->meta);
	/* given up at once on a signal (handle_signals), not after connect_timeout */
	m->meta = sq_connect_plain_stop(m->c->cfg, sq_config_meta_dsn(m->c->cfg), "meta", "mover",
					&meta_wait_stop, msg, sizeof(msg));
	if (!m->meta)
		return sq_err(err, SQ_ECONN, "meta: %s", msg);
	double w = sq_plain_answer_wait_s(m->c->cfg, m->c->cfg->statement_timeout_ms);
	set_wait(m->meta, w, w, 0);
	if (!from)
		return SQ_OK;
	if (relock(m, err) || meta_step_now(m, step, err))
		return err->code;
	if (!strcmp(step, to))
		*done = 1;
	else if (strcmp(step, from))
		return sq_err(err, SQ_ESTATE,
			      "move %lld is at step '%s' now, not '%s': another mover carried it "
			      "on while this one waited for the meta database; this one stops",
			      (long long)m->id, step, from);
	return SQ_OK;
}

/* Sleeps up to a second, less when a signal asks the mover to stop. */
static void wait_a_second(void)
{
	for (int i = 0; i < 20 && !atomic_load(&meta_wait_stop); i++)
		usleep(50000);
}

/* The wait (meta_wait_ms) of a round trip that failed with the meta
 * database out of reach: nothing else is done meanwhile, so the move
 * stays at its step, its partitions as that step leaves them (frozen from
 * the freeze to the switch); the shards' connections stay open and idle,
 * in no transaction. Every second: a new meta connection, the move's lock
 * and step checked (reattach), and fn run again. */
static sq_status meta_wait(move *m, const char *from, const char *to, meta_fn fn, const void *arg,
			   sq_error *err)
{
	struct sigaction sa, old_int, old_term;
	char why[sizeof(err->msg)];
	double t0 = sq_mono_s(), limit = (double)m->o->meta_wait_ms / 1000.0;
	sq_status st;
	snprintf(why, sizeof(why), "%s", err->msg);
	why[strcspn(why, "\n")] = '\0';
	atomic_store(&meta_wait_stop, 0);
	if (m->o->handle_signals) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_stop_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, &old_int);
		sigaction(SIGTERM, &sa, &old_term);
	}
	meta_note(m, "meta database not answering (%s); waiting, tried again every 1s for %.0fs",
		  why, limit);
	for (;;) {
		wait_a_second();
		double waited = sq_mono_s() - t0;
		if (atomic_load(&meta_wait_stop)) {
			st = sq_err(err, SQ_ECONN,
				    "stopped by a signal after waiting %.1fs for the meta database "
				    "(%s)",
				    waited, why);
			break;
		}
		if (waited >= limit) {
			st = sq_err(err, SQ_ECONN,
				    "meta database not answering for %.1fs (%s); gave up waiting",
				    waited, why);
			break;
		}
		int done;
		st = reattach(m, from, to, &done, err);
		if (st == SQ_OK && !done)
			st = fn(m, arg, err);
		if (st == SQ_OK) {
			meta_note(m, "meta database answering again after %.1fs; going on",
				  sq_mono_s() - t0);
			break;
		}
		if (!meta_unreachable(m, err))
			break;
		snprintf(why, sizeof(why), "%s", err->msg);
		why[strcspn(why, "\n")] = '\0';
	}
	if (st != SQ_OK)
		meta_note(m, "%s", err->msg);
	if (m->o->handle_signals) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	return st;
}

/* Runs fn, a step's round trip to the meta database, which moves the
 * move's recorded step from `from` to `to`; one that fails because the
 * meta database cannot be reached waits for it (meta_wait). */
static sq_status on_meta(move *m, const char *from, const char *to, meta_fn fn, const void *arg,
			 sq_error *err)
{
	sq_status st = fn(m, arg, err);
	if (st == SQ_OK || !m->o || !meta_unreachable(m, err) || m->o->meta_wait_ms <= 0)
		return st;
	return meta_wait(m, from, to, fn, arg, err);
}

typedef struct step_record {
	const char *step, *sql, *extra;
} step_record;

static sq_status record_once(move *m, const void *arg, sq_error *err)
{
	const step_record *sr = arg;
	char id[24];
	const char *v[3] = {id, sr->step, sr->extra};
	snprintf(id, sizeof(id), "%lld", (long long)m->id);
	return run_ok(m->meta, "meta", sr->sql ? sr->sql : sq_sql_move_record_step, sr->sql ? 3 : 2,
		      v, err);
}

/* Records the move's step; sql NULL: that alone, else the statement that
 * also records `extra` ($3). */
static sq_status record(move *m, const char *step, const char *sql, const char *extra,
			sq_error *err)
{
	step_record sr = {step, sql, extra};
	if (on_meta(m, m->step, step, record_once, &sr, err))
		return err->code;
	snprintf(m->step, sizeof(m->step), "%s", step);
	return SQ_OK;
}

static void record_error(move *m, const sq_error *e)
{
	char id[24], msg[sizeof(e->msg)];
	const char *v[2] = {id, msg};
	sq_error ignore;
	/* a message cut to fit may end inside a character: the column is text */
	sq_utf8_clean(msg, sizeof(msg), e->msg, strlen(e->msg));
	snprintf(id, sizeof(id), "%lld", (long long)m->id);
	if (m->meta)
		(void)run_ok(m->meta, "meta", sq_sql_move_record_error, 2, v, &ignore);
}

/* Reads a move's row into m. */
static sq_status load(sq_client *c, move *m, int64_t id, sq_error *err)
{
	char ids[24];
	const char *v[1] = {ids};
	PGresult *r;
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	if (!m->meta && !(m->meta = connect_to(c, "meta", sq_config_meta_dsn(c->cfg), err)))
		return err->code;
	r = run(m->meta, "meta", sq_sql_move_load, 1, v, err);
	if (!r)
		return err->code;
	if (PQntuples(r) != 1) {
		PQclear(r);
		return sq_err(err, SQ_ENOTFOUND, "no move with id %lld (see shardq moves --all)",
			      (long long)id);
	}
	m->id = id;
	m->from = sq_config_shard_index(c->cfg, PQgetvalue(r, 0, 1));
	m->to = sq_config_shard_index(c->cfg, PQgetvalue(r, 0, 2));
	if (m->from < 0 || m->to < 0) {
		sq_err(err, SQ_ECONFIG,
		       "move %lld is between shards %s and %s; both must be in the config",
		       (long long)id, PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2));
		PQclear(r);
		return SQ_ECONFIG;
	}
	snprintf(m->step, sizeof(m->step), "%s", PQgetvalue(r, 0, 3));
	m->rows = atoll(PQgetvalue(r, 0, 4));
	m->stall_ms = atof(PQgetvalue(r, 0, 5));
	const char *list = PQgetvalue(r, 0, 0);
	size_t cap = 16;
	m->parts = malloc(cap * sizeof(uint32_t));
	m->n = 0;
	for (const char *p = list; *p && m->parts;) {
		if (m->n == cap) {
			uint32_t *np = realloc(m->parts, (cap *= 2) * sizeof(uint32_t));
			if (!np) {
				PQclear(r);
				return sq_err(err, SQ_ENOMEM, "out of memory");
			}
			m->parts = np;
		}
		m->parts[m->n++] = (uint32_t)strtoul(p, (char **)&p, 10);
		if (*p == ',')
			p++;
	}
	PQclear(r);
	if (!m->parts)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	set_lit(m);
	return SQ_OK;
}

/* One driver per move: a session advisory lock on the mover's meta
 * connection, held until the connection closes. A second mover (or an
 * abort) on the same move is refused instead of racing the first. */
static sq_status lock_move(move *m, sq_error *err)
{
	char ids[24];
	const char *v[1] = {ids};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	PGresult *r = run(m->meta, "meta", sq_sql_move_lock, 1, v, err);
	if (!r)
		return err->code;
	int got = !strcmp(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
	if (got)
		m->lock_pid = PQbackendPID(m->meta);
	if (!got)
		return sq_err(err, SQ_ESTATE,
			      "move %lld is being driven by another mover right now; wait for it, "
			      "or stop it before resuming or aborting",
			      (long long)m->id);
	return SQ_OK;
}

/* Step 0's transaction: a moves row, and the partitions locked to it. A
 * commit whose answer was lost is taken for a failure, and the plan made
 * again finds the partitions locked: it stops, naming that move. */
static sq_status plan_tx(move *m, const void *arg, sq_error *err)
{
	sq_client *c = m->c;
	const char *v[3] = {m->lit, sid(c, m->from), sid(c, m->to)};
	PGresult *r;
	(void)arg;
	m->id = 0;
	if (!m->meta && !(m->meta = connect_to(c, "meta", sq_config_meta_dsn(c->cfg), err)))
		return err->code;
	if (run_ok(m->meta, "meta", "BEGIN", 0, NULL, err))
		return err->code;
	/* the map must agree that the source holds them all */
	r = run(m->meta, "meta", sq_sql_move_plan_on_source, 2, v, err);
	if (!r)
		return err->code;
	if ((size_t)atoll(PQgetvalue(r, 0, 0)) != m->n) {
		PQclear(r);
		run_ok(m->meta, "meta", "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_EINVAL, "not every partition given is on shard %s by the map",
			      sid(c, m->from));
	}
	PQclear(r);
	r = run(m->meta, "meta", sq_sql_move_plan_insert, 3, v, err);
	if (!r)
		return err->code;
	m->id = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	char ids[24];
	const char *v2[2] = {m->lit, ids};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	r = run(m->meta, "meta", sq_sql_move_plan_lock_parts, 2, v2, err);
	if (!r)
		return err->code;
	if ((size_t)PQntuples(r) != m->n) {
		PQclear(r);
		run_ok(m->meta, "meta", "ROLLBACK", 0, NULL, err);
		return sq_err(
			err, SQ_ESTATE,
			"some of these partitions are in an unfinished move; resume or abort it "
			"first (shardq moves)");
	}
	PQclear(r);
	if (run_ok(m->meta, "meta", "COMMIT", 0, NULL, err)) {
		m->id = 0;
		return err->code;
	}
	return SQ_OK;
}

static sq_status lock_once(move *m, const void *arg, sq_error *err)
{
	(void)arg;
	return lock_move(m, err);
}

/* Step 0: a moves row, the partitions locked to it, and the move's own
 * lock (a rebalance's next set waits here for the meta database too). */
static sq_status plan(sq_client *c, move *m, sq_error *err)
{
	(void)c;
	if (on_meta(m, NULL, NULL, plan_tx, NULL, err))
		return err->code;
	snprintf(m->step, sizeof(m->step), "planned");
	return on_meta(m, "planned", "planned", lock_once, NULL, err);
}

/* Step 1: the destination marks the partitions importing and drops any
 * rows an aborted attempt left there. */
static sq_status prepare(sq_client *c, move *m, sq_error *err)
{
	char ids[24], who[96];
	const char *v[2] = {m->lit, ids};
	PGresult *r;
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(who, sizeof(who), "shard %s (destination)", sid(c, m->to));
	if (run_ok(m->dst, who, "BEGIN", 0, NULL, err) || bulk_timeout(c, m->dst, who, 1, 1, err))
		return err->code;
	r = run(m->dst, who, sq_sql_move_prepare_owned, 1, v, err);
	if (!r)
		return err->code;
	long owned = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (owned) {
		run_ok(m->dst, who, "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_ESTATE, "%s already owns %ld of these partitions", who,
			      owned);
	}
	if (run_ok(m->dst, who, sq_sql_move_delete_jobs, 1, v, err) ||
	    run_ok(m->dst, who, sq_sql_move_prepare_importing, 2, v, err) ||
	    run_ok(m->dst, who, "COMMIT", 0, NULL, err))
		return err->code;
	if (record(m, "prepared", NULL, NULL, err))
		return err->code;
	sq_failpoint("after_prepare");
	return SQ_OK;
}

/* The first try for the exclusive gate waits at most this long for the
 * transactions in flight on the source; each next one twice as long, up
 * to lock_timeout. */
#define GATE_FIRST_WAIT_MS 25

/* Opens a transaction on the source and takes the gate exclusive in it. A
 * queued exclusive request holds every new writer of the shard behind it
 * until it is granted: it waits for the longest write or claim then in
 * flight. So the first try waits at most GATE_FIRST_WAIT_MS, and when a
 * round holds the gate longer the request is given up (the writers go
 * on) and made again after as long, waiting twice as long, and so on up
 * to lock_timeout, which is tried freeze_tries times. Before, every try
 * waited up to lock_timeout: each set's freeze held the shard's writers
 * for as long as its slowest round (115-132 ms on average under load in
 * the bench's rebalance scenario). *t0: when the successful try began;
 * *held_ms: the longest a failed try held the writers. On failure nothing
 * is held. */
static sq_status gate_exclusive(sq_client *c, move *m, const char *who, const sq_move_opts *o,
				const char *step, double *t0, double *held_ms, sq_error *err)
{
	char lt[160], full_wait[24];
	const char *fv[1] = {full_wait};
	snprintf(full_wait, sizeof(full_wait), "%lld", (long long)o->lock_timeout_ms);
	/* the gate is never held idle longer than the lock timeout (at least
	 * 1 s, at most the configured idle timeout): the mover runs a few quick
	 * statements under it, and every writer of the shard queues behind it,
	 * so a mover that stalls there (stopped, cut off) is ended by the
	 * server, which lets the writers go; the move is resumed later */
	int64_t idle = o->lock_timeout_ms > 1000 ? o->lock_timeout_ms : 1000;
	if (c->cfg->idle_in_tx_timeout_ms > 0 && c->cfg->idle_in_tx_timeout_ms < idle)
		idle = c->cfg->idle_in_tx_timeout_ms;
	int64_t wait =
		o->lock_timeout_ms < GATE_FIRST_WAIT_MS ? o->lock_timeout_ms : GATE_FIRST_WAIT_MS;
	*held_ms = 0;
	for (int full = 1;;) {
		snprintf(lt, sizeof(lt),
			 "BEGIN; SET LOCAL lock_timeout = %lld; "
			 "SET LOCAL idle_in_transaction_session_timeout = %lld",
			 (long long)wait, (long long)idle);
		if (run_ok(m->src, who, lt, 0, NULL, err))
			return err->code;
		*t0 = sq_mono_s() * 1000.0;
		if (!run_ok(m->src, who, sq_sql_move_gate_exclusive, 1, fv, err))
			return SQ_OK;
		double held = sq_mono_s() * 1000.0 - *t0;
		*held_ms = held > *held_ms ? held : *held_ms;
		if (err->code == SQ_EMOVING && wait < o->lock_timeout_ms) {
			/* the writers held by this try go on for as long */
			usleep((useconds_t)(wait * 1000));
			wait = wait * 2 < o->lock_timeout_ms ? wait * 2 : o->lock_timeout_ms;
			continue;
		}
		if (err->code == SQ_EMOVING && full < o->freeze_tries) {
			usleep((useconds_t)(50000 * full++));
			continue;
		}
		sq_err_prefix(err, "%s (gate busy after %d tries of %lld ms; resume later)", step,
			      full, (long long)o->lock_timeout_ms);
		return err->code;
	}
}

/* Step 2: under the exclusive gate, the source marks them moving_out. The
 * gate waits for every write in flight on the source (they hold it shared)
 * and holds new ones for the few milliseconds of the update: that is the
 * write stall, bounded by lock_timeout and measured. */
static sq_status freeze(sq_client *c, move *m, const sq_move_opts *o, sq_error *err)
{
	char ids[24], who[96], count[24];
	const char *v[3] = {m->lit, ids, count};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(count, sizeof(count), "%zu", m->n);
	snprintf(who, sizeof(who), "shard %s (source)", sid(c, m->from));
	double t0, held;
	PGresult *r;
	if (gate_exclusive(c, m, who, o, "freeze", &t0, &held, err))
		return err->code;
	r = run(m->src, who, sq_sql_move_freeze, 3, v, err);
	if (!r)
		return err->code;
	size_t ok = (size_t)atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (ok != m->n) {
		run_ok(m->src, who, "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_ESTATE, "%s does not own all %zu partitions of move %lld",
			      who, m->n, (long long)m->id);
	}
	/* tests: a mover that stalls with the gate held */
	sq_failpoint("during_freeze");
	if (run_ok(m->src, who, "COMMIT", 0, NULL, err))
		return err->code;
	/* the longest the writers were held at once */
	m->stall_ms = sq_mono_s() * 1000.0 - t0;
	m->stall_ms = held > m->stall_ms ? held : m->stall_ms;
	char extra[64];
	snprintf(extra, sizeof(extra), "%.3f", m->stall_ms);
	if (record(m, "frozen", sq_sql_move_record_frozen, extra, err))
		return err->code;
	sq_failpoint("after_freeze");
	return SQ_OK;
}

/* Step 3: every transaction that began before the freeze has ended. The
 * freeze's exclusive gate waited for them: each write and claim holds the
 * gate shared until it ends, and one that takes it after the freeze reads
 * the partitions as moving_out. So the step only records it, and takes no
 * gate of its own: an exclusive gate here held every writer of the shard
 * back a second time per set (each waited for the longest round then in
 * flight), which a write stall of the freeze alone did not show. */
static sq_status drain(sq_client *c, move *m, const sq_move_opts *o, sq_error *err)
{
	(void)c;
	(void)o;
	sq_failpoint("during_drain");
	return record(m, "drained", NULL, NULL, err);
}

/* The side of the first call of the stream that failed: 0 the source, 1
 * the destination (who is named when both watches ran out at once: the
 * other side's call then fails too, but later). */
static void failed_first(int *failed, int side)
{
	if (*failed < 0)
		*failed = side;
}

/* Ends the destination's COPY (why: its error) and rolls its transaction
 * back; returns st. */
static sq_status copy_abandon(move *m, const char *dw, const char *why, sq_status st, sq_error *err)
{
	PGresult *r;
	PQputCopyEnd(m->dst, why);
	while ((r = PQgetResult(m->dst)) != NULL)
		PQclear(r);
	run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
	return st;
}

/* A COPY of the source (move_copy_out, or move_copy_out_ids) with the
 * partitions' literal in place of $1 and ids' in place of $2 (COPY takes
 * no parameters; the lists are our own integers, so they are safe
 * inline); NULL when out of memory. */
static char *copy_out_sql(const move *m, const char *from, const char *ids)
{
	sq_buf q;
	const char *at;
	sq_buf_init(&q);
	while ((at = strchr(from, '$')) && (at[1] == '1' || at[1] == '2')) {
		sq_buf_append(&q, from, (size_t)(at - from));
		sq_buf_printf(&q, "'%s'", at[1] == '1' ? m->lit : ids);
		from = at + 2;
	}
	sq_buf_puts(&q, from);
	if (q.oom) {
		sq_buf_free(&q);
		return NULL;
	}
	return sq_buf_steal(&q);
}

/* Starts both ends of the copy: the destination's COPY FROM STDIN, then
 * the source's COPY TO STDOUT. On failure the destination's transaction
 * is rolled back. */
static sq_status copy_open(move *m, const char *sw, const char *dw, const char *out_sql,
			   const char *ids, int *failed, sq_error *err)
{
	PGresult *r = PQexec(m->dst, sq_sql_move_copy_in);
	if (PQresultStatus(r) != PGRES_COPY_IN) {
		failed_first(failed, 1);
		sq_err(err, SQ_EDB, "%s: COPY: %s", dw, PQerrorMessage(m->dst));
		PQclear(r);
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return SQ_EDB;
	}
	PQclear(r);
	char *sql = copy_out_sql(m, out_sql, ids);
	r = sql ? PQexec(m->src, sql) : NULL;
	free(sql);
	if (PQresultStatus(r) != PGRES_COPY_OUT) {
		failed_first(failed, 0);
		if (r)
			sq_err(err, SQ_EDB, "%s: COPY: %s", sw, PQerrorMessage(m->src));
		else
			sq_err(err, SQ_ENOMEM, "out of memory");
		PQclear(r);
		PQputCopyEnd(m->dst, "source failed");
		PQclear(PQgetResult(m->dst));
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return r ? SQ_EDB : SQ_ENOMEM;
	}
	PQclear(r);
	return SQ_OK;
}

/* Passes the source's rows to the destination. The source is read to its
 * end even if the destination failed, so that its connection leaves COPY
 * OUT cleanly. Returns whether every row was put. */
static int copy_rows(move *m, int *failed)
{
	PGresult *r;
	int got, put_ok = 1;
	char *buf;
	while ((got = PQgetCopyData(m->src, &buf, 0)) > 0) {
		if (put_ok && PQputCopyData(m->dst, buf, got) != 1) {
			failed_first(failed, 1);
			put_ok = 0;
		}
		PQfreemem(buf);
	}
	if (got == -2)
		failed_first(failed, 0);
	while ((r = PQgetResult(m->src)) != NULL) {
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			failed_first(failed, 0);
		PQclear(r);
	}
	return put_ok;
}

/* Ends the destination's COPY; *copied as it counted the rows. */
static sq_status copy_close(move *m, const char *dw, int *failed, int64_t *copied, sq_error *err)
{
	PGresult *r;
	if (PQputCopyEnd(m->dst, NULL) != 1) {
		failed_first(failed, 1);
		sq_err(err, SQ_EDB, "%s: COPY: %s", dw, PQerrorMessage(m->dst));
		return SQ_EDB;
	}
	r = PQgetResult(m->dst);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		failed_first(failed, 1);
		sq_err(err, SQ_EDB, "%s: COPY: %s", dw, PQresultErrorMessage(r));
		PQclear(r);
		while ((r = PQgetResult(m->dst)) != NULL)
			PQclear(r);
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return SQ_EDB;
	}
	*copied = atoll(PQcmdTuples(r));
	PQclear(r);
	while ((r = PQgetResult(m->dst)) != NULL)
		PQclear(r);
	return SQ_OK;
}

/* The stream of copy_and_own: the source's rows in COPY binary into the
 * destination's open transaction; *copied as the destination counted them.
 * On failure the destination's transaction is rolled back. The source's
 * watch ws is taken off once the source is done (*lost_src: whether it
 * fired), so that a destination that stops answering later is not taken
 * for the source. *failed: the side of the first call that failed
 * (failed_first). */
static sq_status stream(sq_client *c, move *m, const char *sw, const char *dw, const char *out_sql,
			const char *ids, sq_watch *ws, int *lost_src, int *failed, int64_t *copied,
			sq_error *err)
{
	sq_status st = copy_open(m, sw, dw, out_sql, ids, failed, err);
	if (st != SQ_OK)
		return st;
	int put_ok = copy_rows(m, failed);
	if ((*lost_src = sq_watch_disarm(ws)) != SQ_WATCH_NONE)
		return copy_abandon(m, dw, "source failed", SQ_ECONN, err);
	if (bulk_timeout(c, m->src, sw, 0, 0, err)) {
		copy_abandon(m, dw, "source failed", SQ_OK, err);
		return err->code;
	}
	if (!put_ok) {
		sq_err(err, SQ_EDB, "%s: COPY: %s", dw, PQerrorMessage(m->dst));
		return copy_abandon(m, dw, "destination failed", SQ_EDB, err);
	}
	sq_failpoint("mid_copy");
	return copy_close(m, dw, failed, copied, err);
}

/* The stream under the watches of both connections: a side that stops
 * answering ends it with a clear error. The destination's transaction is
 * rolled back on failure. */
static sq_status stream_watched(sq_client *c, move *m, const char *sw, const char *dw,
				const char *out_sql, const char *ids, int64_t *copied,
				sq_error *err)
{
	sq_watch ws, wd;
	int lost_src = 0, failed = -1;
	sq_watch_arm(&ws, m->src, wait_of(m->src), NULL);
	sq_watch_arm(&wd, m->dst, wait_of(m->dst), NULL);
	sq_status st = stream(c, m, sw, dw, out_sql, ids, &ws, &lost_src, &failed, copied, err);
	if (ws.armed)
		lost_src = sq_watch_disarm(&ws);
	int lost_dst = sq_watch_disarm(&wd);
	if (lost_src && lost_dst) /* both ran out: the side that failed first */
		lost_src = failed == 0;
	if (lost_src || lost_dst)
		return unanswered(lost_src ? m->src : m->dst, lost_src ? sw : dw, err);
	return st;
}

/* Opens the destination's transaction of a copy, with the partitions it
 * imports for this move locked, and checks that they are all there. */
static sq_status import_begin(sq_client *c, move *m, const char *dw, sq_error *err)
{
	char ids[24];
	const char *v[2] = {m->lit, ids};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	if (run_ok(m->dst, dw, "BEGIN", 0, NULL, err) || bulk_timeout(c, m->dst, dw, 1, 1, err))
		return err->code;
	PGresult *r = run(m->dst, dw, sq_sql_move_copy_importing, 2, v, err);
	if (!r)
		return err->code;
	size_t importing = (size_t)atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (importing != m->n) {
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_ESTATE, "%s is not importing these partitions for move %lld",
			      dw, (long long)m->id);
	}
	return SQ_OK;
}

static int i64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int rowver_cmp(const void *a, const void *b)
{
	int64_t x = ((const rowver *)a)->id, y = ((const rowver *)b)->id;
	return (x > y) - (x < y);
}

/* The partitions' jobs on the source as (id, version), by id: *n of them
 * (NULL with err set on failure; NULL and 0 when there are none). */
static rowver *read_versions(move *m, const char *sw, size_t *n, sq_error *err)
{
	const char *v[1] = {m->lit};
	PGresult *r = run(m->src, sw, sq_sql_move_row_versions, 1, v, err);
	*n = 0;
	if (!r)
		return NULL;
	size_t rows = (size_t)PQntuples(r);
	rowver *out = malloc((rows ? rows : 1) * sizeof(*out));
	if (!out) {
		PQclear(r);
		sq_err(err, SQ_ENOMEM, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < rows; i++) {
		out[i].id = atoll(PQgetvalue(r, (int)i, 0));
		out[i].xmin = (uint32_t)strtoul(PQgetvalue(r, (int)i, 1), NULL, 10);
	}
	PQclear(r);
	qsort(out, rows, sizeof(*out), rowver_cmp);
	*n = rows;
	return out;
}

/* Step 1b, under no freeze: the partitions' rows as the source has them
 * now (one snapshot: their versions and the copy), into the destination,
 * where they are invisible (the partitions are importing). The copy under
 * the freeze then takes only what was written since (catch_up), so the
 * partitions stay frozen for that, not for the whole copy. What this
 * copied is kept in m, not recorded: a mover that resumes the move copies
 * everything under the freeze, as before this step existed. */
static sq_status precopy(sq_client *c, move *m, sq_error *err)
{
	char sw[96], dw[96];
	const char *v[1] = {m->lit};
	int64_t copied = 0;
	PGresult *r;
	snprintf(sw, sizeof(sw), "shard %s (source)", sid(c, m->from));
	snprintf(dw, sizeof(dw), "shard %s (destination)", sid(c, m->to));
	if (run_ok(m->src, sw, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, err) ||
	    bulk_timeout(c, m->src, sw, 1, 1, err))
		return err->code;
	free(m->pre);
	if (!(m->pre = read_versions(m, sw, &m->npre, err)))
		return err->code;
	/* what a mover that died before its freeze left there goes first */
	if (import_begin(c, m, dw, err) || run_ok(m->dst, dw, sq_sql_move_delete_jobs, 1, v, err))
		return err->code;
	if (!(r = run(m->dst, dw, sq_sql_move_precopy_xid, 0, NULL, err)))
		return err->code;
	snprintf(m->pre_xid, sizeof(m->pre_xid), "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	if (stream_watched(c, m, sw, dw, sq_sql_move_copy_out, NULL, &copied, err))
		return err->code;
	if ((size_t)copied != m->npre) {
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_EDB, "move %lld: the pre-copy took %lld rows of %zu",
			      (long long)m->id, (long long)copied, m->npre);
	}
	if (run_ok(m->dst, dw, "COMMIT", 0, NULL, err) ||
	    run_ok(m->src, sw, "COMMIT", 0, NULL, err))
		return err->code;
	sq_failpoint("after_precopy");
	return SQ_OK;
}

/* ids as an int8[] literal (malloc'd), or NULL when out of memory. */
static char *ids_literal(const int64_t *ids, size_t n)
{
	sq_buf b;
	sq_buf_init(&b);
	sq_arr_open(&b);
	for (size_t i = 0; i < n; i++)
		sq_arr_i64(&b, ids[i]);
	sq_arr_close(&b);
	if (b.oom) {
		sq_buf_free(&b);
		return NULL;
	}
	return sq_buf_steal(&b);
}

/* The ids of the pre-copied rows that the source no longer has as they
 * were: gone, or written since (another version). Both lists by id. */
static int64_t *changed_since(const rowver *pre, size_t npre, const rowver *cur, size_t ncur,
			      size_t *n)
{
	int64_t *out = malloc((npre ? npre : 1) * sizeof(*out));
	size_t k = 0, j = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < npre; i++) {
		while (j < ncur && cur[j].id < pre[i].id)
			j++;
		if (j == ncur || cur[j].id != pre[i].id || cur[j].xmin != pre[i].xmin)
			out[k++] = pre[i].id;
	}
	*n = k;
	return out;
}

/* The ids of cur that the destination does not hold (have, by id). */
static int64_t *missing_from(const rowver *cur, size_t ncur, PGresult *have, size_t *n)
{
	size_t nh = (size_t)PQntuples(have), k = 0, j = 0;
	int64_t *h = malloc((nh ? nh : 1) * sizeof(*h));
	int64_t *out = malloc((ncur ? ncur : 1) * sizeof(*out));
	if (!h || !out) {
		free(h);
		free(out);
		return NULL;
	}
	for (size_t i = 0; i < nh; i++)
		h[i] = atoll(PQgetvalue(have, (int)i, 0));
	qsort(h, nh, sizeof(*h), i64_cmp);
	for (size_t i = 0; i < ncur; i++) {
		while (j < nh && h[j] < cur[i].id)
			j++;
		if (j == nh || h[j] != cur[i].id)
			out[k++] = cur[i].id;
	}
	free(h);
	*n = k;
	return out;
}

/* Runs statement sql on the destination with the partitions and an int8[]
 * of ids (or the text arg) as $2. */
static sq_status dst_run2(move *m, const char *dw, const char *sql, const char *arg, sq_error *err)
{
	const char *v[2] = {m->lit, arg};
	return run_ok(m->dst, dw, sql, 2, v, err);
}

/* The copy under the freeze after a pre-copy: in the destination's open
 * transaction, drops the rows written since on either side and copies
 * what the source has that the destination then lacks. *rows: the
 * partitions' jobs, as the source holds them. */
static sq_status catch_up(sq_client *c, move *m, const char *sw, const char *dw, int64_t *rows,
			  sq_error *err)
{
	size_t ncur = 0, nstale = 0, nneed = 0;
	int64_t copied = 0, *stale = NULL, *need = NULL;
	char *stale_lit = NULL, *need_lit = NULL;
	PGresult *have = NULL;
	sq_status st;
	const char *v[1] = {m->lit};
	rowver *cur = NULL;
	if ((st = import_begin(c, m, dw, err)))
		return st;
	sq_failpoint("before_copy");
	if (!(cur = read_versions(m, sw, &ncur, err))) {
		st = err->code;
		goto out;
	}
	st = SQ_ENOMEM;
	if (!(stale = changed_since(m->pre, m->npre, cur, ncur, &nstale)) ||
	    !(stale_lit = ids_literal(stale, nstale)))
		goto oom;
	if ((st = dst_run2(m, dw, sq_sql_move_delete_ids, stale_lit, err)) ||
	    (st = dst_run2(m, dw, sq_sql_move_delete_not_precopied, m->pre_xid, err)))
		goto out;
	if (!(have = run(m->dst, dw, sq_sql_move_ids_held, 1, v, err))) {
		st = err->code;
		goto out;
	}
	if (!(need = missing_from(cur, ncur, have, &nneed)) ||
	    !(need_lit = ids_literal(need, nneed)))
		goto oom;
	if (nneed &&
	    (st = stream_watched(c, m, sw, dw, sq_sql_move_copy_out_ids, need_lit, &copied, err)))
		goto out;
	st = SQ_OK;
	if ((size_t)copied != nneed || (size_t)PQntuples(have) + nneed != ncur) {
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		st = sq_err(err, SQ_EDB,
			    "move %lld: the destination holds %d rows and took %lld of %zu, but "
			    "the source holds %zu; nothing was committed, run the move again",
			    (long long)m->id, PQntuples(have), (long long)copied, nneed, ncur);
	}
	*rows = (int64_t)ncur;
	goto out;
oom:
	st = sq_err(err, SQ_ENOMEM, "out of memory");
	run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
out:
	PQclear(have);
	free(cur);
	free(stale);
	free(stale_lit);
	free(need);
	free(need_lit);
	return st;
}

/* The copy under the freeze without a pre-copy (a resumed move): in the
 * destination's open transaction, every row of the partitions. *rows: the
 * partitions' jobs, as the source holds them. */
static sq_status copy_all(sq_client *c, move *m, const char *sw, const char *dw, int64_t *rows,
			  sq_error *err)
{
	const char *v[1] = {m->lit};
	int64_t copied = 0;
	PGresult *r = run(m->src, sw, sq_sql_move_count_jobs, 1, v, err);
	if (!r)
		return err->code;
	int64_t want = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (import_begin(c, m, dw, err) || run_ok(m->dst, dw, sq_sql_move_delete_jobs, 1, v, err))
		return err->code;
	sq_failpoint("before_copy");
	if (stream_watched(c, m, sw, dw, sq_sql_move_copy_out, NULL, &copied, err))
		return err->code;
	if (copied != want) {
		run_ok(m->dst, dw, "ROLLBACK", 0, NULL, err);
		return sq_err(err, SQ_EDB,
			      "move %lld: copied %lld rows but the source holds %lld; nothing "
			      "was committed, run the move again",
			      (long long)m->id, (long long)copied, (long long)want);
	}
	*rows = copied;
	return SQ_OK;
}

/* Step 4: in one destination transaction, bring the partitions' rows to
 * what the source holds under the freeze (only what changed since the
 * pre-copy, or all of them), and mark the partitions owned. Its commit is
 * the point of no return. Starting and running jobs keep their attempt,
 * worker and lease, so their worker's next write succeeds there. */
static sq_status copy_and_own(sq_client *c, move *m, sq_error *err)
{
	char ids[24], sw[96], dw[96];
	const char *v[2] = {m->lit, ids};
	PGresult *r;
	int64_t rows = 0;
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(sw, sizeof(sw), "shard %s (source)", sid(c, m->from));
	snprintf(dw, sizeof(dw), "shard %s (destination)", sid(c, m->to));

	/* done before? (killed after the commit, before recording it) */
	r = run(m->dst, dw, sq_sql_move_copied_before, 2, v, err);
	if (!r)
		return err->code;
	int done = (size_t)atoll(PQgetvalue(r, 0, 0)) == m->n;
	PQclear(r);
	if (!done) {
		if (bulk_timeout(c, m->src, sw, 0, 1, err) ||
		    (m->pre ? catch_up(c, m, sw, dw, &rows, err)
			    : copy_all(c, m, sw, dw, &rows, err)))
			return err->code;
		if (run_ok(m->dst, dw, sq_sql_move_own, 2, v, err) ||
		    run_ok(m->dst, dw, sq_sql_move_notify_jobs, 0, NULL, err) ||
		    run_ok(m->dst, dw, "COMMIT", 0, NULL, err))
			return err->code;
		m->rows = rows;
	} else if (m->rows < 0) {
		r = run(m->dst, dw, sq_sql_move_count_jobs, 1, v, err);
		if (!r)
			return err->code;
		m->rows = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
	}
	char extra[64];
	snprintf(extra, sizeof(extra), "%lld", (long long)m->rows);
	if (record(m, "copied", sq_sql_move_record_copied, extra, err))
		return err->code;
	sq_failpoint("after_copy_commit");
	return SQ_OK;
}

/* Once the map has switched: the destination owns what it adopted at the
 * copy's commit (at the switch, and again at the cleanup, for a mover that
 * died between the two). */
static sq_status take_adopted(sq_client *c, move *m, sq_error *err)
{
	char ids[24], dw[96];
	const char *v[2] = {m->lit, ids};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(dw, sizeof(dw), "shard %s (destination)", sid(c, m->to));
	return run_ok(m->dst, dw, sq_sql_move_take_adopted, 2, v, err);
}

/* Step 5's transaction on the meta database: the map, its version, the
 * NOTIFY and the step. */
static sq_status switch_tx(move *m, const void *arg, sq_error *err)
{
	sq_client *c = m->c;
	char ids[24];
	const char *v[3] = {m->lit, sid(c, m->to), ids};
	(void)arg;
	PGresult *r;
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	if (run_ok(m->meta, "meta", "BEGIN", 0, NULL, err) ||
	    run_ok(m->meta, "meta", sq_sql_move_switch_map, 2, v, err))
		return err->code;
	r = run(m->meta, "meta", sq_sql_move_bump_map_version, 0, NULL, err);
	if (!r)
		return err->code;
	char ver[24];
	snprintf(ver, sizeof(ver), "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	const char *nv[1] = {ver};
	const char *sv[1] = {ids};
	if (run_ok(m->meta, "meta", sq_sql_move_notify_map, 1, nv, err) ||
	    run_ok(m->meta, "meta", sq_sql_move_record_switched, 1, sv, err) ||
	    run_ok(m->meta, "meta", "COMMIT", 0, NULL, err))
		return err->code;
	return SQ_OK;
}

/* Step 5: the meta map follows, with a new version and a NOTIFY. Never
 * without the meta database: a switch that cannot reach it waits. */
static sq_status switch_map(sq_client *c, move *m, sq_error *err)
{
	if (on_meta(m, "copied", "switched", switch_tx, NULL, err))
		return err->code;
	snprintf(m->step, sizeof(m->step), "switched");
	sq_failpoint("after_switch");
	return take_adopted(c, m, err);
}

/* Step 6's end on the meta database: the move done, its partitions free. */
static sq_status done_tx(move *m, const void *arg, sq_error *err)
{
	char ids[24];
	const char *fv[1] = {ids};
	(void)arg;
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	if (run_ok(m->meta, "meta", "BEGIN", 0, NULL, err) ||
	    run_ok(m->meta, "meta", sq_sql_move_record_done, 1, fv, err) ||
	    run_ok(m->meta, "meta", sq_sql_move_unlock, 1, fv, err) ||
	    run_ok(m->meta, "meta", "COMMIT", 0, NULL, err))
		return err->code;
	return SQ_OK;
}

/* Step 6: the source marks the partitions gone (writers now hear "moved")
 * and deletes their rows in batches. */
static sq_status cleanup(sq_client *c, move *m, const sq_move_opts *o, sq_error *err)
{
	char ids[24], who[96], batch[16];
	const char *v[2] = {m->lit, ids};
	const char *dv[2] = {m->lit, batch};
	snprintf(ids, sizeof(ids), "%lld", (long long)m->id);
	snprintf(batch, sizeof(batch), "%d", o->delete_batch > 0 ? o->delete_batch : 10000);
	snprintf(who, sizeof(who), "shard %s (source)", sid(c, m->from));
	if (take_adopted(c, m, err) || run_ok(m->src, who, sq_sql_move_gone, 2, v, err))
		return err->code;
	/* rows are deleted only where the source shows the partitions gone for
	 * this very move: never rows of partitions it still owns */
	PGresult *g = run(m->src, who, sq_sql_move_gone_count, 2, v, err);
	if (!g)
		return err->code;
	size_t gone = (size_t)atoll(PQgetvalue(g, 0, 0));
	PQclear(g);
	if (gone != m->n)
		return sq_err(err, SQ_ESTATE,
			      "%s shows %zu of the %zu partitions of move %lld gone; not deleting "
			      "their rows (see shardq moves)",
			      who, gone, m->n, (long long)m->id);
	if (bulk_timeout(c, m->src, who, 0, 1, err))
		return err->code;
	for (int first = 1;; first = 0) {
		PGresult *r = run(m->src, who, sq_sql_move_delete_jobs_batch, 2, dv, err);
		if (!r)
			return err->code;
		long n = atol(PQcmdTuples(r));
		PQclear(r);
		if (first)
			sq_failpoint("mid_cleanup");
		if (n == 0)
			break;
	}
	if (bulk_timeout(c, m->src, who, 0, 0, err))
		return err->code;
	if (on_meta(m, "switched", "done", done_tx, NULL, err))
		return err->code;
	snprintf(m->step, sizeof(m->step), "done");
	/* Then the source forgets the partitions: to a writer a partition it
	 * does not know is "moved", as a gone one is, and no row of them is
	 * left. A shard whose partitions are all owned has the claim test
	 * that once per statement instead of once per row (src/claim.c,
	 * NOT_MOVING), so a shard that gave partitions away gets that back.
	 * Only after the move is recorded done: a cleanup resumed before that
	 * needs these markers (the count above). A failure here leaves them,
	 * which costs the claims there their per-row test, nothing else; the
	 * move is done either way. */
	sq_error ignored;
	(void)run_ok(m->src, who, sq_sql_move_forget_gone, 2, v, &ignored);
	return SQ_OK;
}

static void fill_info(sq_client *c, const move *m, sq_move_info *info)
{
	if (!info)
		return;
	memset(info, 0, sizeof(*info));
	info->move_id = m->id;
	snprintf(info->from, sizeof(info->from), "%s", sid(c, m->from));
	snprintf(info->to, sizeof(info->to), "%s", sid(c, m->to));
	info->npartitions = (int32_t)m->n;
	snprintf(info->step, sizeof(info->step), "%s", m->step);
	info->rows = m->rows;
	info->stall_ms = m->stall_ms;
	info->elapsed_ms = m->t0 ? sq_mono_s() * 1000.0 - m->t0 : 0;
}

/* Both shards at this build's schema: a move's markers (`adopted`, schema
 * 11) and statements are this build's, so a shard not yet upgraded would
 * refuse a step in the middle of the move, with its partitions frozen, and
 * one upgraded past it may have markers this build does not set. */
static sq_status schemas_current(sq_client *c, int from, int to, sq_error *err)
{
	int want = sq_shard_schema_newest(), have, idx[2] = {from, to};
	for (int k = 0; k < 2; k++) {
		if (sq_client_shard_schema(c, idx[k], &have, err))
			return err->code;
		if (have < want)
			return sq_err(err, SQ_ESTATE,
				      "shard %s has schema version %d and this shardq moves "
				      "partitions with version %d; run 'shardq init' to upgrade it "
				      "first",
				      sid(c, idx[k]), have, want);
		if (have > want)
			return sq_err(
				err, SQ_ESTATE,
				"shard %s has schema version %d, newer than this shardq's "
				"(%d): move partitions with the shardq that ran 'shardq init'",
				sid(c, idx[k]), have, want);
	}
	return SQ_OK;
}

/* Carries a loaded or planned move from its recorded step to the end (its
 * shards' schemas checked by the caller: schemas_current). */
static sq_status drive(sq_client *c, move *m, const sq_move_opts *o, int set, int nsets,
		       sq_move_info *info, sq_error *err)
{
	static const char *order[] = {"planned", "prepared", "frozen", "drained",
				      "copied",  "switched", "done"};
	sq_status st = SQ_OK;
	int at = -1;
	m->t0 = m->t0 ? m->t0 : sq_mono_s() * 1000.0;
	if (!strcmp(m->step, "aborted"))
		return sq_err(err, SQ_ESTATE, "move %lld was aborted", (long long)m->id);
	for (int i = 0; i < 7; i++)
		if (!strcmp(m->step, order[i]))
			at = i;
	if (at < 0)
		return sq_err(err, SQ_ESTATE, "move %lld has an unknown step '%s'",
			      (long long)m->id, m->step);
	if ((st = move_connect(c, m, err)))
		return st;
	for (int i = at + 1; i < 7 && st == SQ_OK; i++) {
		switch (i) {
		case 1: st = prepare(c, m, err); break;
		case 2: /* the pre-copy is not a step: a resumed move makes its own */
			if ((st = precopy(c, m, err)) == SQ_OK)
				st = freeze(c, m, o, err);
			break;
		case 3: st = drain(c, m, o, err); break;
		case 4: st = copy_and_own(c, m, err); break;
		case 5: st = switch_map(c, m, err); break;
		case 6: st = cleanup(c, m, o, err); break;
		}
		if (st == SQ_OK && o->progress) {
			sq_move_info mi;
			fill_info(c, m, &mi);
			o->progress(&mi, set, nsets, o->progress_arg);
		}
	}
	if (st != SQ_OK)
		record_error(m, err);
	fill_info(c, m, info);
	return st;
}

/* The client's map follows the move; if the meta database does not answer
 * now, the next "moved" answer refreshes it. */
static void refresh_quietly(sq_client *c)
{
	if (sq_client_refresh_map(c, NULL) != SQ_OK)
		return;
}

static void vacuum(sq_client *c, int s)
{
	char ignore[256];
	/* a bulk statement: under move_statement_timeout (it takes no lock that
	 * writers wait for) */
	PGconn *v = sq_connect_plain(c->cfg, c->cfg->shards[s].dsn, "vacuum",
				     c->cfg->move_statement_timeout_ms, ignore, sizeof(ignore));
	if (!v)
		return;
	/* the mass delete leaves dead rows that seed 002 warns about */
	PQclear(sq_watch_exec(v, "VACUUM (ANALYZE) shardq.jobs", 0, NULL, bulk_wait(c->cfg), NULL,
			      NULL));
	PQfinish(v);
}

static sq_status move_set(sq_client *c, const uint32_t *parts, size_t n, int from, int to,
			  const sq_move_opts *o, int set, int nsets, sq_move_info *info,
			  sq_error *err)
{
	move m;
	sq_status st;
	memset(&m, 0, sizeof(m));
	m.from = from;
	m.to = to;
	m.n = n;
	m.rows = -1;
	m.parts = malloc(n * sizeof(uint32_t));
	if (!m.parts)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	memcpy(m.parts, parts, n * sizeof(uint32_t));
	set_lit(&m);
	m.c = c;
	m.o = o;
	if ((st = schemas_current(c, from, to, err))) {
		move_close(&m);
		return st;
	}
	st = plan(c, &m, err);
	if (st == SQ_OK)
		st = drive(c, &m, o, set, nsets, info, err);
	else
		fill_info(c, &m, info);
	move_close(&m);
	return st;
}

/* What a move of these partitions to `to` needs of its arguments and the
 * map: the source shard in *src, the destination in *dst. */
static sq_status move_args(sq_client *c, const uint32_t *parts, size_t n, const char *to, int *src,
			   int *dst, sq_error *err)
{
	sq_status st;
	*dst = to ? sq_config_shard_index(c->cfg, to) : -1;
	*src = -1;
	if (*dst < 0)
		return sq_err(err, SQ_EINVAL, "no shard '%s' in the config", to ? to : "(null)");
	if (n == 0)
		return sq_err(err, SQ_EINVAL, "no partition given");
	if ((st = sq_client_refresh_map(c, err)))
		return st;
	for (size_t i = 0; i < n; i++) {
		if (parts[i] >= c->partitions)
			return sq_err(err, SQ_EINVAL, "partition %u is out of range (0..%u)",
				      parts[i], c->partitions - 1);
		int s = c->map[parts[i]];
		if (*src >= 0 && s != *src)
			return sq_err(err, SQ_EINVAL,
				      "partitions %u and %u are on different shards (%s, %s); move "
				      "each shard's set on its own",
				      parts[0], parts[i], sid(c, *src), sid(c, s));
		*src = s;
	}
	if (*src == *dst)
		return sq_err(err, SQ_EINVAL, "the partitions are on %s already", to);
	return SQ_OK;
}

sq_status sq_move(sq_client *c, const uint32_t *parts, size_t n, const char *to,
		  const sq_move_opts *opts, sq_move_info *info, sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	sq_move_opts o;
	sq_status st;
	int src, dst;
	if (opts)
		o = *opts;
	else
		sq_move_opts_init(&o);
	if ((st = move_args(c, parts, n, to, &src, &dst, err)))
		return st;
	st = move_set(c, parts, n, src, dst, &o, 1, 1, info, err);
	if (st == SQ_OK)
		vacuum(c, src);
	refresh_quietly(c);
	return st;
}

sq_status sq_move_check(sq_client *c, const uint32_t *parts, size_t n, const char *to,
			sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err;
	sq_status st;
	int src, dst;
	move m;
	if ((st = move_args(c, parts, n, to, &src, &dst, err)))
		return st;
	memset(&m, 0, sizeof(m));
	m.n = n;
	m.parts = malloc(n * sizeof(uint32_t));
	if (!m.parts)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	memcpy(m.parts, parts, n * sizeof(uint32_t));
	set_lit(&m);
	const char *v[1] = {m.lit};
	char who[96];
	PGresult *r = NULL;
	/* the meta database: no unfinished move holds any of them */
	if (!(m.meta = connect_to(c, "meta", sq_config_meta_dsn(c->cfg), err)) ||
	    !(r = run(m.meta, "meta", sq_sql_move_check_locks, 1, v, err))) {
		st = err->code;
		goto out;
	}
	if (atoll(PQgetvalue(r, 0, 0)) > 0) {
		st = sq_err(err, SQ_ESTATE,
			    "%s of these partitions are in unfinished move %s; resume or abort it "
			    "first (shardq moves)",
			    PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
		goto out;
	}
	PQclear(r);
	r = NULL;
	/* both shards answer, and the destination does not own any of them */
	snprintf(who, sizeof(who), "shard %s (source)", sid(c, src));
	if (!(m.src = connect_to(c, who, c->cfg->shards[src].dsn, err)) ||
	    !(r = run(m.src, who, "SELECT 1", 0, NULL, err))) {
		st = err->code;
		goto out;
	}
	PQclear(r);
	r = NULL;
	snprintf(who, sizeof(who), "shard %s (destination)", sid(c, dst));
	if (!(m.dst = connect_to(c, who, c->cfg->shards[dst].dsn, err)) ||
	    !(r = run(m.dst, who, sq_sql_move_check_dst_owned, 1, v, err))) {
		st = err->code;
		goto out;
	}
	if (atoll(PQgetvalue(r, 0, 0)) > 0)
		st = sq_err(err, SQ_ESTATE, "%s already owns %s of these partitions", who,
			    PQgetvalue(r, 0, 0));
out:
	PQclear(r);
	move_close(&m);
	return st;
}

sq_status sq_move_resume(sq_client *c, int64_t id, const sq_move_opts *opts, sq_move_info *info,
			 sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	sq_move_opts o;
	move m;
	sq_status st;
	if (opts)
		o = *opts;
	else
		sq_move_opts_init(&o);
	memset(&m, 0, sizeof(m));
	m.c = c;
	m.o = &o;
	st = load(c, &m, id, err);
	if (st == SQ_OK && strcmp(m.step, "done"))
		st = lock_move(&m, err);
	if (st == SQ_OK && !strcmp(m.step, "done")) {
		fill_info(c, &m, info);
		move_close(&m);
		return SQ_OK;
	}
	if (st == SQ_OK && (st = schemas_current(c, m.from, m.to, err)) == SQ_OK)
		st = drive(c, &m, &o, 1, 1, info, err);
	if (st == SQ_OK)
		vacuum(c, m.from);
	move_close(&m);
	refresh_quietly(c);
	return st;
}

sq_status sq_move_abort(sq_client *c, int64_t id, sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	move m;
	sq_status st;
	char ids[24], who[96];
	memset(&m, 0, sizeof(m));
	if ((st = load(c, &m, id, err)))
		goto out;
	if (!strcmp(m.step, "aborted"))
		goto out;
	if ((st = lock_move(&m, err)))
		goto out;
	if (!strcmp(m.step, "copied") || !strcmp(m.step, "switched") || !strcmp(m.step, "done")) {
		st = sq_err(
			err, SQ_ESTATE,
			"move %lld is past the copy commit (step %s); it cannot be aborted, only "
			"resumed (shardq moves --resume %lld)",
			(long long)id, m.step, (long long)id);
		goto out;
	}
	if ((st = move_connect(c, &m, err)))
		goto out;
	snprintf(ids, sizeof(ids), "%lld", (long long)id);
	const char *v[2] = {m.lit, ids};
	/* the destination may have committed without recording it: check under
	 * the row locks, in the transaction that forgets the partitions */
	snprintf(who, sizeof(who), "shard %s (destination)", sid(c, m.to));
	if ((st = run_ok(m.dst, who, "BEGIN", 0, NULL, err)) ||
	    (st = bulk_timeout(c, m.dst, who, 1, 1, err)))
		goto out;
	PGresult *r = run(m.dst, who, sq_sql_move_abort_owned, 2, v, err);
	if (!r) {
		st = err->code;
		goto out;
	}
	long owned = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (owned) {
		run_ok(m.dst, who, "ROLLBACK", 0, NULL, err);
		st = sq_err(
			err, SQ_ESTATE,
			"move %lld committed its copy on %s; it cannot be aborted, only resumed",
			(long long)id, sid(c, m.to));
		goto out;
	}
	if ((st = run_ok(m.dst, who, sq_sql_move_abort_delete_jobs, 2, v, err)) ||
	    (st = run_ok(m.dst, who, sq_sql_move_abort_forget, 2, v, err)) ||
	    (st = run_ok(m.dst, who, "COMMIT", 0, NULL, err)))
		goto out;
	snprintf(who, sizeof(who), "shard %s (source)", sid(c, m.from));
	if ((st = run_ok(m.src, who, sq_sql_move_abort_restore, 2, v, err)))
		goto out;
	const char *fv[1] = {ids};
	if ((st = run_ok(m.meta, "meta", "BEGIN", 0, NULL, err)) ||
	    (st = run_ok(m.meta, "meta", sq_sql_move_record_aborted, 1, fv, err)) ||
	    (st = run_ok(m.meta, "meta", sq_sql_move_unlock, 1, fv, err)) ||
	    (st = run_ok(m.meta, "meta", "COMMIT", 0, NULL, err)))
		goto out;
out:
	move_close(&m);
	return st;
}

sq_status sq_moves_list(sq_client *c, int all, sq_move_info **out, size_t *n, sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	PGconn *meta = connect_to(c, "meta", sq_config_meta_dsn(c->cfg), err);
	PGresult *r;
	*out = NULL;
	*n = 0;
	if (!meta)
		return err->code;
	r = run(meta, "meta", all ? sq_sql_moves_list_all : sq_sql_moves_list_open, 0, NULL, err);
	if (!r) {
		PQfinish(meta);
		return err->code;
	}
	size_t k = (size_t)PQntuples(r);
	sq_move_info *v = calloc(k ? k : 1, sizeof(*v));
	for (size_t i = 0; v && i < k; i++) {
		v[i].move_id = atoll(PQgetvalue(r, (int)i, 0));
		snprintf(v[i].from, sizeof(v[i].from), "%s", PQgetvalue(r, (int)i, 1));
		snprintf(v[i].to, sizeof(v[i].to), "%s", PQgetvalue(r, (int)i, 2));
		v[i].npartitions = atoi(PQgetvalue(r, (int)i, 3));
		snprintf(v[i].step, sizeof(v[i].step), "%s", PQgetvalue(r, (int)i, 4));
		v[i].rows = atoll(PQgetvalue(r, (int)i, 5));
		v[i].stall_ms = atof(PQgetvalue(r, (int)i, 6));
		v[i].elapsed_ms = atof(PQgetvalue(r, (int)i, 7));
		snprintf(v[i].error, sizeof(v[i].error), "%s", PQgetvalue(r, (int)i, 8));
	}
	PQclear(r);
	PQfinish(meta);
	if (!v)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	*out = v;
	*n = k;
	return SQ_OK;
}

sq_status sq_rebalance_plan(sq_client *c, sq_plan **out, sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	const sq_config *cfg = c->cfg;
	const char *ids[SQ_MAX_SHARDS];
	double ws[SQ_MAX_SHARDS];
	sq_status st;
	*out = NULL;
	if ((st = sq_client_refresh_map(c, err)))
		return st;
	sq_plan *p = calloc(1, sizeof(*p));
	if (!p)
		return sq_err(err, SQ_ENOMEM, "out of memory");
	p->partitions = c->partitions;
	p->nshards = cfg->nshards;
	p->from = malloc(sizeof(int) * c->partitions);
	p->to = malloc(sizeof(int) * c->partitions);
	p->before = calloc((size_t)cfg->nshards, sizeof(int64_t));
	p->after = calloc((size_t)cfg->nshards, sizeof(int64_t));
	if (!p->from || !p->to || !p->before || !p->after) {
		sq_plan_free(p);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	for (int i = 0; i < cfg->nshards; i++)
		ids[i] = cfg->shards[i].id, ws[i] = cfg->shards[i].weight;
	if (sq_hrw_plan(c->partitions, cfg->nshards, ids, ws, p->to)) {
		sq_plan_free(p);
		return sq_err(err, SQ_ECONFIG,
			      "every shard has weight 0; give one a weight above 0");
	}
	for (uint32_t i = 0; i < c->partitions; i++) {
		p->from[i] = c->map[i];
		p->before[p->from[i]]++;
		p->after[p->to[i]]++;
		p->moving += p->from[i] != p->to[i];
	}
	*out = p;
	return SQ_OK;
}

void sq_plan_free(sq_plan *p)
{
	if (!p)
		return;
	free(p->from);
	free(p->to);
	free(p->before);
	free(p->after);
	free(p);
}

sq_status sq_rebalance(sq_client *c, const sq_move_opts *opts, sq_error *err)
{
	sq_error local_err;
	if (!err)
		err = &local_err; /* the steps read err->code */
	sq_move_opts o;
	sq_plan *p;
	sq_status st;
	sq_move_info *pending;
	size_t npending;
	if (opts)
		o = *opts;
	else
		sq_move_opts_init(&o);
	if (o.set_size <= 0)
		o.set_size = 256;
	/* first, what an earlier mover left unfinished */
	if ((st = sq_moves_list(c, 0, &pending, &npending, err)))
		return st;
	for (size_t i = 0; i < npending; i++) {
		if ((st = sq_move_resume(c, pending[i].move_id, &o, NULL, err))) {
			free(pending);
			return st;
		}
	}
	free(pending);
	if ((st = sq_rebalance_plan(c, &p, err)))
		return st;
	int ns = c->nshards;
	unsigned char *src_used = calloc((size_t)ns, 1);
	uint32_t *set = malloc(sizeof(uint32_t) * (size_t)o.set_size);
	int nsets = 0, done_sets = 0;
	if (!src_used || !set) {
		free(src_used);
		free(set);
		sq_plan_free(p);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	/* count the sets first, for progress */
	for (int a = 0; a < ns; a++)
		for (int b = 0; b < ns; b++) {
			int64_t k = 0;
			for (uint32_t i = 0; i < p->partitions; i++)
				k += p->from[i] == a && p->to[i] == b && a != b;
			nsets += (int)((k + o.set_size - 1) / o.set_size);
		}
	for (int a = 0; a < ns && st == SQ_OK; a++)
		for (int b = 0; b < ns && st == SQ_OK; b++) {
			size_t k = 0;
			if (a == b)
				continue;
			for (uint32_t i = 0; i <= p->partitions && st == SQ_OK; i++) {
				int last = i == p->partitions;
				if (!last && p->from[i] == a && p->to[i] == b)
					set[k++] = i;
				if (k == (size_t)o.set_size || (last && k)) {
					st = move_set(c, set, k, a, b, &o, ++done_sets, nsets, NULL,
						      err);
					src_used[a] = 1;
					k = 0;
					if (st == SQ_OK && o.pause_ms > 0)
						usleep((useconds_t)(o.pause_ms * 1000));
				}
			}
		}
	for (int a = 0; a < ns; a++)
		if (src_used[a])
			vacuum(c, a);
	free(src_used);
	free(set);
	sq_plan_free(p);
	refresh_quietly(c);
	return st;
}

/* check.c - sq_check (`shardq check`): reads the meta database and every
 * shard, checks the cluster's own invariants (include/shardq.h lists them),
 * reports each finding with the shard, the partition and what to do, and
 * with repair on makes the repairs that are provably safe. The statements
 * are in sql/queries/check.sql. */
#include "buf.h"
#include "client.h"
#include "error.h"
#include "schema.h"
#include "sql_queries.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A shard's marker for a partition: none, or partition_state's state. */
enum {
	M_NONE = 0,
	M_OWNED = 'o',
	M_IMPORTING = 'i',
	M_MOVING = 'm',
	M_GONE = 'g',
	M_ADOPTED = 'a'
};

/* An unfinished move, from shard index `from` to `to` (-1: a shard the
 * config does not name). */
typedef struct open_move {
	int64_t id;
	int from, to;
	char step[16];
} open_move;

typedef struct ck {
	sq_client *c;
	sq_check_opts o;
	sq_check_summary *sum;
	uint32_t P;
	int n;
	int *up;          /* [n] the shard answered its head */
	int all_up;       /* every shard did, and is of this cluster */
	char *state;      /* [n * P] markers */
	int *map;         /* [P] the meta map's shard index (-1: not in the config) */
	int *owner;       /* [P] the sole owner, -1 none, -2 several */
	int *held;        /* [P] index into moves, -1: no open move */
	open_move *moves; /* the unfinished moves */
	size_t nmoves;
	int64_t seq_given; /* the last id block the sequence gave out */
	int64_t max_block; /* the highest block of a job id on a shard */
	int max_block_shard;
	char cluster_id[128];
} ck;

void sq_check_opts_init(sq_check_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->stray_limit = 100000;
}

static const char *sname(const ck *k, int s)
{
	return s >= 0 && s < k->n ? k->c->cfg->shards[s].id : "";
}

static char *st_at(ck *k, int s, uint32_t p)
{
	return &k->state[(size_t)s * k->P + p];
}

static const char *state_name(char m)
{
	switch (m) {
	case M_OWNED: return "owned";
	case M_IMPORTING: return "importing";
	case M_MOVING: return "moving_out";
	case M_GONE: return "gone";
	case M_ADOPTED: return "adopted";
	default: return "unknown";
	}
}

/* Reports one finding: check, shard (-1: none), partition (-1: none),
 * whether it was repaired, what to do, and what is wrong (printf). */
static void finding(ck *k, const char *check, int s, int64_t p, int repaired, const char *todo,
		    const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void finding(ck *k, const char *check, int s, int64_t p, int repaired, const char *todo,
		    const char *fmt, ...)
{
	sq_check_finding f;
	va_list ap;
	memset(&f, 0, sizeof(f));
	f.check = check;
	f.shard = sname(k, s);
	f.partition = p;
	f.repaired = repaired;
	snprintf(f.todo, sizeof(f.todo), "%s", todo);
	va_start(ap, fmt);
	vsnprintf(f.what, sizeof(f.what), fmt, ap);
	va_end(ap);
	k->sum->findings++;
	k->sum->repaired += repaired != 0;
	if (k->o.report)
		k->o.report(&f, k->o.arg);
}

static void progress(ck *k, const char *step, int64_t done, int64_t total)
{
	if (k->o.progress)
		k->o.progress(step, done, total, k->o.arg);
}

static PGresult *meta_exec(ck *k, const char *sql, int n, const char *const *v, sq_error *err)
{
	return sq_pgconn_exec(&k->c->meta, sql, n, v, err);
}

static PGresult *shard_exec(ck *k, int s, const char *sql, int n, const char *const *v,
			    sq_error *err)
{
	return sq_pgconn_exec(&k->c->shards[s], sql, n, v, err);
}

/* Runs statements in one transaction on pc: BEGIN, each, COMMIT; SQ_OK or
 * the first error (rolled back). */
static sq_status in_tx(sq_pgconn *pc, int nstmt, const char *const *sql, const int *nparams,
		       const char *const *const *vals, sq_error *err)
{
	sq_error ignore;
	PGresult *r = sq_pgconn_exec(pc, "BEGIN", 0, NULL, err);
	if (!r)
		return err->code;
	PQclear(r);
	for (int i = 0; i < nstmt; i++) {
		if (!(r = sq_pgconn_exec(pc, sql[i], nparams[i], vals[i], err))) {
			if ((r = sq_pgconn_exec(pc, "ROLLBACK", 0, NULL, &ignore)))
				PQclear(r);
			return err->code;
		}
		PQclear(r);
	}
	if (!(r = sq_pgconn_exec(pc, "COMMIT", 0, NULL, err)))
		return err->code;
	PQclear(r);
	return SQ_OK;
}

/* ---- the meta database --------------------------------------------------- */

static sq_status read_meta_head(ck *k, sq_error *err)
{
	PGresult *r = meta_exec(k, sq_sql_check_meta_head, 0, NULL, err);
	if (!r)
		return sq_err(err, err->code,
			      "the meta database does not answer (%s); nothing was checked",
			      err->msg);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return sq_err(err, SQ_ESTATE,
			      "the meta database holds no cluster; run 'shardq init' first");
	}
	snprintf(k->cluster_id, sizeof(k->cluster_id), "%s", PQgetvalue(r, 0, 0));
	uint32_t parts = (uint32_t)atol(PQgetvalue(r, 0, 1));
	int have = atoi(PQgetvalue(r, 0, 2)),
	    want = sq_meta_migrations[sq_meta_migration_count - 1].version;
	int64_t last = atoll(PQgetvalue(r, 0, 3));
	k->seq_given = *PQgetvalue(r, 0, 4) == 't' ? last : last - 1;
	PQclear(r);
	if (parts != k->P)
		return sq_err(err, SQ_ESTATE,
			      "the cluster has %u partitions and the config says %u; set [cluster] "
			      "partitions = %u",
			      parts, k->P, parts);
	if (have != want)
		finding(k, "schema", -1, -1, 0,
			have < want ? "run 'shardq init' to upgrade it"
				    : "upgrade shardq to the release that made it",
			"the meta database is at schema version %d, this shardq at %d", have, want);
	return SQ_OK;
}

static sq_status read_map(ck *k, sq_error *err)
{
	PGresult *r = meta_exec(k, sq_sql_check_meta_map, 0, NULL, err);
	if (!r)
		return err->code;
	for (uint32_t p = 0; p < k->P; p++)
		k->map[p] = -3; /* no row */
	for (int i = 0; i < PQntuples(r); i++) {
		uint32_t p = (uint32_t)atol(PQgetvalue(r, i, 0));
		if (p < k->P)
			k->map[p] = sq_config_shard_index(k->c->cfg, PQgetvalue(r, i, 1));
		if (p < k->P && k->map[p] < 0)
			finding(k, "map", -1, p, 0,
				"add the shard to the config (its [shard] section), or move the "
				"partition off it",
				"the map puts partition %u on shard '%s', which the config does "
				"not "
				"name",
				p, PQgetvalue(r, i, 1));
	}
	PQclear(r);
	for (uint32_t p = 0; p < k->P; p++)
		if (k->map[p] == -3)
			finding(k, "map", -1, p, 0, "run 'shardq init' (it plans missing rows)",
				"the map has no row for partition %u", p);
	return SQ_OK;
}

static sq_status read_open_moves(ck *k, sq_error *err)
{
	PGresult *r = meta_exec(k, sq_sql_check_meta_moves_open, 0, NULL, err);
	if (!r)
		return err->code;
	for (uint32_t p = 0; p < k->P; p++)
		k->held[p] = -1;
	k->moves = calloc((size_t)PQntuples(r) + 1, sizeof(open_move));
	if (!k->moves) {
		PQclear(r);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	for (int i = 0; i < PQntuples(r); i++) {
		int64_t id = atoll(PQgetvalue(r, i, 0));
		uint32_t p = (uint32_t)atol(PQgetvalue(r, i, 4));
		size_t m = 0;
		while (m < k->nmoves && k->moves[m].id != id)
			m++;
		if (m == k->nmoves) {
			k->moves[m].id = id;
			k->moves[m].from = sq_config_shard_index(k->c->cfg, PQgetvalue(r, i, 1));
			k->moves[m].to = sq_config_shard_index(k->c->cfg, PQgetvalue(r, i, 2));
			snprintf(k->moves[m].step, sizeof(k->moves[m].step), "%s",
				 PQgetvalue(r, i, 3));
			k->nmoves++;
		}
		if (p < k->P)
			k->held[p] = (int)m;
	}
	PQclear(r);
	return SQ_OK;
}

/* ---- each shard's head and markers --------------------------------------- */

static void check_shard_head(ck *k, int s)
{
	sq_error e;
	PGresult *r = shard_exec(k, s, sq_sql_check_shard_head, 0, NULL, &e);
	int want = sq_shard_schema_newest();
	if (!r) {
		finding(k, "reach", s, -1, 0,
			"start it or mend the dsn of its [shard] section; the ownership, map, "
			"stray and key checks need every shard, and were left out",
			"shard %s does not answer, or has no shardq schema: %s", sname(k, s),
			e.msg);
		return;
	}
	if (PQntuples(r) != 1) {
		finding(k, "identity", s, -1, 0, "run 'shardq init'",
			"shard %s was never initialised (shardq.node is empty)", sname(k, s));
		PQclear(r);
		return;
	}
	int same = !strcmp(PQgetvalue(r, 0, 0), sname(k, s)) &&
		   !strcmp(PQgetvalue(r, 0, 1), k->cluster_id) &&
		   (uint32_t)atol(PQgetvalue(r, 0, 2)) == k->P;
	int have = atoi(PQgetvalue(r, 0, 3));
	if (!same)
		finding(k, "identity", s, -1, 0,
			"check the dsn of its [shard] section: it reaches another database",
			"shard %s's database says it is shard '%s' of cluster %s with %s "
			"partitions; this cluster is %s with %u",
			sname(k, s), PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2),
			k->cluster_id, k->P);
	if (have != want)
		finding(k, "schema", s, -1, 0,
			have < want ? "run 'shardq init' to upgrade it"
				    : "upgrade shardq to the release that made it",
			"shard %s is at schema version %d, this shardq at %d", sname(k, s), have,
			want);
	for (int col = 4; col <= 5; col++) {
		int64_t block = atoll(PQgetvalue(r, 0, col)) >> 32;
		if (block > k->max_block)
			k->max_block = block, k->max_block_shard = s;
	}
	PQclear(r);
	k->up[s] = same;
}

static char marker_code(const char *state)
{
	if (!strcmp(state, "owned"))
		return M_OWNED;
	if (!strcmp(state, "importing"))
		return M_IMPORTING;
	if (!strcmp(state, "moving_out"))
		return M_MOVING;
	if (!strcmp(state, "adopted"))
		return M_ADOPTED;
	return M_GONE;
}

static void read_markers(ck *k, int s)
{
	sq_error e;
	PGresult *r = shard_exec(k, s, sq_sql_check_shard_markers, 0, NULL, &e);
	if (!r) {
		finding(k, "reach", s, -1, 0, "run the check again once it answers",
			"shard %s stopped answering: %s", sname(k, s), e.msg);
		k->up[s] = 0;
		return;
	}
	for (int i = 0; i < PQntuples(r); i++) {
		uint32_t p = (uint32_t)atol(PQgetvalue(r, i, 0));
		if (p < k->P)
			*st_at(k, s, p) = marker_code(PQgetvalue(r, i, 1));
	}
	PQclear(r);
}

/* ---- ownership, the map, and the markers ---------------------------------- */

static int sole_owner(ck *k, uint32_t p)
{
	int o = -1;
	for (int s = 0; s < k->n; s++)
		if (*st_at(k, s, p) == M_OWNED)
			o = o == -1 ? s : -2;
	return o;
}

static void check_held(ck *k, uint32_t p)
{
	const open_move *m = &k->moves[k->held[p]];
	for (int s = 0; s < k->n; s++)
		if (s != m->from && s != m->to && *st_at(k, s, p) != M_NONE)
			finding(k, "markers", s, p, 0,
				"let the move finish (shardq moves --resume %lld), then run the "
				"check again",
				"shard %s marks partition %u %s, but the open move %lld is from %s "
				"to %s",
				sname(k, s), p, state_name(*st_at(k, s, p)), (long long)m->id,
				sname(k, m->from), sname(k, m->to));
	if (m->from >= 0 && m->to >= 0 && *st_at(k, m->from, p) == M_OWNED &&
	    *st_at(k, m->to, p) == M_OWNED)
		finding(k, "ownership", -1, p, 0, "see docs/operations.md, \"Two owners\"",
			"partition %u is owned by both %s and %s during move %lld", p,
			sname(k, m->from), sname(k, m->to), (long long)m->id);
	if (k->map[p] >= 0 && k->map[p] != m->from && k->map[p] != m->to)
		finding(k, "map", -1, p, 0, "let the move finish, then run the check with --repair",
			"the map puts partition %u on %s, but it is moving from %s to %s", p,
			sname(k, k->map[p]), sname(k, m->from), sname(k, m->to));
}

/* No owner. Made good when that is provably safe: a freeze that no open
 * move explains is undone where exactly one shard holds the partition
 * frozen (as an abort undoes it); a partition no shard marks at all is
 * owned by the shard the map names (nothing of it is anywhere else). */
static void check_unowned(ck *k, uint32_t p)
{
	int frozen = -1, nfrozen = 0, marked = 0;
	for (int s = 0; s < k->n; s++) {
		if (*st_at(k, s, p) == M_MOVING)
			frozen = s, nfrozen++;
		marked += *st_at(k, s, p) != M_NONE;
	}
	int to = nfrozen == 1 ? frozen : !marked && k->map[p] >= 0 ? k->map[p] : -1;
	int repaired = 0;
	if (to >= 0 && k->o.repair) {
		char ps[16];
		const char *v[1] = {ps};
		sq_error e;
		snprintf(ps, sizeof(ps), "%u", p);
		PGresult *r = shard_exec(k, to,
					 nfrozen == 1 ? sq_sql_check_shard_unfreeze
						      : sq_sql_check_shard_adopt,
					 1, v, &e);
		if ((repaired = r != NULL)) {
			PQclear(r);
			*st_at(k, to, p) = M_OWNED;
			k->owner[p] = to;
		}
	}
	finding(k, "ownership", to, p, repaired,
		repaired  ? "nothing: writes to it go on"
		: to >= 0 ? "run the check with --repair: it makes that shard the owner"
			  : "see docs/operations.md, \"Restoring one shard from a backup\"",
		"partition %u is owned by no shard%s%s", p,
		nfrozen == 1 ? "; it is frozen (moving_out) by no open move on "
		: to >= 0    ? "; no shard marks it, and the map names "
			     : "",
		to >= 0 ? sname(k, to) : "");
}

/* Whether partition p's latest recorded move is done, from shard `from` to
 * shard `to`. */
static int moved_last(ck *k, uint32_t p, int from, int to)
{
	char ps[16];
	const char *v[1] = {ps};
	sq_error e;
	snprintf(ps, sizeof(ps), "%u", p);
	PGresult *r = meta_exec(k, sq_sql_check_meta_last_move, 1, v, &e);
	int yes = r && PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), sname(k, from)) &&
		  !strcmp(PQgetvalue(r, 0, 1), sname(k, to)) &&
		  !strcmp(PQgetvalue(r, 0, 2), "done");
	if (r)
		PQclear(r);
	return yes;
}

/* Shard s forgets partition p, marked m, and its rows of it, under the
 * partition gate; 1 on success. */
static int forget(ck *k, int s, uint32_t p, char m)
{
	char lit[24];
	const char *v[2] = {lit, state_name(m)};
	const char *const *vals[2] = {NULL, v};
	const char *sql[2] = {sq_sql_check_shard_gate, sq_sql_check_shard_forget};
	int np[2] = {0, 2};
	sq_error e;
	snprintf(lit, sizeof(lit), "{%u}", p);
	if (in_tx(&k->c->shards[s], 2, sql, np, vals, &e) != SQ_OK)
		return 0;
	*st_at(k, s, p) = M_NONE;
	return 1;
}

/* A marker other than owned on a shard that is not the owner, with no open
 * move: what a move left. Forgotten (with the shard's rows of it) when that
 * is provably safe: an importing partition's rows never were the ones
 * clients wrote to; a source's, once the partition's latest move from it
 * to the owner is done. */
static void check_leftover(ck *k, uint32_t p, int s, int owner)
{
	char m = *st_at(k, s, p);
	int safe =
		m == M_IMPORTING || ((m == M_MOVING || m == M_GONE) && moved_last(k, p, s, owner));
	int repaired = safe && k->o.repair && forget(k, s, p, m);
	finding(k, "markers", s, p, repaired,
		repaired ? "nothing"
		: safe   ? "run the check with --repair: it forgets the marker and the shard's "
			   "rows of the partition"
			 : "see docs/operations.md, \"Restoring one shard from a backup\"",
		"shard %s marks partition %u %s with no open move, and %s owns it%s", sname(k, s),
		p, state_name(m), sname(k, owner),
		m == M_IMPORTING ? " (left by an aborted move)"
		: safe           ? " (left by the move to it, which is done)"
				 : "");
}

/* Two owners, one of them the source of the partition's latest move, which
 * is done and went to the other: the source's marker and rows are older
 * than that move (a backup restored), and go. */
static void check_two_owners(ck *k, uint32_t p)
{
	int own[2] = {-1, -1}, n = 0, src = -1, dst = -1;
	for (int s = 0; s < k->n; s++)
		if (*st_at(k, s, p) == M_OWNED && n++ < 2)
			own[n - 1] = s;
	if (n == 2 && moved_last(k, p, own[0], own[1]))
		src = own[0], dst = own[1];
	else if (n == 2 && moved_last(k, p, own[1], own[0]))
		src = own[1], dst = own[0];
	int repaired = src >= 0 && k->o.repair && forget(k, src, p, M_OWNED);
	if (repaired)
		k->owner[p] = dst;
	sq_buf who;
	sq_buf_init(&who);
	for (int s = 0; s < k->n; s++)
		if (*st_at(k, s, p) == M_OWNED || (repaired && s == src))
			sq_buf_printf(&who, "%s%s", who.len ? ", " : "", sname(k, s));
	finding(k, "ownership", src, p, repaired,
		repaired   ? "nothing: its jobs since that move are the new owner's"
		: src >= 0 ? "run the check with --repair: the source of the partition's last "
			     "move forgets it (docs/operations.md, \"Restoring one shard from a "
			     "backup\")"
			   : "see docs/operations.md, \"Restoring one shard from a backup\"",
		"partition %u is owned by several shards: %s%s%s%s", p, who.data,
		src >= 0 ? "; its last move went from " : "", src >= 0 ? sname(k, src) : "",
		src >= 0 ? " to the other" : "");
	sq_buf_free(&who);
}

static void check_partition(ck *k, uint32_t p)
{
	int o = sole_owner(k, p);
	k->owner[p] = o;
	if (k->held[p] >= 0) {
		check_held(k, p);
		return;
	}
	if (o == -1)
		check_unowned(k, p);
	else if (o == -2)
		check_two_owners(k, p);
	o = k->owner[p];
	if (o < 0)
		return;
	for (int s = 0; s < k->n; s++)
		if (s != o && *st_at(k, s, p) != M_NONE)
			check_leftover(k, p, s, o);
}

/* ---- repairs of the map --------------------------------------------------- */

/* Whether the map names another shard than partition p's sole owner, with
 * no open move to explain it (read after check_partition). */
static int map_wrong(const ck *k, uint32_t p)
{
	return k->held[p] < 0 && k->owner[p] >= 0 && k->map[p] >= 0 && k->map[p] != k->owner[p];
}

/* Points the map at the owners where it names another shard, one meta
 * transaction per owner with a version bump and NOTIFY each. */
static void repair_map(ck *k)
{
	for (int o = 0; o < k->n; o++) {
		sq_buf lit;
		int count = 0, done = 0;
		sq_buf_init(&lit);
		sq_arr_open(&lit);
		for (uint32_t p = 0; p < k->P; p++)
			if (map_wrong(k, p) && k->owner[p] == o)
				sq_arr_i64(&lit, p), count++;
		sq_arr_close(&lit);
		if (count && k->o.repair) {
			const char *v[2] = {lit.data, sname(k, o)};
			const char *const *vals[3] = {v, NULL, NULL};
			const char *sql[3] = {sq_sql_check_meta_map_set,
					      sq_sql_move_bump_map_version,
					      sq_sql_check_meta_notify_map};
			int np[3] = {2, 0, 0};
			sq_error e;
			done = in_tx(&k->c->meta, 3, sql, np, vals, &e) == SQ_OK;
		}
		for (uint32_t p = 0; count && p < k->P; p++)
			if (map_wrong(k, p) && k->owner[p] == o)
				finding(k, "map", o, p, done,
					done ? "nothing: clients follow the new map version"
					     : "run the check with --repair: it points the map at "
					       "the owner",
					"the map puts partition %u on %s, but %s owns it", p,
					sname(k, k->map[p]), sname(k, o));
		sq_buf_free(&lit);
	}
}

static void check_partitions(ck *k)
{
	for (uint32_t p = 0; p < k->P; p++) {
		check_partition(k, p);
		if ((p & 1023) == 1023 || p + 1 == k->P)
			progress(k, "partitions", p + 1, k->P);
	}
	repair_map(k);
	k->sum->partitions_checked = k->P;
}

static void check_locks(ck *k)
{
	sq_error e;
	PGresult *r = meta_exec(k, sq_sql_check_meta_locks_stale, 0, NULL, &e);
	if (!r || PQntuples(r) == 0) {
		if (r)
			PQclear(r);
		return;
	}
	sq_buf lit;
	sq_buf_init(&lit);
	sq_arr_open(&lit);
	for (int i = 0; i < PQntuples(r); i++)
		sq_arr_i64(&lit, atoll(PQgetvalue(r, i, 0)));
	sq_arr_close(&lit);
	int done = 0;
	if (k->o.repair) {
		const char *v[1] = {lit.data};
		PGresult *d = meta_exec(k, sq_sql_check_meta_unlock_stale, 1, v, &e);
		done = d != NULL;
		if (d)
			PQclear(d);
	}
	for (int i = 0; i < PQntuples(r); i++)
		finding(k, "markers", -1, atoll(PQgetvalue(r, i, 0)), done,
			done ? "nothing: the partition can move again"
			     : "run the check with --repair: it drops the lock",
			"partition %s is locked to move %s, which is %s: no other move can take "
			"it",
			PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2));
	PQclear(r);
	sq_buf_free(&lit);
}

/* ---- stray jobs and keys --------------------------------------------------- */

typedef struct stray {
	int64_t id;
	uint32_t partition;
	char *task, *key; /* key NULL: none */
	int copy;         /* the owner holds the same id */
} stray;

/* The partitions shard s holds jobs in but does not own (nor imports, nor
 * freezes), with no open move: "partition count" lines in *out. */
static sq_status stray_partitions(ck *k, int s, sq_buf *out, sq_error *err)
{
	sq_buf lit;
	int any = 0;
	sq_buf_init(&lit);
	sq_arr_open(&lit);
	for (uint32_t p = 0; p < k->P; p++) {
		char m = *st_at(k, s, p);
		if ((m == M_NONE || m == M_GONE) && k->held[p] < 0)
			sq_arr_i64(&lit, p), any = 1;
	}
	sq_arr_close(&lit);
	if (!any) {
		sq_buf_free(&lit);
		return SQ_OK;
	}
	const char *v[1] = {lit.data};
	PGresult *r = shard_exec(k, s, sq_sql_check_shard_stray_counts, 1, v, err);
	sq_buf_free(&lit);
	if (!r)
		return err->code;
	for (int i = 0; i < PQntuples(r); i++)
		sq_buf_printf(out, "%s %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
	PQclear(r);
	return SQ_OK;
}

static stray *read_strays(ck *k, int s, const char *parts, size_t *n, sq_error *err)
{
	sq_buf lit;
	char lim[24];
	sq_buf_init(&lit);
	sq_arr_open(&lit);
	for (const char *line = parts; line && *line;
	     line = strchr(line, '\n'), line += line != NULL)
		sq_arr_i64(&lit, atoll(line));
	sq_arr_close(&lit);
	snprintf(lim, sizeof(lim), "%lld", (long long)k->o.stray_limit);
	const char *v[2] = {lit.data, lim};
	PGresult *r = shard_exec(k, s, sq_sql_check_shard_stray_jobs, 2, v, err);
	sq_buf_free(&lit);
	if (!r)
		return NULL;
	stray *out = calloc((size_t)PQntuples(r) + 1, sizeof(stray));
	for (int i = 0; out && i < PQntuples(r); i++) {
		out[i].id = atoll(PQgetvalue(r, i, 0));
		out[i].partition = (uint32_t)atol(PQgetvalue(r, i, 1));
		out[i].task = strdup(PQgetvalue(r, i, 2));
		out[i].key = PQgetisnull(r, i, 3) ? NULL : strdup(PQgetvalue(r, i, 3));
	}
	*n = out ? (size_t)PQntuples(r) : 0;
	PQclear(r);
	if (!out)
		sq_err(err, SQ_ENOMEM, "out of memory");
	return out;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Marks the strays whose owner o holds the same id (live or finished). */
static void find_copies(ck *k, int o, stray *v, size_t n)
{
	sq_buf lit;
	int any = 0;
	sq_error e;
	sq_buf_init(&lit);
	sq_arr_open(&lit);
	for (size_t i = 0; i < n; i++)
		if (k->owner[v[i].partition] == o)
			sq_arr_i64(&lit, v[i].id), any = 1;
	sq_arr_close(&lit);
	const char *pv[1] = {lit.data};
	PGresult *r = any ? shard_exec(k, o, sq_sql_check_shard_have_ids, 1, pv, &e) : NULL;
	sq_buf_free(&lit);
	if (!r)
		return;
	int64_t *have = malloc(sizeof(int64_t) * ((size_t)PQntuples(r) + 1));
	for (int i = 0; have && i < PQntuples(r); i++)
		have[i] = atoll(PQgetvalue(r, i, 0));
	if (have)
		qsort(have, (size_t)PQntuples(r), sizeof(int64_t), cmp_i64);
	for (size_t i = 0; have && i < n; i++)
		if (k->owner[v[i].partition] == o)
			v[i].copy = bsearch(&v[i].id, have, (size_t)PQntuples(r), sizeof(int64_t),
					    cmp_i64) != NULL;
	free(have);
	PQclear(r);
}

/* Reports the strays of shard s whose (type, key) is live on owner o. */
static void find_shared_keys(ck *k, int s, int o, const stray *v, size_t n)
{
	sq_buf tasks, keys;
	int any = 0;
	sq_error e;
	sq_buf_init(&tasks);
	sq_buf_init(&keys);
	sq_arr_open(&tasks);
	sq_arr_open(&keys);
	for (size_t i = 0; i < n; i++)
		if (k->owner[v[i].partition] == o && v[i].key && !v[i].copy)
			sq_arr_str(&tasks, v[i].task), sq_arr_str(&keys, v[i].key), any = 1;
	sq_arr_close(&tasks);
	sq_arr_close(&keys);
	const char *pv[2] = {tasks.data, keys.data};
	PGresult *r = any ? shard_exec(k, o, sq_sql_check_shard_live_keys, 2, pv, &e) : NULL;
	for (int i = 0; r && i < PQntuples(r); i++)
		for (size_t j = 0; j < n; j++)
			if (v[j].key && k->owner[v[j].partition] == o &&
			    !strcmp(v[j].task, PQgetvalue(r, i, 0)) &&
			    !strcmp(v[j].key, PQgetvalue(r, i, 1)))
				finding(k, "keys", s, v[j].partition, 0,
					"keep the owner's job; see docs/operations.md, "
					"\"Restoring one shard from a backup\"",
					"type %s key \"%.200s\" is live twice: job %lld on %s "
					"(stray) "
					"and job %s on %s (the owner)",
					v[j].task, v[j].key, (long long)v[j].id, sname(k, s),
					PQgetvalue(r, i, 2), sname(k, o));
	if (r)
		PQclear(r);
	sq_buf_free(&tasks);
	sq_buf_free(&keys);
}

/* Deletes the strays that are copies of the owner's jobs; 1 if it did. */
static int delete_copies(ck *k, int s, const stray *v, size_t n)
{
	sq_buf lit;
	int any = 0;
	sq_error e;
	sq_buf_init(&lit);
	sq_arr_open(&lit);
	for (size_t i = 0; i < n; i++)
		if (v[i].copy)
			sq_arr_i64(&lit, v[i].id), any = 1;
	sq_arr_close(&lit);
	const char *pv[1] = {lit.data};
	PGresult *r = any ? shard_exec(k, s, sq_sql_check_shard_delete_copies, 1, pv, &e) : NULL;
	sq_buf_free(&lit);
	if (r)
		PQclear(r);
	return r != NULL;
}

static void report_strays(ck *k, int s, const char *parts, const stray *v, size_t n, int deleted)
{
	for (const char *line = parts; line && *line;
	     line = strchr(line, '\n'), line += line != NULL) {
		unsigned p;
		long long count, copies = 0, seen = 0;
		if (sscanf(line, "%u %lld", &p, &count) != 2)
			continue;
		for (size_t i = 0; i < n; i++)
			if (v[i].partition == p)
				seen++, copies += v[i].copy;
		int o = k->owner[p], all = deleted && copies == count;
		k->sum->stray_jobs += count;
		finding(k, "stray", s, p, all,
			all     ? "nothing: they were deleted"
			: o < 0 ? "settle the partition's owner first (the ownership finding)"
			: copies
				? "run the check with --repair: it deletes the copies; the others "
				  "exist only here (docs/operations.md, \"Restoring one shard from "
				  "a backup\")"
				: "they exist only here: see docs/operations.md, \"Restoring one "
				  "shard from a backup\"",
			"shard %s holds %lld job%s in partition %u, which %s owns; %lld of the "
			"%lld "
			"read are copies of the owner's jobs",
			sname(k, s), count, count == 1 ? "" : "s", p,
			o >= 0 ? sname(k, o) : "no single shard", copies, seen);
	}
}

static void check_strays_of(ck *k, int s)
{
	sq_buf parts;
	sq_error e;
	size_t n = 0;
	sq_buf_init(&parts);
	if (stray_partitions(k, s, &parts, &e) != SQ_OK) {
		finding(k, "reach", s, -1, 0, "run the check again once it answers",
			"shard %s: the stray jobs could not be read: %s", sname(k, s), e.msg);
		sq_buf_free(&parts);
		return;
	}
	if (!parts.len) {
		sq_buf_free(&parts);
		return;
	}
	stray *v = read_strays(k, s, parts.data, &n, &e);
	for (int o = 0; v && o < k->n; o++)
		if (o != s) {
			find_copies(k, o, v, n);
			find_shared_keys(k, s, o, v, n);
		}
	int deleted = v && k->o.repair && delete_copies(k, s, v, n);
	report_strays(k, s, parts.data, v, n, deleted);
	for (size_t i = 0; v && i < n; i++)
		free(v[i].task), free(v[i].key);
	free(v);
	sq_buf_free(&parts);
}

/* ---- the id sequence -------------------------------------------------------- */

static void check_ids(ck *k)
{
	if (k->max_block <= k->seq_given)
		return;
	int done = 0;
	if (k->o.repair) {
		char b[24];
		snprintf(b, sizeof(b), "%lld", (long long)k->max_block);
		const char *v[1] = {b};
		const char *sql[2] = {sq_sql_check_meta_lock_ids, sq_sql_check_meta_raise_ids};
		const char *const *vals[2] = {NULL, v};
		int np[2] = {0, 1};
		sq_error e;
		done = in_tx(&k->c->meta, 2, sql, np, vals, &e) == SQ_OK;
	}
	finding(k, "ids", k->max_block_shard, -1, done,
		done ? "nothing: new blocks come after it"
		     : "run the check with --repair: it raises the sequence past the shards' ids",
		"shard %s holds job ids of block %lld, but the meta database's id sequence has "
		"given out only up to block %lld (was the meta database restored from a "
		"backup?): new jobs could be given ids already in use",
		sname(k, k->max_block_shard), (long long)k->max_block, (long long)k->seq_given);
}

/* ---- the whole check -------------------------------------------------------- */

static sq_status check_alloc(ck *k)
{
	k->up = calloc((size_t)k->n, sizeof(int));
	k->state = calloc((size_t)k->n * k->P, 1);
	k->map = calloc(k->P, sizeof(int));
	k->owner = calloc(k->P, sizeof(int));
	k->held = calloc(k->P, sizeof(int));
	return k->up && k->state && k->map && k->owner && k->held ? SQ_OK : SQ_ENOMEM;
}

static void check_free(ck *k)
{
	free(k->up);
	free(k->state);
	free(k->map);
	free(k->owner);
	free(k->held);
	free(k->moves);
}

static void check_shards(ck *k)
{
	k->all_up = 1;
	for (int s = 0; s < k->n; s++) {
		check_shard_head(k, s);
		if (k->up[s])
			read_markers(k, s);
		k->all_up &= k->up[s];
		progress(k, "shards", s + 1, k->n);
	}
}

sq_status sq_check(sq_client *c, const sq_check_opts *o, sq_check_summary *out, sq_error *err)
{
	sq_check_summary local;
	ck k;
	sq_status st;
	memset(&k, 0, sizeof(k));
	k.c = c;
	k.sum = out ? out : &local;
	memset(k.sum, 0, sizeof(*k.sum));
	if (o)
		k.o = *o;
	else
		sq_check_opts_init(&k.o);
	k.P = c->cfg->partitions;
	k.n = c->nshards;
	if (check_alloc(&k) != SQ_OK) {
		check_free(&k);
		return sq_err(err, SQ_ENOMEM, "out of memory");
	}
	if ((st = read_meta_head(&k, err)) || (st = read_map(&k, err)) ||
	    (st = read_open_moves(&k, err)))
		goto out;
	progress(&k, "meta", 1, 1);
	check_shards(&k);
	if (k.all_up) {
		check_partitions(&k);
		for (int s = 0; s < k.n; s++) {
			check_strays_of(&k, s);
			progress(&k, "stray jobs", s + 1, k.n);
		}
	}
	check_locks(&k);
	check_ids(&k);
out:
	check_free(&k);
	return st;
}

/* schema.h - embedded SQL migrations and cluster initialisation. */
#ifndef SQ_SCHEMA_H
#define SQ_SCHEMA_H

/* The advisory-lock keys (two int4) of the partition gate and of init.
 * The statements under sql/queries/ spell these numbers out (gate_shared,
 * move_gate_exclusive, move_lock, limit_lock, maintain_lock): change them
 * together. */
#define SQ_GATE_KEY "1397837137, 1"
#define SQ_INIT_KEY "1397837137, 2"
/* History maintenance (sq_maintain): one runner per shard, session level. */
#define SQ_MAINTAIN_KEY "1397837137, 3"
/* A move's driver lock: (this, move id). */
#define SQ_MOVE_KEY "1397837138"
/* A limited type's claims on one shard: (this, hashtext(type)). */
#define SQ_LIMIT_KEY "1397837139"
/* The rows of one type, as jobs_ready and jobs_lease find them (schema
 * version 7): they lead with hashtext(task), and the second condition
 * drops another type whose name hashes alike. `col` and `type` are SQL. */
#define SQ_TASK_IS(col, type) "hashtext(" col ") = hashtext(" type ") AND " col " = " type

struct sq_migration {
	int version;
	const char *name;
	const char *sql;
};

/* The oldest shard schema this build runs on. Version 7 only changed how
 * two indexes lead (hashtext(task)), and this build's statements use either
 * form, so workers can be rolled to it before `shardq init` applies 7: a
 * worker of an older release on version 7 would claim by reading all of a
 * shard's ready jobs (docs/operations.md, "Upgrading"). */
#define SQ_SHARD_SCHEMA_MIN 6
/* How far past its own last migration a build runs: one. Every migration
 * keeps the release before it working (tests/test_upgrade.c runs that
 * release's programs while this build's `shardq init` migrates); nothing
 * promises the release two before. The mover alone needs its own version
 * (its markers and steps are its release's). */
#define SQ_SHARD_SCHEMA_AHEAD 1
extern const struct sq_migration sq_shard_migrations[];
extern const int sq_shard_migration_count;
/* The newest shard schema: this build's last migration's version (inline:
 * the migrations are a leaf, schema.c is not). */
static inline int sq_shard_schema_newest(void)
{
	return sq_shard_migrations[sq_shard_migration_count - 1].version;
}
extern const struct sq_migration sq_meta_migrations[];
extern const int sq_meta_migration_count;

#endif

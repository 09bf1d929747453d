-- Shard schema, version 1: the hot job table, the partition markers that
-- make every shard the authority on what it owns, and the history table.
CREATE SCHEMA IF NOT EXISTS shardq;

CREATE TYPE shardq.job_status AS ENUM
    ('ready', 'starting', 'running', 'completed', 'failed', 'cancelled');
CREATE TYPE shardq.part_state AS ENUM
    ('owned', 'importing', 'moving_out', 'gone');

-- Who this database is: written once by init, checked on every init.
CREATE TABLE shardq.node (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    shard_id    text    NOT NULL,
    partitions  integer NOT NULL,
    cluster_id  text    NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per partition this shard knows. Writes that name a partition take
-- the gate (an advisory lock) shared in one statement and check this marker
-- in a later one; the mover takes the gate exclusive to change it.
CREATE TABLE shardq.partition_state (
    partition   integer PRIMARY KEY,
    state       shardq.part_state NOT NULL,
    epoch       bigint  NOT NULL DEFAULT 0,
    move_id     bigint,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- Normally empty: lets the claim skip moving partitions at no cost.
CREATE INDEX partition_state_not_owned ON shardq.partition_state (partition)
    WHERE state <> 'owned';

-- Live work. The id is global (allocated from the meta database in blocks)
-- and its low 16 bits are the partition, so a handle routes without lookup.
CREATE TABLE shardq.jobs (
    id                          bigint  PRIMARY KEY,
    partition                   integer NOT NULL,
    task                        text    NOT NULL,
    status                      shardq.job_status NOT NULL DEFAULT 'ready',
    priority                    integer NOT NULL DEFAULT 0,
    schedule_time               timestamptz NOT NULL DEFAULT now(),
    delay_tolerance_time        timestamptz,
    expected_status_change_time timestamptz,
    attempt                     integer NOT NULL DEFAULT 0,
    max_attempts                integer NOT NULL DEFAULT 1,
    worker                      text,
    active_uid                  text,
    dedup_policy                "char"  NOT NULL DEFAULT 'i',
    params                      jsonb   NOT NULL DEFAULT '{}',
    rerun_params                jsonb,
    last_error                  text,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 80,
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_insert_scale_factor = 0.02,
        autovacuum_analyze_scale_factor = 0.02,
        autovacuum_vacuum_cost_delay = 0);

-- The claim: ready jobs of one type in the documented order.
CREATE INDEX jobs_ready ON shardq.jobs
    (task, priority DESC, (COALESCE(delay_tolerance_time, schedule_time)), id)
    WHERE status = 'ready';
-- The claim of expired leases.
CREATE INDEX jobs_lease ON shardq.jobs (task, expected_status_change_time)
    WHERE status IN ('starting', 'running');
-- Dedup among live jobs; the key decides the partition, so this holds
-- across all shards.
CREATE UNIQUE INDEX jobs_active_uid ON shardq.jobs (task, active_uid)
    WHERE status IN ('ready', 'starting', 'running') AND active_uid IS NOT NULL;
-- Moves copy and delete by partition.
CREATE INDEX jobs_partition ON shardq.jobs (partition);

-- Finished jobs of types that keep history.
CREATE TABLE shardq.jobs_history (
    id            bigint  NOT NULL,
    partition     integer NOT NULL,
    task          text    NOT NULL,
    status        shardq.job_status NOT NULL,
    attempt       integer NOT NULL,
    worker        text,
    active_uid    text,
    params        jsonb   NOT NULL,
    last_error    text,
    created_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_history_id ON shardq.jobs_history (id);

-- Raises SQM01 (moving) or SQM02 (moved) unless every partition given is
-- owned here. Called in its own statement after the gate is held.
CREATE FUNCTION shardq.check_owned(parts integer[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    bad integer;
    st  shardq.part_state;
BEGIN
    SELECT p, ps.state INTO bad, st
      FROM unnest(parts) AS p
      LEFT JOIN shardq.partition_state ps ON ps.partition = p
     WHERE ps.state IS DISTINCT FROM 'owned'
     LIMIT 1;
    IF FOUND THEN
        IF st = 'moving_out' OR st = 'importing' THEN
            RAISE EXCEPTION 'partition % is moving', bad
                USING ERRCODE = 'SQM01', DETAIL = bad::text;
        END IF;
        RAISE EXCEPTION 'partition % is not owned by this shard', bad
            USING ERRCODE = 'SQM02', DETAIL = bad::text;
    END IF;
END
$fn$;

-- Meta schema, version 1: the cluster, its shards, the authoritative
-- partition map with its version, and the job id allocator.
CREATE SCHEMA IF NOT EXISTS shardq_meta;

CREATE TABLE shardq_meta.cluster (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    cluster_id   text    NOT NULL,
    partitions   integer NOT NULL,
    map_version  bigint  NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Stable shard ids: placement hashes these, never config order.
CREATE TABLE shardq_meta.shards (
    shard_id   text PRIMARY KEY,
    weight     double precision NOT NULL DEFAULT 1,
    added_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shardq_meta.partition_map (
    partition  integer PRIMARY KEY,
    shard_id   text NOT NULL REFERENCES shardq_meta.shards (shard_id)
);

-- Job ids: each client takes a block of 65536 ids at a time.
CREATE SEQUENCE shardq_meta.id_block START 1;

-- Moves (filled by the mover; created now so the schema is complete).
CREATE TABLE shardq_meta.moves (
    move_id     bigserial PRIMARY KEY,
    partitions  integer[] NOT NULL,
    from_shard  text NOT NULL,
    to_shard    text NOT NULL,
    step        text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    error       text
);

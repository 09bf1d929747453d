-- Shard schema, version 5: per-type limits across the fleet. Each shard
-- keeps its share of a type's `rate` as a token bucket here; `max_running`
-- needs no table (the claim counts the type's starting and running rows).
-- A claim of a limited type takes an advisory lock per type first, so the
-- bucket and the count it reads are never stale.
CREATE TABLE shardq.rate_bucket (
    task    text PRIMARY KEY,
    tokens  double precision NOT NULL,
    at      timestamptz NOT NULL
);

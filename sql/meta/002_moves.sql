-- Meta schema, version 2: what the mover needs to be resumable and to keep
-- one mover per partition.

-- A partition in an unfinished move; the primary key is the "one mover per
-- partition" rule. Rows go when the move is done or aborted.
CREATE TABLE shardq_meta.move_lock (
    partition  integer PRIMARY KEY,
    move_id    bigint NOT NULL REFERENCES shardq_meta.moves (move_id)
);

ALTER TABLE shardq_meta.moves
    ADD COLUMN rows_copied bigint,
    ADD COLUMN stall_ms    double precision,
    ADD COLUMN switched_at timestamptz;

CREATE INDEX moves_unfinished ON shardq_meta.moves (move_id)
    WHERE finished_at IS NULL;

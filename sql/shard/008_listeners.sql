-- Shard schema, version 8: the workers that listen for this shard's
-- NOTIFYs, so that a batch wakes as many of them as it needs instead of
-- all of them (docs/worker.md, "Which workers a NOTIFY wakes").
--
-- Each worker's LISTEN connection writes its row every few seconds: its
-- backend's pid, and per task type it runs, the type's hash and how many
-- jobs of it the worker would take when idle. It reads the fresh rows in
-- the same statement, and removes the ones nobody has written for a
-- while (a worker that died). A NOTIFY's payload then ranks the
-- listeners the same way in every worker, and only the first few claim.
--
-- UNLOGGED: the rows are rewritten every few seconds, so nothing of value
-- is lost when a crash empties the table; a worker missing from it is
-- woken by every NOTIFY, as before this version. A shard still at version
-- 7 has no table: its workers are woken by every NOTIFY.
CREATE UNLOGGED TABLE shardq.listeners (
    pid integer PRIMARY KEY,
    types text NOT NULL,
    seen timestamptz NOT NULL
);

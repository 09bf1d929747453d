-- Meta schema, version 3: periodic jobs ([schedule NAME] sections).
-- One row per schedule. last_slot is the latest slot a scheduler claimed
-- (or skipped, or the baseline taken when the schedule was first seen); a
-- slot is claimed by a compare-and-set that moves it forward, so exactly one
-- scheduler wins each slot. lease_until is set while the winner's enqueue is
-- not yet confirmed: once it has passed, another scheduler takes the claim
-- over and enqueues the same slot (same key) again.
CREATE TABLE shardq_meta.schedules (
    name          text PRIMARY KEY,
    last_slot     timestamptz NOT NULL,
    claimed_by    text,
    lease_until   timestamptz,
    enqueued_slot timestamptz,
    job_id        bigint,
    enqueues      bigint NOT NULL DEFAULT 0,
    retries       bigint NOT NULL DEFAULT 0,
    skipped       bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- claim.sql: the multi-type claim (src/claim.c), one statement per shard.
-- Named queries: claim, claim_limited, limit_lock, and the fragments
-- claim_body and job_columns_bin that the two claims share.
--
-- Per type: expired leases first (a dead worker's jobs come back), then due
-- ready jobs in priority / delay-tolerance order; at most lim in all. Both
-- arms are index scans (jobs_lease, jobs_ready) and skip partitions that
-- are not owned here (normally none). A type's rows are found by
-- hashtext(task) = hashtext(type) AND task = type: the two indexes lead
-- with hashtext(task) (shard schema 7), and the second condition drops
-- another type whose name hashes alike.
--
-- The claim runs the plan made once per session (plan_cache_mode
-- force_generic_plan, set by the C code before it): it is index-driven in
-- any plan, and a custom plan per call cost more to make than most claims
-- cost to run.

-- name: claim
-- Claims jobs of several types at once.
-- $1 text[]   the types
-- $2 int[]    per type: how many jobs at most (lim)
-- $3 bigint[] per type: the starting lease in ms
-- $4 text     the worker id
-- $5 int[]    per type: how many of them go straight to `running` (start)
-- $6..$9      per type: the claim's cursor (claim_cursor_key)
-- Returns the claimed jobs, columns as job_columns_bin, in binary format,
-- then a cursor row per type (claim_cursor_rows).
-- Indexes: jobs_lease and jobs_ready per type, jobs_pkey per picked row,
-- partition_state_not_owned once.
WITH t AS (
  SELECT t.*, t.lim AS rlim, {{claim_cursor_key}}
    FROM unnest($1::text[], $2::int[], $3::bigint[], $5::int[],
                $6::bool[], $7::int[], $8::bigint[], $9::bigint[])
           AS t(task, lim, lease_ms, start, full_scan, cur_p, cur_us, cur_id)
), {{claim_body}}
SELECT {{job_columns_bin}} FROM upd j WHERE j.status IN ('starting', 'running')
UNION ALL {{claim_cursor_rows}}

-- name: claim_limited
-- A claim with a type that has `rate` or `max_running`. $1..$5 as claim;
-- this shard's shares, per type (-1: none):
-- $6 int[]    max_running
-- $7 float8[] rate per second
-- $8 float8[] bucket size
-- $9..$12     per type: the claim's cursor (claim_cursor_key)
-- The lock statement before it (limit_lock) serialises the limited claims
-- of a type on this shard, so what this statement reads (its snapshot
-- starts after the lock is held) is never stale: the count of the type's
-- starting and running rows (jobs_lease), of them the ones whose lease ran
-- out, and its token bucket (rate_bucket's key). The ready jobs get the
-- places left (rlim); the expired leases may be taken back beyond them
-- (lim), as a job taken back holds the place it held: a type whose workers
-- all died at its limit is taken up again, and the limit still holds,
-- also against a start or heartbeat that comes late (a row whose lease ran
-- out still counts). The bucket fills at the rate since its last claim, up to its size,
-- and loses one token per job handed out; it starts empty.
-- Indexes: as claim, and jobs_lease for the count.
WITH t0 AS (
  SELECT t.*, {{claim_cursor_key}} FROM unnest($1::text[], $2::int[], $3::bigint[], $5::int[],
                       $6::int[], $7::float8[], $8::float8[],
                       $9::bool[], $10::int[], $11::bigint[], $12::bigint[])
           AS t(task, lim, lease_ms, start, maxrun, rate, burst,
                full_scan, cur_p, cur_us, cur_id)
), t1 AS (
  SELECT t0.*,
    CASE WHEN t0.rate < 0 THEN NULL ELSE least(t0.burst, COALESCE(rb.tokens
      + extract(epoch FROM now() - rb.at) * t0.rate, 0)) END AS avail,
    CASE WHEN t0.maxrun < 0 THEN NULL ELSE b.busy END AS busy,
    CASE WHEN t0.maxrun < 0 THEN 0 ELSE b.stale END AS stale
    FROM t0 LEFT JOIN shardq.rate_bucket rb ON rb.task = t0.task
    -- one read of jobs_lease for both counts (and none without max_running)
    CROSS JOIN LATERAL (SELECT count(*) AS busy,
        count(*) FILTER (WHERE j.expected_status_change_time < now()) AS stale
      FROM shardq.jobs j
      WHERE t0.maxrun >= 0
        AND hashtext(j.task) = hashtext(t0.task) AND j.task = t0.task
        AND j.status IN ('starting', 'running')) b
), t2 AS (
  SELECT t1.*,
    greatest(0, least(t1.lim,
      COALESCE(t1.maxrun - t1.busy, t1.lim),
      COALESCE(floor(t1.avail)::int, t1.lim)))::int AS rlim
    FROM t1
), t AS (
  SELECT t2.task, t2.lease_ms, t2.start, t2.avail,
    t2.full_scan, t2.cur_p, t2.cur_key, t2.cur_id, t2.rlim,
    greatest(0, least(t2.lim, t2.rlim + t2.stale,
      COALESCE(floor(t2.avail)::int, t2.lim)))::int AS lim
    FROM t2
), {{claim_body}}, bucket AS (
  INSERT INTO shardq.rate_bucket AS rb (task, tokens, at)
  SELECT t.task, t.avail - (SELECT count(*) FROM upd u WHERE u.task = t.task
                              AND u.status IN ('starting', 'running')), now()
    FROM t WHERE t.avail IS NOT NULL
  ON CONFLICT (task) DO UPDATE SET tokens = EXCLUDED.tokens, at = EXCLUDED.at
)
SELECT {{job_columns_bin}} FROM upd j WHERE j.status IN ('starting', 'running')
UNION ALL {{claim_cursor_rows}}

-- name: limit_lock
-- Before a limited claim, in the same transaction: one lock per limited
-- type, in one order (no deadlock between two claims), after the gate.
-- The key is (1397837139, hashtext(type)) (SQ_LIMIT_KEY in src/schema.h).
-- $1 text[]   the limited types
-- Indexes: none (no table).
SELECT pg_advisory_xact_lock(1397837139, q.k) FROM (
  SELECT DISTINCT hashtext(x) AS k FROM unnest($1::text[]) AS x ORDER BY 1) q

-- name: claim_body
-- Fragment: the claim's arms and its updates, shared by claim and
-- claim_limited; `t` holds (task, lim, rlim, lease_ms, start: lim in all,
-- of which at most rlim ready jobs) and $4 is the
-- worker.
--
-- The ready jobs are taken priority by priority, highest first: a
-- recursive step finds the next priority that has ready jobs (one descent
-- of jobs_ready each; there are few priorities), and within it come first
-- the jobs whose order key is past (jobs_ready up to now: a range that
-- ends at the first job not yet due), then the due jobs whose tolerance
-- runs past now (jobs_tolerant, which skips a job not yet due on the index
-- tuple). So a claim never reads the jobs scheduled for later, however
-- many there are: one ordered scan of jobs_ready with a filter on
-- schedule_time read every one of them whenever the type had fewer due
-- jobs than the claim asked for. Every job due now is in one arm: its
-- order key is at least its schedule (the tolerance is positive).
--
-- A picked row is in a partition owned here. Normally every partition is:
-- the first NOT EXISTS is one probe of the empty index
-- partition_state_not_owned for the whole statement (an InitPlan), and the
-- per-row probe runs only while one is not (a move under way). Both are
-- filters of the arm's index scan, so no join sits under its FOR UPDATE:
-- an anti join under the lock cost the claim 15-32% more statement time
-- per job.
--
-- The updates find the picked rows by `j.id = ANY (ARRAY(...))`, which only
-- jobs_pkey serves, and join nothing: whatever the plan (one made once for
-- all values, or on an analyzed empty table), each picked row is one index
-- probe. A join on the ids could become a merge join that reads jobs_pkey
-- from its lowest id, or a nested loop that reads every picked row for
-- each one. Two updates of one statement (disjoint rows): the jobs that go
-- straight to `running` (the first `start` of their type) and the others,
-- so that no value of a picked row is needed. A job from the lease arm is
-- one not `ready` (it is locked since it was picked), and the lease is its
-- type's, from `t`.
--
-- A lease that expired on the last try (status not ready, tries used up:
-- "spent" below): the job killed or hung every worker that took it. It is
-- failed (or, with a rerun pending, made ready with the rerun's params and
-- a fresh budget), not handed out forever.
--
-- Every claimed job gets the type's starting lease, also the ones that
-- come back `running` (start): if this answer never reaches the worker (a
-- dropped connection, a shard's part skipped), they come back to another
-- worker within the starting timeout, not the execution timeout. The
-- worker that has them extends the lease to the execution lease by
-- heartbeat before the starting lease runs out (docs/worker.md).
picked AS (
  SELECT c.id, c.rn, t.start, t.task, c.arm, c.prio, c.okey FROM t CROSS JOIN LATERAL (
    SELECT u.id, u.arm, u.prio, u.okey, row_number() OVER () AS rn FROM (
      SELECT e.id, 0 AS arm, 0 AS prio, NULL::timestamptz AS okey FROM (
        SELECT j.id FROM shardq.jobs j
         WHERE t.full_scan
           AND hashtext(j.task) = hashtext(t.task) AND j.task = t.task
           AND j.status IN ('starting', 'running')
           AND j.expected_status_change_time < now()
           AND {{claim_owned}}
         ORDER BY j.expected_status_change_time
         LIMIT t.lim FOR UPDATE SKIP LOCKED) e
      UNION ALL
      SELECT r.id, r.arm, r.prio, r.okey FROM (
        WITH RECURSIVE pr(p) AS (
          SELECT CASE WHEN t.full_scan THEN
            (SELECT j.priority FROM shardq.jobs j
              WHERE hashtext(j.task) = hashtext(t.task) AND j.task = t.task
                AND j.status = 'ready'
              ORDER BY j.priority DESC LIMIT 1)
            ELSE t.cur_p END
          UNION ALL
          SELECT (SELECT j.priority FROM shardq.jobs j
                   WHERE hashtext(j.task) = hashtext(t.task) AND j.task = t.task
                     AND j.status = 'ready'
                     AND j.priority < pr.p
                   ORDER BY j.priority DESC LIMIT 1)
            FROM pr WHERE pr.p IS NOT NULL
        )
        SELECT a.id, a.arm, pr.p AS prio, a.okey FROM pr CROSS JOIN LATERAL (
          SELECT d.id, 1 AS arm, d.okey FROM (
            SELECT j.id, COALESCE(j.delay_tolerance_time, j.schedule_time) AS okey
              FROM shardq.jobs j
             WHERE hashtext(j.task) = hashtext(t.task) AND j.task = t.task
               AND j.status = 'ready' AND j.priority = pr.p
               AND COALESCE(j.delay_tolerance_time, j.schedule_time) <= now()
               AND (COALESCE(j.delay_tolerance_time, j.schedule_time), j.id)
                   > (CASE WHEN NOT t.full_scan AND pr.p = t.cur_p
                           THEN t.cur_key ELSE '-infinity' END,
                      CASE WHEN NOT t.full_scan AND pr.p = t.cur_p
                           THEN t.cur_id ELSE 0 END)
               AND j.schedule_time <= now()
               AND {{claim_owned}}
             ORDER BY COALESCE(j.delay_tolerance_time, j.schedule_time), j.id
             LIMIT t.rlim FOR UPDATE SKIP LOCKED) d
          UNION ALL
          SELECT l.id, 2 AS arm, NULL::timestamptz AS okey FROM (
            SELECT j.id FROM shardq.jobs j
             WHERE hashtext(j.task) = hashtext(t.task) AND j.task = t.task
               AND j.status = 'ready' AND j.priority = pr.p
               AND j.delay_tolerance_time IS NOT NULL AND j.delay_tolerance_time > now()
               AND j.schedule_time <= now()
               AND {{claim_owned}}
             ORDER BY j.delay_tolerance_time, j.id
             LIMIT t.rlim FOR UPDATE SKIP LOCKED) l
        ) a WHERE pr.p IS NOT NULL
      ) r
    ) u LIMIT t.lim
  ) c
), upd_run AS (
  UPDATE shardq.jobs j SET
    status = (CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NULL THEN 'failed'
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN 'ready'
        ELSE 'running' END)::shardq.job_status,
{{claim_update_set}}
  WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p WHERE p.rn <= p.start))
  RETURNING j.*
), upd_start AS (
  UPDATE shardq.jobs j SET
    status = (CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NULL THEN 'failed'
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN 'ready'
        ELSE 'starting' END)::shardq.job_status,
{{claim_update_set}}
  WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p WHERE p.rn > p.start))
  RETURNING j.*
), upd AS (
  SELECT * FROM upd_run UNION ALL SELECT * FROM upd_start
)

-- name: claim_cursor_key
-- Fragment: the claim's cursor, per type, and its order key as a
-- timestamptz (exact: the µs count is below 2^53, and interval * float8
-- rounds to the µs).
--
-- Beside a transaction left open on a shard (issue 43; docs/operations.md,
-- "A transaction left open"), the rows that claims and completions leave
-- behind cannot be removed, and their entries stay at the front of
-- jobs_ready and jobs_lease: a claim that reads from the front steps over
-- every one of them (77 ms for a claim of 1,000 jobs of three types after
-- 250,000 jobs). So a client remembers, per shard and type, where its last
-- claim's due arm stopped (the last job it took there: priority, order
-- key, id), and the next claim reads from there:
--   full_scan  false: the due arm of the cursor's priority starts after the
--              cursor (an index bound: ROW(order key, id) > the cursor),
--              lower priorities are found as always, and neither the
--              expired leases nor a priority above the cursor's are read;
--              true: the claim as it always was, from the front.
--   cur_p      the cursor's priority (any value when full_scan)
--   cur_us     its order key, in µs since 2000-01-01 (PostgreSQL's epoch)
--   cur_id     its job id
-- A job behind the cursor (released, moved in, scheduled in the past, or
-- skipped while another claim held its lock), an expired lease and a
-- priority above the cursor's are found by the next full claim: a client
-- makes one per shard and type at least once a second (longer when full
-- claims are slow: ten times the last one's time), at once after a release
-- on the shard by any client of its process, and after the map changed
-- (src/claim.c). A failed job's retry is after the cursor: its order key
-- is its new schedule.
(timestamptz '2000-01-01 00:00:00+00' + t.cur_us * interval '1 microsecond') AS cur_key

-- name: claim_cursor_rows
-- Fragment: after the jobs, one row per type whose due arm took a job: the
-- last one it took (the lowest priority, then the greatest order key and
-- id), in job_columns_bin's columns, marked by a negative id (-id) and the
-- status 'cursor': its priority, and its order key as the schedule_time.
SELECT -x.id, 0, 0, 0, x.prio, 'cursor'::text, x.task, NULL::text, NULL::text, x.okey,
       NULL::timestamptz, NULL::timestamptz, x.okey
  FROM (SELECT DISTINCT ON (p.task) p.task, p.prio, p.okey, p.id FROM picked p
         WHERE p.arm = 1 ORDER BY p.task, p.prio, p.okey DESC, p.id DESC) x

-- name: claim_owned
-- Fragment: the picked row j is in a partition owned here (see claim_body).
(NOT EXISTS (SELECT 1 FROM shardq.partition_state ps0 WHERE ps0.state <> 'owned')
 OR NOT EXISTS (SELECT 1 FROM shardq.partition_state ps
                 WHERE ps.partition = j.partition AND ps.state <> 'owned'))

-- name: claim_update_set
-- Fragment: what both of the claim's updates set besides the status (the
-- runs' `running` and the others' `starting`): the next try under this
-- worker with the type's starting lease; or, for a lease that expired on
-- the last try, the job failed (or, with a rerun pending, made ready with
-- the rerun's params and a fresh budget) instead of handed out again.
    worker = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NULL THEN j.worker
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN NULL
        ELSE $4 END,
    attempt = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN j.attempt
        ELSE j.attempt + 1 END,
    attempt_base = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NOT NULL THEN j.attempt
        ELSE j.attempt_base END,
    params = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NOT NULL THEN j.rerun_params
        ELSE j.params END,
    rerun_params = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN NULL
        ELSE j.rerun_params END,
    schedule_time = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
         AND j.rerun_params IS NOT NULL THEN now()
        ELSE j.schedule_time END,
    expected_status_change_time = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts) THEN NULL
        ELSE now() + (SELECT tl.lease_ms FROM t tl WHERE tl.task = j.task LIMIT 1)
                     * interval '1 millisecond' END,
    last_error = CASE
        WHEN (j.status <> 'ready' AND j.attempt - j.attempt_base >= j.max_attempts)
        THEN format('the lease of try %s of %s expired (worker %s died or hung)',
                    j.attempt - j.attempt_base, j.max_attempts, j.worker)
        ELSE j.last_error END,
    updated_at = now()

-- name: job_columns_bin
-- Fragment: the claim's columns, for results in binary format (checked and
-- read by src/jobrow.c, sq_jobrow_check_bin, in this order): the stored
-- values as they are, with no text to make on the shard and none to parse
-- in the client (a session formatted 1,000 rows of the text columns that
-- the lookups use in 2.2 ms, of these in 1.3 ms), and no worker, which is
-- the claimer's own id.
j.id, j.attempt, (j.attempt - j.attempt_base), j.max_attempts, j.priority,
j.status::text, j.task, j.active_uid, j.params::text, j.schedule_time,
j.delay_tolerance_time, j.expected_status_change_time, j.created_at

-- enqueue.sql: the batched enqueue (src/enqueue.c): one INSERT .. ON
-- CONFLICT per shard and round, after the gate and the check of the
-- partitions' ownership, then a NOTIFY; and the two questions asked after a
-- connection broke with a part of the batch sent.
--
-- The rows come as one array per column, in this order:
-- $1 bigint[] id            $7 bigint[]  run at, microseconds since the
-- $2 int[]    partition                    epoch (0: not set)
-- $3 text[]   task type     $8 bigint[]  delay in ms
-- $4 text[]   key           $9 bigint[]  delay tolerance in ms (0: none)
-- $5 text[]   params        $10 int[]    max attempts
-- $6 int[]    priority      $11 text[]   dedup policy: i ignore, r replace,
--                                        m merge, R rerun (docs/design.md)
--
-- A column whose value every row of the statement shares is sent once, as a
-- one-element array: unnest pads it with NULLs, which read as the first
-- row's value (the COALESCE of enqueue_input). Parsing the arrays was about
-- a quarter of the insert's time on the shard, and most batches share all
-- but the ids and the params. The id and the params are always sent whole,
-- and the keys whole or as an empty array (no row has one): a NULL key is a
-- value, not "the same as the first".

-- name: enqueue
-- A round with keys: each key at most once (a key seen again in the batch
-- goes to the next round), its dedup policy applied by the ON CONFLICT on
-- jobs_active_uid.
-- Returns per input row (ord, the job's id, what happened: i inserted,
-- u updated while ready, R rerun pending on a live job, d a live
-- duplicate left as it was). A duplicate that finished between the insert
-- and its lookup has no id (NULL): the client sends it again.
-- Indexes: jobs_pkey (insert), jobs_active_uid (conflict, and the lookup
-- of a duplicate).
WITH rows AS (
  SELECT {{enqueue_input}}, u.ord
    FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::int[],
                $7::bigint[], $8::bigint[], $9::bigint[], $10::int[], $11::text[])
         WITH ORDINALITY
         AS u(id, part, task, uid, params, prio, at_us, delay_ms, tol_ms, maxa, pol, ord)
), input AS (
  SELECT r.*, CASE WHEN r.at_us <> 0 THEN to_timestamp(r.at_us / 1000000.0)
              ELSE now() + r.delay_ms * interval '1 millisecond' END AS st
    FROM rows r
), ins AS (
  INSERT INTO shardq.jobs AS j (id, partition, task, active_uid, params, priority,
         schedule_time, delay_tolerance_time, max_attempts, dedup_policy)
  SELECT id, part, task, uid, params::jsonb, prio, st,
         CASE WHEN tol_ms > 0 THEN st + tol_ms * interval '1 millisecond' END, maxa,
         pol::"char"
    FROM input
  ON CONFLICT (task, active_uid)
     WHERE status IN ('ready', 'starting', 'running') AND active_uid IS NOT NULL
  DO UPDATE SET
    params = CASE WHEN j.status <> 'ready' THEN j.params
                  WHEN EXCLUDED.dedup_policy = 'm' THEN j.params || EXCLUDED.params
                  ELSE EXCLUDED.params END,
    priority = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'
                    THEN EXCLUDED.priority ELSE j.priority END,
    schedule_time = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'
                    THEN EXCLUDED.schedule_time ELSE j.schedule_time END,
    delay_tolerance_time = CASE WHEN j.status = 'ready' AND EXCLUDED.dedup_policy = 'r'
                    THEN EXCLUDED.delay_tolerance_time ELSE j.delay_tolerance_time END,
    rerun_params = CASE WHEN j.status <> 'ready' THEN EXCLUDED.params
                        ELSE j.rerun_params END,
    updated_at = now()
  WHERE (j.status = 'ready' AND EXCLUDED.dedup_policy IN ('r', 'm', 'R'))
     OR (j.status IN ('starting', 'running') AND EXCLUDED.dedup_policy = 'R')
  RETURNING j.id, j.task, j.active_uid, (j.xmax = 0) AS inserted, j.status
)
SELECT i.ord, COALESCE(a.id, b.id, d.id),
       CASE WHEN a.id IS NOT NULL THEN 'i'
            WHEN b.id IS NOT NULL THEN CASE WHEN b.status = 'ready' THEN 'u' ELSE 'R' END
            WHEN d.id IS NOT NULL THEN 'd' END
  FROM input i
  LEFT JOIN ins a ON a.inserted AND a.id = i.id
  LEFT JOIN ins b ON NOT b.inserted AND b.task = i.task AND b.active_uid = i.uid
  LEFT JOIN LATERAL (SELECT x.id FROM shardq.jobs x
                      WHERE a.id IS NULL AND b.id IS NULL AND x.task = i.task
                        AND x.active_uid = i.uid
                        AND x.status IN ('ready', 'starting', 'running')) d ON true

-- name: enqueue_keyless
-- A round of keyless rows only: nothing can conflict (every id is new), so
-- a plain insert; every row is written with the id it was sent with, and
-- nothing comes back. Parameters as enqueue ($4, the keys, empty).
-- Index: jobs_pkey.
INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time,
       delay_tolerance_time, max_attempts, dedup_policy)
SELECT u.id, u.part, u.task, u.params::jsonb, u.prio, s.st,
       CASE WHEN u.tol_ms > 0 THEN s.st + u.tol_ms * interval '1 millisecond' END,
       u.maxa, u.pol::"char"
  FROM (SELECT {{enqueue_input}}
          FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::int[],
                      $7::bigint[], $8::bigint[], $9::bigint[], $10::int[], $11::text[])
               AS u(id, part, task, uid, params, prio, at_us, delay_ms, tol_ms, maxa, pol)) u
  CROSS JOIN LATERAL (SELECT CASE WHEN u.at_us <> 0
         THEN to_timestamp(u.at_us / 1000000.0)
         ELSE now() + u.delay_ms * interval '1 millisecond' END AS st) s

-- name: enqueue_input
-- Fragment: the columns of the unnested input `u`, each sent-once column
-- read as the first row's value where unnest padded it with NULL.
u.id,
 COALESCE(u.part, ($2::int[])[1]) AS part,
 COALESCE(u.task, ($3::text[])[1]) AS task,
 u.uid, u.params,
 COALESCE(u.prio, ($6::int[])[1]) AS prio,
 COALESCE(u.at_us, ($7::bigint[])[1]) AS at_us,
 COALESCE(u.delay_ms, ($8::bigint[])[1]) AS delay_ms,
 COALESCE(u.tol_ms, ($9::bigint[])[1]) AS tol_ms,
 COALESCE(u.maxa, ($10::int[])[1]) AS maxa,
 COALESCE(u.pol, ($11::text[])[1]) AS pol

-- name: enqueue_notify
-- Wakes idle workers that LISTEN; once per batch per shard, after its
-- rounds. The payload says which of them claim (src/client.c,
-- wake_is_ours; made by wake_payload in src/enqueue.c).
-- $1 text     the payload
SELECT pg_notify('shardq_jobs', $1)

-- name: end_session
-- After a lost connection: ends the old session (if it still runs) and
-- waits for it, so its transaction can no longer commit.
-- $1 int      the old backend's pid
-- $2 bigint   how long to wait for it to end, in ms
-- Returns how many sessions did not end (0 or 1).
SELECT count(*) FILTER (WHERE NOT pg_terminate_backend(pid, $2::bigint))
  FROM pg_stat_activity
 WHERE pid = $1::int AND pid <> pg_backend_pid() AND datname = current_database()

-- name: rows_there
-- ... then which of the rows it sent are there, live or finished.
-- $1 bigint[] the ids sent
-- Returns the ordinals (into $1) of those found.
-- Indexes: jobs_pkey, jobs_history_id.
SELECT u.ord FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)
 WHERE EXISTS (SELECT 1 FROM shardq.jobs j WHERE j.id = u.id)
    OR EXISTS (SELECT 1 FROM shardq.jobs_history h WHERE h.id = u.id)

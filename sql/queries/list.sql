-- list.sql: finding jobs (src/list.c, sq_jobs_list; `shardq jobs`,
-- GET /v1/jobs): one type's jobs in one live status, a page at a time, on
-- one shard, each status by the index that already holds it in an order of
-- its own, after a keyset cursor (never OFFSET). The client merges the
-- shards' pages in the same order. Each returns job_columns and then the
-- row's cursor key as text ("a.b.c": integers), then columns of its own.

-- Every listing but list_key reads at most $6 rows of its status's index
-- from the cursor on (list_take_head and list_take_tail around it) and
-- returns of them the first $5 created in a window, and the last row read.
-- $6 is $5 when the window is every time: the page is then the first $5.

-- name: list_take_head
-- Fragment: the head of a bounded scan. The statement between this and
-- list_take_tail reads the rows in its status's order, at most $6: the job
-- columns, the cursor key k, the creation time c_, and the order as three
-- ascending keys s1_, s2_, s3_. Of them come back the first $5 created
-- after $7 and at or before $8 (µs since the epoch), take_ = true, and the
-- last row read (take_ = false unless it is one of those), each with n_:
-- how many rows the scan read. sq_jobs_list reads past a shard whose scan
-- read $6 rows from the last one on.
SELECT * FROM (
  SELECT s.*, count(*) OVER () AS n_, row_number() OVER w AS r_,
         (s.c_ > timestamptz 'epoch' + $7::bigint * interval '1 microsecond'
          AND s.c_ <= timestamptz 'epoch' + $8::bigint * interval '1 microsecond'
          AND count(*) FILTER (
                WHERE s.c_ > timestamptz 'epoch' + $7::bigint * interval '1 microsecond'
                  AND s.c_ <= timestamptz 'epoch' + $8::bigint * interval '1 microsecond')
              OVER w <= $5) AS take_
    FROM (

-- name: list_take_tail
-- Fragment: the end of a bounded scan (list_take_head).
    ) s
  WINDOW w AS (ORDER BY s.s1_, s.s2_, s.s3_ ROWS UNBOUNDED PRECEDING)) t
 WHERE t.take_ OR t.r_ = t.n_
 ORDER BY t.r_

-- name: list_ready
-- Ready jobs in claim order: priority (highest first), order key, id.
-- $1 text     the type
-- $2 int      the cursor's priority ($2 = 2147483647 and $3 = $4 = 0: from
--             the start)
-- $3 bigint   its order key, µs since the epoch
-- $4 bigint   its id
-- $5 int      the page's size; $6 int the scan's; $7, $8 bigint the
--             creation window (list_take_head)
-- Index: jobs_ready, two ranges: the rest of the cursor's priority, then
-- the priorities below it.
{{list_take_head}}
SELECT x.*, -x.p_ AS s1_, x.o_ AS s2_, x.id AS s3_ FROM (
  (SELECT {{job_columns}}, j.priority || '.' || {{list_okey}} || '.' || j.id AS k,
          j.created_at AS c_, j.priority AS p_,
          COALESCE(j.delay_tolerance_time, j.schedule_time) AS o_
     FROM shardq.jobs j
    WHERE hashtext(j.task) = hashtext($1) AND j.task = $1 AND j.status = 'ready'
      AND j.priority = $2
      AND (COALESCE(j.delay_tolerance_time, j.schedule_time), j.id)
          > (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::bigint)
    ORDER BY COALESCE(j.delay_tolerance_time, j.schedule_time), j.id LIMIT $6)
  UNION ALL
  (SELECT {{job_columns}}, j.priority || '.' || {{list_okey}} || '.' || j.id,
          j.created_at, j.priority, COALESCE(j.delay_tolerance_time, j.schedule_time)
     FROM shardq.jobs j
    WHERE hashtext(j.task) = hashtext($1) AND j.task = $1 AND j.status = 'ready'
      AND j.priority < $2
    ORDER BY j.priority DESC, COALESCE(j.delay_tolerance_time, j.schedule_time), j.id
    LIMIT $6)) x
ORDER BY x.p_ DESC, x.o_, x.id LIMIT $6
{{list_take_tail}}

-- name: list_leased
-- Starting or running jobs ($2: 'starting' or 'running') by the end of
-- their lease, then id.
-- $1 text, $3 bigint the cursor's lease end (µs), $4 bigint its id, $5 to
-- $8 as list_ready's
-- Index: jobs_lease.
{{list_take_head}}
SELECT {{job_columns}},
       '0.' || (extract(epoch FROM j.expected_status_change_time) * 1000000)::bigint
       || '.' || j.id AS k,
       j.created_at AS c_, 0 AS s1_, j.expected_status_change_time AS s2_, j.id AS s3_
  FROM shardq.jobs j
 WHERE hashtext(j.task) = hashtext($1) AND j.task = $1
   AND j.status IN ('starting', 'running') AND j.status::text = $2
   AND (j.expected_status_change_time, j.id)
       > (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::bigint)
 ORDER BY j.expected_status_change_time, j.id LIMIT $6
{{list_take_tail}}

-- name: list_failed
-- Failed jobs in the order they failed, then id, up to a failure time (a
-- bulk retry's start: the jobs that fail again meanwhile come after it).
-- $1 text, $2 text 'failed', $3 bigint the cursor's failure time (µs),
-- $4 bigint its id, $5 to $8 as list_ready's, $9 bigint the latest failure
-- time (µs)
-- Index: jobs_failed_task (shard schema 14; on 13, jobs_failed, every
-- type's failed jobs by time, the type a filter).
{{list_take_head}}
SELECT {{job_columns}},
       '0.' || (extract(epoch FROM j.updated_at) * 1000000)::bigint || '.' || j.id AS k,
       j.created_at AS c_, 0 AS s1_, j.updated_at AS s2_, j.id AS s3_
  FROM shardq.jobs j
 WHERE j.status = 'failed' AND j.task = $1 AND $2::text = 'failed'
   AND (j.updated_at, j.id)
       > (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::bigint)
   AND j.updated_at <= timestamptz 'epoch' + $9::bigint * interval '1 microsecond'
 ORDER BY j.updated_at, j.id LIMIT $6
{{list_take_tail}}

-- name: list_completed
-- Completed jobs in the history, in the order they finished, then id, up
-- to a finish time.
-- $1 text, $2 text 'completed', $3 bigint the cursor's finish time (µs),
-- $4 bigint its id, $5 to $8 as list_ready's, $9 bigint the latest finish
-- time (µs)
-- Index: jobs_history_task (shard schema 12) in each day partition.
{{list_take_head}}
SELECT j.id, j.attempt, j.attempt, j.attempt, 0, j.status::text, j.task, j.active_uid,
       j.params::text, j.worker, NULL, NULL, NULL,
       (extract(epoch from j.created_at) * 1000000)::bigint,
       '0.' || (extract(epoch FROM j.finished_at) * 1000000)::bigint || '.' || j.id AS k,
       j.created_at AS c_, 0 AS s1_, j.finished_at AS s2_, j.id AS s3_
  FROM shardq.jobs_history j
 WHERE j.task = $1 AND $2::text = 'completed'
   AND (j.finished_at, j.id)
       > (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::bigint)
   AND j.finished_at <= timestamptz 'epoch' + $9::bigint * interval '1 microsecond'
 ORDER BY j.finished_at, j.id LIMIT $6
{{list_take_tail}}

-- name: history_purge
-- Deletes at most $3 history rows of type $1 that finished at or before
-- $2 (µs since the epoch), oldest first; returns how many.
-- Index: jobs_history_task in each day partition.
WITH d AS (DELETE FROM shardq.jobs_history h WHERE (h.tableoid, h.ctid) IN (
    SELECT j.tableoid, j.ctid FROM shardq.jobs_history j
     WHERE j.task = $1
       AND j.finished_at <= timestamptz 'epoch' + $2::bigint * interval '1 microsecond'
     ORDER BY j.finished_at LIMIT $3)
  RETURNING 1)
SELECT count(*) FROM d

-- name: list_cancelled
-- Cancelled jobs in the order they were cancelled, then id.
-- $1 text, $2 text 'cancelled', $3 bigint the cursor's cancel time (µs),
-- $4 bigint its id, $5 to $8 as list_ready's
-- Index: jobs_cancelled (shard schema 13).
{{list_take_head}}
SELECT {{job_columns}},
       '0.' || (extract(epoch FROM j.updated_at) * 1000000)::bigint || '.' || j.id AS k,
       j.created_at AS c_, 0 AS s1_, j.updated_at AS s2_, j.id AS s3_
  FROM shardq.jobs j
 WHERE j.status = 'cancelled' AND j.task = $1 AND $2::text = 'cancelled'
   AND (j.updated_at, j.id)
       > (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::bigint)
 ORDER BY j.updated_at, j.id LIMIT $6
{{list_take_tail}}

-- name: list_key
-- The live job of a type with a key, in any live status.
-- $1 text the type, $2 text the key
-- Index: jobs_active_uid.
SELECT {{job_columns}}, '0.0.' || j.id FROM shardq.jobs j
 WHERE j.task = $1 AND j.active_uid = $2 AND j.status IN ('ready', 'starting', 'running')

-- name: list_okey
-- Fragment: a ready job's order key as µs since the epoch.
(extract(epoch FROM COALESCE(j.delay_tolerance_time, j.schedule_time)) * 1000000)::bigint

-- name: list_errors
-- The last errors of a page of jobs (sq_jobs_errors), each as get_error
-- finds it: in the hot table, else in the job's latest history row.
-- $1 bigint[] the ids on this shard; returns each one's place in $1
-- (from 1) and its error.
-- Index: jobs_pkey; jobs_history_id in each history partition.
SELECT i.ord, CASE WHEN j.id IS NOT NULL THEN j.last_error
                   ELSE (SELECT h.last_error FROM shardq.jobs_history h WHERE h.id = i.id
                          ORDER BY h.finished_at DESC LIMIT 1) END
  FROM unnest($1::bigint[]) WITH ORDINALITY AS i(id, ord)
  LEFT JOIN shardq.jobs j ON j.id = i.id

-- Shard schema, version 4: history retention. shardq.jobs_history becomes
-- a table partitioned by RANGE (expires_at), one partition per UTC day:
-- expires_at = finished_at + the type's history_retention (whole days), so
-- a partition holds the rows that expire on its day, whatever their type,
-- and `shardq maintain` (src/maintain.c) drops a partition whole once its
-- day has ended: never a DELETE of many rows. A DEFAULT partition catches a
-- row whose day has no partition yet (maintenance was not run), so a
-- completion never fails for a missing partition; maintenance reports its
-- rows and moves them into their day's partition when it creates it.
--
-- The rows of the old table are copied, each with expires_at = finished_at
-- + 7 days, but at least the next UTC midnight after this migration plus a
-- day: no row is dropped at the first maintenance pass.
--
-- Safe to apply again (a test removes the version row and runs init): when
-- jobs_history is already partitioned only the functions are replaced.
DO $mig$
BEGIN
    IF (SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'shardq' AND c.relname = 'jobs_history') = 'p' THEN
        RETURN;
    END IF;
    ALTER TABLE shardq.jobs_history RENAME TO jobs_history_old;
    ALTER INDEX shardq.jobs_history_id RENAME TO jobs_history_old_id;
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
        finished_at   timestamptz NOT NULL DEFAULT now(),
        expires_at    timestamptz NOT NULL DEFAULT now() + interval '7 days'
    ) PARTITION BY RANGE (expires_at);
    -- sq_get_history and the enqueue's recovery look rows up by id
    CREATE INDEX jobs_history_id ON shardq.jobs_history (id);
    CREATE TABLE shardq.jobs_history_default PARTITION OF shardq.jobs_history DEFAULT;
END
$mig$;

-- The partitions of jobs_history with their bounds (NULL: MINVALUE or
-- MAXVALUE; both NULL and is_default for the DEFAULT one) and PostgreSQL's
-- estimate of their rows (pg_class.reltuples; -1 when never analysed).
-- The bounds are read from pg_get_expr under TimeZone UTC, so they parse
-- the same whatever the session's zone.
CREATE OR REPLACE FUNCTION shardq.history_partitions()
RETURNS TABLE (name text, lo timestamptz, hi timestamptz, is_default boolean, est_rows bigint)
LANGUAGE sql STABLE SET TimeZone = 'UTC' AS $fn$
    SELECT c.relname::text,
           substring(b.expr FROM 'FROM \(''([^'']+)''\)')::timestamptz,
           substring(b.expr FROM 'TO \(''([^'']+)''\)')::timestamptz,
           b.expr = 'DEFAULT',
           CASE WHEN c.reltuples < 0 THEN -1 ELSE c.reltuples::bigint END
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) b
     WHERE i.inhparent = 'shardq.jobs_history'::regclass
$fn$;

-- Creates the partition of one UTC day, jobs_history_pYYYYMMDD, unless a
-- partition already covers any of that day (returns -1). Rows of that day
-- that are in the DEFAULT partition move into the new one in the same
-- transaction (PostgreSQL refuses the new partition while the default holds
-- rows of its range); returns how many moved.
CREATE OR REPLACE FUNCTION shardq.history_add_day(d date) RETURNS bigint
LANGUAGE plpgsql SET TimeZone = 'UTC' AS $fn$
DECLARE
    d_lo  timestamptz := d::timestamp AT TIME ZONE 'UTC';
    d_hi  timestamptz := (d + 1)::timestamp AT TIME ZONE 'UTC';
    moved shardq.jobs_history_default[];
    n     bigint := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM shardq.history_partitions() p
                WHERE NOT p.is_default
                  AND (p.lo IS NULL OR p.lo < d_hi) AND (p.hi IS NULL OR p.hi > d_lo)) THEN
        RETURN -1;
    END IF;
    WITH m AS (DELETE FROM shardq.jobs_history_default h
                WHERE h.expires_at >= d_lo AND h.expires_at < d_hi RETURNING h)
    SELECT array_agg(m.h), count(*) INTO moved, n FROM m;
    EXECUTE format('CREATE TABLE shardq.%I PARTITION OF shardq.jobs_history'
                   ' FOR VALUES FROM (%L) TO (%L)',
                   'jobs_history_p' || to_char(d, 'YYYYMMDD'), d_lo, d_hi);
    IF n > 0 THEN
        INSERT INTO shardq.jobs_history SELECT (unnest(moved)).*;
    END IF;
    RETURN n;
END
$fn$;

-- The old table's rows, then the old table goes.
DO $mig$
DECLARE
    floor_at timestamptz := (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '2 days')
                            AT TIME ZONE 'UTC';
    d date;
BEGIN
    IF to_regclass('shardq.jobs_history_old') IS NULL THEN
        RETURN;
    END IF;
    FOR d IN SELECT DISTINCT (greatest(o.finished_at + interval '7 days', floor_at)
                              AT TIME ZONE 'UTC')::date
               FROM shardq.jobs_history_old o LOOP
        PERFORM shardq.history_add_day(d);
    END LOOP;
    INSERT INTO shardq.jobs_history (id, partition, task, status, attempt, worker, active_uid,
                                     params, last_error, created_at, finished_at, expires_at)
    SELECT id, partition, task, status, attempt, worker, active_uid, params, last_error,
           created_at, finished_at, greatest(finished_at + interval '7 days', floor_at)
      FROM shardq.jobs_history_old;
    DROP TABLE shardq.jobs_history_old;
END
$mig$;

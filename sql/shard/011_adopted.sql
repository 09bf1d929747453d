-- Shard schema, version 11: a destination holds the partitions of a move
-- `adopted` from its copy's commit until the meta map has switched to it
-- (docs/moves.md). Before, it marked them owned at the commit, so its
-- claims handed out their jobs while every client still routed writes for
-- them to the source, which refused them ("moving") until the switch: a
-- mover that died between the two (or was slow) made those jobs run again
-- on the destination every time their lease ran out there (issue 43,
-- item 7). An adopted partition is one the shard has whole and will own:
-- claims skip it (as every partition not owned), and a write to it hears
-- "moving" and is sent again, as to a frozen one.
ALTER TYPE shardq.part_state ADD VALUE IF NOT EXISTS 'adopted';

CREATE OR REPLACE FUNCTION shardq.check_owned(parts integer[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    gone   integer;
    first  integer;
    moving text;
BEGIN
    -- one statement, so one snapshot: a mover that marks the partitions
    -- gone meanwhile cannot leave a "moving" without its list
    SELECT min(p) FILTER (WHERE ps.state IS NULL OR ps.state = 'gone'),
           min(p) FILTER (WHERE ps.state::text IN ('moving_out', 'importing', 'adopted')),
           string_agg(p::text, ',' ORDER BY p)
               FILTER (WHERE ps.state::text IN ('moving_out', 'importing', 'adopted'))
      INTO gone, first, moving
      FROM unnest(parts) AS p
      LEFT JOIN shardq.partition_state ps ON ps.partition = p;
    -- a partition that is gone or unknown here wins: the map is wrong, and
    -- the client reads it again before it sends anything more
    IF gone IS NOT NULL THEN
        RAISE EXCEPTION 'partition % is not owned by this shard', gone
            USING ERRCODE = 'SQM02', DETAIL = gone::text;
    END IF;
    IF first IS NOT NULL THEN
        RAISE EXCEPTION 'partition % is moving', first
            USING ERRCODE = 'SQM01', DETAIL = 'moving: ' || moving;
    END IF;
END
$fn$;

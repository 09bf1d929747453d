-- Shard schema, version 10: a write refused because partitions of its
-- batch are moving names all of them, so that the client can write the
-- batch's other jobs at once and hold back only those (docs/moves.md,
-- "Writers meanwhile"). Before, it named the first one, and the client
-- held the shard's whole part of the batch until the move switched.
--
-- The DETAIL of SQM01 is now "moving: P1,P2,...": the moving partitions
-- among those given. A client of an older release ignores the DETAIL, and
-- a client of this one reads no list from an older shard (its DETAIL is a
-- bare number): it then holds the shard's part as before. The message and
-- the SQLSTATEs are unchanged. The check is one statement (one snapshot)
-- over the batch's partitions, as before.
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
           min(p) FILTER (WHERE ps.state IN ('moving_out', 'importing')),
           string_agg(p::text, ',' ORDER BY p)
               FILTER (WHERE ps.state IN ('moving_out', 'importing'))
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

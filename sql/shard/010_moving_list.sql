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
-- the SQLSTATEs are unchanged, and so is the cost of the check when every
-- partition is owned.
CREATE OR REPLACE FUNCTION shardq.check_owned(parts integer[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    bad    integer;
    st     shardq.part_state;
    moving text;
BEGIN
    SELECT p, ps.state INTO bad, st
      FROM unnest(parts) AS p
      LEFT JOIN shardq.partition_state ps ON ps.partition = p
     WHERE ps.state IS DISTINCT FROM 'owned'
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- a partition that is gone or unknown here wins: the map is wrong, and
    -- the client reads it again before it sends anything more
    SELECT p INTO bad
      FROM unnest(parts) AS p
      LEFT JOIN shardq.partition_state ps ON ps.partition = p
     WHERE ps.state IS NULL OR ps.state NOT IN ('owned', 'moving_out', 'importing')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'partition % is not owned by this shard', bad
            USING ERRCODE = 'SQM02', DETAIL = bad::text;
    END IF;
    SELECT min(p), 'moving: ' || string_agg(p::text, ',' ORDER BY p) INTO bad, moving
      FROM unnest(parts) AS p
      JOIN shardq.partition_state ps ON ps.partition = p
     WHERE ps.state IN ('moving_out', 'importing');
    RAISE EXCEPTION 'partition % is moving', bad
        USING ERRCODE = 'SQM01', DETAIL = moving;
END
$fn$;

#!/bin/bash
# waits for the bench's shardq database and its partition_state, then adds a
# 'gone' row for a partition this shard does not own (as a finished move leaves)
for p in 55631 55632 55633 55634; do
  for i in $(seq 1 200); do
    n=$(psql -U postgres -h 127.0.0.1 -p $p -d shardq_bench -Atc "SELECT count(*) FROM shardq.partition_state" 2>/dev/null)
    [ -n "$n" ] && [ "$n" -gt 0 ] && break
    sleep 0.1
  done
  psql -U postgres -h 127.0.0.1 -p $p -d shardq_bench -Atc "INSERT INTO shardq.partition_state (partition, state) SELECT g, 'gone' FROM generate_series(0,16383) g WHERE NOT EXISTS (SELECT 1 FROM shardq.partition_state WHERE partition = g) LIMIT 1000 RETURNING 1" 2>&1 | wc -l
done

#!/bin/bash
# samples autovacuum workers and checkpoints on the 4 bench shards every 0.1 s
out=$1; : > $out
for p in 55631 55632 55633 55634; do
  ( while [ ! -e /tmp/s39/stop-sampler ]; do
    printf "%s\n" "select extract(epoch from clock_timestamp())::numeric(16,2), $p, (select string_agg(left(regexp_replace(query,'\s+',' ','g'),50)||':'||coalesce(wait_event,'cpu'), ';') from pg_stat_activity where backend_type in ('autovacuum worker','checkpointer') and (state is not null or wait_event is null)) \watch 0.1" | psql -X -At -U postgres -h 127.0.0.1 -p $p -d shardq_bench >> $out 2>/dev/null
    sleep 0.2
  done ) &
done
wait

#!/bin/bash
out=$1; : > $out
for p in 55631 55632 55633 55634; do
  ( while [ ! -e /tmp/s36/stop-sampler ]; do
    printf "%s\n" "select to_char(clock_timestamp(),'HH24:MI:SS.MS'), $p, (select n_tup_del from pg_stat_user_tables where relname='jobs' and schemaname='shardq'), (select string_agg(left(regexp_replace(query,'\s+',' ','g'),40)||':'||coalesce(wait_event,'cpu'), ';') from pg_stat_activity where backend_type='autovacuum worker' and datname = current_database()) \watch 0.5" | psql -X -At -U postgres -h 127.0.0.1 -p $p -d shardq_bench >> $out 2>/dev/null
    sleep 0.2
  done ) &
done
wait

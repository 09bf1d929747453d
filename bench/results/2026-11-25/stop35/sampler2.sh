#!/bin/bash
out=$1; : > $out
for p in 55631 55632 55633 55634; do
  printf "%s\n" "select $p, coalesce(wait_event_type,'cpu'), coalesce(wait_event,'-'), left(regexp_replace(query,'\s+',' ','g'),30) from pg_stat_activity where state='active' and pid<>pg_backend_pid() and backend_type = 'client backend' \watch 0.2" | psql -X -At -U postgres -h 127.0.0.1 -p $p -d postgres >> $out 2>&1 &
done
wait

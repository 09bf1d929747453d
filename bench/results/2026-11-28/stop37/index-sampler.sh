#!/usr/bin/env bash
while true; do
  psql -X -At -h 127.0.0.1 -p 55631 -U postgres -d shardq_bench -c "
   SELECT to_char(now(),'MI:SS'),
    (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid='shardq.jobs'::regclass),
    (SELECT string_agg(indexrelname||'='||idx_scan||'/'||idx_tup_read||'/'||idx_tup_fetch, ' ' ORDER BY indexrelname) FROM pg_stat_user_indexes WHERE relid='shardq.jobs'::regclass AND indexrelname IN ('jobs_ready','jobs_lease','jobs_pkey')),
    (SELECT max(age(backend_xmin)) FROM pg_stat_activity),
    (SELECT count(*) FROM pg_stat_progress_vacuum)
  " 2>/dev/null
  sleep 1
done

\startpipeline
BEGIN;
SELECT pg_advisory_xact_lock_shared(1397837137, 1);
SELECT shardq.check_owned('{1,2,20,28,34,35,37,39,43,45,48,52,61,64,67,71,77,85,88,89,93,94,97,100,101,103,106,110,114,131,136,145,150,151,153,160,164,165,172,174,176,179,181,182,190,191,192,195,202,205,206,209,210,211,215,219,225,230,235,240,244,250,253,257,258,259,262,270,272,277,280,281,286,291,297,304,306,308,309,319,320,329,344,348,349,351,358,362,365,366,368,369,371,379,381,382,392,395,397,398}'::int[]);
INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time, delay_tolerance_time, max_attempts, dedup_policy) SELECT n * 65536 + g, g, 'noop', '{}'::jsonb, 0, now(), NULL, 1, 'i' FROM (SELECT nextval('public.sqid') AS n) s, generate_series(1,100) g;
SELECT pg_notify('shardq_jobs', '');
COMMIT;
\endpipeline

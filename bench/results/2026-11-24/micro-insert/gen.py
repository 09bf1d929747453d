# gen.py - writes the psql scripts of the insert probe (docs/benchmarks.md,
# "Where the default scenario's enqueue spends the servers' time"): 60
# transactions of 1,000 keyless rows each, as shardq's keyless enqueue sends
# them (gate, check_owned, the insert, NOTIFY) and as baseline (b) inserts
# them. Usage: python3 gen.py PARTITION (a partition shard 1 owns), then
#   psql -h 127.0.0.1 -p 55631 -U postgres -X -q -d shardq_bench -f sq.sql
#   psql ... -d shardq_bench_baseline -f b.sql
# on the databases `bench/run default --set run.jobs=2000 --keep` leaves.
import sys
part = sys.argv[1]
N, ITER = 1000, 60
KEYLESS = """INSERT INTO shardq.jobs (id, partition, task, params, priority, schedule_time,
       delay_tolerance_time, max_attempts, dedup_policy)
SELECT u.id, u.part, u.task, u.params::jsonb, u.prio, s.st,
       CASE WHEN u.tol_ms > 0 THEN s.st + u.tol_ms * interval '1 millisecond' END,
       u.maxa, u.pol::"char"
  FROM (SELECT u.id, COALESCE(u.part, ($2::int[])[1]) AS part,
               COALESCE(u.task, ($3::text[])[1]) AS task, u.uid, u.params,
               COALESCE(u.prio, ($6::int[])[1]) AS prio,
               COALESCE(u.at_us, ($7::bigint[])[1]) AS at_us,
               COALESCE(u.delay_ms, ($8::bigint[])[1]) AS delay_ms,
               COALESCE(u.tol_ms, ($9::bigint[])[1]) AS tol_ms,
               COALESCE(u.maxa, ($10::int[])[1]) AS maxa,
               COALESCE(u.pol, ($11::text[])[1]) AS pol
          FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::int[],
                      $7::bigint[], $8::bigint[], $9::bigint[], $10::int[], $11::text[])
            AS u(id, part, task, uid, params, prio, at_us, delay_ms, tol_ms, maxa, pol)) u
  CROSS JOIN LATERAL (SELECT CASE WHEN u.at_us <> 0 THEN to_timestamp(u.at_us / 1000000.0)
         ELSE now() + u.delay_ms * interval '1 millisecond' END AS st) s"""
def arr(xs):
    return "'{" + ",".join(xs) + "}'"
def params():
    return ['"{\\"t\\":%d}"' % (1795501121000000 + i) for i in range(N)]
with open("sq.sql", "w") as f:
    f.write("\\set QUIET on\nTRUNCATE shardq.jobs;\nPREPARE ins(bigint[],int[],text[],text[],"
            "text[],int[],bigint[],bigint[],bigint[],int[],text[]) AS " + KEYLESS + ";\n")
    nid = 1
    for _ in range(ITER):
        ids = [str(((nid + i) << 16) | int(part)) for i in range(N)]
        nid += N
        f.write("BEGIN;\nSELECT pg_advisory_xact_lock_shared(1397837137, 1);\n")
        f.write("SELECT shardq.check_owned('{%s}');\n" % part)
        f.write(f"EXECUTE ins({arr(ids)}, '{{{part}}}', '{{noop}}', '{{}}', {arr(params())}, "
                "'{0}', '{0}', '{0}', '{0}', '{1}', '{i}');\n")
        f.write("SELECT pg_notify('shardq_jobs', '');\nCOMMIT;\n")
with open("b.sql", "w") as f:
    f.write("\\set QUIET on\nTRUNCATE job;\nPREPARE ins(text[], jsonb[]) AS INSERT INTO job "
            "(queue, payload) SELECT * FROM unnest($1::text[], $2::jsonb[]);\n")
    for _ in range(ITER):
        f.write(f"BEGIN;\nEXECUTE ins({arr(['noop'] * N)}, {arr(params())});\nCOMMIT;\n")

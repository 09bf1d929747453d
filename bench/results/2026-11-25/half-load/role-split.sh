#!/bin/bash
cd /work/main
SHARDQ_SHARDS_DIR=$PWD/.shards-bench SHARDQ_BASE_PORT=55631 SHARDQ_SHARDS=4 scripts/shards start >/dev/null 2>&1
build-bench/bench/shardq-bench bench/scenarios/latency.ini --ports 55631,55632,55633,55634 --set run.baselines=${BL:-none} ${EXTRA} --out /tmp/pidprofrun > /tmp/pidprofrun.log 2>&1 &
bp=$!
sleep ${DELAY:-9}
for p in 55631 55632 55633 55634; do psql -h 127.0.0.1 -p $p -U postgres -d postgres -Atc "SELECT pid, 'pg:' || coalesce(nullif(application_name,''), backend_type) || ' ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 30) FROM pg_stat_activity" ; done > /tmp/pidroles.txt
perf record -a -F 999 -o /tmp/pidperf.data -- sleep 8 > /dev/null 2>&1
wait $bp
perf report -i /tmp/pidperf.data --no-children --sort pid --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" > /tmp/pidreport.txt
python3 - <<'PY'
roles={}
for l in open('/tmp/pidroles.txt'):
    l=l.strip()
    if '|' in l:
        pid,role=l.split('|',1); roles[pid]=role
agg={}
for l in open('/tmp/pidreport.txt'):
    parts=l.split()
    if len(parts)<2: continue
    pct=float(parts[0].rstrip('%'))
    name=parts[1]
    pid=name.split(':')[0]
    comm=name.split(':',1)[1] if ':' in name else name
    role=roles.get(pid, comm if comm!='postgres' else 'postgres-other')
    agg[role]=agg.get(role,0)+pct
for r,v in sorted(agg.items(), key=lambda x:-x[1]):
    if v>=0.3: print(f"{v:6.2f}%  {r}")
PY

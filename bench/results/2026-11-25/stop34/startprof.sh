#!/bin/bash
cd /work/main
build-bench/bench/shardq-bench bench/scenarios/latency.ini --ports 55631,55632,55633,55634 --set run.baselines=none --set run.duration=3s --set run.sample=100ms --out /tmp/startrun > /tmp/startrun.log 2>&1 &
bp=$!
while ! pgrep -f "worker-process" >/dev/null; do sleep 0.01; done
perf record -a -F 1999 -o /tmp/start2.data -- sleep ${WIN:-1.2} > /dev/null 2>&1
for p in 55631 55632 55633 55634; do psql -h 127.0.0.1 -p $p -U postgres -d postgres -Atc "SELECT pid, coalesce(nullif(application_name,''), backend_type) || ' ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 40) FROM pg_stat_activity" ; done > /tmp/startroles.txt
wait $bp
perf report -i /tmp/start2.data --no-children --sort pid --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" > /tmp/startreport.txt
python3 - <<'PY'
roles={}
for l in open('/tmp/startroles.txt'):
    l=l.strip()
    if '|' in l:
        pid,role=l.split('|',1); roles[pid]=role
agg={}
for l in open('/tmp/startreport.txt'):
    parts=l.split()
    if len(parts)<2: continue
    pct=float(parts[0].rstrip('%'))
    name=parts[1]
    pid=name.split(':')[0]
    comm=name.split(':',1)[1] if ':' in name else name
    role=roles.get(pid, comm if comm!='postgres' else 'postgres-gone')
    agg[role]=agg.get(role,0)+pct
for r,v in sorted(agg.items(), key=lambda x:-x[1]):
    if v>=0.5: print(f"{v:6.2f}%  {r}")
PY
grep -E "p50 ms|p99 ms" /tmp/startrun.log | head -2

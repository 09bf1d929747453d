#!/bin/bash
# perf -a for 8 s in the shardq phase and in the (b) phase of one latency run; CPU by backend role
cd /work/main
SHARDQ_SHARDS_DIR=$PWD/.shards-bench SHARDQ_BASE_PORT=55631 SHARDQ_SHARDS=4 scripts/shards start >/dev/null 2>&1
build-bench/bench/shardq-bench bench/scenarios/latency.ini --ports 55631,55632,55633,55634 --set run.baselines=b ${EXTRA} --out /tmp/phaserolerun > /tmp/phaserolerun.log 2>&1 &
bp=$!
roles() { for p in 55631 55632 55633 55634; do psql -h 127.0.0.1 -p $p -U postgres -d postgres -Atc "SELECT pid, 'pg:' || coalesce(nullif(application_name,''), backend_type) || ' ' || left(regexp_replace(coalesce(query,''), '\\s+', ' ', 'g'), 24) FROM pg_stat_activity" ; done > $1; ps -eo pid=,args= | grep "postgres:" | grep -v grep | awk '{pid=$1; $1=""; print pid "|ps:" substr($0,1,40)}' >> $1; }
until grep -q "^shardq  *5.0s" /tmp/phaserolerun.log; do sleep 0.2; done
roles /tmp/pr-roles-shardq.txt
perf record -a -F 999 -o /tmp/pr-shardq.data -- sleep 8 > /dev/null 2>&1
until grep -q "^(b)  *5.0s" /tmp/phaserolerun.log; do sleep 0.2; done
roles /tmp/pr-roles-b.txt
perf record -a -F 999 -o /tmp/pr-b.data -- sleep 8 > /dev/null 2>&1
wait $bp
for ph in shardq b; do
perf report -i /tmp/pr-$ph.data --no-children --sort pid --stdio -F sample,pid 2>/dev/null | grep -v "^#" | grep -v "^$" > /tmp/pr-$ph.txt
echo "== $ph (samples over 8 s, 2 cores at 999 Hz = 15984)"
python3 - $ph <<'PY'
import sys,re
ph=sys.argv[1]
roles={}
for l in open(f'/tmp/pr-roles-{ph}.txt'):
    l=l.strip()
    if '|' in l:
        pid,role=l.split('|',1)
        if pid not in roles: roles[pid]=role
agg={}
for l in open(f'/tmp/pr-{ph}.txt'):
    p=l.split()
    if len(p)<2: continue
    n=int(p[0]); name=p[1]
    pid=name.split(':')[0]; comm=name.split(':',1)[1] if ':' in name else name
    role=roles.get(pid, comm if comm!='postgres' else 'postgres-other')
    # group by role without the statement text beyond the first words
    role=re.sub(r'\d+','#',role)
    agg[role]=agg.get(role,0)+n
tot=sum(agg.values())
for r,v in sorted(agg.items(), key=lambda x:-x[1]):
    if v>=40: print(f"{v:6d}  {r}")
print("total", tot)
PY
done
grep -E "end-to-end|PostgreSQL|p99 ms" /tmp/phaserolerun.log | head -4

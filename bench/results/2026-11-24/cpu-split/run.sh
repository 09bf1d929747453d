#!/bin/bash
# usage: run.sh LABEL [bench args]
l=$1; shift
cd /work/main; rm -f /tmp/pgcpu/stop
python3 /tmp/pgcpu/sample.py /tmp/pgcpu/$l.tsv /tmp/pgcpu/stop &
bench/run default --set run.jobs=400000 --set run.baselines=b --quiet --out /tmp/ab/$l "$@" > /dev/null 2>&1
touch /tmp/pgcpu/stop; wait
echo "$l: $(python3 /tmp/pgcpu/split.py /tmp/pgcpu/$l.tsv) | $(grep -E '^\s+(enqueue/s|end-to-end)' /tmp/ab/$l/summary.txt | awk '{print $(NF)}' | tr '\n' ' ')"

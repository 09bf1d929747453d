import os, sys, time, collections
# samples CPU ticks of every postgres process; classifies by cmdline
hz = os.sysconf('SC_CLK_TCK')
out = sys.argv[1]
stop = sys.argv[2]
series = []  # (t, pid, kind, ticks)
seen = {}
while not os.path.exists(stop):
    t = time.time()
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            st = open(f'/proc/{p}/stat').read()
            comm = st[st.index('(')+1:st.rindex(')')]
            if comm not in ('postgres','shardq-bench'): continue
            f = st[st.rindex(')')+2:].split()
            ticks = int(f[11]) + int(f[12])
            cmd = open(f'/proc/{p}/cmdline').read().replace('\0', ' ').strip()
        except Exception:
            continue
        seen[p] = cmd
        series.append((t, p, cmd, ticks))
    time.sleep(0.2)
with open(out, 'w') as fo:
    for t, p, c, k in series:
        fo.write(f"{t:.2f}\t{p}\t{k}\t{c}\n")

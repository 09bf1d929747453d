import sys, collections
rows=[l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
by=collections.defaultdict(list)
for t,p,k,c in rows: by[p].append((float(t),int(k),c))
acc=collections.Counter()
for p,s in by.items():
    cs=' '.join(c for _,_,c in s)
    if 'shardq_bench' not in cs: continue
    d=(s[-1][1]-s[0][1])/100
    db='b' if 'shardq_bench_baseline' in cs else 'sq'
    role='prod' if 'INSERT' in cs else 'work'
    acc[db+'-'+role]+=d
print(' '.join(f"{k}={v:.2f}" for k,v in sorted(acc.items())))

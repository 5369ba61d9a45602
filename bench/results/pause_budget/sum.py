import json, glob, sys, statistics as st, collections
out = sys.argv[1]; maxsize = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(out + '/*.json')):
    lib = f.split('/')[-1].rsplit('_r', 1)[0]
    for r in json.load(open(f))['results']:
        if r['size'] > maxsize: continue
        key = (r['collective'], r['size'])
        for p, (t, c) in enumerate(zip(r['pass_time_us'], r['pass_cpu_us'])):
            d[lib][key + (p + 1,)].append((t, c))
libs = sorted(d)
keys = sorted(set(k for l in libs for k in d[l]))
print('coll size pass | ' + ' | '.join('%s time med [min-max] cpu med' % l[-12:] for l in libs))
for k in keys:
    cells = []
    for l in libs:
        v = d[l].get(k, [])
        if not v: cells.append('-'); continue
        t = [x[0] for x in v]; c = [x[1] for x in v]
        cells.append('%.3f [%.3f-%.3f] %.3f' % (st.median(t), min(t), max(t), st.median(c)))
    print('%s %d p%d | %s' % (k[0], k[1], k[2], ' | '.join(cells)))

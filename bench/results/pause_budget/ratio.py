"""First size over second size, per launch, pass and collective: the
median over launches of t(8 B) / t(32 B) (a slow first size reads > 1;
the VM's state moves both sizes of a launch alike)."""
import json, glob, sys, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    lib = f.split('/')[-1].rsplit('_r', 1)[0]
    t = {}
    for r in json.load(open(f))['results']:
        t[(r['collective'], r['size'])] = r['pass_time_us']
    for (c, s), v in t.items():
        if s == 8 and (c, 32) in t:
            for p, (a, b) in enumerate(zip(v, t[(c, 32)])):
                d[(c, p + 1, lib)].append(a / b)
libs = sorted({k[2] for k in d})
print('collective pass ' + ' '.join('%28s' % l[-28:] for l in libs))
for c, p in sorted({(k[0], k[1]) for k in d}):
    print('%-14s p%d ' % (c, p) + ' '.join(
        '%28s' % ('%.2f [%.2f-%.2f]' % (st.median(d[(c, p, l)]), min(d[(c, p, l)]), max(d[(c, p, l)])) if d[(c, p, l)] else '-') for l in libs))

import json, glob, statistics, collections
runs = {}
for f in sorted(glob.glob('docs/data/h200-2026-12-01-s14/tables/table_*.json')):
    i, c = f.split('table_')[1].rsplit('.',1)[0].split('_')
    d = json.load(open(f))
    rows = {(r['impl'], r['case'], r.get('note','')): r['us'] for r in d['rows']}
    runs.setdefault(c, []).append(rows)
    print(f, len(rows), 'rows', 'skipped', len(d['skipped']), 'errors', len(d.get('error', {})))
old, new = runs['4028be9'], runs['8324861']
keys = sorted(set(old[0]) & set(old[1]) & set(new[0]) & set(new[1]))
print('common rows', len(keys), 'old-only', len(set(old[0]) - set(new[0])), 'new-only', len(set(new[0]) - set(old[0])))
print(sorted(set(old[0]) ^ set(new[0]))[:10])
within, between = [], []
out = []
for k in keys:
    o = statistics.mean([old[0][k], old[1][k]]); n = statistics.mean([new[0][k], new[1][k]])
    w = max(abs(old[0][k]/old[1][k]-1), abs(new[0][k]/new[1][k]-1))
    within.append(w); between.append(n/o-1)
    out.append((n/o-1, w, k, o, n))
print(f"between (new/old - 1): median {statistics.median(between)*100:+.2f}%  min {min(between)*100:+.2f}% max {max(between)*100:+.2f}%")
print(f"within (same commit, 2 runs): median {statistics.median(within)*100:.2f}%  max {max(within)*100:.2f}%")
n_out = sum(1 for b, w, *_ in out if abs(b) > max(w, 0.01))
print('rows whose old->new change exceeds both 1% and their own within-commit spread:', n_out)
for b, w, k, o, n in sorted(out, key=lambda r: -abs(r[0]))[:15]:
    print(f"{b*100:+6.2f}% (within {w*100:.2f}%) {o:9.2f} -> {n:9.2f} us  {k[0]} @ {k[1]} {k[2]}")

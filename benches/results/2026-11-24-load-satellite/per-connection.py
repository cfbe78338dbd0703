"""Per pool connection in a pool-ss-watch log: bytes acknowledged between its first and last
sample, the largest unsent queue, bytes in flight (segments), congestion window (segments),
BBR bandwidth estimate and pacing rate (Mbit/s), and the smallest receive window the edge
advertised. Usage: python3 per-connection.py ss-samples.log"""
import re,collections,sys
rows=collections.defaultdict(list)
for line in open(sys.argv[1]):
    f=line.split()
    ts=float(f[0]); peer=f[4]
    g=lambda k: int((re.search(r'\b'+k+r':(\d+)',line) or [None,0])[1])
    bw=re.search(r'bw:(\d+)bps',line); pr=re.search(r'pacing_rate (\d+)bps',line); dr=re.search(r'delivery_rate (\d+)bps',line)
    rows[peer].append((ts,g('bytes_acked'),g('notsent'),g('unacked'),g('cwnd'),int(bw[1]) if bw else 0,int(pr[1]) if pr else 0,int(dr[1]) if dr else 0, g('snd_wnd')))
tot=0
for p,r in sorted(rows.items()):
    acked=r[-1][1]-r[0][1]; tot+=acked
    print(p, 'n=%d'%len(r),'acked %.1f MB'%(acked/1e6), 'max notsent %dKB'%(max(x[2] for x in r)/1e3), 'max unacked %d'%max(x[3] for x in r), 'max cwnd %d'%max(x[4] for x in r), 'bw max %.1f'%(max(x[5] for x in r)/1e6), 'pacing max %.1f'%(max(x[6] for x in r)/1e6), 'snd_wnd min %.2fMB'%(min(x[8] for x in r)/1e6))
print('total %.1f MB over %.1f s'%(tot/1e6, max(x[0] for r in rows.values() for x in r)-min(x[0] for r in rows.values() for x in r)))

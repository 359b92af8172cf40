# samples /sys/block/vda/inflight every 2 ms for SECONDS; prints idle fraction and depth histogram
import sys, time
secs = float(sys.argv[1]); end = time.time() + secs
hist = {}
n = 0
while time.time() < end:
    w = int(open('/sys/block/vda/inflight').read().split()[1])
    hist[w] = hist.get(w, 0) + 1; n += 1
    time.sleep(0.002)
tot = sum(hist.values())
print("samples", tot, "idle %.1f%%" % (100*hist.get(0,0)/tot), "mean depth %.2f" % (sum(k*v for k,v in hist.items())/tot))
print(" ".join("%d:%.0f%%" % (k, 100*v/tot) for k, v in sorted(hist.items())))

import time, sys
# samples /sys/block/vda/stat every 50 ms; prints stalls: intervals with writes in flight and none completed
prev=None; t0=time.time(); stall_start=None; out=[]
end=t0+float(sys.argv[1])
while time.time()<end:
    s=list(map(int,open('/sys/block/vda/stat').read().split())); now=time.time()
    if prev:
        done=s[4]-prev[4]; infl=s[8]; flushes=s[15]-prev[15]
        if infl>0 and done==0:
            if stall_start is None: stall_start=now-0.05
        else:
            if stall_start is not None and now-stall_start>=0.1:
                out.append("stall %.2f s at t=%.1f (in flight %d)" % (now-stall_start, stall_start-t0, infl))
            stall_start=None
    prev=s; time.sleep(0.05)
print("\n".join(out) or "no stall >= 100 ms")

import time, sys
secs = float(sys.argv[1]); end = time.monotonic() + secs; last = time.monotonic(); gaps = []
while True:
    now = time.monotonic()
    if now - last > 0.002: gaps.append(now - last)
    last = now
    if now > end: break
print("%d gaps >2ms, frozen %.1f%% of the time, longest %.1f ms" % (len(gaps), sum(gaps) / secs * 100, max(gaps, default=0) * 1e3))

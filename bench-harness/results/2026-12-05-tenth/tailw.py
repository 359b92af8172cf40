# O_DIRECT appends of ~step bytes (rewriting the partial tail page) + fdatasync, at a rate; prints latency percentiles.
import os, sys, mmap, time
path, step, rate, secs, prealloc, fsync = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
if prealloc == "zero":
    buf = mmap.mmap(-1, 1 << 20)
    for i in range(256): os.pwrite(fd, buf, i << 20)
    os.fsync(fd)
elif prealloc == "falloc":
    os.posix_fallocate(fd, 0, 256 << 20)
buf = mmap.mmap(-1, 1 << 20)
end = 0; lat = []; wl = []; sl = []
t0 = time.monotonic(); n = 0
while True:
    due = t0 + n / rate
    now = time.monotonic()
    if now - t0 > secs: break
    if due > now: time.sleep(due - now)
    start = time.monotonic()
    pos = end & ~4095
    newend = end + step
    ln = ((newend + 4095) & ~4095) - pos
    os.pwrite(fd, memoryview(buf)[:ln], pos)
    w = time.monotonic()
    if fsync: os.fdatasync(fd)
    e = time.monotonic()
    wl.append(w - start); sl.append(e - w); lat.append(e - start)
    end = newend; n += 1
    if end > (250 << 20): end = 0
def pct(a):
    a = sorted(a); return " ".join("%s=%.2fms" % (p, a[min(len(a) - 1, int(len(a) * q))] * 1e3) for p, q in (("p50", .5), ("p99", .99), ("p99.9", .999), ("max", 1.0)))
print(f"{path} n={n} write {pct(wl)} | sync {pct(sl)} | total {pct(lat)}")
os.unlink(path)

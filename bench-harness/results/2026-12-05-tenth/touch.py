import mmap, time
for i in range(4):
    t = time.monotonic()
    m = mmap.mmap(-1, 1 << 30)
    for off in range(0, 1 << 30, 4096): m[off] = 1
    d = time.monotonic() - t
    m.close()
    print("round %d: 1 GiB first-touch in %.2f s" % (i, d))

import os, sys, time, struct
from concurrent.futures import ThreadPoolExecutor
N=int(sys.argv[1]); T=int(sys.argv[2]); root=sys.argv[3]
dirs=[os.path.join(root,f"p{i}") for i in range(N)]
for d in dirs: os.makedirs(d, exist_ok=True)
def one(d, v):
    tmp=os.path.join(d,"hw.tmp")
    fd=os.open(tmp, os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o644)
    os.write(fd, struct.pack("<QI", v, 0)); os.fdatasync(fd); os.close(fd)
    os.rename(tmp, os.path.join(d,"hw"))
    dfd=os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
def stat():
    return list(map(int, open("/sys/block/vda/stat").read().split()))
for rep in range(int(os.environ.get("REPS","3"))):
    a=stat(); t=time.time()
    if T==1:
        for d in dirs: one(d, rep)
    else:
        with ThreadPoolExecutor(T) as ex: list(ex.map(lambda d: one(d, rep), dirs))
    b=stat()
    print(f"N={N} T={T} rep={rep} {time.time()-t:.3f}s flushes {b[15]-a[15]} writes {b[4]-a[4]}")

#!/bin/bash
# e2e native at 50k msg/s for 20 s; MODE=rm: 2 GB of files (dd-written) removed 5 s in by rm, outside the broker
# MODE=trunc: the same files shrunk by ftruncate in 64 MiB steps, then removed
set -u
D=/tmp/fx/datarm; rm -rf $D; PORT=19591
B_DIR=${B_DIR:-/tmp/fx/bin-cur}
mkdir -p /tmp/fx/junk; for f in 1 2; do dd if=/dev/zero of=/tmp/fx/junk/f$f bs=1M count=1024 oflag=direct status=none; done; sync; sleep 2
$B_DIR/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) > /tmp/fx/brokerrm.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
$B_DIR/rill topic create e --partitions 2 -b 127.0.0.1:$PORT > /dev/null
case ${MODE:-none} in
  rm) (sleep 5; /usr/bin/time -f "  rm %e s" rm -rf /tmp/fx/junk) & ;;
  trunc) (sleep 5; /usr/bin/time -f "  trunc %e s" python3 -c '
import os, time
for f in ("/tmp/fx/junk/f1", "/tmp/fx/junk/f2"):
    size = os.path.getsize(f)
    fd = os.open(f, os.O_WRONLY)
    while size > 0:
        if '${FSYNC:-0}' == '1': os.fdatasync(fd)
        size = max(0, size - ('${CHUNK:-64}' << 20)); os.truncate(f, size); time.sleep('${PAUSE:-0.01}')
    os.remove(f)
os.rmdir("/tmp/fx/junk")') & ;;
esac
$B_DIR/rill-bench e2e -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic e --rate 50000 --messages 1000000 --linger-ms 0 --batch-bytes 1048576 --json /tmp/fx/rrm.json > /tmp/fx/benchrm.log 2>&1
python3 -c 'import json; r=json.load(open("/tmp/fx/rrm.json")); l=r["latency_us"]; print("  MODE='${MODE:-none}' p50 %d p99 %d p99.9 %d p99.99 %d max %d us" % (l["p50"], l["p99"], l["p999"], l["p9999"], l["max"]))'
kill $B; wait $B; rm -rf $D /tmp/fx/junk

#!/bin/bash
# e2e native at 50k msg/s for 20 s on topic e; with DEL=1 a 2 GB topic is deleted 5 s in
set -u
D=/tmp/fx/datadel; rm -rf $D; PORT=19581
B_DIR=${B_DIR:-/tmp/fx/bin-cur}
$B_DIR/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) ${BFLAGS:-} > /tmp/fx/brokerdel.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
$B_DIR/rill topic create big --partitions 2 -b 127.0.0.1:$PORT > /dev/null
$B_DIR/rill topic create e --partitions 2 -b 127.0.0.1:$PORT > /dev/null
$B_DIR/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic big --messages 2000000 --batch-bytes 1048576 > /dev/null 2>&1
sync; sleep 2
if [ "${DEL:-0}" = 1 ]; then (sleep 4; [ "${PERF:-0}" = 1 ] && (perf ${PERFCMD:-sched record} -g -o /tmp/fx/perf-sched.data -- sleep 3 > /dev/null 2>&1 &); sleep 1; t0=$(date +%s.%N); $B_DIR/rill topic delete big -b 127.0.0.1:$PORT > /dev/null; t1=$(date +%s.%N)
  [ "${MON:-0}" = 1 ] && while ls -l /proc/$B/fd 2>/dev/null | grep -q "(deleted)"; do sleep 0.01; done; t2=$(date +%s.%N)
  echo "  delete command $(echo "$t1 - $t0" | bc) s, space back $(echo "$t2 - $t0" | bc) s after it") & fi
$B_DIR/rill-bench e2e -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic e --rate 50000 --messages 1000000 --linger-ms 0 --batch-bytes 1048576 --json /tmp/fx/rdel.json > /tmp/fx/benchdel.log 2>&1
python3 -c 'import json; r=json.load(open("/tmp/fx/rdel.json")); l=r["latency_us"]; print("  DEL='${DEL:-0}' p50 %d p99 %d p99.9 %d p99.99 %d max %d us" % (l["p50"], l["p99"], l["p999"], l["p9999"], l["max"]))'
kill $B; wait $B; rm -rf $D

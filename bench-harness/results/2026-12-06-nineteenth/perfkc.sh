#!/bin/bash
set -u
D=/tmp/fx/datapk; rm -rf $D; PORT=19521
/tmp/fx/bin-new/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) > /tmp/fx/brokerpk.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
/tmp/fx/bin-new/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --messages 2000000 --batch-bytes 1048576 > /dev/null 2>&1
perf record -F 2000 -g -p $B -o /tmp/fx/perf-kc.data 2>/dev/null &
P=$!
sleep 0.5
/tmp/fx/bin-new/rill-bench consume --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --messages 2000000 > /tmp/fx/benchpk.log 2>&1
kill -INT $P; wait $P
kill $B; wait $B; rm -rf $D

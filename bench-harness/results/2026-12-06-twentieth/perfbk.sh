#!/bin/bash
# perf of rill-bench (librdkafka producer or consumer) against the Kafka listener, fresh broker
set -u
D=/tmp/fx/databk; rm -rf $D; PORT=19561
B_DIR=${B_DIR:-/tmp/fx/bin-cur}
$B_DIR/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) > /tmp/fx/brokerbk.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
perf record -F 1999 -o /tmp/fx/perf-bk-prod.data -- $B_DIR/rill-bench produce --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes 1048576 > /tmp/fx/benchbk.log 2>&1
perf record -F 1999 -o /tmp/fx/perf-bk-cons.data -- $B_DIR/rill-bench consume --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --messages 2000000 > /tmp/fx/benchbkc.log 2>&1
kill $B; wait $B; rm -rf $D

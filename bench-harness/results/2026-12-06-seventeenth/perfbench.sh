#!/bin/bash
set -u
D=/tmp/fx/data; rm -rf $D; PORT=19341
${RILL:-/work/main/target/release/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen off > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
perf record -e cpu-clock -F 500 --call-graph dwarf,16384 -o /tmp/fx/perf.bench.data ${BENCH:-/work/main/target/release/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1
kill $B; wait $B; rm -rf $D

#!/bin/bash
# perf record of the broker (and separately the bench) during one produce-1000
set -u
D=/tmp/fx/data; rm -rf $D; PORT=19331
${RILL:-/work/main/target/release/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen off "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
perf record -e cpu-clock -F 2000 -g -p $B -o /tmp/fx/perf.broker.data 2>/dev/null &
P=$!
sleep 0.3
${BENCH:-/work/main/target/release/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1
kill -INT $P; wait $P
kill $B; wait $B; rm -rf $D
python3 -c 'import json; r=json.load(open("/tmp/fx/r.json")); print("%.0f msg/s" % r["msgs_per_sec"])'

#!/bin/bash
set -u
D=/tmp/fx/data; rm -rf $D
PORT=${PORT:-19331}
/work/main/target/release/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen off "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench e2e -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic e2e --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --messages 488400 --batch-bytes 107456 ${BURST:+--burst $BURST} --json /tmp/fx/e.json > /tmp/fx/bench.log 2>&1
python3 -c 'import json; r=json.load(open("/tmp/fx/e.json")); l=r["latency_us"]; print("p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms" % tuple(l[k]/1e3 for k in ("p50","p99","p999","p9999","max")))'
kill $B; wait $B; rm -rf $D

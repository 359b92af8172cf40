#!/bin/bash
# run rill broker --fsync ${FSYNC:-always}, then produce at 10k msg/s; print summary and broker metrics
set -u
D=/tmp/fx/data; rm -rf $D
PORT=${PORT:-19311}; MPORT=$((PORT+5))
/work/main/target/release/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-always} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$MPORT "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
/usr/bin/time -f client_cpu_%U+%S /work/main/target/release/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages ${N:-100000} --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1
python3 -c 'import json; r=json.load(open("/tmp/fx/r.json")); print({k:r[k] for k in ("msgs_per_sec","latency_us","request_latency_us") if k in r})'
curl -s 127.0.0.1:$MPORT/metrics > /tmp/fx/metrics.txt
awk "{print \"broker cpu ticks\", \$14+\$15}" /proc/$B/stat; kill $B; wait $B
rm -rf $D

#!/bin/bash
# compare-iggy's produce-10m shape on a fresh broker (fsync never): 2 producers, 2 partitions,
# 1 KiB messages, linger 5 ms, 1000-message batches; keeps the broker's metrics.
set -u
D=/tmp/fx/data10m; rm -rf $D
PORT=${PORT:-19371}
${RILL:-/tmp/fx/bin-base/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/broker10m.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
python3 /work/main/scripts/lost-time-probe.py > /tmp/fx/probe10m.out & P=$!
a=$(cat /sys/block/vda/stat)
${BENCH:-/tmp/fx/bin-base/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic p10m --producers 2 --acks 1 --linger-ms 5 --messages ${N:-10000000} --batch-bytes 1072256 --json /tmp/fx/r10m.json ${BENCHARGS:-} > /tmp/fx/bench10m.log 2>&1
b=$(cat /sys/block/vda/stat)
kill -TERM $P; wait $P
python3 -c 'import json; r=json.load(open("/tmp/fx/r10m.json")); q=r["request_latency_us"]; print("%.0f msg/s req p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms n=%d" % (r["msgs_per_sec"], q["p50"]/1e3, q["p99"]/1e3, q["p999"]/1e3, q["p9999"]/1e3, q["max"]/1e3, r.get("requests",0)))'
cat /tmp/fx/probe10m.out | tr '\n' ' '; echo
python3 -c "
a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); print('  device writes', b[4]-a[4], 'flushes', b[15]-a[15], 'flush ms', b[16]-a[16], 'write ms', b[7]-a[7])"
curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metrics10m.txt
kill $B; wait $B; rm -rf $D

#!/bin/bash
# Kafka-listener produce on a fresh broker: librdkafka via rill-bench, 2 producers, 2 partitions, 1 MiB batches, acks 1
set -u
D=/tmp/fx/datak; rm -rf $D
PORT=${PORT:-19421}
${RILL:-/tmp/fx/bin-cur/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/brokerk.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
/usr/bin/time -f "  bench cpu %U user %S sys" ${BENCH:-/tmp/fx/bin-cur/rill-bench} produce --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages ${N:-2000000} --batch-bytes 1048576 --json /tmp/fx/rk.json > /tmp/fx/benchk.log 2>/tmp/fx/benchk.err; tail -1 /tmp/fx/benchk.err
python3 -c 'import json; r=json.load(open("/tmp/fx/rk.json")); print("  %.0f msg/s p50 %.1f ms p99 %.1f ms" % (r["msgs_per_sec"], r["latency_us"]["p50"]/1e3, r["latency_us"]["p99"]/1e3))'
awk '{print "  broker cpu ticks", $14+$15, "user", $14, "sys", $15, "minflt", $10}' /proc/$B/stat; kill $B; wait $B
rm -rf $D

#!/bin/bash
# Kafka-listener produce then consume (librdkafka via rill-bench) on a fresh broker: 1M x 1 KiB, 2 partitions
set -u
D=/tmp/fx/datakc; rm -rf $D
PORT=${PORT:-19441}
${RILL:-/tmp/fx/bin-cur/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/brokerkc.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
BN=${BENCH:-/tmp/fx/bin-cur/rill-bench}
PD=${PDRIVER:-kafka}; PB=127.0.0.1:$((PORT+2)); [ $PD = native ] && PB=127.0.0.1:$PORT
$BN produce --driver $PD -b $PB --partitions 2 --message-bytes 1024 --topic t --acks 1 --linger-ms 5 --messages ${N:-1000000} --batch-bytes 1048576 --json /tmp/fx/rkc1.json > /tmp/fx/benchkc.log 2>&1
t0=$(awk '{print $14+$15}' /proc/$B/stat)
/usr/bin/time -f "  consume client cpu %U user %S sys, wall %e s" $BN consume --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --messages ${N:-1000000} ${CARGS:-} --json /tmp/fx/rkc2.json >> /tmp/fx/benchkc.log 2>&1
curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metricskc.txt; t1=$(awk '{print $14+$15}' /proc/$B/stat)
python3 -c 'import json; a=json.load(open("/tmp/fx/rkc1.json")); b=json.load(open("/tmp/fx/rkc2.json")); print("  produce %.0f msg/s, consume %.0f msg/s" % (a["msgs_per_sec"], b["msgs_per_sec"]))'
echo "  broker cpu ticks during consume $((t1-t0))"
kill $B; wait $B
rm -rf $D

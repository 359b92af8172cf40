#!/bin/bash
# perf of the broker during a Kafka-listener produce (librdkafka), and of rill-bench
set -u
D=/tmp/fx/datapp; rm -rf $D; PORT=19541
B_DIR=${B_DIR:-/tmp/fx/bin-cur}
$B_DIR/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) --metrics-listen 127.0.0.1:$((PORT+5)) > /tmp/fx/brokerpp.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
perf record -F 1999 -g -p $B -o /tmp/fx/perf-kp.data 2>/dev/null &
P=$!
sleep 0.5
/usr/bin/time -f "  bench cpu %U user %S sys" -o /tmp/fx/time.txt $B_DIR/rill-bench produce --driver ${DRIVER:-kafka} -b 127.0.0.1:$((PORT+${OFF:-2})) --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages ${N:-2000000} --batch-bytes 1048576 --json /tmp/fx/rkp.json > /tmp/fx/benchpp.log 2>&1
kill -INT $P; wait $P; cat /tmp/fx/time.txt
awk '{print "  broker cpu ticks", $14+$15, "user", $14, "sys", $15}' /proc/$B/stat
kill $B; wait $B; rm -rf $D
python3 -c 'import json; r=json.load(open("/tmp/fx/rkp.json")); print("  %.0f msg/s" % r["msgs_per_sec"])'

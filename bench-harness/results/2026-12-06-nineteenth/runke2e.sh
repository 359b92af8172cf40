#!/bin/bash
# e2e at 50k msg/s through DRIVER (kafka|native), 10 s, fresh broker; broker produce duration histogram
set -u
D=/tmp/fx/datake; rm -rf $D; PORT=${PORT:-19481}
${RILL:-/tmp/fx/bin-new/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) --metrics-listen 127.0.0.1:$((PORT+5)) > /tmp/fx/brokerke.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
DR=${DRIVER:-kafka}; BS=127.0.0.1:$((PORT+2)); [ $DR = native ] && BS=127.0.0.1:$PORT
${BENCH:-/tmp/fx/bin-new/rill-bench} e2e --driver $DR -b $BS --partitions 2 --message-bytes 1024 --topic e --rate 50000 --messages 500000 --linger-ms 0 ${BARGS:-} --json /tmp/fx/rke.json > /tmp/fx/benchke.log 2>&1
curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metricske-$DR.txt
python3 - /tmp/fx/rke.json /tmp/fx/metricske-$DR.txt <<'PY'
import json, sys, re, collections
r = json.load(open(sys.argv[1])); a = r.get("ack_latency_us") or {}
print("  e2e p50 %.0f us, ack p50 %.0f us" % (r["latency_us"]["p50"], a.get("p50", 0)))
b = collections.Counter(); c = 0
for line in open(sys.argv[2]):
    m = re.match(r'rill_produce_duration_seconds_bucket\{shard="\d",le="([^"]+)"\} (\d+)', line)
    if m: b[m.group(1)] += int(m.group(2))
    m = re.match(r'rill_requests_total\{shard="\d",listener="(\w+)",api="Produce"\} (\d+)', line)
    if m: print("  produce requests", m.group(1), m.group(2))
tot = b["+Inf"]
print("  broker produce duration: " + ", ".join("<=%s s %.0f%%" % (k, 100 * b[k] / tot) for k in ("0.0001", "0.00025", "0.0005", "0.001") if k in b))
PY
kill $B; wait $B; rm -rf $D

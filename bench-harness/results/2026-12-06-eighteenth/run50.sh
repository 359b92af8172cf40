#!/bin/bash
# compare-iggy's e2e-50mb shape on a fresh broker (fsync never): 2 producers, 2 consumers,
# 2 partitions, linger 0, 50 MB/s of 1 KiB messages, 100-message batches at most.
set -u
D=/tmp/fx/data50; rm -rf $D
PORT=${PORT:-19411}
${RILL:-/tmp/fx/bin-base/rill} broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/broker50.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
python3 /work/main/scripts/lost-time-probe.py > /tmp/fx/probe50.out & P=$!
${BENCH:-/tmp/fx/bin-base/rill-bench} e2e -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic e2e --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --messages ${N:-488400} --batch-bytes $((100*(1024+48)+256)) --json /tmp/fx/r50.json ${BENCHARGS:-} > /tmp/fx/bench50.log 2>&1
kill -TERM $P; wait $P
python3 -c 'import json; r=json.load(open("/tmp/fx/r50.json")); l=r["latency_us"]; print("%.0f msg/s e2e p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms" % (r["msgs_per_sec"], l["p50"]/1e3, l["p99"]/1e3, l["p999"]/1e3, l["p9999"]/1e3, l["max"]/1e3))'
cat /tmp/fx/probe50.out | tr '\n' ' '; echo
curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metrics50.txt
kill $B; wait $B; rm -rf $D

#!/bin/bash
# fsync-10k shape: --fsync always, 2 producers, linger 0, 10,000 msg/s, 100k messages
set -u
D=/tmp/fx/data10k; rm -rf $D
PORT=${PORT:-19361}
${RILL:-/tmp/fx/bin-base/rill} broker --data-dir $D --shards ${SHARDS:-2} --fsync always --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/broker10k.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
a=$(cat /sys/block/vda/stat)
${BWRAP:-} ${BENCH:-/tmp/fx/bin-base/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate ${RATE:-10000} --messages ${N:-100000} --batch-bytes 1072256 --json /tmp/fx/r10k.json ${BENCHARGS:-} > /tmp/fx/bench10k.log 2>&1
b=$(cat /sys/block/vda/stat)
python3 -c 'import json; r=json.load(open("/tmp/fx/r10k.json")); l=r["latency_us"]; print("%.0f msg/s ack p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms" % (r["msgs_per_sec"], l["p50"]/1e3, l["p99"]/1e3, l.get("p999",0)/1e3, l.get("p9999",0)/1e3, l.get("max",0)/1e3)); print({k:v for k,v in r.items() if "req" in k})'
python3 -c "
a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); print('  device writes', b[4]-a[4], 'flushes', b[15]-a[15], 'flush ms', b[16]-a[16], 'write ms', b[7]-a[7])"
awk "{print \"  broker cpu ticks\", \$14, \$15}" /proc/$B/stat; grep -E "^(voluntary|nonvoluntary)" /proc/$B/status; curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metrics10k.txt
kill $B; wait $B; rm -rf $D

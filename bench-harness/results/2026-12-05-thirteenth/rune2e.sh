#!/bin/bash
# e2e-50mb shape: 2 producers, 2 consumers, 2 partitions, linger 0, 50 MB/s; prints latency, device ops, lost time
set -u
D=/tmp/fx/data; rm -rf $D
PORT=${PORT:-19321}
env ${RILL_ENV:-X=1} ${WRAP:-} ${RILL:-/work/main/target/release/rill} broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
python3 /work/main/scripts/lost-time-probe.py > /tmp/fx/probe.out & P=$!
a=$(cat /sys/block/vda/stat); T0=$(date +%s.%N)
${BENCH:-/work/main/target/release/rill-bench} e2e -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic e --producers 2 --consumers 2 --acks 1 --linger-ms ${LINGER:-0} --rate 48828 --messages ${N:-488400} --batch-bytes $((100*1072+256)) --json /tmp/fx/r.json ${BENCHARGS:-} > /tmp/fx/bench.log 2>&1
b=$(cat /sys/block/vda/stat); T1=$(date +%s.%N); kill $P; wait $P
W=$(python3 -c "print(($T1-$T0))")
curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metrics.txt
python3 -c 'import json; r=json.load(open("/tmp/fx/r.json")); l=r["latency_us"]; print("p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms" % (l["p50"]/1e3, l["p99"]/1e3, l["p999"]/1e3, l["p9999"]/1e3, l["max"]/1e3))'
python3 -c "
a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); w=$W; print('  wall %.1f s, device writes/s %.0f, KB/write %.0f, flushes %d, write ms %d' % (w, (b[4]-a[4])/w, (b[6]-a[6])*512/1024/max(1,b[4]-a[4]), b[15]-a[15], b[7]-a[7]))"
echo "  probe: $(tr '\n' ' ' < /tmp/fx/probe.out)"
awk '{print "  broker cpu ticks", $14+$15}' /proc/$B/stat; kill $B; wait $B
rm -rf $D

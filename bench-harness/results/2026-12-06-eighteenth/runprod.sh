#!/bin/bash
# produce-1000 shape: 2 producers, 2 partitions, 1 MiB batches, fsync never; prints result, freeze, cpu per thread
set -u
D=/tmp/fx/data; rm -rf $D
PORT=${PORT:-19321}
env ${RILL_ENV:-X=1} ${WRAP:-} ${RILL:-/work/main/target/release/rill} broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:$((PORT+5)) "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
[ -n "${MON:-}" ] && (sleep 0.5; python3 /tmp/fx/inflight.py ${SECS:-3} > /tmp/fx/gaps.txt; ) &

s0=$(head -1 /proc/stat); a=$(cat /sys/block/vda/stat); T0=$(date +%s.%N)
/usr/bin/time -f "  bench cpu %U user %S sys" ${BENCH:-/work/main/target/release/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 5 --messages ${N:-2000000} --batch-bytes ${BB:-1072256} --json /tmp/fx/r.json ${BENCHARGS:-} > /tmp/fx/bench.log 2>/tmp/fx/bench.err; tail -1 /tmp/fx/bench.err
s1=$(head -1 /proc/stat); b=$(cat /sys/block/vda/stat); T1=$(date +%s.%N); echo wall $(python3 -c "print(round(($T1-$T0)*1000))") ms; curl -s 127.0.0.1:$((PORT+5))/metrics > /tmp/fx/metrics.txt
python3 -c 'import json; r=json.load(open("/tmp/fx/r.json")); print("%.0f msg/s p50 %.1f ms p99 %.1f ms" % (r["msgs_per_sec"], r["latency_us"]["p50"]/1e3, r["latency_us"]["p99"]/1e3))'
python3 -c "
a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); print('  device writes', b[4]-a[4], 'sectors', b[6]-a[6], 'flushes', b[15]-a[15], 'write ms', b[7]-a[7], 'io_ticks ms', b[9]-a[9], 'queue ms', b[10]-a[10])"
awk '{print "  broker cpu ticks", $14+$15, "minflt", $10}' /proc/$B/stat; kill $B; wait $B
rm -rf $D
[ -n "${MON:-}" ] && cat /tmp/fx/gaps.txt
python3 -c "
a=list(map(int,'$s0'.split()[1:])); b=list(map(int,'$s1'.split()[1:])); d=[y-x for x,y in zip(a,b)]; t=sum(d)
print('  machine: user %.0f%% sys %.0f%% idle %.0f%% iowait %.0f%% irq+soft %.0f%% steal %.0f%%' % tuple(100*x/t for x in (d[0]+d[1], d[2], d[3], d[4], d[5]+d[6], d[7])))"

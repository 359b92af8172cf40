#!/usr/bin/env bash
# ab10m.sh ROUNDS BIN... : fresh broker per run, compare-iggy's 10 M produce with one
# 1000-message batch in flight per connection; per-request latency percentiles.
R=$1; shift
BB=$(( 1000*(1024+48)+256 ))
d=/tmp/rollab/data; P=19541
for r in $(seq 1 $R); do for bin in "$@"; do
  rm -rf $d
  $bin broker --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off > /tmp/rollab/broker.log 2>&1 &
  bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
  /work/main/target/release/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p10m --producers 2 --acks 1 --linger-ms 5 --messages 10000000 --batch-bytes $BB --partition-request-bytes $BB --max-in-flight 1 --json /tmp/rollab/p.json >/dev/null 2>&1
  res=$(python3 -c 'import json; r=json.load(open("/tmp/rollab/p.json")); q=r["request_latency_us"]; print("%.0f msg/s; per request p50 %.1f p99 %.1f p99.9 %.1f p99.99 %.1f max %.1f ms" % (r["msgs_per_sec"], q["p50"]/1e3, q["p99"]/1e3, q["p999"]/1e3, q["p9999"]/1e3, q["max"]/1e3))' 2>/dev/null)
  kill $bp; wait $bp 2>/dev/null
  slow=$(grep -c "rolling to segment" /tmp/rollab/broker.log)
  worst=$(grep -o "took [0-9]* ms" /tmp/rollab/broker.log | awk '{print $2}' | sort -n | tail -1)
  echo "$r $bin $res | slow rolls $slow worst ${worst:-0} ms"
done; done
rm -rf $d

#!/usr/bin/env bash
# ab2.sh ROUNDS BIN... : fresh broker per run, --segment-bytes 16 MiB (a run rolls ~30 times),
# only the 50 MB/s e2e in Iggy's shape (no big produce before it).
R=$1; shift
B100=$(( 100*(1024+48)+256 ))
d=/tmp/rollab/data; P=19541
for r in $(seq 1 $R); do for bin in "$@"; do
  rm -rf $d
  $bin broker --data-dir $d --shards 2 --fsync never --segment-bytes 16777216 --listen 127.0.0.1:$P --kafka-listen off $EXTRA > /tmp/rollab/broker.log 2>&1 &
  bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
  /work/main/target/release/rill-bench e2e -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic e2eb --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --burst 100 --messages 488400 --batch-bytes $B100 --json /tmp/rollab/e2e.json >/dev/null 2>&1
  lat=$(python3 -c 'import json; r=json.load(open("/tmp/rollab/e2e.json")); l=r["latency_us"]; print("p50 %.2f p99 %.2f p99.9 %.2f p99.99 %.2f max %.2f ms" % (l["p50"]/1e3, l["p99"]/1e3, l["p999"]/1e3, l["p9999"]/1e3, l["max"]/1e3))' 2>/dev/null)
  kill $bp; wait $bp 2>/dev/null
  rolls=$(ls $d/topics/*/* 2>/dev/null | grep -c "\.log$")
  slow=$(grep -c "rolling to segment" /tmp/rollab/broker.log)
  worst=$(grep -o "took [0-9]* ms" /tmp/rollab/broker.log | awk '{print $2}' | sort -n | tail -1)
  echo "$r $bin e2e $lat | segments $rolls slow rolls $slow worst ${worst:-0} ms"
done; done
rm -rf $d

#!/usr/bin/env bash
# /tmp/raab/tc.sh ROUNDS CACHE_BYTES... : fresh broker per run, produce 2M then consume on it
R=$1; shift
BIN=/work/main/target/release
BB=$(( 1000*(1024+48)+256 ))
d=/tmp/raab/tcdata; P=19521
for r in $(seq 1 $R); do for c in "$@"; do
  rm -rf $d
  $BIN/rill broker --tail-cache-bytes $c $EXTRA --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off > /tmp/raab/broker.log 2>&1 &
  bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
  pr=$($BIN/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB 2>&1 | tail -1 | grep -o "[0-9]* msg/s")
  cpu1=$(awk '{printf "%.2f", ($14+$15)/100}' /proc/$bp/stat)
  flt1=$(awk '{print $10}' /proc/$bp/stat)
  co=$($BIN/rill-bench consume -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --consumers 2 --messages 2000000 2>&1 | tail -1 | grep -o "[0-9]* msg/s")
  rss=$(grep VmRSS /proc/$bp/status | awk '{print $2/1024 " MB"}')
  kill $bp; wait $bp 2>/dev/null
  echo "$r cache=$c produce $pr (broker cpu $cpu1 s, minflt $flt1) consume $co rss $rss"
done; done
rm -rf $d

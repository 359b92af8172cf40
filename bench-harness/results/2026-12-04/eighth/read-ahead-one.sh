#!/usr/bin/env bash
# /tmp/raab/one.sh WINDOWS [flags]: produce 2M, restart, consume, print read metrics
BIN=/work/main/target/release
BB=$(( 1000*(1024+48)+256 ))
d=/tmp/raab/data
P=19511
start() { $BIN/rill broker "$@" --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off --metrics-listen 127.0.0.1:19590 > /tmp/raab/broker.log 2>&1 &
  bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done; }
if [ ! -d $d ]; then start; $BIN/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB 2>&1 | tail -1; kill $bp; wait $bp 2>/dev/null; fi
start "$@"
$BIN/rill-bench consume -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --consumers 2 --messages 2000000 2>&1 | tail -1
curl -s 127.0.0.1:19590/metrics | grep -E "^rill_(read_ahead|tail_cache|fetch)" | grep -v bucket
kill $bp; wait $bp 2>/dev/null

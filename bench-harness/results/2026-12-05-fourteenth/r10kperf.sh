#!/bin/bash
D=/tmp/fx/data; rm -rf $D; PORT=19311
/work/main/target/release/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:19316 > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages 50000 --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1 &
C=$!
sleep 1.5
perf record -F 999 -g -p $B -o /tmp/fx/perf.b.data -- sleep 2 2>/dev/null &
perf record -F 999 -g -p $C -o /tmp/fx/perf.c.data -- sleep 2 2>/dev/null
wait $C
kill $B; wait $B; rm -rf $D

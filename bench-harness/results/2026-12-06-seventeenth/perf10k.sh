#!/bin/bash
set -u
D=/tmp/fx/data10k; rm -rf $D; PORT=19371
${RILL:-/tmp/fx/bin-base/rill} broker --data-dir $D --shards 2 --fsync always --listen 127.0.0.1:$PORT --kafka-listen off > /tmp/fx/broker10k.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
${BENCH:-/tmp/fx/bin-base/rill-bench} produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages 100000 --batch-bytes 1072256 --json /tmp/fx/r10k.json > /tmp/fx/bench10k.log 2>&1 &
P=$!
sleep 3
perf record -e cpu-clock -F 700 --call-graph dwarf,16384 -p $B -o /tmp/fx/perf10k.data -- sleep 4 2>/dev/null
wait $P
kill $B; wait $B; rm -rf $D

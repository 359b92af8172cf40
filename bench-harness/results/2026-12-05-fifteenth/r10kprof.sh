#!/bin/bash
# 10,000 msg/s, linger 0: a flat cpu-clock profile of the broker (self time by symbol).
D=/tmp/fx/data; rm -rf $D; mkdir -p /tmp/fx; PORT=19311
/work/main/target/release/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:19316 "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages ${N:-50000} --batch-bytes 1072256 > /tmp/fx/bench.log 2>&1 &
C=$!
sleep 1.5
perf record -e cpu-clock -F 1999 -g -p $B -o /tmp/fx/perf.b.data -- sleep 2 2>/dev/null >/dev/null
wait $C
kill $B; wait $B; rm -rf $D
perf report -i /tmp/fx/perf.b.data --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -${TOP:-45}

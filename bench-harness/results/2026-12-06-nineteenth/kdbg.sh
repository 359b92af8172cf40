#!/bin/bash
set -u
D=/tmp/fx/datakd; rm -rf $D; PORT=19461
/tmp/fx/bin-cur/rill broker --data-dir $D --shards 2 --fsync never --listen 127.0.0.1:$PORT --kafka-listen 127.0.0.1:$((PORT+2)) > /tmp/fx/brokerkd.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((PORT+2))) 2>/dev/null && break; sleep 0.1; done
BN=/tmp/fx/bin-cur/rill-bench
$BN produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --acks 1 --linger-ms 5 --messages 1000000 --batch-bytes 1048576 > /dev/null 2>&1
RUST_LOG=debug $BN consume --driver kafka -b 127.0.0.1:$((PORT+2)) --partitions 2 --message-bytes 1024 --topic t --messages 1000000 --kafka-config debug=fetch,protocol > /tmp/fx/kdbg.out 2>&1
kill $B; wait $B; rm -rf $D

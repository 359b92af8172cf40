#!/usr/bin/env bash
BB=$(( 1000*(1024+48)+256 )); d=/tmp/rollab/data; P=19541; M=19549
rm -rf $d
/work/main/target/release/rill broker --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off --metrics-listen 127.0.0.1:$M "$@" > /tmp/rollab/broker.log 2>&1 &
bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers ${PRODUCERS:-2} --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB $CLIENT 2>&1 | tail -1 | cut -c1-90
curl -s 127.0.0.1:$M/metrics | grep -E "round_bytes_(sum|count)|write_duration_seconds_(sum|count)|produce_duration_seconds_(sum|count)"
kill $bp; wait $bp 2>/dev/null; rm -rf $d

#!/usr/bin/env bash
# /tmp/ab.sh ROUNDS BIN... : fresh broker per run, produce-1000 shape, prints msg/s and broker write sum
R=$1; shift
BB=$(( 1000*(1024+48)+256 ))
for r in $(seq 1 $R); do
  for spec in "$@"; do IFS=: read -r label bin bflags <<< "$spec"
    d=/tmp/ab-data; rm -rf $d
    $bin broker $bflags --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:19411 --kafka-listen off --metrics-listen 127.0.0.1:19490 > /tmp/ab-broker.log 2>&1 &
    bp=$!
    for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19411) 2>/dev/null && break; sleep 0.1; done
    out=$(/work/main/target/release/rill-bench produce -b 127.0.0.1:19411 --partitions 2 --message-bytes 1024 --topic p1000 --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB $EXTRA 2>&1 | tail -1)
    ws=$(curl -s 127.0.0.1:19490/metrics | grep "^rill_group_commit_write_duration_seconds_sum" | awk '{s+=$2} END {printf "%.2f", s}')
    cpu=$(awk '{printf "%.2f", ($14+$15)/100}' /proc/$bp/stat)
    kill $bp; wait $bp 2>/dev/null
    echo "$r $label $(echo "$out" | grep -o '[0-9]* msg/s') write_sum $ws broker_cpu $cpu reqlat $(echo "$out" | grep -o 'request latency us p50 [0-9]*' | awk '{print $NF}')"
  done
done
rm -rf /tmp/ab-data

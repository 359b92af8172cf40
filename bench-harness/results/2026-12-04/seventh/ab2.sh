#!/usr/bin/env bash
# roll A/B: fresh broker per run, --segment-bytes 16 MiB, 4 M x 1 KiB in Iggy's shape (one batch in flight)
R=$1; shift
BB=$(( 1000*(1024+48)+256 ))
for r in $(seq 1 $R); do
  for spec in "$@"; do IFS=: read -r label bin <<< "$spec"
    d=/tmp/ab2-data; rm -rf $d
    RUST_LOG=info $bin broker --data-dir $d --shards 2 --fsync never --segment-bytes 16777216 --listen 127.0.0.1:19511 --kafka-listen off > /tmp/ab2-broker.log 2>&1 &
    bp=$!
    for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19511) 2>/dev/null && break; sleep 0.1; done
    [ -n "$NOISE" ] && { fio --name=noise --filename=/tmp/ab2-noise.dat --size=1g --rw=write --bs=64k --fsync=8 --time_based --runtime=600 --rate=100m >/dev/null 2>&1 & np=$!; }
    out=$(/work/main/target/release/rill-bench produce -b 127.0.0.1:19511 --partitions 2 --message-bytes 1024 --topic p --producers 2 --acks 1 --linger-ms 5 --messages 4000000 --batch-bytes $BB --max-in-flight 1 --partition-request-bytes $BB 2>&1 | tail -1)
    kill $bp; wait $bp 2>/dev/null; [ -n "$NOISE" ] && { kill $np; wait $np 2>/dev/null; }
    slow=$(grep -c "rolling to segment" /tmp/ab2-broker.log)
    idx=$(grep -o "its indexes written [0-9]* ms" /tmp/ab2-broker.log | awk '{s+=$4; if ($4>m) m=$4} END {printf "sum %d max %d", s, m}')
    tot=$(grep -o "took [0-9]* ms" /tmp/ab2-broker.log | awk '{if ($2>m) m=$2} END {printf "%d", m}')
    echo "$r $label $(echo "$out" | grep -o '[0-9]* msg/s') req_p9999 $(echo "$out" | grep -o 'request latency us .*' | awk '{print $11}') slow_rolls $slow max_roll $tot index_ms $idx"
  done
done
rm -rf /tmp/ab2-data /tmp/ab2-noise.dat

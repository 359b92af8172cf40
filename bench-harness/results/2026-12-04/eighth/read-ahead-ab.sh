#!/usr/bin/env bash
# /tmp/raab/ab.sh ROUNDS WINDOWS... : one 2 M x 1 KiB topic (2 partitions, 2 shards), consumed
# from the start by a fresh broker per run with --file-read-ahead-windows W, alternating.
R=$1; shift
BIN=/work/main/target/release
BB=$(( 1000*(1024+48)+256 ))
d=/tmp/raab/data; rm -rf $d
P=19511
start() { $BIN/rill broker "$@" --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off --metrics-listen 127.0.0.1:19590 > /tmp/raab/broker.log 2>&1 &
  bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done; }
start
$BIN/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB 2>&1 | tail -1
kill $bp; wait $bp 2>/dev/null
fio_read() { mkdir -p /tmp/raab/fio; fio --name=r --directory=/tmp/raab/fio --rw=read --bs=4M --size=1G --numjobs=2 --group_reporting --direct=1 --ioengine=io_uring --iodepth=$1 --runtime=4 --time_based --output-format=json | python3 -c "import json,sys;j=json.load(sys.stdin);print(round(j['jobs'][0]['read']['bw_bytes']/1e6))"; }
mkdir -p /tmp/raab/fio; fio --name=r --directory=/tmp/raab/fio --rw=write --bs=4M --size=1G --numjobs=2 --direct=1 --ioengine=io_uring --iodepth=8 --output-format=terse >/dev/null
for r in $(seq 1 $R); do
  echo "$r fio 2 files 4M depth1 $(fio_read 1) MB/s depth4 $(fio_read 4) MB/s"
  for w in "$@"; do
    start --file-read-ahead-windows $w --file-read-ahead-bytes ${RA_BYTES:-67108864}
    out=$($BIN/rill-bench consume -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --consumers 2 --messages 2000000 2>&1 | tail -1)
    cpu=$(awk '{printf "%.2f", ($14+$15)/100}' /proc/$bp/stat)
    taken=$(curl -s 127.0.0.1:19590/metrics | grep "^rill_read_ahead_taken_total" | awk '{s+=$2} END {print s}')
    kill $bp; wait $bp 2>/dev/null
    echo "$r windows=$w $(echo "$out" | grep -o '[0-9]* msg/s') broker_cpu $cpu taken $taken"
  done
done
rm -rf /tmp/raab/data /tmp/raab/fio

#!/usr/bin/env bash
# probe.sh BIN: one round (produce 2 GB then e2e Iggy shape), the group-commit write and
# fdatasync histograms scraped before and after the e2e, diskstats of vda sampled each 100 ms.
bin=$1
BB=$(( 1000*(1024+48)+256 )); B100=$(( 100*(1024+48)+256 ))
d=/tmp/rollab/data; P=19541; M=19549
rm -rf $d
$bin broker --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off --metrics-listen 127.0.0.1:$M $EXTRA > /tmp/rollab/broker.log 2>&1 &
bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB 2>&1 | tail -1
curl -s 127.0.0.1:$M/metrics | grep "group_commit_write_duration_seconds_bucket\|fdatasync_duration_seconds_bucket" > before.txt
( while kill -0 $bp 2>/dev/null; do echo "$(date +%s.%N) $(grep ' vda ' /proc/diskstats)"; sleep 0.1; done ) > diskstats.txt &
dsp=$!
/work/main/target/release/rill-bench e2e -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic e2eb --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --burst 100 --messages 488400 --batch-bytes $B100 --json /tmp/rollab/e2e.json 2>&1 | tail -1
curl -s 127.0.0.1:$M/metrics | grep "group_commit_write_duration_seconds_bucket\|fdatasync_duration_seconds_bucket" > after.txt
kill $dsp; kill $bp; wait $bp 2>/dev/null
python3 -c 'import json; r=json.load(open("/tmp/rollab/e2e.json")); l=r["latency_us"]; print("p50 %.2f p99 %.2f p99.99 %.2f max %.2f ms" % (l["p50"]/1e3, l["p99"]/1e3, l["p9999"]/1e3, l["max"]/1e3))'
paste before.txt after.txt | awk '{split($1,a,"le=\""); split(a[2],b,"\""); print b[1], $4-$2}' | uniq
rm -rf $d

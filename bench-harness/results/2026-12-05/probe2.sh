#!/usr/bin/env bash
# probe2.sh BIN: ab2's run once, write-duration histogram after.
bin=$1; B100=$(( 100*(1024+48)+256 )); d=/tmp/rollab/data; P=19541; M=19549
rm -rf $d
$bin broker --data-dir $d --shards 2 --fsync never --segment-bytes ${SEG:-16777216} --listen 127.0.0.1:$P --kafka-listen off --metrics-listen 127.0.0.1:$M $EXTRA > /tmp/rollab/broker.log 2>&1 &
bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench e2e -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic e2eb --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --burst 100 --messages 488400 --batch-bytes $B100 --json /tmp/rollab/e2e.json 2>&1 | tail -1 | grep -o "latency us p50 [0-9]* p99 [0-9]* p99.9 [0-9]* p99.99 [0-9]*" | head -1
curl -s 127.0.0.1:$M/metrics | grep "group_commit_write_duration_seconds_bucket" | python3 -c "import sys,re
v={}
for l in sys.stdin:
  m=re.search(r'shard=\"(\d)\",le=\"([^\"]+)\"} (\d+)',l)
  v.setdefault(m[1],{})[m[2]]=int(m[3])
print('writes >10ms:', sum(s['+Inf']-s['0.01'] for s in v.values()), '>50ms:', sum(s['+Inf']-s['0.05'] for s in v.values()))"
kill $bp; wait $bp 2>/dev/null; rm -rf $d

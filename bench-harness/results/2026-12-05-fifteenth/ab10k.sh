#!/bin/bash
# A/B at 10,000 msg/s (2 producers, linger 0, 2 partitions, 2 shards, 1 KiB): two broker
# binaries alternated round by round. Per run: ack latency, broker CPU (ticks of 10 ms over
# the run), rill-bench CPU, and the share of time the VM was stopped (lost-time probe).
# usage: ab10k.sh ROUNDS DIR_A DIR_B [broker args...]   (env FSYNC, N)
set -u
R=$1; A=$2; Bd=$3; shift 3
PORT=19311; D=/tmp/fx/data
for r in $(seq $R); do for bin in $A $Bd; do
  rm -rf $D
  $bin/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:19316 "$@" > /tmp/fx/broker.log 2>&1 &
  B=$!
  for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
  python3 /work/main/scripts/lost-time-probe.py > /tmp/fx/probe.txt & P=$!
  /usr/bin/time -f "client_cpu %U+%S" $bin/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages ${N:-100000} --batch-bytes 1072256 > /tmp/fx/bench.log 2>&1
  kill $P; wait $P 2>/dev/null
  t=$(awk '{print $14+$15}' /proc/$B/stat)
  # the slowest device waits of the run: fdatasync and group-commit writes over 100 ms
  slow=$(curl -s 127.0.0.1:19316/metrics | python3 -c '
import sys, re
c = {}
for l in sys.stdin:
    m = re.match(r"rill_(fdatasync|group_commit_write)_duration_seconds_bucket\{shard=\"\d+\",le=\"([^\"]+)\"\} (\d+)", l)
    if m: c.setdefault(m.group(1), {}).setdefault(m.group(2), 0); c[m.group(1)][m.group(2)] += int(m.group(3))
out = []
for k, b in c.items():
    tot = b.get("+Inf", 0); le = {float(x): v for x, v in b.items() if x != "+Inf"}
    under = max((v for x, v in le.items() if x <= 0.1), default=0)
    out.append("%s_over_100ms %d" % (k, tot - under))
print(" ".join(out))')
  kill $B; wait $B
  echo "round $r $(basename $bin) fsync=${FSYNC:-never} broker_ticks $t $(grep -o 'client_cpu.*' /tmp/fx/bench.log) $(tr '\n' ' ' < /tmp/fx/probe.txt) $slow"
  grep -o "latency us p50 [0-9]* p99 [0-9]* p99.9 [0-9]* p99.99 [0-9]* max [0-9]*; [0-9]* requests" /tmp/fx/bench.log | head -1
done; done
rm -rf $D

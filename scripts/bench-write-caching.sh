#!/usr/bin/env bash
# Write caching off vs on (--write-caching), same binary, 3 alternating rounds, --fsync always,
# (FSYNC=never for the other policy) 2 shards, 2 partitions, 1 KiB messages: producer-to-consumer latency at 50 MB/s and at
# 10,000 msg/s (2 producers, 2 consumers, linger 0), and 1000-message-batch produce throughput.
# Medians over the rounds. Binaries from RILL_BIN_DIR [target/release]; data in /tmp, removed.
set -u
R=${RILL_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
out=/tmp/wc-bench; rm -rf $out; mkdir -p $out
for round in 1 2 3; do
  for wc in false true; do
    for fsync in ${FSYNC:-always}; do
      d=$(mktemp -d /tmp/wcdata.XXXX); port=$((20000 + RANDOM % 20000))
      $R/rill broker --data-dir $d --shards 2 --fsync $fsync --listen 127.0.0.1:$port --kafka-listen off --write-caching $wc >$out/broker.log 2>&1 &
      pid=$!
      for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
      $R/rill-bench e2e -b 127.0.0.1:$port --partitions 2 --message-bytes 1024 --topic e2e --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 48828 --messages 488200 --batch-bytes 107456 --json $out/e2e50-$wc-$round.json >>$out/bench.log 2>&1
      $R/rill-bench e2e -b 127.0.0.1:$port --partitions 2 --message-bytes 1024 --topic e2e10k --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate 10000 --messages 100000 --batch-bytes 107456 --json $out/e2e10k-$wc-$round.json >>$out/bench.log 2>&1
      $R/rill-bench produce -b 127.0.0.1:$port --partitions 2 --message-bytes 1024 --topic p --producers 2 --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes 1072256 --json $out/prod-$wc-$round.json >>$out/bench.log 2>&1
      kill $pid; wait $pid; rm -rf $d
    done
  done
done
python3 - <<'PY'
import json,glob,statistics
for w in ("e2e50","e2e10k","prod"):
  for wc in ("false","true"):
    rs=[json.load(open(f)) for f in sorted(glob.glob(f"/tmp/wc-bench/{w}-{wc}-*.json"))]
    m=lambda k: statistics.median(r["latency_us"][k] for r in rs)
    print(w, "write-caching", wc, "n=%d"%len(rs), "msg/s %.0f"%statistics.median(r["msgs_per_sec"] for r in rs),
          "p50 %.0f p99 %.0f p99.99 %.0f max %.0f us" % (m("p50"),m("p99"),m("p9999"),m("max")))
PY

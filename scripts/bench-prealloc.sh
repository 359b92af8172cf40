#!/usr/bin/env bash
# Before/after of preallocation in steps: the same produce workload against the rill of
# c4f6547 (whole-segment preallocation) and of HEAD (16 MiB steps), alternating rounds.
# Usage: scripts/bench-prealloc.sh OLD_RELEASE_DIR NEW_RELEASE_DIR [DATA_PARENT]
# (each RELEASE_DIR holds `rill` and `rill-bench` built with --release; needs fio).
set -euo pipefail
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
OLD=${1:?old release dir}
NEW=${2:?new release dir}
BASE=${3:-$PWD/bench-prealloc}
DATA=$BASE/data
OUT=$BASE/out
mkdir -p "$DATA" "$OUT"
run() { # rev-dir name round
  local R=$1 name=$2 round=$3
  local port=$((19950 + round * 10))
  rm -rf "$DATA/$name"
  "$R/rill" broker --data-dir "$DATA/$name" --listen "127.0.0.1:$port" --shards 2 --kafka-listen off \
    >"$OUT/broker-$name-$round.log" 2>&1 &
  local pid=$!; sleep 0.2
  for _ in $(seq 1 600); do
    if "$R/rill" -b "127.0.0.1:$port" cluster info >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  "$R/rill-bench" --json "$OUT/$name-$round.json" produce -b "127.0.0.1:$port" --topic pa --partitions 2 \
    --messages 1000000 --producers 2 --acks all --batch-bytes 65536 --linger-ms 5 >/dev/null
  kill "$pid"; wait "$pid" || true
  rm -rf "$DATA/$name"
  python3 - "$name" "$round" "$OUT/$name-$round.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[3])); l = j["latency_us"]
print(f"{sys.argv[1]:4s} round {sys.argv[2]}: {j['msgs_per_sec']:>10,.0f} msg/s {j['mb_per_sec']:>7.1f} MB/s p50 {l['p50']:.0f} us p99 {l['p99']:.0f} us p99.9 {l['p999']:.0f} us")
PY
}
fio --name=seq1m --directory="$DATA" --rw=write --bs=1M --size=1G --direct=1 --ioengine=io_uring --iodepth=8 \
  --output-format=json >"$OUT/fio-seq1m.json"
python3 -c "import json; j=json.load(open('$OUT/fio-seq1m.json'))['jobs'][0]['write']; print('fio O_DIRECT 1 MiB sequential write: %.0f MB/s' % (j['bw']*1024/1e6))"
fio --name=sync4k --directory="$DATA" --rw=write --bs=4k --size=20M --direct=1 --fdatasync=1 --ioengine=sync \
  --output-format=json >"$OUT/fio-sync4k.json"
python3 -c "import json; p=json.load(open('$OUT/fio-sync4k.json'))['jobs'][0]['sync']['lat_ns']['percentile']; print('fio 4 KiB write + fdatasync: p50 %.0f us, p99 %.0f us' % (p['50.000000']/1e3, p['99.000000']/1e3))"
rm -f "$DATA"/seq1m.* "$DATA"/sync4k.*
for round in 1 2 3; do
  run "$OLD" old "$round"
  run "$NEW" new "$round"
done
rm -rf "$DATA"

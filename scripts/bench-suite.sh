#!/usr/bin/env bash
# Runs every workload of bench-harness/RESULTS.md in one go, with fio and iperf3 beside them,
# so the figures of one run can be compared as ratios. Writes JSON, SVG plots and HDR logs to
# OUT (default bench-harness/out/<UTC time>) and prints a one-line summary per workload.
#
#   scripts/bench-suite.sh            # BENCH_DIR: directory on the disk to measure (default .)
#
# Needs fio and iperf3 (apt-get install fio iperf3). Takes about 3 minutes. Brokers run on
# 127.0.0.1 only and are stopped (by pid) at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-harness/out/$(date -u +%Y%m%dT%H%M%SZ)}
BENCH_DIR=${BENCH_DIR:-.}
mkdir -p "$OUT"
cargo build --release --workspace >/dev/null 2>&1
R=target/release
DATA=$(mktemp -d "$BENCH_DIR/rill-bench-suite.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT

start_broker() { # name port flags...
  local name=$1 port=$2
  shift 2
  "$R/rill" broker --data-dir "$DATA/$name" --listen "127.0.0.1:$port" --shards 2 --kafka-listen off "$@" \
    >"$OUT/broker-$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if "$R/rill" -b "127.0.0.1:$port" cluster info >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "broker $name did not start" >&2
  exit 1
}

summary() { # name json
  python3 - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
l = j["latency_us"]
print(f"{name:28s} {j['msgs_per_sec']:>12,.0f} msg/s {j['mb_per_sec']:>8.1f} MB/s  "
      f"p50 {l['p50']:>8.0f}  p99 {l['p99']:>8.0f}  p99.9 {l['p999']:>8.0f}  p99.99 {l['p9999']:>8.0f}  max {l['max']:>8.0f} us")
PY
}

echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"

echo "== disk and network"
fio --name=seq1m --directory="$DATA" --rw=write --bs=1M --size=1G --direct=1 --ioengine=io_uring --iodepth=8 \
  --output-format=json >"$OUT/fio-seq1m.json"
python3 -c "import json; j=json.load(open('$OUT/fio-seq1m.json'))['jobs'][0]['write']; print('fio O_DIRECT 1 MiB sequential write: %.0f MB/s' % (j['bw']*1024/1e6))"
fio --name=sync4k --directory="$DATA" --rw=write --bs=4k --size=20M --direct=1 --fdatasync=1 --ioengine=sync \
  --output-format=json >"$OUT/fio-sync4k.json"
python3 -c "import json; p=json.load(open('$OUT/fio-sync4k.json'))['jobs'][0]['sync']['lat_ns']['percentile']; print('fio 4 KiB write + fdatasync: p50 %.0f us, p99 %.0f us' % (p['50.000000']/1e3, p['99.000000']/1e3))"
rm -f "$DATA"/seq1m.* "$DATA"/sync4k.*
iperf3 -s -B 127.0.0.1 -p 19899 -1 >/dev/null 2>&1 &
sleep 0.5
iperf3 -c 127.0.0.1 -p 19899 -t 5 -J >"$OUT/iperf3.json"
python3 -c "import json; j=json.load(open('$OUT/iperf3.json')); print('iperf3 loopback: %.1f Gbit/s' % (j['end']['sum_received']['bits_per_second']/1e9))"

echo "== rill, --fsync never"
start_broker never 19910 --fsync never
B="-b 127.0.0.1:19910"
"$R/rill-bench" --json "$OUT/produce-1mib.json" produce $B --topic p1m --partitions 2 --messages 2000000 \
  --producers 2 --acks 1 --batch-bytes 1048576 --linger-ms 5 >/dev/null
summary "produce acks=1 batch 1 MiB" "$OUT/produce-1mib.json"
"$R/rill-bench" --json "$OUT/produce-kafka-settings.json" produce $B --topic pk --partitions 2 --messages 2000000 \
  --producers 2 --acks 1 --batch-bytes 65536 --linger-ms 5 >/dev/null
summary "produce linger 5 batch 64 KiB" "$OUT/produce-kafka-settings.json"
"$R/rill-bench" --json "$OUT/consume.json" consume $B --topic p1m --messages 2000000 --consumers 2 >/dev/null
summary "consume 2 M from start" "$OUT/consume.json"
"$R/rill-bench" --json "$OUT/e2e-50k.json" e2e $B --topic e2e --partitions 2 --rate 50000 --duration-secs 20 \
  --warmup-secs 2 --linger-ms 0 --plot "$OUT/e2e-50k.svg" --histogram-log "$OUT/e2e-50k.hlog" >/dev/null
summary "e2e 50k msg/s linger 0" "$OUT/e2e-50k.json"
"$R/rill-bench" --json "$OUT/sweep.json" sweep $B --topic sweep --partitions 2 --messages 300000 \
  --lingers 0,1,5 --batch-sizes 16384,65536,1048576 --sweep-plot "$OUT/sweep.svg" >"$OUT/sweep.md" 2>/dev/null
cat "$OUT/sweep.md"

echo "== rill, --fsync always"
start_broker always 19920 --fsync always
B="-b 127.0.0.1:19920"
"$R/rill-bench" --json "$OUT/fsync-10k.json" produce $B --topic f10k --partitions 2 --rate 10000 --duration-secs 10 \
  --warmup-secs 1 --acks all --linger-ms 0 --plot "$OUT/fsync-10k.svg" >/dev/null
summary "fsync always, 10k msg/s" "$OUT/fsync-10k.json"
"$R/rill-bench" --json "$OUT/fsync-1mib.json" produce $B --topic f1m --partitions 2 --messages 1000000 \
  --producers 2 --acks all --batch-bytes 1048576 --linger-ms 5 >/dev/null
summary "fsync always, batch 1 MiB" "$OUT/fsync-1mib.json"
echo "== results in $OUT"

#!/usr/bin/env bash
# Starts one rill broker on loopback in the background and waits until it answers.
# Usage: scripts/run-local.sh [DATA_DIR] [SHARDS] [PORT] [-- EXTRA BROKER FLAGS...]
#   DATA_DIR  default ./rill-data        SHARDS  default 1        PORT  default 9292
#   e.g. scripts/run-local.sh /tmp/rill 2 9292 -- --config tuning/low-latency.toml
# The binary is $RILL_BIN, else target/release/rill, else target/debug/rill, else built with
# `cargo build --release --bin rill`. The broker's output goes to DATA_DIR/broker.log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
data_dir=${1:-./rill-data}
shards=${2:-1}
port=${3:-9292}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
extra=("$@")

if [ -n "${RILL_BIN:-}" ]; then
  rill=$RILL_BIN
elif [ -x "$root/target/release/rill" ]; then
  rill=$root/target/release/rill
elif [ -x "$root/target/debug/rill" ]; then
  rill=$root/target/debug/rill
else
  echo "building rill (cargo build --release --bin rill)..." >&2
  (cd "$root" && cargo build --release --bin rill)
  rill=$root/target/release/rill
fi

mkdir -p "$data_dir"
log=$data_dir/broker.log
bootstrap=127.0.0.1:$port

# glommio needs locked memory; the broker raises the limit itself when it may.
ulimit -l unlimited 2>/dev/null || true

nohup "$rill" broker --data-dir "$data_dir" --listen "$bootstrap" --shards "$shards" \
  --kafka-listen off "${extra[@]}" >"$log" 2>&1 </dev/null &
pid=$!
echo "rill broker pid $pid: $shards shard(s) on 127.0.0.1:$port..$((port + shards - 1)), data in $data_dir, log in $log"

for _ in $(seq 1 120); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "the broker exited during start; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  if "$rill" -b "$bootstrap" cluster info >/dev/null 2>&1; then
    "$rill" -b "$bootstrap" cluster info
    echo "ready. try: $rill -b $bootstrap topic create demo --partitions $shards"
    echo "stop it with: kill $pid"
    exit 0
  fi
  sleep 0.5
done
echo "the broker (pid $pid) did not answer on $bootstrap within 60 s; see $log; stop it with: kill $pid" >&2
exit 1

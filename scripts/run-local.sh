#!/usr/bin/env bash
# Starts one rill broker on loopback in the background and waits until it answers.
# Usage: scripts/run-local.sh [DATA_DIR] [SHARDS] [PORT] [-- EXTRA BROKER FLAGS...]
#   DATA_DIR  default ./rill-data        SHARDS  default 1        PORT  default 9292
#   e.g. scripts/run-local.sh /tmp/rill 2 9292 -- --config tuning/low-latency.toml
# With RILL_NODES=3 (or 5) it starts that many brokers, each a voter of one controller
# quorum: node i (1..N) has data in DATA_DIR/node-i, native port PORT + 100*(i-1) (and up, one
# per shard), controller transport on PORT + 1000 + i.
#   e.g. RILL_NODES=3 scripts/run-local.sh /tmp/rill-cluster
# With RILL_BROKERS=M as well, M more brokers (ids N+1..N+M) join as non-voters
# (--process-roles broker) following the quorum, laid out the same way.
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

# glommio needs locked memory; the broker raises the limit itself when it may.
ulimit -l unlimited 2>/dev/null || true

voter_nodes=${RILL_NODES:-1}
extra_brokers=${RILL_BROKERS:-0}
if [ "$extra_brokers" -gt 0 ] && [ "$voter_nodes" -lt 3 ]; then
  echo "RILL_BROKERS needs RILL_NODES=3 or 5 (non-voters follow a quorum)" >&2
  exit 1
fi
nodes=$((voter_nodes + extra_brokers))
voters=""
if [ "$nodes" -gt 1 ]; then
  for i in $(seq 1 "$voter_nodes"); do
    voters+="${voters:+,}$i@127.0.0.1:$((port + 1000 + i))"
  done
fi

pids=()
for i in $(seq 1 "$nodes"); do
  if [ "$nodes" -gt 1 ]; then
    dir=$data_dir/node-$i
    node_port=$((port + 100 * (i - 1)))
    if [ "$i" -le "$voter_nodes" ]; then
      quorum=(--node-id "$i" --controller-voters "$voters" --controller-listen "127.0.0.1:$((port + 1000 + i))")
    else
      quorum=(--node-id "$i" --controller-voters "$voters" --process-roles broker)
    fi
  else
    dir=$data_dir
    node_port=$port
    quorum=()
  fi
  mkdir -p "$dir"
  log=$dir/broker.log
  nohup "$rill" broker --data-dir "$dir" --listen "127.0.0.1:$node_port" --shards "$shards" \
    --kafka-listen off "${quorum[@]}" "${extra[@]}" >"$log" 2>&1 </dev/null &
  pids+=($!)
  echo "rill broker $i pid $!: $shards shard(s) on 127.0.0.1:$node_port..$((node_port + shards - 1)), data in $dir, log in $log"
done

# Every broker answers once the quorum elected a leader and it registered.
for i in $(seq 1 "$nodes"); do
  if [ "$nodes" -gt 1 ]; then node_port=$((port + 100 * (i - 1))); log=$data_dir/node-$i/broker.log; else node_port=$port; log=$data_dir/broker.log; fi
  pid=${pids[$((i - 1))]}
  up=""
  for _ in $(seq 1 240); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "broker $i exited during start; last lines of $log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    if "$rill" -b "127.0.0.1:$node_port" cluster info >/dev/null 2>&1; then up=1; break; fi
    sleep 0.5
  done
  if [ -z "$up" ]; then
    echo "broker $i (pid $pid) did not answer on 127.0.0.1:$node_port within 120 s; see $log; stop with: kill ${pids[*]}" >&2
    exit 1
  fi
done
bootstrap=127.0.0.1:$port
"$rill" -b "$bootstrap" cluster info
echo "ready. try: $rill -b $bootstrap topic create demo --partitions $shards"
echo "stop with: kill ${pids[*]}"

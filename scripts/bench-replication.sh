#!/usr/bin/env bash
# What replication costs, and how long a failover takes (issue 14), on one host.
#
# Alternating rounds of two setups, each on fresh data dirs and fresh brokers:
#   rf1: 1 broker, a topic of RF 1, `rill-bench produce --acks 1`
#   rf3: 3 brokers (one controller quorum), a topic of RF 3 with min.insync.replicas 2,
#        `rill-bench produce --acks all`
# both at the same fixed rate (open loop, so latency is not hidden by a slower sender), the
# same partitions, message size and broker flags. Then, in every rf3 round, the failover: a
# probe producer (`rill produce --acks all`, one record to partition 0, through a broker that
# survives) is started the moment the leader of partition 0 is SIGKILLed; the time from the
# kill to its acknowledgement is the time to the first acknowledged write at the new leader.
# It is dominated by --broker-session-timeout-ms (the controller fences a broker that stopped
# heartbeating after it), so it is measured at SESSION_MS.
#
# The three brokers share the machine's cores with the client: compare the two setups as
# ratios within one run (medians over ROUNDS), never with figures from another day.
#
# Usage: scripts/bench-replication.sh
#   env: ROUNDS (3) RATE msg/s (20000) SECS per run (20) MESSAGE_BYTES (1024) PARTITIONS (4)
#        SHARDS per broker (1) FSYNC (never) SESSION_MS (2000) HEARTBEAT_MS (500)
#        BENCH_DIR (/tmp) RILL_BIN_DIR (else release binaries are built)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RATE=${RATE:-20000}
SECS=${SECS:-20}
MESSAGE_BYTES=${MESSAGE_BYTES:-1024}
PARTITIONS=${PARTITIONS:-4}
SHARDS=${SHARDS:-1}
FSYNC=${FSYNC:-never}
SESSION_MS=${SESSION_MS:-2000}
HEARTBEAT_MS=${HEARTBEAT_MS:-500}
BENCH_DIR=${BENCH_DIR:-/tmp}
command -v python3 >/dev/null 2>&1 || { echo "bench-replication: python3 is needed for the summary" >&2; exit 1; }

. "$(dirname "$0")/bench-common.sh"
bench_setup bench-replication
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work"/data-*
  echo "== results kept in $results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


now_ms() { date +%s%3N; }

wait_answers() { # ADDR SECONDS
  local i
  for i in $(seq 1 $(($2 * 10))); do
    "$RILL" -b "$1" cluster info >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-replication: no broker answered on $1 within $2 s" >&2
  exit 1
}

# Starts N brokers (N=1: the single-node default; N=3: one quorum of 3 voters) on fresh
# dirs; sets addrs[] (native) and node_pids[].
start_brokers() { # N TAG
  local n=$1 tag=$2 i voters="" base
  addrs=(); node_pids=(); ctl=()
  for i in $(seq 1 "$n"); do
    base=$(free_ports $((SHARDS + 1)))
    addrs+=("127.0.0.1:$base"); ctl+=("127.0.0.1:$((base + SHARDS))")
  done
  if [ "$n" -gt 1 ]; then
    for i in $(seq 1 "$n"); do voters+="${voters:+,}$i@${ctl[$((i - 1))]}"; done
  fi
  for i in $(seq 1 "$n"); do
    local dir=$work/data-$tag-$i quorum=()
    mkdir -p "$dir"
    if [ "$n" -gt 1 ]; then
      quorum=(--node-id "$i" --controller-voters "$voters" --controller-listen "${ctl[$((i - 1))]}"
        --broker-session-timeout-ms "$SESSION_MS" --broker-heartbeat-interval-ms "$HEARTBEAT_MS")
    fi
    "$RILL" broker --data-dir "$dir" --listen "${addrs[$((i - 1))]}" --shards "$SHARDS" \
      --fsync "$FSYNC" --kafka-listen off "${quorum[@]}" >"$results/broker-$tag-$i.log" 2>&1 </dev/null &
    node_pids+=($!); pids+=($!)
  done
  for i in $(seq 1 "$n"); do wait_answers "${addrs[$((i - 1))]}" 120; done
}

stop_brokers() {
  local pid
  for pid in "${node_pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work"/data-*
}

# rill-bench produce against addrs[0]; its JSON report in $results/TAG.json.
run_produce() { # TAG ACKS
  "$BENCH" --json "$results/$1.json" produce -b "${addrs[0]}" --topic bench \
    --partitions "$PARTITIONS" --message-bytes "$MESSAGE_BYTES" --rate "$RATE" \
    --duration-secs "$SECS" --warmup-secs 2 --acks "$2" --linger-ms 1 \
    | tee -a "$results/runs.txt"
}

# Node (1-based) that leads partition P of topic bench, as broker addrs[0] sees it.
leader_of() { # P
  "$RILL" -b "${addrs[0]}" topic describe bench \
    | awk -v p="$1" '$1 == "partition" && $2 == p { for (i = 1; i <= NF; i++) if ($i == "broker") { print $(i + 1); exit } }'
}

failover() { # TAG
  local victim probe_addr t0 t1 i
  victim=$(leader_of 0)
  [ -n "$victim" ] || { echo "bench-replication: no leader for partition 0" >&2; exit 1; }
  for i in 1 2 3; do [ "$i" != "$victim" ] && { probe_addr=${addrs[$((i - 1))]}; break; }; done
  # A warm probe first: the same command, leader alive.
  echo warm | "$RILL" -b "$probe_addr" produce bench --partition 0 --acks all >/dev/null
  t0=$(now_ms)
  kill -KILL "${node_pids[$((victim - 1))]}"
  echo after-kill | "$RILL" -b "$probe_addr" produce bench --partition 0 --acks all >/dev/null
  t1=$(now_ms)
  echo "$1 failover: SIGKILL of broker $victim to the first acks=all acknowledgement: $((t1 - t0)) ms" \
    | tee -a "$results/runs.txt"
  echo "$1 $((t1 - t0))" >>"$results/failover.txt"
}

fio_line=""
if command -v fio >/dev/null 2>&1; then
  fio_line=$(cd "$work" && fio --name=w --filename=fio.tmp --size=256M --bs=16k --rw=write \
    --direct=1 --ioengine=libaio --iodepth=16 --runtime=10 --time_based --output-format=terse 2>/dev/null \
    | awk -F';' '{printf "fio 16 KiB O_DIRECT sequential write: %.0f MB/s", $48 / 1024}' || true)
  rm -f "$work/fio.tmp"
fi
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores; $ROUNDS rounds of ${SECS}s at $RATE msg/s x $MESSAGE_BYTES B, $PARTITIONS partitions, $SHARDS shard(s)/broker, --fsync $FSYNC; ${fio_line:-fio not installed}" \
  | tee "$results/runs.txt"

for r in $(seq 1 "$ROUNDS"); do
  # Alternate which setup goes first.
  if [ $((r % 2)) = 1 ]; then order="rf1 rf3"; else order="rf3 rf1"; fi
  for setup in $order; do
    echo "== round $r: $setup" | tee -a "$results/runs.txt"
    if [ "$setup" = rf1 ]; then
      start_brokers 1 "rf1-$r"
      "$RILL" -b "${addrs[0]}" topic create bench --partitions "$PARTITIONS" >/dev/null
      run_produce "rf1-$r" 1
    else
      start_brokers 3 "rf3-$r"
      "$RILL" -b "${addrs[0]}" topic create bench --partitions "$PARTITIONS" \
        --replication-factor 3 --config min.insync.replicas=2 >/dev/null
      run_produce "rf3-$r" all
      failover "rf3-$r"
    fi
    stop_brokers
  done
done

python3 - "$results" <<'EOF'
import json, os, statistics, sys
res = sys.argv[1]
rows = {"rf1": [], "rf3": []}
for f in sorted(os.listdir(res)):
    if f.endswith(".json"):
        d = json.load(open(os.path.join(res, f)))
        rows[f.split("-")[0]].append(d)
def med(rs, k):
    return statistics.median(k(r) for r in rs)
print("| setup | runs | msg/s (median) | p50 us | p99 us | p99.9 us |")
print("|---|---|---|---|---|---|")
for name, rs in rows.items():
    if not rs:
        continue
    tput = med(rs, lambda r: r["msgs_per_sec"])
    p50 = med(rs, lambda r: r["latency_us"]["p50"])
    p99 = med(rs, lambda r: r["latency_us"]["p99"])
    p999 = med(rs, lambda r: r["latency_us"]["p999"])
    label = {"rf1": "1 broker, RF 1, acks=1", "rf3": "3 brokers, RF 3, min.insync 2, acks=all"}[name]
    print(f"| {label} | {len(rs)} | {tput:,.0f} | {p50:,.0f} | {p99:,.0f} | {p999:,.0f} |")
if rows["rf1"] and rows["rf3"]:
    r1 = med(rows["rf1"], lambda r: r["latency_us"]["p99"])
    r3 = med(rows["rf3"], lambda r: r["latency_us"]["p99"])
    print(f"\np99 ratio rf3/rf1: {r3 / r1:.2f}")
fo = os.path.join(res, "failover.txt")
if os.path.exists(fo):
    ms = [int(l.split()[1]) for l in open(fo)]
    print(f"failover (SIGKILL to first acks=all ack), ms: {ms}; median {statistics.median(ms):.0f}")
EOF

#!/usr/bin/env bash
# What the idempotent producer costs (issue 17): `rill-bench produce --idempotence on` vs
# `off`, in alternating rounds, each on a fresh broker and data dir (1 broker, acks=all):
# a closed-loop run (as fast as it goes: throughput) and an open-loop run at RATE (latency
# from the intended send time: p50/p99/p99.9). Compare the two as ratios within one run
# (medians over ROUNDS), never with figures from another day.
# With COMPARE=transactions, what transactions cost the same way: the idempotent producer
# (`idem`) vs the transactional one at RECORDS_PER_TXN messages per transaction (`txn`,
# `rill-bench produce --records-per-txn`): rill's client, or librdkafka on rill's Kafka
# listener with TXN_DRIVER=kafka.
#
# Usage: scripts/bench-idempotence.sh
#   env: COMPARE (idempotence | transactions) RECORDS_PER_TXN (100) TXN_DRIVER (native | kafka) ROUNDS (5) MESSAGES per closed-loop run (500000) RATE msg/s (20000) SECS per
#        open-loop run (15) MESSAGE_BYTES (1024) PARTITIONS (4) SHARDS (1) FSYNC (never)
#        BENCH_DIR (/tmp) RILL_BIN_DIR (else release binaries are built)
set -euo pipefail

COMPARE=${COMPARE:-idempotence}
RECORDS_PER_TXN=${RECORDS_PER_TXN:-100}
TXN_DRIVER=${TXN_DRIVER:-native}
case "$COMPARE" in
  idempotence) modes=(on off) ;;
  transactions) modes=(txn idem) ;;
  *) echo "bench-idempotence: COMPARE is idempotence or transactions" >&2; exit 2 ;;
esac
ROUNDS=${ROUNDS:-5}
MESSAGES=${MESSAGES:-500000}
RATE=${RATE:-20000}
SECS=${SECS:-15}
MESSAGE_BYTES=${MESSAGE_BYTES:-1024}
PARTITIONS=${PARTITIONS:-4}
SHARDS=${SHARDS:-1}
FSYNC=${FSYNC:-never}
BENCH_DIR=${BENCH_DIR:-/tmp}
command -v python3 >/dev/null 2>&1 || { echo "bench-idempotence: python3 is needed for the summary" >&2; exit 1; }

. "$(dirname "$0")/bench-common.sh"
bench_setup bench-idempotence
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work"/data-*
  echo "== results kept in $results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_answers() { # ADDR SECONDS
  local i
  for i in $(seq 1 $(($2 * 10))); do
    "$RILL" -b "$1" cluster info >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-idempotence: no broker answered on $1 within $2 s" >&2
  exit 1
}

start_broker() { # TAG
  local base dir=$work/data-$1
  base=$(free_ports "$SHARDS")
  addr=127.0.0.1:$base
  kaddr=off
  [ "$TXN_DRIVER" = kafka ] && kaddr=127.0.0.1:$(free_ports "$SHARDS")
  mkdir -p "$dir"
  "$RILL" broker --data-dir "$dir" --listen "$addr" --shards "$SHARDS" --fsync "$FSYNC" \
    --kafka-listen "$kaddr" >"$results/broker-$1.log" 2>&1 </dev/null &
  broker_pid=$!; pids+=($!)
  wait_answers "$addr" 120
  "$RILL" -b "$addr" topic create bench --partitions "$PARTITIONS" >/dev/null
}

fio_line=""
if command -v fio >/dev/null 2>&1; then
  fio_line=$(cd "$work" && fio --name=w --filename=fio.tmp --size=256M --bs=16k --rw=write \
    --direct=1 --ioengine=libaio --iodepth=16 --runtime=10 --time_based --output-format=terse 2>/dev/null \
    | awk -F';' '{printf "fio 16 KiB O_DIRECT sequential write: %.0f MB/s", $48 / 1024}' || true)
  rm -f "$work/fio.tmp"
fi
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds: $MESSAGES msgs closed loop, ${SECS}s at $RATE msg/s open loop, $MESSAGE_BYTES B, $PARTITIONS partitions, $SHARDS shard(s), --fsync $FSYNC, acks=all, comparing $COMPARE$([ "$COMPARE" = transactions ] && echo " ($TXN_DRIVER client, $RECORDS_PER_TXN messages per transaction)"); ${fio_line:-fio not installed}" \
  | tee "$results/runs.txt"

mode_args() { # MODE: the producer's flags for it
  case "$1" in
    on | off) echo "-b $addr --idempotence $1" ;;
    idem | txn)
      local flags="-b $addr --idempotence on"
      [ "$TXN_DRIVER" = kafka ] && flags="--driver kafka -b $kaddr"
      [ "$1" = txn ] && flags="$flags --records-per-txn $RECORDS_PER_TXN"
      echo "$flags" ;;
  esac
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="${modes[0]} ${modes[1]}"; else order="${modes[1]} ${modes[0]}"; fi
  for idem in $order; do
    echo "== round $r: $COMPARE $idem" | tee -a "$results/runs.txt"
    start_broker "$idem-$r"
    # shellcheck disable=SC2046 # the mode's flags are words
    "$BENCH" --json "$results/closed-$idem-$r.json" produce $(mode_args "$idem") --topic bench \
      --partitions "$PARTITIONS" --message-bytes "$MESSAGE_BYTES" --messages "$MESSAGES" \
      --acks all | tee -a "$results/runs.txt"
    # shellcheck disable=SC2046
    "$BENCH" --json "$results/open-$idem-$r.json" produce $(mode_args "$idem") --topic bench \
      --partitions "$PARTITIONS" --message-bytes "$MESSAGE_BYTES" --rate "$RATE" \
      --duration-secs "$SECS" --warmup-secs 2 --acks all --linger-ms 1 \
      | tee -a "$results/runs.txt"
    stop_pid "$broker_pid"
    rm -rf "$work"/data-*
  done
done

python3 - "$results" "${modes[0]}" "${modes[1]}" <<'PY'
import json, os, statistics, sys
res, a, b = sys.argv[1:4]
rows = {}
for f in sorted(os.listdir(res)):
    if f.endswith(".json"):
        kind, idem, _ = f[:-5].split("-")
        rows.setdefault((kind, idem), []).append(json.load(open(os.path.join(res, f))))
def med(rs, k):
    return statistics.median(k(r) for r in rs)
print("| run | producer | runs | msg/s (median) | p50 us | p99 us | p99.9 us |")
print("|---|---|---|---|---|---|---|")
for (kind, idem), rs in sorted(rows.items()):
    print(f"| {kind} | {idem} | {len(rs)} | {med(rs, lambda r: r['msgs_per_sec']):,.0f} | "
          f"{med(rs, lambda r: r['latency_us']['p50']):,.0f} | "
          f"{med(rs, lambda r: r['latency_us']['p99']):,.0f} | "
          f"{med(rs, lambda r: r['latency_us']['p999']):,.0f} |")
for kind in ("closed", "open"):
    on, off = rows.get((kind, a)), rows.get((kind, b))
    if on and off:
        t = med(on, lambda r: r["msgs_per_sec"]) / med(off, lambda r: r["msgs_per_sec"])
        p = med(on, lambda r: r["latency_us"]["p99"]) / med(off, lambda r: r["latency_us"]["p99"])
        print(f"{kind}: {a}/{b} throughput {t:.3f}, p99 {p:.2f}")
PY

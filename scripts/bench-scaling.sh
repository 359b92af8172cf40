#!/usr/bin/env bash
# How rill's produce throughput and broker memory grow with partitions and with connections.
#
# Usage: RILL_BIN_DIR=target/release scripts/bench-scaling.sh [--quick]
#
# Each cell starts a fresh broker (2 shards, --fsync never, no Kafka listener, a new data dir,
# free ports: shard i listens on port + i), runs one `rill-bench produce` (closed loop, 1 KiB
# messages, acks 1, linger 5 ms, 1 MiB batches, the message count split evenly over the
# producers), reads the broker's VmRSS and VmHWM from /proc/PID/status right after the run
# (before stopping it), and stops it by pid.
#   - partitions: 1, 10, 100, 1000 partitions, 2 producers;
#   - connections: 10, 100, 1000 producers on a 10-partition topic (5 partitions per shard, so
#     every producer's sticky batches reach both shards; the 2-producer cell of the partition
#     grid is their baseline).
# A rill-bench producer is one client: one pipelined connection to each shard it sends to (2
# here) plus the client's request/response connection(s) for metadata and its producer id (1,
# sometimes 2), i.e. about 3 TCP connections per producer. The script counts the broker's
# established connections during each run (ss, sampled every 50 ms) and prints the peak beside
# the expected count (a lower bound: producers that finish early, as in --quick's tiny runs,
# close theirs before the last ones connect).
# Each producer also runs 7 threads (its loop, a delivery waiter, the sender, and a reader and
# a writer per pipelined connection): 1000 producers are ~7000 threads and ~3000 sockets in
# rill-bench, so the script raises the open-files limit to the hard limit, and the broker gets
# --max-connections-per-ip 20000: with its default (1000 per shard listener) shard 0, which also
# takes every client's control connection, refuses connections from 127.0.0.1 in the
# 1000-producer cell ("--max-connections-per-ip 1000 reached"). Producers connect inside the timed run: with 1000 of them, setting up 3000 connections
# is part of what the cell measures, and rill-bench's threads share the host's cores with the
# broker. Each partition's first segment is preallocated (one
# --preallocate-step-bytes, 16 MiB by default): the 1000-partition cell takes ~16 GiB of
# BENCH_DIR's disk for its run (the script warns below 20 GiB free).
#
# --quick: a smoke run (100 k messages per cell, a few seconds each); its figures are not to
# be quoted. The full run sends MESSAGES [4000000] per cell (~7 s at ~600 k msg/s). Knobs
# (environment): MESSAGES, BENCH_DIR [/tmp] (data dirs and logs), RILL_BIN_DIR [built here with
# cargo build --release]. Output: a TSV and a markdown table in
# bench-harness/results/DATE/scaling-{full,quick}-HHMMSS.{tsv,md}; logs and JSON reports in
# BENCH_DIR/bench-scaling.*/results. Every process it starts is stopped by pid when it ends.
set -euo pipefail

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }

mode=full
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-scaling: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for tool in python3 ss; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench-scaling: $tool is needed" >&2; exit 1; }
done

if [ "$mode" = quick ]; then MESSAGES=${MESSAGES:-100000}; else MESSAGES=${MESSAGES:-4000000}; fi
MESSAGE_BYTES=1024
BENCH_DIR=${BENCH_DIR:-/tmp}
SHARDS=2
CONN_PARTITIONS=10

# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_setup bench-scaling
out_dir=$repo/bench-harness/results/$(date -u +%Y-%m-%d)
mkdir -p "$out_dir"
stamp=$(date -u +%H%M%S)
out_tsv=$out_dir/scaling-$mode-$stamp.tsv
out_md=$out_dir/scaling-$mode-$stamp.md

broker=
sampler=
data=
stop_broker() {
  [ -z "$sampler" ] || stop_pid "$sampler"
  sampler=
  [ -z "$broker" ] || stop_pid "$broker"
  broker=
  [ -z "$data" ] || rm -rf "$data"
  data=
}
cleanup() {
  stop_broker
  echo "== logs and JSON reports kept in $results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1000 producers hold ~3000 sockets (and the broker as many): as many files as allowed.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 8192 ]; then
  echo "bench-scaling: open files limit $(ulimit -n) < 8192: the 1000-producer cell will fail" >&2
fi

free_gib=$(df -Pk "$BENCH_DIR" | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "$free_gib" -lt 20 ]; then
  echo "bench-scaling: only $free_gib GiB free in $BENCH_DIR: the 1000-partition cell preallocates ~16 GiB" >&2
fi

start_broker() { # CELL: sets broker, port, data
  local cell=$1 i
  port=$(free_ports "$SHARDS")
  data=$work/data-$cell
  "$RILL" broker --shards "$SHARDS" --fsync never --kafka-listen off --data-dir "$data" \
    --listen "127.0.0.1:$port" --max-connections-per-ip 20000 \
    >"$results/broker-$cell.log" 2>&1 </dev/null &
  broker=$!
  for i in $(seq 1 1200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$((port + SHARDS - 1))") 2>/dev/null; then return 0; fi
    kill -0 "$broker" 2>/dev/null || { echo "bench-scaling: broker exited (see $results/broker-$cell.log)" >&2; return 1; }
    sleep 0.1
  done
  echo "bench-scaling: broker did not listen within 120 s" >&2
  return 1
}

# The peak of the broker's established connections (its side: source port in its range), into
# FILE, until stopped.
start_sampler() { # FILE
  local file=$1 lo=$port hi=$((port + SHARDS - 1))
  (
    peak=0
    while :; do
      n=$(ss -Htn state established "( sport >= :$lo and sport <= :$hi )" 2>/dev/null | wc -l)
      if [ "$n" -gt "$peak" ]; then peak=$n; echo "$peak" >"$file"; fi
      sleep 0.05
    done
  ) &
  sampler=$!
}

mib() { # FIELD: a /proc/$broker/status field in MiB (empty if the broker is gone)
  awk -v f="$1:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$broker/status" 2>/dev/null || true
}

printf 'grid\tpartitions\tproducers\tpeak_connections\tmessages\tmsgs_per_sec\tmb_per_sec\tp99_us\treq_p50_us\treq_p99_us\trss_idle_mib\trss_mib\thwm_mib\tstatus\n' >"$out_tsv"

cell() { # GRID PARTITIONS PRODUCERS
  local grid=$1 partitions=$2 producers=$3 name json conns idle rss hwm status=ok
  name=$grid-p$partitions-n$producers
  json=$results/$name.json
  echo "== $name: $partitions partitions, $producers producers, $MESSAGES messages"
  if ! start_broker "$name"; then
    printf '%s\t%s\t%s\t\t\t\t\t\t\t\t\t\t\tbroker failed\n' "$grid" "$partitions" "$producers" >>"$out_tsv"
    stop_broker
    return 0
  fi
  idle=$(mib VmRSS)
  echo 0 >"$results/$name.conns"
  start_sampler "$results/$name.conns"
  if ! "$BENCH" produce -b "127.0.0.1:$port" --topic "scale-$partitions" --partitions "$partitions" \
    --producers "$producers" --messages "$MESSAGES" --message-bytes "$MESSAGE_BYTES" --acks 1 \
    --linger-ms 5 --batch-bytes $((1 << 20)) --json "$json" >"$results/$name.log" 2>&1; then
    status=failed
    echo "   FAILED: $(tail -n 1 "$results/$name.log")"
  fi
  # Right after the run, before the broker stops.
  rss=$(mib VmRSS)
  hwm=$(mib VmHWM)
  stop_pid "$sampler"
  sampler=
  conns=$(cat "$results/$name.conns")
  if [ "$status" = ok ]; then
    python3 - "$json" "$grid" "$partitions" "$producers" "$conns" "$idle" "$rss" "$hwm" >>"$out_tsv" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
grid, partitions, producers, conns, idle, rss, hwm = sys.argv[2:9]
req = r.get("request_latency_us") or {}
print("\t".join([grid, partitions, producers, conns, str(r["messages"]), f'{r["msgs_per_sec"]:.0f}',
                 f'{r["mb_per_sec"]:.1f}', f'{r["latency_us"]["p99"]:.0f}', f'{req["p50"]:.0f}' if req else "",
                 f'{req["p99"]:.0f}' if req else "", idle, rss, hwm, "ok"]))
EOF
    echo "   $(tail -n 1 "$out_tsv" | cut -f4-13 | tr '\t' ' ') (conns msgs msg/s MB/s p99-us req-p50-us req-p99-us rss-idle rss hwm)"
  else
    printf '%s\t%s\t%s\t%s\t\t\t\t\t\t\t%s\t%s\t%s\t%s\n' "$grid" "$partitions" "$producers" "$conns" \
      "$idle" "$rss" "$hwm" "$status" >>"$out_tsv"
  fi
  stop_broker
}

echo "== machine: $(nproc) cpus, $(free -m | awk '/^Mem:/ {print $2}') MiB, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ); $mode run"
for p in 1 10 100 1000; do cell partitions "$p" 2; done
for n in 10 100 1000; do cell connections "$CONN_PARTITIONS" "$n"; done

echo
python3 - "$out_tsv" "$mode" "$MESSAGES" "$CONN_PARTITIONS" <<'EOF' | tee "$out_md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
mode, messages, conn_partitions = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"rill produce scaling ({mode} run: {messages} messages of 1 KiB per cell, acks 1, linger 5 ms, "
      f"1 MiB batches, 2 shards, --fsync never)\n")
print("| grid | partitions | producers | TCP connections: expected / peak seen | msg/s | MB/s | p99 per message us | p50 / p99 per request us | broker RSS MiB (idle) | RSS MiB | HWM MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def expected(r):
    # Per producer: its client's control connection and a pipelined one per shard it sends to.
    return int(r["producers"]) * (1 + min(int(r["partitions"]), 2))

for r in rows:
    if r["status"] != "ok":
        print(f"| {r['grid']} | {r['partitions']} | {r['producers']} | {expected(r)} / {r['peak_connections'] or 'n/a'} | "
              f"{r['status']} | | | | {r['rss_idle_mib']} | {r['rss_mib']} | {r['hwm_mib']} |")
        continue
    print(f"| {r['grid']} | {r['partitions']} | {r['producers']} | {expected(r)} / {r['peak_connections']} | "
          f"{float(r['msgs_per_sec']):,.0f} | {r['mb_per_sec']} | {r['p99_us']} | "
          f"{r['req_p50_us'] or 'n/a'} / {r['req_p99_us'] or 'n/a'} | {r['rss_idle_mib']} | "
          f"{r['rss_mib']} | {r['hwm_mib']} |")

def rate(grid, partitions, producers):
    for r in rows:
        if (r["grid"], r["partitions"], r["producers"], r["status"]) == (grid, partitions, producers, "ok"):
            return float(r["msgs_per_sec"])
    return None

p10, p1000 = rate("partitions", "10", "2"), rate("partitions", "1000", "2")
ratio = f"{p1000 / p10:.2f}" if p10 and p1000 else "n/a"
print(f"\nThroughput with 1000 partitions / with 10 partitions (2 producers): {ratio}")
base = rate("partitions", conn_partitions, "2")
for n in ("10", "100", "1000"):
    r = rate("connections", conn_partitions, n)
    if base and r:
        print(f"Throughput with {n} producers / with 2 producers ({conn_partitions} partitions): {r / base:.2f}")
print(f"\nTSV: {sys.argv[1]}")
EOF

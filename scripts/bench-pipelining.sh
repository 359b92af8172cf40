#!/usr/bin/env bash
# Before/after of pipelined connections within one binary: rill-bench produce against a broker
# with --max-in-flight-requests-per-connection 1 (a request answered before the next is read,
# as connections were before pipelining) and 5 (the default), alternating which goes first,
# a fresh data dir each run. Prints and appends to OUT/ab.tsv: round, bound, msg/s, p50 us,
# p99 us.
#
# rill's own producer keeps one request per partition in flight, so with one partition per
# shard it does not pipeline at all; DRIVER=kafka (librdkafka through the Kafka listener, up to
# 5 requests per connection) does.
#
# Knobs (environment): DRIVER [native | kafka], ROUNDS [5], FSYNC [always], MESSAGES [1000000], BATCH [107656 bytes:
# 100 records of 1 KiB], RILL_BIN_DIR [target/release], OUT [a new directory under /tmp],
# BENCH_DIR [/tmp] for the data. Brokers listen on 127.0.0.1 and are stopped by pid.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
R=${RILL_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/release}
OUT=${OUT:-$(mktemp -d /tmp/bench-pipelining.XXXXXX)}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-5}
FSYNC=${FSYNC:-always}
pid=
data=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -z "$data" ] || rm -rf "$data"
}
trap cleanup EXIT
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh" # free_ports
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="1 5"; else order="5 1"; fi
  for inflight in $order; do
    data=$(mktemp -d "${BENCH_DIR:-/tmp}/bench-pipelining-data.XXXXXX")
    port=$(free_ports 2)
    kport=$(free_ports 2)
    while [ $((kport - port)) -lt 2 ] && [ $((port - kport)) -lt 2 ]; do kport=$(free_ports 2); done
    if [ "${DRIVER:-native}" = kafka ]; then
      kafka=127.0.0.1:$kport bench=(--driver kafka -b "127.0.0.1:$kport")
    else
      kafka=off bench=(-b "127.0.0.1:$port")
    fi
    "$R/rill" broker --data-dir "$data" --shards 2 --fsync "$FSYNC" --listen "127.0.0.1:$port" \
      --kafka-listen "$kafka" --max-in-flight-requests-per-connection "$inflight" \
      >"$OUT/broker-$r-$inflight.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    if [ "$kafka" != off ]; then
      for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$kport") 2>/dev/null && break; sleep 0.1; done
    fi
    "$R/rill-bench" produce "${bench[@]}" --topic ab --partitions 2 --producers 2 --acks 1 \
      --messages "${MESSAGES:-1000000}" --batch-bytes "${BATCH:-107656}" --linger-ms 5 \
      --json "$OUT/r$r-$inflight.json" >/dev/null 2>>"$OUT/bench.log"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    rm -rf "$data"; data=
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); l=j["latency_us"]; print(sys.argv[2], sys.argv[3], round(j["msgs_per_sec"]), round(l["p50"]), round(l["p99"]), sep="\t")' \
      "$OUT/r$r-$inflight.json" "$r" "$inflight" | tee -a "$OUT/ab.tsv"
  done
done
python3 - "$OUT/ab.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
med = {k: statistics.median(int(r[2]) for r in rows if r[1] == k) for k in ("1", "5")}
print(f"medians: in flight 1 {med['1']:,.0f} msg/s, in flight 5 {med['5']:,.0f} msg/s, 5 / 1 = {med['5'] / med['1']:.2f}x")
PY

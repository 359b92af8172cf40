#!/usr/bin/env bash
# Compares rill with Apache Iggy on Iggy's own workloads, same machine, same run, as ratios.
#
# Usage: scripts/compare-iggy.sh [--rounds N] [--quick] IGGY_DIR
#
# IGGY_DIR holds iggy-server, iggy-bench and server-config.toml (../shared/peers/iggy here;
# its README says how they were built and how to read iggy-bench's figures). Every round runs
# each workload on both systems, alternating which goes first, and the summary gives the
# medians over the rounds and rill / Iggy:
#   - produce, 1000-message batches and 100-message batches (msg/s);
#   - consume from the start what the 1000-message produce wrote (msg/s);
#   - producer+consumer at a fixed 50 MB/s in (end-to-end latency p50 ... p99.99, and
#     rill-bench's true max; Iggy's percentiles are means over actors, not pooled; rill's are
#     from each message's intended send time, and again from its send call, as Iggy's are);
#   - produce with an fsync per write (rill --fsync always, Iggy --enforce-fsync), and rill at
#     10,000 msg/s with an fsync per write, beside the machine alone at that pace (fio paced,
#     and `rill-bench loopback --sync-dir`: a plain thread's durable acknowledgement);
#   - a 10 M-message produce (its tail latency, while Iggy's page cache is written back;
#     rill's per message includes the wait in its producer's buffer, so rill's per request,
#     from write to response, is also set beside Iggy's, which times each batch request),
#     and again with one batch in flight per connection (--max-in-flight 1), Iggy's shape;
#   - rill with --write-caching (acknowledged from memory, written behind: what Iggy's default
#     does) on both produces (with a 1 GiB bound per partition, see run_rill) and the 50 MB/s
#     run (on a broker of its own), beside the same Iggy figures.
# Shapes: 2 producers (and 2 consumers), 2 partitions on 2 shards for rill, 2 streams of one
# partition for Iggy, messages of MESSAGE_BYTES [1024] B. rill-bench's batches are sized in
# bytes: BATCH_OVERHEAD [48] B per message is added so a batch holds as many messages as Iggy's.
# fio (O_DIRECT 1 MiB writes; 4 KiB write + fdatasync; 64 KiB writes at 50 MB/s) and iperf3
# (loopback) run once, at the start, in the same data directory.
# Beside every workload scripts/lost-time-probe.py measures the time the whole machine could not
# run (a VM its host stopped, or both cores busy); the summary gives it per system and workload.
#
# --rounds N [5]: rounds (5 or more for figures to quote); --quick: 1 round and a tenth of the
# messages (a smoke run; its figures are not to be quoted). Knobs (environment): SCALE [1]
# divides every message count (e.g. SCALE=10 --rounds 3 for a shorter run), MESSAGE_BYTES,
# BATCH_OVERHEAD, BENCH_DIR [/tmp] (data and results), RILL_BIN_DIR [built here with cargo build
# --release], RILL_SHARDS [2], RILL_BROKER_FLAGS [none] (more flags for every rill broker, as
# --tail-cache-pre-touch; the summary names them). Results (logs, JSON, results.tsv, summary.md,
# settle.log) stay in BENCH_DIR/compare-iggy.*/results. Every process it starts is stopped by
# pid when it ends.
# Iggy listens on its config's fixed loopback ports (TCP 8090, QUIC 8080, HTTP 3000, WS 8092).
set -euo pipefail

usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; }

rounds=5
scale=${SCALE:-1}
iggy_dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --quick) rounds=1; scale=10 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "compare-iggy: unknown option $1" >&2; exit 2 ;;
    *) iggy_dir=$1 ;;
  esac
  shift
done
[ -n "$iggy_dir" ] || { usage >&2; exit 2; }
IGGY_SERVER=$iggy_dir/iggy-server
IGGY_BENCH=$iggy_dir/iggy-bench
[ -x "$IGGY_SERVER" ] && [ -x "$IGGY_BENCH" ] && [ -f "$iggy_dir/server-config.toml" ] \
  || { echo "compare-iggy: $iggy_dir has no iggy-server, iggy-bench and server-config.toml" >&2; exit 1; }
# Its runtime libraries (libhwloc15, libudev1) are not on every machine: say so before any run.
if ldd "$IGGY_SERVER" | grep -q 'not found'; then
  echo "compare-iggy: iggy-server lacks libraries: $(ldd "$IGGY_SERVER" | grep 'not found' | xargs)" >&2
  echo "  (apt-get install -y libhwloc15 libudev1)" >&2
  exit 1
fi
for tool in python3 fio iperf3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "compare-iggy: $tool is needed (apt-get install $tool)" >&2; exit 1; }
done

MESSAGE_BYTES=${MESSAGE_BYTES:-1024}
BATCH_OVERHEAD=${BATCH_OVERHEAD:-48}
BENCH_DIR=${BENCH_DIR:-/tmp}
RILL_SHARDS=${RILL_SHARDS:-2}
RILL_BROKER_FLAGS=${RILL_BROKER_FLAGS:-}
# 2 actors x batches x messages per batch, as iggy-bench counts them.
B1000=$((1000 / scale))     # 1000-message batches per producer: 2 M messages
B100=$((10000 / scale))     # 100-message batches per producer: 2 M messages
B10M=$((5000 / scale))      # 1000-message batches per producer: 10 M messages
BE2E=$((2442 / scale))      # 100-message batches per producer at 50 MB/s in
E2E_RATE=$((50000000 / MESSAGE_BYTES)) # msg/s over both producers: 50 MB/s

# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_setup compare-iggy
server=
# Stops the server, deletes its data and waits for the machine to settle: a host still
# discarding the blocks of a deleted 10 GB data directory stopped this VM for 13-25 ms in the
# next run (RESULTS.md 2026-12-06 eighteenth). Up to 60 s for 3 s without a stop; logged.
stop_server() {
  [ -z "$server" ] || stop_pid "$server"
  server=
  rm -rf "$work/data"
  sync
  echo "$(date -u +%T) $(python3 "$PROBE" --until-quiet 3 60 | tr '\n' ' ')" >>"$results/settle.log"
}
cleanup() {
  local pid
  stop_server
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work/data" "$work/fio"
  echo "== results kept in $results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() { # PORT SECONDS NAME (gives up early if the server started last exited)
  local i
  for i in $(seq 1 $(($2 * 10))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    if [ -n "$server" ] && ! kill -0 "$server" 2>/dev/null; then
      echo "compare-iggy: $3 exited before listening (see $results)" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "compare-iggy: $3 did not listen on port $1 within $2 s" >&2
  exit 1
}
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$tsv"; } # system workload round metric value
# The time no thread of the machine could run while a workload ran (a host stopping the VM, or
# both cores busy): scripts/lost-time-probe.py beside each run, recorded as lost_* metrics.
PROBE=$(dirname "$0")/lost-time-probe.py
probe_start() { python3 "$PROBE" >"$results/probe.out" & probe=$!; pids+=("$probe"); }
probe_stop() { # SYSTEM WORKLOAD ROUND
  local metric value
  kill -TERM "$probe" 2>/dev/null || true
  wait "$probe" 2>/dev/null || true
  while read -r metric value; do record "$1" "$2" "$3" "$metric" "$value"; done <"$results/probe.out"
}

# --- the machine: disk and loopback, once --------------------------------------------------
echo "== machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
mkdir -p "$work/fio"
fio --name=seq1m --directory="$work/fio" --rw=write --bs=1M --size=1G --direct=1 --ioengine=io_uring \
  --iodepth=8 --output-format=json >"$results/fio-seq1m.json"
# rill's consume from the start reads from the disk (its writes bypass the page cache); Iggy's
# reads what its buffered writes left in the page cache: the disk's read rate bounds rill's.
fio --name=seq1m --directory="$work/fio" --rw=read --bs=1M --size=1G --direct=1 --ioengine=io_uring \
  --iodepth=8 --output-format=json >"$results/fio-read1m.json"
fio --name=sync4k --directory="$work/fio" --rw=write --bs=4k --size=20M --direct=1 --fdatasync=1 \
  --ioengine=sync --output-format=json >"$results/fio-sync4k.json"
fio --name=rate64k --directory="$work/fio" --rw=write --bs=64k --size=1G --direct=1 --rate=50m \
  --ioengine=sync --runtime=10 --time_based --output-format=json >"$results/fio-rate64k.json"
rm -rf "$work/fio"
iperf_port=$(free_ports 4)
iperf3 -s -B 127.0.0.1 -p "$iperf_port" >"$results/iperf3-server.log" 2>&1 </dev/null &
iperf_pid=$!
pids+=("$iperf_pid")
# Not probed with a connection (iperf3 takes it for a test): its socket is looked for in the
# listening table, and the client retries besides (one run's 50 tries in 10 s all found no
# listener).
for i in $(seq 1 100); do
  ss -Hltn "sport = :$iperf_port" 2>/dev/null | grep -q . && break
  kill -0 "$iperf_pid" 2>/dev/null || break
  sleep 0.1
done
for i in $(seq 1 50); do
  iperf3 -c 127.0.0.1 -p "$iperf_port" -t 5 -J >"$results/iperf3.json" 2>/dev/null && break
  sleep 0.2
done
stop_pid "$iperf_pid"
python3 - "$results" <<'EOF' | tee "$results/machine.md"
import json, sys
d = sys.argv[1]
seq = json.load(open(f"{d}/fio-seq1m.json"))["jobs"][0]["write"]
read = json.load(open(f"{d}/fio-read1m.json"))["jobs"][0]["read"]
sync = json.load(open(f"{d}/fio-sync4k.json"))["jobs"][0]["sync"]["lat_ns"]["percentile"]
rate = json.load(open(f"{d}/fio-rate64k.json"))["jobs"][0]["write"]["clat_ns"]["percentile"]
# A failed iperf3 run is reported, not fatal: the disk and broker figures still count.
ipj = json.load(open(f"{d}/iperf3.json"))
ip = ipj.get("end", {}).get("sum_received", {}).get("bits_per_second")
print(f"- fio O_DIRECT 1 MiB sequential writes (io_uring, depth 8): {seq['bw'] * 1024 / 1e6:.0f} MB/s")
print(f"- fio O_DIRECT 1 MiB sequential reads (io_uring, depth 8): {read['bw'] * 1024 / 1e6:.0f} MB/s")
print(f"- fio 4 KiB write + fdatasync: p50 {sync['50.000000'] / 1e3:.0f} us, p99 {sync['99.000000'] / 1e3:.0f} us")
print(f"- fio 64 KiB O_DIRECT writes at 50 MB/s, one at a time: p50 {rate['50.000000'] / 1e3:.0f} us, "
      f"p99 {rate['99.000000'] / 1e3:.0f} us, p99.99 {rate['99.990000'] / 1e3:.0f} us")
print(f"- iperf3 loopback: {ip / 1e9:.1f} Gbit/s" if ip else f"- iperf3 loopback: n/a ({ipj.get('error', 'no result')})")
EOF

# --- the two systems -----------------------------------------------------------------------
start_rill() { # FSYNC [BROKER-FLAGS...]
  local port fsync=$1
  shift
  port=$(free_ports 4)
  RILL_ADDR=127.0.0.1:$port
  # shellcheck disable=SC2086 # RILL_BROKER_FLAGS is a list of flags
  "$RILL" broker --data-dir "$work/data" --shards "$RILL_SHARDS" --fsync "$fsync" --listen "$RILL_ADDR" \
    --kafka-listen off $RILL_BROKER_FLAGS "$@" >>"$results/rill-broker.log" 2>&1 &
  server=$!
  wait_port "$port" 120 rill
}
start_iggy() {
  for p in 8090 8080 3000 8092; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "compare-iggy: port $p is taken: Iggy's config needs it" >&2
      exit 1
    fi
  done
  IGGY_CONFIG_PATH=$iggy_dir/server-config.toml IGGY_SYSTEM_PATH=$work/data \
    "$IGGY_SERVER" --fresh --with-default-root-credentials >>"$results/iggy-server.log" 2>&1 &
  server=$!
  wait_port 8090 120 iggy-server
}

# rill-bench WORKLOAD NAME ROUND ARGS...: msg/s and latency percentiles (us).
rill_bench() {
  local workload=$1 name=$2 round=$3 json
  shift 3
  json=$results/rill-$name-$round.json
  probe_start
  if "$BENCH" "$workload" -b "$RILL_ADDR" --partitions 2 --message-bytes "$MESSAGE_BYTES" "$@" \
    --json "$json" >>"$results/rill-bench.log" 2>&1; then
    python3 - "$json" <<'EOF' | while read -r metric value; do record rill "$name" "$round" "$metric" "$value"; done
import json, sys
r = json.load(open(sys.argv[1]))
print("msgs_per_sec", r["msgs_per_sec"])
for k in ("p50", "p99", "p999", "p9999", "max"):
    print(k + "_us", r["latency_us"][k])
# produce only: per request, write to response (Iggy's bench times each batch that way).
for k, v in (r.get("request_latency_us") or {}).items():
    print("req_" + k + "_us", v)
# e2e only: from each send call, not corrected for coordinated omission (as Iggy's).
for k, v in (r.get("latency_from_send_us") or {}).items():
    print("send_" + k + "_us", v)
EOF
    echo "   rill $name: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); l=r["latency_us"]; q=r.get("request_latency_us")
print("%.0f msg/s, p50 %.0f us, p99 %.0f us, p99.99 %.0f us" % (r["msgs_per_sec"], l["p50"], l["p99"], l["p9999"])
      + ("; per request p50 %.0f us, p99.99 %.0f us" % (q["p50"], q["p9999"]) if q else ""))' "$json")"
  else
    record rill "$name" "$round" failed 1
    echo "   rill $name: FAILED (see $results/rill-bench.log)"
  fi
  probe_stop rill "$name" "$round"
}

# The machine alone at the fsync-10k row's pace (10,000 a second over 2 writers), right after
# it: fio's 4 KiB write + fdatasync paced (2 jobs of 5,000 IOPS; the hot-loop fio above never
# lets the device idle), and `rill-bench loopback`: a request over loopback TCP answered once
# written O_DIRECT|O_DSYNC by a plain thread, the floor under any broker's acknowledgement.
machine_floor() { # ROUND
  local json=$results/machine-loopback-dsync-$1.json
  probe_start
  if "$BENCH" loopback --rate 10000 --connections 2 --messages $((100000 / scale)) \
    --request-bytes "$MESSAGE_BYTES" --sync-dir "$work" --json "$json" >>"$results/rill-bench.log" 2>&1; then
    python3 - "$json" <<'EOF' | while read -r metric value; do record machine loopback-dsync "$1" "$metric" "$value"; done
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("p50", "p99", "p9999"):
    print(k + "_us", r["latency_us"][k])
    print("send_" + k + "_us", r["latency_from_send_us"][k])
EOF
  else
    record machine loopback-dsync "$1" failed 1
  fi
  probe_stop machine loopback-dsync "$1"
  mkdir -p "$work/fio"
  fio --name=sync4kpaced --directory="$work/fio" --rw=write --bs=4k --size=64M --direct=1 --fdatasync=1 \
    --ioengine=sync --rate_iops=5000 --numjobs=2 --group_reporting --runtime=10 --time_based \
    --output-format=json >"$results/fio-sync4k-paced-$1.json"
  rm -rf "$work/fio"
  python3 - "$results/fio-sync4k-paced-$1.json" <<'EOF' | while read -r metric value; do record machine fio-sync4k-paced "$1" "$metric" "$value"; done
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("sync_p99_us", j["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e3)
print("write_p99_us", j["write"]["clat_ns"]["percentile"]["99.000000"] / 1e3)
EOF
}

# iggy-bench NAME ROUND GLOBAL-ARGS... -- COMMAND-ARGS...: its total msg/s and percentiles
# (ms, converted to us), the consumers' where it has consumers.
iggy_bench() {
  local name=$1 round=$2 out global=()
  shift 2
  while [ "$1" != -- ]; do global+=("$1"); shift; done
  shift
  out=$results/iggy-$name-$round.log
  probe_start
  if timeout 1200 "$IGGY_BENCH" -m "$MESSAGE_BYTES" "${global[@]}" "$@" tcp --nodelay >"$out" 2>&1; then
    python3 - "$out" <<'EOF' | while read -r metric value; do record iggy "$name" "$round" "$metric" "$value"; done
import re, sys
text = re.sub(r"\x1b\[[0-9;]*m", "", open(sys.argv[1]).read())
# "Producers Results: Total throughput: X MB/s, Y messages/s, ..., p50 latency: Z ms, ...,
# p9999 latency: Z ms, ..., max: Z ms, ..."; with consumers, theirs is producer-to-consumer.
results = dict(re.findall(r"^(Producers|Consumers) Results: (.*)$", text, re.M))
line = results.get("Consumers") or results.get("Producers") or ""
m = re.search(r"Total throughput:\s*[0-9.]+\s*MB/s,\s*([0-9.]+)\s*messages/s", line)
if m:
    print("msgs_per_sec", m.group(1))
for key, metric in (("p50 latency", "p50_us"), ("p99 latency", "p99_us"), ("p999 latency", "p999_us"),
                    ("p9999 latency", "p9999_us"), ("max", "max_us")):
    m = re.search(rf"\b{key}:\s*([0-9.]+)\s*ms", line)
    if m:
        print(metric, float(m.group(1)) * 1000)
EOF
    echo "   iggy $name: $(sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -E '^(Producers|Consumers) Results' | tail -n 1 | cut -c1-160)"
  else
    record iggy "$name" "$round" failed 1
    echo "   iggy $name: FAILED (see $out)"
  fi
  probe_stop iggy "$name" "$round"
}

batch_bytes() { echo $(($1 * (MESSAGE_BYTES + BATCH_OVERHEAD) + 256)); } # MESSAGES per batch (+ header)

run_rill() { # ROUND
  local r=$1
  start_rill never
  rill_bench produce produce-1000 "$r" --topic p1000 --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B1000 * 1000)) --batch-bytes "$(batch_bytes 1000)"
  rill_bench consume consume "$r" --topic p1000 --consumers 2 --messages $((2 * B1000 * 1000))
  rill_bench produce produce-100 "$r" --topic p100 --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B100 * 100)) --batch-bytes "$(batch_bytes 100)"
  rill_bench e2e e2e-50mb "$r" --topic e2e --producers 2 --consumers 2 --acks 1 --linger-ms 0 \
    --rate "$E2E_RATE" --messages $((2 * BE2E * 100)) --batch-bytes "$(batch_bytes 100)"
  # The same in Iggy's shape: 100 messages back to back at each turn, all timed from the turn,
  # sent as one batch (the linger outlasts the burst; rill-bench flushes at its end) whose
  # answer comes before the next turn (Iggy's producers send 100-message batches at its rate,
  # one at a time, timed per batch).
  rill_bench e2e e2e-50mb-burst "$r" --topic e2eb --producers 2 --consumers 2 --acks 1 \
    --linger-ms 5 --rate "$E2E_RATE" --burst 100 --messages $((2 * BE2E * 100)) \
    --batch-bytes "$(batch_bytes 100)"
  rill_bench produce produce-10m "$r" --topic p10m --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B10M * 1000)) --batch-bytes "$(batch_bytes 1000)"
  stop_server
  # The same with one batch in flight per connection, as Iggy's bench sends (a broker of its
  # own: the disk holds one 10 GB run at a time).
  start_rill never
  rill_bench produce produce-10m-1b "$r" --topic p10m --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B10M * 1000)) --batch-bytes "$(batch_bytes 1000)" \
    --partition-request-bytes "$(batch_bytes 1000)" --max-in-flight 1
  stop_server
  start_rill always
  rill_bench produce produce-fsync "$r" --topic pfsync --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B1000 * 1000 / 4)) --batch-bytes "$(batch_bytes 1000)"
  # The issue's other fsync target: at 10,000 msg/s the p99 acknowledgement within 2x fio's
  # fdatasync p99 of the same run (rill only: Iggy's bench has no rate for this).
  rill_bench produce produce-fsync-10k "$r" --topic pfsync10k --producers 2 --acks 1 \
    --linger-ms 0 --rate 10000 --messages $((100000 / scale)) --batch-bytes "$(batch_bytes 1000)"
  stop_server
  machine_floor "$r"
  # Acknowledged from memory, as Iggy's writes are from its page cache. Iggy's writers wait
  # only past vm.dirty_ratio of memory (20%: GBs); at the default 16 MiB per partition this
  # row measured the disk again, so the bound here is 1 GiB per partition (2 GiB in all).
  start_rill never --write-caching true --write-caching-max-bytes $((1 << 30))
  rill_bench produce produce-1000-wc "$r" --topic p1000 --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B1000 * 1000)) --batch-bytes "$(batch_bytes 1000)"
  rill_bench produce produce-100-wc "$r" --topic p100 --producers 2 --acks 1 --linger-ms 5 \
    --messages $((2 * B100 * 100)) --batch-bytes "$(batch_bytes 100)"
  stop_server
  # A broker of its own: the produces above leave up to 2 GiB still to write behind, and the
  # fixed-rate run measured that write-back (2026-12-05, twelfth session).
  start_rill never --write-caching true --write-caching-max-bytes $((1 << 30))
  rill_bench e2e e2e-50mb-wc "$r" --topic e2e --producers 2 --consumers 2 --acks 1 --linger-ms 0 \
    --rate "$E2E_RATE" --messages $((2 * BE2E * 100)) --batch-bytes "$(batch_bytes 100)"
  # Both acknowledging from memory, both in 100-message batches one at a time: like for like.
  rill_bench e2e e2e-50mb-burst-wc "$r" --topic e2eb --producers 2 --consumers 2 --acks 1 \
    --linger-ms 5 --rate "$E2E_RATE" --burst 100 --messages $((2 * BE2E * 100)) \
    --batch-bytes "$(batch_bytes 100)"
  stop_server
}

run_iggy() { # ROUND
  local r=$1
  start_iggy
  iggy_bench produce-1000 "$r" -P 1000 -b "$B1000" -- pinned-producer --producers 2 --streams 2
  iggy_bench consume "$r" -P 1000 -b "$B1000" --reuse-streams -- pinned-consumer --consumers 2 --streams 2
  iggy_bench produce-100 "$r" -P 100 -b "$B100" -- pinned-producer --producers 2 --streams 2
  iggy_bench e2e-50mb "$r" -P 100 -b "$BE2E" -r 100MB -- pinned-producer-and-consumer \
    --producers 2 --consumers 2 --streams 2
  iggy_bench produce-10m "$r" -P 1000 -b "$B10M" -- pinned-producer --producers 2 --streams 2
  iggy_bench produce-fsync "$r" -P 1000 -b $((B1000 / 4)) --enforce-fsync -- pinned-producer \
    --producers 2 --streams 2
  stop_server
}

echo "== $rounds rounds, messages of $MESSAGE_BYTES B, 2 producers / 2 consumers, rill on $RILL_SHARDS shards${RILL_BROKER_FLAGS:+ with $RILL_BROKER_FLAGS}"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order=(rill iggy); else order=(iggy rill); fi
  echo "== round $r of $rounds: ${order[*]}"
  for s in "${order[@]}"; do "run_$s" "$r"; done
done

# --- summary -------------------------------------------------------------------------------
echo
echo "== medians of $rounds rounds ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cpus, $(uname -r))"
python3 - "$tsv" "$rounds" "$RILL_BROKER_FLAGS" <<'EOF' | tee "$results/summary.md"
import collections, statistics, sys

print(f"rill brokers ran with {sys.argv[3]}." if sys.argv[3] else "rill brokers ran with their defaults.")

rows = collections.defaultdict(list)
failed = collections.Counter()
for line in open(sys.argv[1]):
    system, workload, rnd, metric, value = line.rstrip("\n").split("\t")
    if metric == "failed":
        failed[(system, workload)] += 1
    elif value:
        rows[(system, workload, metric)].append(float(value))

def med(system, workload, metric):
    if workload.endswith("-wc"):  # rill's write-caching runs, against Iggy's (it has no other)
        workload = workload[:-3] if system == "iggy" else workload
    if workload.endswith("-1b"):  # rill with one batch per request, against Iggy's same run
        workload = workload[:-3] if system == "iggy" else workload
    if workload.endswith("-burst"):  # rill sending in Iggy's 100-message turns
        workload = workload[:-6] if system == "iggy" else workload
    # "req_*": rill's per-request figure beside Iggy's own (per batch request already);
    # "send_*": rill's e2e from the send call beside Iggy's (never corrected).
    if system == "iggy" and (metric.startswith("req_") or metric.startswith("send_")):
        metric = metric.split("_", 1)[1]
    v = rows.get((system, workload, metric))
    return statistics.median(v) if v else None

def fmt(x, unit):
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if unit == "msg/s" else f"{x / 1000:,.2f} ms"

lines = [
    ("produce-1000", "msgs_per_sec", "msg/s", "produce, 1000-message batches"),
    ("produce-100", "msgs_per_sec", "msg/s", "produce, 100-message batches"),
    ("consume", "msgs_per_sec", "msg/s", "consume from the start"),
    ("e2e-50mb", "p50_us", "ms", "50 MB/s in, consumers along: p50"),
    ("e2e-50mb", "p99_us", "ms", "50 MB/s in, consumers along: p99"),
    ("e2e-50mb", "p999_us", "ms", "50 MB/s in, consumers along: p99.9"),
    ("e2e-50mb", "p9999_us", "ms", "50 MB/s in, consumers along: p99.99"),
    ("e2e-50mb", "max_us", "ms", "50 MB/s in, consumers along: max (rill true, Iggy bucket)"),
    ("e2e-50mb", "send_p50_us", "ms", "50 MB/s, both uncorrected (rill from the send call): p50"),
    ("e2e-50mb", "send_p99_us", "ms", "50 MB/s, both uncorrected: p99"),
    ("e2e-50mb", "send_p9999_us", "ms", "50 MB/s, both uncorrected: p99.99"),
    ("e2e-50mb-burst", "p50_us", "ms", "50 MB/s in Iggy's shape (100 messages a turn): p50"),
    ("e2e-50mb-burst", "p99_us", "ms", "50 MB/s in Iggy's shape: p99"),
    ("e2e-50mb-burst", "p9999_us", "ms", "50 MB/s in Iggy's shape: p99.99"),
    ("e2e-50mb-burst", "max_us", "ms", "50 MB/s in Iggy's shape: max (rill true, Iggy bucket)"),
    ("produce-fsync", "msgs_per_sec", "msg/s", "produce, fsync per write"),
    ("produce-10m", "msgs_per_sec", "msg/s", "10 M-message produce"),
    ("produce-10m", "p9999_us", "ms", "10 M-message produce: p99.99"),
    ("produce-10m", "req_p9999_us", "ms", "10 M-message produce: p99.99 per request (rill) vs per batch (Iggy)"),
    ("produce-10m-1b", "msgs_per_sec", "msg/s", "10 M-message produce, rill one batch in flight per connection"),
    ("produce-10m-1b", "req_p50_us", "ms", "10 M, one batch in flight: p50 per request / batch"),
    ("produce-10m-1b", "req_p9999_us", "ms", "10 M, one batch in flight: p99.99 per request / batch"),
    ("produce-1000-wc", "msgs_per_sec", "msg/s", "produce, 1000-message batches, rill --write-caching (1 GiB a partition)"),
    ("produce-100-wc", "msgs_per_sec", "msg/s", "produce, 100-message batches, rill --write-caching (1 GiB a partition)"),
    ("e2e-50mb-wc", "p50_us", "ms", "50 MB/s, rill --write-caching: p50"),
    ("e2e-50mb-wc", "p99_us", "ms", "50 MB/s, rill --write-caching: p99"),
    ("e2e-50mb-wc", "p9999_us", "ms", "50 MB/s, rill --write-caching: p99.99"),
    ("e2e-50mb-wc", "max_us", "ms", "50 MB/s, rill --write-caching: max"),
    ("e2e-50mb-burst-wc", "p50_us", "ms", "50 MB/s in Iggy's shape, rill --write-caching: p50"),
    ("e2e-50mb-burst-wc", "p99_us", "ms", "50 MB/s in Iggy's shape, rill --write-caching: p99"),
    ("e2e-50mb-burst-wc", "p9999_us", "ms", "50 MB/s in Iggy's shape, rill --write-caching: p99.99"),
    ("e2e-50mb-burst-wc", "max_us", "ms", "50 MB/s in Iggy's shape, rill --write-caching: max"),
]
print(f"| workload ({sys.argv[2]} rounds, medians) | Iggy | rill | rill / Iggy |")
print("|---|---|---|---|")
for workload, metric, unit, label in lines:
    i, r = med("iggy", workload, metric), med("rill", workload, metric)
    ratio = "n/a" if i is None or r is None or i == 0 else f"{r / i:.2f}x"
    print(f"| {label} | {fmt(i, unit)} | {fmt(r, unit)} | {ratio} |")
# rill only, against the machine: fio's 4 KiB write + fdatasync p99 of this run.
import json, os
fio = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "fio-sync4k.json")))
fio_p99 = fio["jobs"][0]["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e3
for metric, label in (("p50_us", "p50"), ("p99_us", "p99")):
    r = med("rill", "produce-fsync-10k", metric)
    if r is not None:
        print(f"\nrill `--fsync always` at 10,000 msg/s, acknowledgement {label}: {r / 1000:.2f} ms; "
              f"fio fdatasync p99 {fio_p99 / 1000:.2f} ms: {r / fio_p99:.1f}x (target for p99: <= 2x)")
# The same pace without a broker (medians over the rounds, each right after rill's run).
r = med("rill", "produce-fsync-10k", "p99_us")
paced = med("machine", "fio-sync4k-paced", "sync_p99_us")
paced_w = med("machine", "fio-sync4k-paced", "write_p99_us")
floor = med("machine", "loopback-dsync", "p99_us")
floor_send = med("machine", "loopback-dsync", "send_p99_us")
if r is not None and paced:
    print(f"\nAt the same pace: fio 4 KiB write + fdatasync at 2 x 5,000 IOPS: fdatasync p99 "
          f"{paced / 1000:.2f} ms (write p99 {paced_w / 1000:.2f} ms); rill's p99 is {r / paced:.1f}x it.")
if r is not None and floor:
    print(f"`rill-bench loopback` (no broker; each request written O_DSYNC by a plain thread, then "
          f"answered; one in flight per connection): p99 {floor / 1000:.2f} ms from the intended "
          f"send, {floor_send / 1000:.2f} ms from the send; rill's p99 is {r / floor:.2f}x the first.")
# Time lost by the whole machine while each ran (medians): a latency under it says as much
# about the host as about the system measured.
probed = sorted({w for (s, w, m) in rows if s == "rill" and m == "lost_pct"})
if probed:
    print("\n| workload: time the machine could not run (lost-time-probe, medians) | Iggy | rill |")
    print("|---|---|---|")
    for w in probed:
        cells = []
        for system in ("iggy", "rill"):
            pct, longest = med(system, w, "lost_pct"), med(system, w, "lost_max_us")
            cells.append("n/a" if pct is None else f"{pct:.1f}%, longest {longest / 1000:.1f} ms")
        print(f"| {w} | {cells[0]} | {cells[1]} |")
for (system, workload), n in sorted(failed.items()):
    print(f"\n{system} {workload}: failed in {n} round(s)")
EOF

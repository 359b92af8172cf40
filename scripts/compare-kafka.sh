#!/usr/bin/env bash
# Compares rill with Apache Kafka on this machine, same workloads, same run, as ratios.
#
# Usage: scripts/compare-kafka.sh [--rill-only] [KAFKA_HOME]
#
# KAFKA_HOME (the argument, else the environment variable) is an Apache Kafka installation
# (bin/kafka-server-start.sh, libs/); Java 17 must be on PATH. The script starts a
# single-node KRaft Kafka on loopback (its own temporary directory and free ports) and a
# `rill broker` (native protocol and Kafka listener, 2 shards), then runs, alternating the
# targets within every round:
#   - rill-bench against rill (--driver native), rill's Kafka listener (--driver kafka) and
#     Kafka (--driver kafka): produce acks=1, produce acks=all, consume from the beginning,
#     e2e latency at a fixed rate;
#   - Kafka's own tools against Kafka and rill's Kafka listener: kafka-producer-perf-test.sh
#     (acks=1, acks=all), kafka-consumer-perf-test.sh, EndToEndLatency (one message in
#     flight); a tool rill cannot serve yet (the consumer perf test needs consumer groups)
#     is reported as failed, not fatal.
# and prints medians and ratios, with the CPU per GB that rill-bench and the broker each spent
# (on a machine they share, that bounds the ratios). Without a Kafka installation it says so and exits 0;
# --rill-only runs just the rill half (native vs the Kafka listener, rill-bench only).
# Every process it starts is stopped by pid when it ends.
#
# Knobs (environment): MESSAGES [1000000] per produce/consume run, MESSAGE_BYTES [1024],
# PARTITIONS [2], LINGER_MS [5], BATCH_BYTES [1048576]; for e2e RATE [50000] msg/s,
# E2E_SECS [20], E2E_LINGER_MS [0]; E2E_MESSAGES [10000] for EndToEndLatency; RUNS [3]
# rounds; RILL_FSYNC [never] (Kafka does not fsync by default either); RILL_SHARDS [2];
# BENCH_DIR [/tmp] for data and results; RILL_BIN_DIR [built here with cargo build
# --release]; KAFKA_HEAP [1G].
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }

rill_only=0
kafka_home=${KAFKA_HOME:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --rill-only) rill_only=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "compare-kafka: unknown option $1" >&2; exit 2 ;;
    *) kafka_home=$1 ;;
  esac
  shift
done

if [ "$rill_only" = 0 ]; then
  if [ -z "$kafka_home" ]; then
    echo "compare-kafka: no Apache Kafka installation given (pass KAFKA_HOME, or --rill-only): nothing compared"
    exit 0
  fi
  if [ ! -f "$kafka_home/bin/kafka-server-start.sh" ]; then
    echo "compare-kafka: $kafka_home has no bin/kafka-server-start.sh: not an Apache Kafka installation, nothing compared"
    exit 0
  fi
  command -v java >/dev/null 2>&1 || { echo "compare-kafka: java is not on PATH (Kafka needs Java 17)" >&2; exit 1; }
fi
command -v python3 >/dev/null 2>&1 || { echo "compare-kafka: python3 is needed for the summary" >&2; exit 1; }

MESSAGES=${MESSAGES:-1000000}
MESSAGE_BYTES=${MESSAGE_BYTES:-1024}
PARTITIONS=${PARTITIONS:-2}
LINGER_MS=${LINGER_MS:-5}
BATCH_BYTES=${BATCH_BYTES:-1048576}
RATE=${RATE:-50000}
E2E_LINGER_MS=${E2E_LINGER_MS:-0}
E2E_SECS=${E2E_SECS:-20}
E2E_MESSAGES=${E2E_MESSAGES:-10000}
RUNS=${RUNS:-3}
RILL_FSYNC=${RILL_FSYNC:-never}
RILL_SHARDS=${RILL_SHARDS:-2}
BENCH_DIR=${BENCH_DIR:-/tmp}
KAFKA_HEAP=${KAFKA_HEAP:-1G}

# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_setup compare-kafka
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work/rill-data" "$work/kafka-data"
  echo "== results kept in $results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() { # PORT SECONDS NAME
  local i
  for i in $(seq 1 $(($2 * 10))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "compare-kafka: $3 did not listen on port $1 within $2 s" >&2
  exit 1
}

# --- rill ----------------------------------------------------------------------------------
rill_port=$(free_ports "$RILL_SHARDS")
rill_kafka_port=$(free_ports "$RILL_SHARDS")
while [ $((rill_kafka_port - rill_port)) -lt "$RILL_SHARDS" ] && [ $((rill_port - rill_kafka_port)) -lt "$RILL_SHARDS" ]; do
  rill_kafka_port=$(free_ports "$RILL_SHARDS")
done
RILL_NATIVE=127.0.0.1:$rill_port
RILL_KAFKA=127.0.0.1:$rill_kafka_port
echo "== rill broker: native $RILL_NATIVE, Kafka listener $RILL_KAFKA, --shards $RILL_SHARDS --fsync $RILL_FSYNC"
"$RILL" broker --data-dir "$work/rill-data" --shards "$RILL_SHARDS" --fsync "$RILL_FSYNC" \
  --listen "$RILL_NATIVE" --kafka-listen "$RILL_KAFKA" >"$results/rill-broker.log" 2>&1 &
rill_pid=$!
pids+=("$rill_pid")
wait_port "$rill_port" 120 "rill"
wait_port "$rill_kafka_port" 120 "rill's Kafka listener"

# --- Apache Kafka, single-node KRaft ---------------------------------------------------------
KAFKA=
if [ "$rill_only" = 0 ]; then
  kafka_port=$(free_ports 1)
  controller_port=$(free_ports 1)
  while [ "$controller_port" = "$kafka_port" ]; do controller_port=$(free_ports 1); done
  KAFKA=127.0.0.1:$kafka_port
  props=$work/server.properties
  cat >"$props" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$kafka_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$work/kafka-data
num.partitions=$PARTITIONS
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  echo "== Apache Kafka ($kafka_home): $KAFKA, controller 127.0.0.1:$controller_port"
  cluster_id=$("$kafka_home/bin/kafka-storage.sh" random-uuid)
  "$kafka_home/bin/kafka-storage.sh" format -t "$cluster_id" -c "$props" >"$results/kafka-format.log" 2>&1 \
    || { cat "$results/kafka-format.log" >&2; exit 1; }
  # kafka-server-start.sh execs kafka-run-class.sh, which execs java: $! is the JVM.
  LOG_DIR=$work/kafka-app-logs KAFKA_HEAP_OPTS="-Xms$KAFKA_HEAP -Xmx$KAFKA_HEAP" \
    "$kafka_home/bin/kafka-server-start.sh" "$props" >"$results/kafka-broker.log" 2>&1 &
  kafka_pid=$!
  pids+=("$kafka_pid")
  wait_port "$kafka_port" 120 "Kafka"
fi

# --- helpers ---------------------------------------------------------------------------------
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$tsv"; } # tool target workload run metric value

create_topic() { # TARGET NAME
  case "$1" in
    rill-native | rill-kafka)
      "$RILL" topic create "$2" --partitions "$PARTITIONS" -b "$RILL_NATIVE" >/dev/null ;;
    kafka)
      "$kafka_home/bin/kafka-topics.sh" --bootstrap-server "$KAFKA" --create --topic "$2" \
        --partitions "$PARTITIONS" --replication-factor 1 >/dev/null ;;
  esac
}
delete_topic() { # TARGET NAME
  case "$1" in
    rill-native | rill-kafka)
      "$RILL" topic delete "$2" -b "$RILL_NATIVE" >/dev/null 2>&1 || true ;;
    kafka)
      "$kafka_home/bin/kafka-topics.sh" --bootstrap-server "$KAFKA" --delete --topic "$2" \
        >/dev/null 2>&1 || true ;;
  esac
}
bench_args() { # TARGET -> driver and bootstrap flags
  case "$1" in
    rill-native) echo "--driver native -b $RILL_NATIVE" ;;
    rill-kafka) echo "--driver kafka -b $RILL_KAFKA" ;;
    kafka) echo "--driver kafka -b $KAFKA" ;;
  esac
}
kafka_bootstrap() { # TARGET (Kafka protocol targets)
  case "$1" in
    rill-kafka) echo "$RILL_KAFKA" ;;
    kafka) echo "$KAFKA" ;;
  esac
}

# CPU seconds (user + system) a broker process has used so far.
clock_ticks=$(getconf CLK_TCK)
broker_cpu() { # TARGET
  local pid=$rill_pid
  [ "$1" = kafka ] && pid=$kafka_pid
  awk -v t="$clock_ticks" '{ print ($14 + $15) / t }' "/proc/$pid/stat"
}

# rill-bench WORKLOAD TARGET RUN TOPIC ARGS...: records msgs/s and latency percentiles (us),
# and the CPU the client and the broker spent per GB moved (so a ratio limited by two processes
# sharing the machine's cores shows as such).
rill_bench() {
  local workload=$1 target=$2 run=$3 topic=$4 name json cpu0
  shift 4
  name=$workload
  [ "$workload" = produce ] && name=produce-acks$(printf '%s' "$*" | sed -E 's/.*--acks ([^ ]+).*/\1/')
  json=$results/rill-bench-$name-$target-$run.json
  cpu0=$(broker_cpu "$target")
  # shellcheck disable=SC2046
  if "$BENCH" "$workload" $(bench_args "$target") --topic "$topic" --partitions "$PARTITIONS" \
    --message-bytes "$MESSAGE_BYTES" --batch-bytes "$BATCH_BYTES" "$@" --json "$json" >>"$results/rill-bench.log" 2>&1; then
    python3 - "$json" "$cpu0" "$(broker_cpu "$target")" <<'EOF' | while read -r metric value; do record rill-bench "$target" "$name" "$run" "$metric" "$value"; done
import json, sys
r = json.load(open(sys.argv[1]))
print("msgs_per_sec", r["msgs_per_sec"])
for k in ("p50", "p99", "p999", "p9999", "max"):
    print(k + "_us", r["latency_us"][k])
if r.get("ack_latency_us"):
    print("ack_p50_us", r["ack_latency_us"]["p50"])
gb = r["bytes"] / 1e9
if gb > 0:
    cpu = r["cpu_seconds"]
    print("client_cpu_s_per_gb", (cpu["user"] + cpu["system"]) / gb)
    print("broker_cpu_s_per_gb", (float(sys.argv[3]) - float(sys.argv[2])) / gb)
EOF
    echo "   rill-bench $name $target: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.0f msg/s, p50 %.0f us, p99 %.0f us" % (r["msgs_per_sec"], r["latency_us"]["p50"], r["latency_us"]["p99"]))' "$json")"
  else
    record rill-bench "$target" "$name" "$run" failed 1
    echo "   rill-bench $name $target: FAILED (see $results/rill-bench.log)"
  fi
}

tool_props=$work/tool.properties
# Java producers turn idempotence on by default; rill-bench and rill's own producer have none.
printf 'enable.idempotence=false\n' >"$tool_props"

kafka_producer_perf() { # TARGET RUN TOPIC ACKS
  local target=$1 run=$2 topic=$3 acks=$4 out line
  out=$results/kafka-producer-perf-acks$acks-$target-$run.log
  if timeout 600 "$kafka_home/bin/kafka-producer-perf-test.sh" --topic "$topic" \
    --num-records "$MESSAGES" --record-size "$MESSAGE_BYTES" --throughput -1 \
    --producer-props bootstrap.servers="$(kafka_bootstrap "$target")" acks="$acks" \
    linger.ms="$LINGER_MS" batch.size="$BATCH_BYTES" compression.type=none \
    enable.idempotence=false >"$out" 2>&1; then
    # "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, P50 ms 50th, ..."
    line=$(grep 'records sent' "$out" | tail -n 1)
    record kafka-tools "$target" "produce-acks$acks" "$run" msgs_per_sec \
      "$(printf '%s' "$line" | sed -E 's/.*sent, ([0-9.]+) records\/sec.*/\1/')"
    record kafka-tools "$target" "produce-acks$acks" "$run" p50_us \
      "$(printf '%s' "$line" | sed -E 's/.* ([0-9.]+) ms 50th.*/\1/' | awk '{print $1 * 1000}')"
    record kafka-tools "$target" "produce-acks$acks" "$run" p99_us \
      "$(printf '%s' "$line" | sed -E 's/.* ([0-9.]+) ms 99th.*/\1/' | awk '{print $1 * 1000}')"
    echo "   kafka-producer-perf-test acks=$acks $target: $line"
  else
    record kafka-tools "$target" "produce-acks$acks" "$run" failed 1
    echo "   kafka-producer-perf-test acks=$acks $target: FAILED ($out)"
  fi
}

kafka_consumer_perf() { # TARGET RUN TOPIC
  local target=$1 run=$2 topic=$3 out
  out=$results/kafka-consumer-perf-$target-$run.log
  if timeout 600 "$kafka_home/bin/kafka-consumer-perf-test.sh" --bootstrap-server \
    "$(kafka_bootstrap "$target")" --topic "$topic" --messages "$MESSAGES" --timeout 60000 \
    --group "perf-$target-$run" >"$out" 2>&1; then
    # A CSV header then one line; fetch.nMsg.sec leaves the group join out, as rill-bench's
    # assign-mode consumers have none.
    local v
    v=$(awk -F', *' '/fetch.nMsg.sec/ { for (i = 1; i <= NF; i++) if ($i == "fetch.nMsg.sec") c = i; next }
                     c && NF >= c { v = $c } END { print v }' "$out")
    if [ -n "$v" ]; then
      record kafka-tools "$target" consume "$run" msgs_per_sec "$v"
      echo "   kafka-consumer-perf-test $target: $v msg/s (fetch.nMsg.sec)"
      return
    fi
  fi
  record kafka-tools "$target" consume "$run" failed 1
  echo "   kafka-consumer-perf-test $target: FAILED ($out)"
}

end_to_end_latency() { # TARGET RUN TOPIC
  local target=$1 run=$2 topic=$3 out class line
  out=$results/kafka-e2e-latency-$target-$run.log
  # Kafka 3.7+ has the Java tool; older releases the Scala one (gone in 4.0).
  for class in org.apache.kafka.tools.EndToEndLatency kafka.tools.EndToEndLatency; do
    if timeout 600 "$kafka_home/bin/kafka-run-class.sh" "$class" "$(kafka_bootstrap "$target")" \
      "$topic" "$E2E_MESSAGES" 1 "$MESSAGE_BYTES" "$tool_props" >"$out" 2>&1; then
      # "Percentiles: 50th = 1, 99th = 2, 99.9th = 4" (whole ms), "Avg latency: 0.4 ms"
      line=$(grep 'Percentiles' "$out" | tail -n 1)
      record kafka-tools "$target" e2e-one-in-flight "$run" avg_us \
        "$(grep 'Avg latency' "$out" | sed -E 's/.*: ([0-9.]+) ms.*/\1/' | awk '{print $1 * 1000}')"
      record kafka-tools "$target" e2e-one-in-flight "$run" p50_us \
        "$(printf '%s' "$line" | sed -E 's/.*50th = ([0-9]+).*/\1/' | awk '{print $1 * 1000}')"
      record kafka-tools "$target" e2e-one-in-flight "$run" p99_us \
        "$(printf '%s' "$line" | sed -E 's/.* 99th = ([0-9]+).*/\1/' | awk '{print $1 * 1000}')"
      record kafka-tools "$target" e2e-one-in-flight "$run" p999_us \
        "$(printf '%s' "$line" | sed -E 's/.*99\.9th = ([0-9]+).*/\1/' | awk '{print $1 * 1000}')"
      echo "   EndToEndLatency $target: $(grep 'Avg latency' "$out") $line"
      return
    fi
    grep -q -E 'ClassNotFoundException|Could not find or load main class' "$out" || break
  done
  record kafka-tools "$target" e2e-one-in-flight "$run" failed 1
  echo "   EndToEndLatency $target: FAILED ($out)"
}

# --- the rounds ------------------------------------------------------------------------------
if [ "$rill_only" = 1 ]; then
  targets=(rill-native rill-kafka)
else
  targets=(rill-native rill-kafka kafka)
fi
e2e_messages=$((RATE * E2E_SECS))
echo "== $RUNS rounds: $MESSAGES messages of $MESSAGE_BYTES B, $PARTITIONS partitions, linger $LINGER_MS ms, batch $BATCH_BYTES B; e2e $RATE msg/s for $E2E_SECS s, linger $E2E_LINGER_MS ms"
for run in $(seq 1 "$RUNS"); do
  # Rotate the order every round so no target always runs first (or on a warmer machine).
  n=${#targets[@]}
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${targets[$(((i + run - 1) % n))]}"); done
  echo "== round $run of $RUNS: ${order[*]}"
  # rill's two targets share one broker: every topic is named after its target.
  for t in "${order[@]}"; do
    for topic in p1 pall e2e; do create_topic "$t" "$t-$topic-$run"; done
  done
  for t in "${order[@]}"; do rill_bench produce "$t" "$run" "$t-p1-$run" --acks 1 --messages "$MESSAGES" --linger-ms "$LINGER_MS"; done
  for t in "${order[@]}"; do rill_bench produce "$t" "$run" "$t-pall-$run" --acks all --messages "$MESSAGES" --linger-ms "$LINGER_MS"; done
  for t in "${order[@]}"; do rill_bench consume "$t" "$run" "$t-p1-$run" --messages "$MESSAGES"; done
  for t in "${order[@]}"; do delete_topic "$t" "$t-p1-$run"; delete_topic "$t" "$t-pall-$run"; done
  for t in "${order[@]}"; do
    rill_bench e2e "$t" "$run" "$t-e2e-$run" --rate "$RATE" --messages "$e2e_messages" --linger-ms "$E2E_LINGER_MS"
  done
  for t in "${order[@]}"; do delete_topic "$t" "$t-e2e-$run"; done
  if [ "$rill_only" = 0 ]; then
    tool_targets=(kafka rill-kafka)
    [ $((run % 2)) = 0 ] && tool_targets=(rill-kafka kafka)
    for t in "${tool_targets[@]}"; do
      for topic in kp1 kpall ke2e; do create_topic "$t" "$t-$topic-$run"; done
    done
    for t in "${tool_targets[@]}"; do kafka_producer_perf "$t" "$run" "$t-kp1-$run" 1; done
    for t in "${tool_targets[@]}"; do kafka_producer_perf "$t" "$run" "$t-kpall-$run" all; done
    for t in "${tool_targets[@]}"; do kafka_consumer_perf "$t" "$run" "$t-kp1-$run"; done
    for t in "${tool_targets[@]}"; do end_to_end_latency "$t" "$run" "$t-ke2e-$run"; done
    for t in "${tool_targets[@]}"; do
      for topic in kp1 kpall ke2e; do delete_topic "$t" "$t-$topic-$run"; done
    done
  fi
done

# --- summary -------------------------------------------------------------------------------
echo
echo "== medians of $RUNS rounds ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cpus, $(uname -r))"
python3 - "$tsv" "$rill_only" "$RATE" <<'EOF' | tee "$results/summary.md"
import collections, statistics, sys

rows = collections.defaultdict(list)
failed = collections.Counter()
for line in open(sys.argv[1]):
    tool, target, workload, run, metric, value = line.rstrip("\n").split("\t")
    if metric == "failed":
        failed[(tool, target, workload)] += 1
    elif value:
        rows[(tool, target, workload, metric)].append(float(value))
rill_only = sys.argv[2] == "1"
rate = sys.argv[3]

def med(tool, target, workload, metric):
    v = rows.get((tool, target, workload, metric))
    return statistics.median(v) if v else None

def fmt(x, unit):
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if unit == "msg/s" else f"{x:,.0f} us"

def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

workloads = [
    ("produce-acks1", "msgs_per_sec", "msg/s", "produce acks=1"),
    ("produce-acksall", "msgs_per_sec", "msg/s", "produce acks=all"),
    ("consume", "msgs_per_sec", "msg/s", "consume from the beginning"),
    ("e2e", "p50_us", "us", f"e2e p50 at {rate} msg/s"),
    ("e2e", "p99_us", "us", f"e2e p99 at {rate} msg/s"),
    ("e2e", "p999_us", "us", f"e2e p99.9 at {rate} msg/s"),
    ("e2e", "p9999_us", "us", f"e2e p99.99 at {rate} msg/s"),
]
print("rill-bench (higher msg/s is better, lower latency is better; ratios of medians):")
print()
if rill_only:
    print("| workload | rill native | rill Kafka listener | listener / native |")
    print("|---|---|---|---|")
    for w, m, unit, label in workloads:
        n, k = med("rill-bench", "rill-native", w, m), med("rill-bench", "rill-kafka", w, m)
        print(f"| {label} | {fmt(n, unit)} | {fmt(k, unit)} | {ratio(k, n)} |")
else:
    print("| workload | rill native | rill Kafka listener | Apache Kafka | native / Kafka | listener / Kafka | listener / native |")
    print("|---|---|---|---|---|---|---|")
    for w, m, unit, label in workloads:
        n = med("rill-bench", "rill-native", w, m)
        k = med("rill-bench", "rill-kafka", w, m)
        a = med("rill-bench", "kafka", w, m)
        print(f"| {label} | {fmt(n, unit)} | {fmt(k, unit)} | {fmt(a, unit)} | {ratio(n, a)} | {ratio(k, a)} | {ratio(k, n)} |")
    print()
    print("Kafka's own tools (Java client; EndToEndLatency reports whole milliseconds):")
    print()
    print("| workload | rill Kafka listener | Apache Kafka | rill / Kafka |")
    print("|---|---|---|---|")
    tools = [
        ("produce-acks1", "msgs_per_sec", "msg/s", "kafka-producer-perf-test acks=1"),
        ("produce-acksall", "msgs_per_sec", "msg/s", "kafka-producer-perf-test acks=all"),
        ("consume", "msgs_per_sec", "msg/s", "kafka-consumer-perf-test (fetch.nMsg.sec)"),
        ("e2e-one-in-flight", "avg_us", "us", "EndToEndLatency avg"),
        ("e2e-one-in-flight", "p50_us", "us", "EndToEndLatency p50"),
        ("e2e-one-in-flight", "p99_us", "us", "EndToEndLatency p99"),
        ("e2e-one-in-flight", "p999_us", "us", "EndToEndLatency p99.9"),
    ]
    for w, m, unit, label in tools:
        k, a = med("kafka-tools", "rill-kafka", w, m), med("kafka-tools", "kafka", w, m)
        print(f"| {label} | {fmt(k, unit)} | {fmt(a, unit)} | {ratio(k, a)} |")

targets = ["rill-native", "rill-kafka"] + ([] if rill_only else ["kafka"])
print()
print("CPU per GB moved (rill-bench: its own process, every thread; broker: the broker process")
print("over the same run; both on this machine's cores), and the e2e producer's acknowledgement:")
print()
print("| workload | target | rill-bench s/GB | broker s/GB | together s/GB |")
print("|---|---|---|---|---|")
cpu = {}
for w, label in (("produce-acks1", "produce acks=1"), ("produce-acksall", "produce acks=all"),
                 ("consume", "consume from the beginning"), ("e2e", f"e2e at {rate} msg/s")):
    for t in targets:
        c = med("rill-bench", t, w, "client_cpu_s_per_gb")
        b = med("rill-bench", t, w, "broker_cpu_s_per_gb")
        cpu[(w, t)] = (c, b)
        both = None if c is None or b is None else c + b
        f = lambda x: "n/a" if x is None else f"{x:.2f}"
        print(f"| {label} | {t} | {f(c)} | {f(b)} | {f(both)} |")
acks = [(t, med("rill-bench", t, "e2e", "ack_p50_us")) for t in targets]
print()
print("e2e: the producer's acknowledgement p50 (from the intended send): "
      + ", ".join(f"{t} {fmt(a, 'us')}" for t, a in acks))
print()
for w in ("produce-acks1", "consume"):
    (nc, nb), (kc, kb) = cpu.get((w, "rill-native"), (None, None)), cpu.get((w, "rill-kafka"), (None, None))
    if None in (nc, nb, kc, kb) or kc + kb == 0 or kc + nb == 0:
        continue
    print(f"{w}: were both runs CPU-bound on the shared cores, listener / native would be "
          f"{(nc + nb) / (kc + kb):.2f}x (the CPU per GB together); with a listener costing the "
          f"broker no more than native, at most {(nc + nb) / (kc + nb):.2f}x (rill-bench's Kafka "
          f"client alone is {kc / (nc + nb):.2f}x native's client and broker together).")
if failed:
    print()
    for (tool, target, workload), n in sorted(failed.items()):
        print(f"failed: {tool} {workload} against {target} ({n} of the rounds)")
EOF

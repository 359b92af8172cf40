#!/usr/bin/env bash
# Where a record's producer-to-consumer time goes, hop by hop, from one run: rill-bench e2e
# (2 producers, 2 consumers, 2 partitions, linger 0, 1 KiB records) at RATE msg/s [10000] for
# MESSAGES [100000], against a fresh `rill broker --shards 2 --fsync FSYNC` [always] (extra
# broker flags: BROKER_ARGS) with its metrics listener. Client side (rill-bench): end to end,
# the producer's acknowledgement per message, and the round trip per produce request. Broker
# side (its Prometheus histograms, medians interpolated within buckets): a produce from read to
# answer ready, each group-commit round's write, each fdatasync. The budget subtracts medians
# of neighbouring spans, so its rows are estimates of each hop's typical share, not exact
# per-record sums. With --write-caching in BROKER_ARGS the write and the sync are behind the
# acknowledgement, so they count as off the path. Binaries from RILL_BIN_DIR [target/release];
# data in /tmp, removed.
set -u
R=${RILL_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
RATE=${RATE:-10000}
MESSAGES=${MESSAGES:-100000}
FSYNC=${FSYNC:-always}
out=$(mktemp -d /tmp/latency-budget.XXXX)
d=$(mktemp -d /tmp/latency-budget-data.XXXX)
port=$((20000 + RANDOM % 20000))
mport=$((port + 10))
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$d"
}
trap cleanup EXIT
# shellcheck disable=SC2086
"$R/rill" broker --data-dir "$d" --shards 2 --fsync "$FSYNC" --listen 127.0.0.1:$port \
  --kafka-listen off --metrics-listen 127.0.0.1:$mport ${BROKER_ARGS:-} >"$out/broker.log" 2>&1 &
pid=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
"$R/rill-bench" e2e -b 127.0.0.1:$port --partitions 2 --message-bytes 1024 --topic budget \
  --producers 2 --consumers 2 --acks 1 --linger-ms 0 --rate "$RATE" --messages "$MESSAGES" \
  --batch-bytes 107456 --json "$out/e2e.json" >"$out/bench.log" 2>&1 || {
  echo "latency-budget: rill-bench failed, see $out/bench.log" >&2
  exit 1
}
curl -s "http://127.0.0.1:$mport/metrics" >"$out/metrics.txt"
# With write caching the write and the sync are behind the acknowledgement, off the path.
cached=no
case " ${BROKER_ARGS:-} " in *" --write-caching false "*) ;; *" --write-caching"*) cached=yes ;; esac
python3 - "$out" "$RATE" "$FSYNC" "$cached" <<'PY'
import json, re, sys
out, rate, fsync, cached = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "yes"
r = json.load(open(f"{out}/e2e.json"))
buckets = {}
for line in open(f"{out}/metrics.txt"):
    m = re.match(r'^(\w+)_bucket\{(.*)\} (\S+)$', line)
    if not m:
        continue
    name, labels, v = m.groups()
    le = re.search(r'le="([^"]+)"', labels).group(1)
    if "listener=" in labels and 'listener="native"' not in labels:
        continue
    b = buckets.setdefault(name, {})
    le = float("inf") if le == "+Inf" else float(le)
    b[le] = b.get(le, 0) + float(v)  # summed over shards
def median_us(name):
    b = sorted(buckets.get(name, {}).items())
    if not b or b[-1][1] == 0:
        return None
    half, prev_le, prev_n = b[-1][1] / 2, 0.0, 0.0
    for le, n in b:
        if n >= half:
            if le == float("inf"):
                return prev_le * 1e6
            frac = (half - prev_n) / (n - prev_n) if n > prev_n else 0
            return (prev_le + frac * (le - prev_le)) * 1e6
        prev_le, prev_n = le, n
e2e = r["latency_us"]["p50"]
ack = r.get("ack_latency_us", {}).get("p50")
req = r.get("request_latency_us", {}).get("p50")
produce = median_us("rill_produce_duration_seconds")
write = 0.0 if cached else median_us("rill_group_commit_write_duration_seconds")
sync = median_us("rill_fdatasync_duration_seconds") if fsync == "always" and not cached else 0.0
# No fdatasync timed with --fsync always: the segments are O_DSYNC (--fsync-o-dsync, the
# default), each write synced by itself, inside the write's span above.
dsync = sync is None and fsync == "always" and not cached
if dsync:
    sync = 0.0
def f(x):
    return "n/a" if x is None else f"{x:,.0f}"
def sub(a, *b):
    return None if a is None or any(x is None for x in b) else a - sum(b)
rows = [
    ("producer: send to request written (linger 0: batching behind the partition's request in flight)", sub(ack, req)),
    ("client and loopback: request written to response read, less the broker's part", sub(req, produce)),
    ("broker: request read, validation, wait for the group-commit round, high watermark", sub(produce, write, sync)),
    ("broker: the group-commit round's DMA write" + (" (written behind: off the path)" if cached else ""), write),
    ("broker: fdatasync (written behind: off the path)" if cached else "broker: fdatasync (none: O_DSYNC writes, synced within the write)" if dsync else "broker: fdatasync" if fsync == "always" else "broker: fdatasync (none: --fsync never)", sync),
    ("acknowledged to consumed: fetch wake-up, response, consumer", sub(e2e, ack)),
]
print(f"| hop (medians, us; {rate} msg/s, --fsync {fsync}{', write caching' if cached else ''}) | us |")
print("|---|---|")
for name, v in rows:
    print(f"| {name} | {f(v)} |")
print(f"| **end to end, p50** (p99 {f(r['latency_us']['p99'])}, p99.99 {f(r['latency_us']['p9999'])}) | **{f(e2e)}** |")
print(f"spans: e2e {f(e2e)}, producer ack {f(ack)}, request round trip {f(req)}, broker produce {f(produce)}, write {f(write)}, fdatasync {f(sync)}")
PY
echo "raw: $out"

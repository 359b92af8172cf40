#!/usr/bin/env bash
# How fetches read the segment files: `--file-reads sendfile`, `copy` without read-ahead
# (`--file-read-ahead-bytes 0`) and `copy` with its default read-ahead, same binary, alternating
# rounds (ROUNDS, default 5; the order rotates each round). Each run: a fresh broker
# (`--shards 2 --fsync never`), a 2 M-message produce of 1 KiB records in 1000-message batches
# to 2 partitions, then `rill-bench consume` of all of it twice: "cold" (nothing in the page
# cache: segments are written with O_DIRECT) and "again" (what sendfile's first read left in
# the page cache). fio in the same run: O_DIRECT 4 MiB sequential reads, and a buffered read
# of a file not in the page cache. Medians per mode; binaries from RILL_BIN_DIR
# [target/release]; data in /tmp, removed.
set -u
R=${RILL_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
ROUNDS=${ROUNDS:-5}
MESSAGES=${MESSAGES:-2000000}
out=$(mktemp -d /tmp/file-reads-bench.XXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf /tmp/file-reads-data.* "$out/fio.dat"
}
trap cleanup EXIT

echo "== fio, same run"
fio --name=w --filename="$out/fio.dat" --size=2G --rw=write --bs=1M --direct=1 --ioengine=psync \
  >/dev/null 2>&1
fio --name=direct-read --filename="$out/fio.dat" --size=2G --rw=read --bs=4M --direct=1 \
  --ioengine=psync 2>&1 | grep -E "READ:"
fio --name=buffered-cold-read --filename="$out/fio.dat" --size=2G --rw=read --bs=4M --direct=0 \
  --ioengine=psync 2>&1 | grep -E "READ:|cpu"
rm -f "$out/fio.dat"

modes=("sendfile" "copy-noahead" "copy")
args() {
  case $1 in
    sendfile) echo "--file-reads sendfile" ;;
    copy-noahead) echo "--file-reads copy --file-read-ahead-bytes 0" ;;
    copy) echo "--file-reads copy" ;;
  esac
}
for round in $(seq "$ROUNDS"); do
  for i in 0 1 2; do
    mode=${modes[$(((i + round) % 3))]}
    d=$(mktemp -d /tmp/file-reads-data.XXXX)
    port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2046
    "$R/rill" broker --data-dir "$d" --shards 2 --fsync never --listen 127.0.0.1:$port \
      --kafka-listen off $(args "$mode") >"$out/broker.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    common=(-b 127.0.0.1:$port --partitions 2 --message-bytes 1024 --topic p)
    "$R/rill-bench" produce "${common[@]}" --producers 2 --acks 1 --linger-ms 5 \
      --messages "$MESSAGES" --batch-bytes 1072256 >>"$out/bench.log" 2>&1
    for pass in cold again; do
      "$R/rill-bench" consume "${common[@]}" --consumers 2 --messages "$MESSAGES" \
        --json "$out/$mode-$pass-$round.json" >>"$out/bench.log" 2>&1
    done
    kill "$pid"; wait "$pid"; pid=
    rm -rf "$d"
    echo "round $round $mode: $(python3 -c 'import json,sys; print(" ".join("%s %.0f msg/s" % (p, json.load(open(f))["msgs_per_sec"]) for p, f in zip(("cold", "again"), sys.argv[1:])))' \
      "$out/$mode-cold-$round.json" "$out/$mode-again-$round.json")"
  done
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| mode | consume cold, msg/s (median) | consume again, msg/s (median) | rounds |")
print("|---|---|---|---|")
for mode in ("sendfile", "copy-noahead", "copy"):
    row = []
    for p in ("cold", "again"):
        rs = [json.load(open(f))["msgs_per_sec"] for f in sorted(glob.glob(f"{out}/{mode}-{p}-*.json"))]
        row.append((statistics.median(rs), rs))
    print(f"| {mode} | {row[0][0]:,.0f} | {row[1][0]:,.0f} | {len(row[0][1])} |")
PY
echo "raw: $out"

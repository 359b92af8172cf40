# Sourced by the compare scripts: what they share. Needs BENCH_DIR set; takes the calling
# script's name. Sets repo, RILL, BENCH, work, results, tsv and pids; defines stop_pid and
# free_ports.
bench_setup() {
  local name=$1
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ -z "${RILL_BIN_DIR:-}" ]; then
    echo "== building rill and rill-bench (release)"
    (cd "$repo" && cargo build --release -p rill -p rill-bench --bins)
    RILL_BIN_DIR=${CARGO_TARGET_DIR:-$repo/target}/release
  fi
  RILL=$RILL_BIN_DIR/rill
  BENCH=$RILL_BIN_DIR/rill-bench
  [ -x "$RILL" ] && [ -x "$BENCH" ] || { echo "$name: no rill/rill-bench in $RILL_BIN_DIR" >&2; exit 1; }

  work=$(mktemp -d "$BENCH_DIR/$name.XXXXXX")
  results=$work/results
  mkdir -p "$results"
  tsv=$results/results.tsv
  : >"$tsv"
  # Processes the script starts, stopped by pid.
  pids=()
}

# Stops one process we started: TERM, up to 10 s, then KILL.
stop_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# The first of N consecutive ports free to bind on 127.0.0.1 right now (a broker takes port +
# shard), below the kernel's ephemeral range: a port from that range is also the local port of
# outgoing connections, and one took a shard's port between the check and the broker's bind
# (compare-iggy, 2026-12-04 19:13: EADDRINUSE on port + 1, a round lost).
free_ports() { # N
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
def free(q):
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", q))
        return True
    except OSError:
        return False
    finally:
        t.close()
while True:
    p = random.randrange(10000, max(lo - n, 10001))
    if all(free(q) for q in range(p, p + n)):
        print(p)
        break
PY
}

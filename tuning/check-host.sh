#!/usr/bin/env bash
# Prints the host facts that matter to a rill broker: `rill tune check` does the work (reads
# only; its O_DIRECT probe writes and removes one 4 KiB temp file in the data dir).
# Usage: tuning/check-host.sh [DATA_DIR] [--json]   (default ./rill-data)
# The rill binary: $RILL, else `rill` on PATH, else this checkout's target/{release,debug}/rill.
set -euo pipefail

data_dir=${1:-./rill-data}
shift || true

here=$(cd "$(dirname "$0")/.." && pwd)
rill=${RILL:-}
if [ -z "$rill" ]; then
  if command -v rill >/dev/null 2>&1; then
    rill=rill
  else
    for candidate in "${CARGO_TARGET_DIR:-$here/target}"/release/rill "${CARGO_TARGET_DIR:-$here/target}"/debug/rill; do
      if [ -x "$candidate" ]; then rill=$candidate; break; fi
    done
  fi
fi
if [ -z "$rill" ]; then
  echo "check-host.sh: no rill binary (set RILL=PATH, put rill on PATH, or cargo build --release)" >&2
  exit 2
fi
exec "$rill" tune check --data-dir "$data_dir" "$@"

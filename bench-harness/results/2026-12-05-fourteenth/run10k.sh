#!/bin/bash
# The tenth session's run10k.sh, with rill-bench's CPU (client_cpu_USER+SYS in
# /tmp/fx/bench.log) and the broker's CPU ticks printed. Same environment and arguments.
here=$(cd "$(dirname "$0")" && pwd)
bash <(sed -e 's|^/work/main/target/release/rill-bench produce|/usr/bin/time -f client_cpu_%U+%S &|' \
  -e 's|^kill \$B; wait \$B$|awk "{print \\"broker cpu ticks\\", \\$14+\\$15}" /proc/$B/stat; kill $B; wait $B|' \
  "$here/../2026-12-05-tenth/run10k.sh") "$@"

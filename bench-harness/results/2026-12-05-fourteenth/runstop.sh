#!/bin/bash
# The thirteenth session's runprod.sh, with the broker's clean stop timed ("stop ms") in place
# of its CPU line. Same environment (RILL, PARTS, N, ...) and broker arguments.
here=$(cd "$(dirname "$0")" && pwd)
bash <(sed 's|^awk .*/proc/\$B/stat; kill \$B; wait \$B$|S0=$(date +%s.%N); kill $B; wait $B; S1=$(date +%s.%N); python3 -c "print(\\"  stop ms\\", round(($S1-$S0)*1000))"|' \
  "$here/../2026-12-05-thirteenth/runprod.sh") "$@"

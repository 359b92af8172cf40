#!/bin/bash
for round in 1 2; do for parts in 1000 10; do for t in 1 16; do
  echo "== round $round parts $parts threads $t"
  PARTS=$parts N=4000000 bash /work/main/bench-harness/results/2026-12-05-thirteenth/runprod.sh --replica-high-watermark-checkpoint-threads $t
  python3 -c 'import json; r=json.load(open("/tmp/fx/r.json")); print("  req p99.99 ms", r.get("request_latency_us",{}).get("p9999",0)/1e3)'
  grep "^rill_high_watermark_checkpoint_duration_seconds_\(sum\|count\)" /tmp/fx/metrics.txt | tr '\n' ' '; echo
done; done; done

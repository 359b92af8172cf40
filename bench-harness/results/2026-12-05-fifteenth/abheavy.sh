#!/bin/bash
# A/B of two builds (directories holding rill and rill-bench) on the thirteenth session's
# produce-1000 shape (runprod.sh, 2 M x 1 KiB) and 50 MB/s e2e shape at linger 0 (rune2e.sh),
# alternated round by round.  usage: abheavy.sh ROUNDS DIR_A DIR_B
R=$1; A=$2; Bd=$3; S=/work/main/bench-harness/results/2026-12-05-thirteenth
for r in $(seq $R); do for bin in $A $Bd; do
  echo "== round $r $(basename $bin) produce-1000"
  RILL=$bin/rill BENCH=$bin/rill-bench bash $S/runprod.sh
  echo "== round $r $(basename $bin) e2e 50 MB/s linger 0"
  RILL=$bin/rill BENCH=$bin/rill-bench bash $S/rune2e.sh
done; done

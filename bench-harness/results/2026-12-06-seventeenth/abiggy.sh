#!/bin/bash
# alternating: rill base, rill arena, iggy produce-1000; ROUNDS
cd /tmp/fx
for r in $(seq ${1:-5}); do
  for v in ${VARIANTS:-base arena}; do echo "== $r $v"; RILL=/tmp/fx/bin-$v/rill BENCH=/tmp/fx/bin-base/rill-bench ./runprod.sh 2>&1 | grep -v "^  device\|machine"; done
  echo "== $r iggy"; ./iggyprod.sh
done

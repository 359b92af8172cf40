#!/bin/bash
# trace.sh CMD...: block-layer trace of 2 s of CMD (from 2.5 s in); summary + request kinds
T=/sys/kernel/tracing
echo > $T/trace; echo 1 > $T/events/block/block_rq_issue/enable; echo 1 > $T/events/block/block_rq_complete/enable
(sleep 2.5; echo 1 > $T/tracing_on; sleep 2; echo 0 > $T/tracing_on) &
"$@" 2>/dev/null | head -1
wait
echo 0 > $T/events/block/enable
cp $T/trace /tmp/fx/blk-x.txt
python3 /tmp/fx/blk.py /tmp/fx/blk-x.txt
grep block_rq_issue /tmp/fx/blk-x.txt | awk '{print $6}' | sort | uniq -c | xargs echo "issues by kind:"

#!/bin/bash
python3 /work/main/scripts/lost-time-probe.py > /tmp/fx/probe.txt & P=$!
a=$(cat /sys/block/vda/stat); T0=$(date +%s.%N)
bash "$(dirname "$0")/run10k.sh" "$@"
b=$(cat /sys/block/vda/stat); T1=$(date +%s.%N)
kill $P; wait $P; tr '\n' ' ' < /tmp/fx/probe.txt; echo
python3 -c "
a=list(map(int,'$a'.split())); b=list(map(int,'$b'.split())); t=$T1-$T0; print('  wall %.1f s'%t, 'writes/s %.0f'%((b[4]-a[4])/t), 'sectors/write %.1f'%((b[6]-a[6])/max(1,b[4]-a[4])), 'flushes/s %.0f'%((b[15]-a[15])/t), 'io_ticks %%%.0f'%((b[9]-a[9])/t/10))"
grep -E "^rill_(fsync|group_commit|append_rounds|produce_duration_seconds_(count|sum))" /tmp/fx/metrics.txt | head -20

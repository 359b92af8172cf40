#!/bin/bash
# 10,000 msg/s, linger 0: a flat cpu-clock profile of the broker (self time by symbol).
. "$(dirname "$0")/start10k.sh"
perf record -e cpu-clock -F 1999 -g -p $B -o /tmp/fx/perf.b.data -- sleep 2 2>/dev/null >/dev/null
wait $C
kill $B; wait $B; rm -rf $D
perf report -i /tmp/fx/perf.b.data --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -${TOP:-45}

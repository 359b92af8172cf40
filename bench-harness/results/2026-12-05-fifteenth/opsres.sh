#!/bin/bash
# Which io_uring requests the broker makes at 10,000 msg/s: opcode x result, matched by request.
. "$(dirname "$0")/start10k.sh"
perf record -e io_uring:io_uring_submit_req -e io_uring:io_uring_complete -e io_uring:io_uring_file_get -p $B -o /tmp/fx/perf.ops.data -- sleep 1 2>/dev/null >/dev/null
wait $C
kill $B; wait $B; rm -rf $D
perf script -i /tmp/fx/perf.ops.data 2>/dev/null > /tmp/fx/ops.txt
python3 - <<'PY'
import re, collections
op={}; fd={}; c=collections.Counter()
for l in open('/tmp/fx/ops.txt'):
    m=re.search(r'io_uring_file_get: ring \S+, req (\S+), user_data \S+, fd (\d+)',l)
    if m: fd[m.group(1)]=m.group(2); continue
    m=re.search(r'io_uring_submit_req: ring \S+, req (\S+), user_data \S+, opcode (\S+)',l)
    if m: op[m.group(1)]=m.group(2); continue
    m=re.search(r'io_uring_complete: ring \S+, req (\S+), user_data \S+, result (-?\d+)',l)
    if m:
        r=int(m.group(2)); o=op.get(m.group(1),'?')
        c[(o, 'fd'+fd.get(m.group(1),'?'), r if r<=8 else ('>8' if r<4096 else '>=4096'))]+=1
for k,v in c.most_common(25): print(v,k)
PY

#!/bin/bash
# 10,000 msg/s, linger 0: what the broker asks of the kernel per produce request.
# perf stat counts syscalls and io_uring requests (by opcode) of the broker alone.
. "$(dirname "$0")/start10k.sh"
perf stat -e 'raw_syscalls:sys_enter,io_uring:io_uring_submit_req,io_uring:io_uring_complete,io_uring:io_uring_queue_async_work,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_membarrier,syscalls:sys_enter_eventfd2,syscalls:sys_enter_write,syscalls:sys_enter_read,context-switches,task-clock' -p $B -- sleep 2 2>&1 | grep -v "^$"
perf record -e io_uring:io_uring_submit_req -p $B -o /tmp/fx/perf.ops.data -- sleep 1 2>/dev/null >/dev/null
perf script -i /tmp/fx/perf.ops.data 2>/dev/null | grep -o "opcode [A-Z_]*" | sort | uniq -c
wait $C
curl -s 127.0.0.1:19316/metrics > /tmp/fx/metrics.txt
grep -E "^rill_(produce_duration_seconds_count|append_rounds)" /tmp/fx/metrics.txt
grep -E "produce|p99|requests" /tmp/fx/bench.log | head -5
kill $B; wait $B; rm -rf $D

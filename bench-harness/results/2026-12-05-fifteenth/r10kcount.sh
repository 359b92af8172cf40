#!/bin/bash
# 10,000 msg/s, linger 0: what the broker asks of the kernel per produce request.
# perf stat counts syscalls and io_uring requests (by opcode) of the broker alone.
D=/tmp/fx/data; rm -rf $D; mkdir -p /tmp/fx; PORT=19311
/work/main/target/release/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:19316 "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
/work/main/target/release/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages ${N:-50000} --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1 &
C=$!
sleep 1.5
perf stat -e 'raw_syscalls:sys_enter,io_uring:io_uring_submit_req,io_uring:io_uring_complete,io_uring:io_uring_queue_async_work,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_membarrier,syscalls:sys_enter_eventfd2,syscalls:sys_enter_write,syscalls:sys_enter_read,context-switches,task-clock' -p $B -- sleep 2 2>&1 | grep -v "^$"
perf record -e io_uring:io_uring_submit_req -p $B -o /tmp/fx/perf.ops.data -- sleep 1 2>/dev/null >/dev/null
perf script -i /tmp/fx/perf.ops.data 2>/dev/null | grep -o "opcode [A-Z_]*" | sort | uniq -c
wait $C
curl -s 127.0.0.1:19316/metrics > /tmp/fx/metrics.txt
grep -E "^rill_(produce_duration_seconds_count|append_rounds)" /tmp/fx/metrics.txt
grep -E "produce|p99|requests" /tmp/fx/bench.log | head -5
kill $B; wait $B; rm -rf $D

#!/bin/bash
T=/sys/kernel/tracing
echo 0 > $T/tracing_on; echo > $T/trace; echo 65536 > $T/buffer_size_kb
for e in block/block_rq_issue block/block_rq_complete io_uring/io_uring_submit_req io_uring/io_uring_complete sched/sched_switch sched/sched_wakeup raw_syscalls/sys_enter raw_syscalls/sys_exit; do echo 1 > $T/events/$e/enable; done
(sleep 2.5; echo 1 > $T/tracing_on; sleep 0.5; echo 0 > $T/tracing_on) &
bash /tmp/fx/runprod.sh "$@" 2>&1 | sed -n 2p
wait
for e in block io_uring sched raw_syscalls; do echo 0 > $T/events/$e/enable; done
cp $T/trace /tmp/fx/tr3.txt; echo > $T/trace; echo 1408 > $T/buffer_size_kb

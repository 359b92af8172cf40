# Sourced by r10kcount.sh, opsres.sh and r10kprof.sh: starts a fresh 2-shard broker (pid in B,
# extra broker arguments from the caller's "$@") and a 10,000 msg/s linger-0 rill-bench
# produce against it (pid in C), then lets it settle for 1.5 s. Env: RILL_DIR, FSYNC, N.
D=/tmp/fx/data; rm -rf $D; mkdir -p /tmp/fx; PORT=19311
${RILL_DIR:-/work/main/target/release}/rill broker --data-dir $D --shards 2 --fsync ${FSYNC:-never} --listen 127.0.0.1:$PORT --kafka-listen off --metrics-listen 127.0.0.1:19316 "$@" > /tmp/fx/broker.log 2>&1 &
B=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
${RILL_DIR:-/work/main/target/release}/rill-bench produce -b 127.0.0.1:$PORT --partitions 2 --message-bytes 1024 --topic t --producers 2 --acks 1 --linger-ms 0 --rate 10000 --messages ${N:-50000} --batch-bytes 1072256 --json /tmp/fx/r.json > /tmp/fx/bench.log 2>&1 &
C=$!
sleep 1.5

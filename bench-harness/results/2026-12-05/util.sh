#!/usr/bin/env bash
# util.sh [BROKER-FLAGS...]: one 2 GB produce on a fresh broker; vda's utilisation and mean
# queue depth over the produce (from /proc/diskstats), and the produce's rate.
BB=$(( 1000*(1024+48)+256 )); d=/tmp/rollab/data; P=19541
rm -rf $d
/work/main/target/release/rill broker --data-dir $d --shards 2 --fsync never --listen 127.0.0.1:$P --kafka-listen off "$@" > /tmp/rollab/broker.log 2>&1 &
bp=$!; for i in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$((P+1))) 2>/dev/null && break; sleep 0.1; done
a=($(grep ' vda ' /proc/diskstats)); t0=$(date +%s%N)
r=$(/work/main/target/release/rill-bench produce -b 127.0.0.1:$P --partitions 2 --message-bytes 1024 --topic p1000 --producers ${PRODUCERS:-2} --acks 1 --linger-ms 5 --messages 2000000 --batch-bytes $BB $CLIENT 2>&1 | tail -1 | grep -o "[0-9]* msg/s, [0-9.]* MB/s")
b=($(grep ' vda ' /proc/diskstats)); t1=$(date +%s%N)
kill $bp; wait $bp 2>/dev/null; rm -rf $d
ms=$(( (t1 - t0) / 1000000 ))
# fields (0-based in the array): 7 writes completed, 9 sectors written, 10 ms writing, 12 io_ticks, 13 weighted ms
python3 -c "
ms=$ms; w=${b[7]}-${a[7]}; sec=${b[9]}-${a[9]}; wms=${b[10]}-${a[10]}; busy=${b[12]}-${a[12]}; wq=${b[13]}-${a[13]}
print(f'$r | {ms} ms: device busy {100*busy/ms:.0f}%, mean queue {wq/ms:.1f}, {sec*512/1e6/(ms/1000):.0f} MB/s written, {w} writes of {sec*512/max(w,1)/1024:.0f} KiB, {wms/max(w,1):.1f} ms each')"

#!/bin/bash
# MODE=fresh|over ; 4 KiB write + fdatasync at 3500/s for 10 s
rm -f f; 
if [ $MODE = over ]; then dd if=/dev/zero of=f bs=1M count=256 oflag=direct status=none; sync; else fallocate -l 256M f; sync; fi
python3 /work/main/scripts/lost-time-probe.py > probe.txt & P=$!
a=$(cat /sys/block/vda/stat)
fio --name=s --filename=f --rw=write --bs=${BS:-4k} --size=200M --direct=1 --fdatasync=1 --ioengine=sync --rate_iops=${IOPS:-3500} --runtime=10 --time_based=0 --output-format=json > fio.json 2>/dev/null
b=$(cat /sys/block/vda/stat)
kill $P; wait $P
python3 - "$a" "$b" <<'PY'
import json,sys
a=list(map(int,sys.argv[1].split())); b=list(map(int,sys.argv[2].split()))
j=json.load(open("fio.json"))["jobs"][0]
s=j["sync"]["lat_ns"]["percentile"]; w=j["write"]
n=w["total_ios"]; rt=j["job_runtime"]/1000
print("ios %d in %.1fs, dev writes/io %.2f flushes/io %.2f, sync p50 %.0f p99 %.0f us, clat+sync p99? write clat p99 %.0f us" % (n, rt, (b[4]-a[4])/n, (b[15]-a[15])/n, s["50.000000"]/1e3, s["99.000000"]/1e3, w["clat_ns"]["percentile"]["99.000000"]/1e3))
PY
tr '\n' ' ' < probe.txt; echo
rm -f f

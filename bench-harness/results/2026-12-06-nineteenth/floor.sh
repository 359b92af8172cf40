#!/bin/bash
# One round: fio hot / paced, the loopback floor, rill's fsync-10k shape.
set -u
cd /tmp/fx
B=${BENCH:-/tmp/fx/bin-cur/rill-bench}
fiorun() { # name args...
  local n=$1; shift; mkdir -p /tmp/fx/fio
  fio --name=$n --directory=/tmp/fx/fio --rw=write --bs=4k --size=64M --direct=1 --fdatasync=1 --ioengine=sync --group_reporting --output-format=json "$@" > fio-$n.json 2>/dev/null
  rm -rf /tmp/fx/fio
  python3 -c "
import json; j=json.load(open('fio-$n.json'))['jobs'][0]; s=j['sync']['lat_ns']['percentile']; w=j['write']['clat_ns']['percentile']
print('fio $n', 'iops %.0f'%j['write']['iops'], 'fdatasync p50 %.0f p99 %.0f p99.9 %.0f us'%(s['50.000000']/1e3,s['99.000000']/1e3,s['99.900000']/1e3), 'write p50 %.0f p99 %.0f us'%(w['50.000000']/1e3,w['99.000000']/1e3))"
}
fiorun hot --size=20M
fiorun paced1 --rate_iops=5000 --runtime=10 --time_based
fiorun paced2 --rate_iops=5000 --numjobs=2 --runtime=10 --time_based
echo -n "loopback nosync: "; $B loopback --rate 10000 --messages 100000 | sed 's/^loopback: //'
echo -n "loopback dsync: "; $B loopback --rate 10000 --messages 100000 --sync-dir /tmp/fx | sed 's/^loopback: //'
echo -n "rill fsync-10k: "; RILL=${RILL:-/tmp/fx/bin-cur/rill} BENCH=$B ./run10kfs.sh | head -1

#!/bin/bash
# Iggy produce-1000 (or $P msgs/batch, $NB batches) on a fresh server
P=/work/shared/peers/iggy; D=/tmp/fx/iggy; rm -rf $D; mkdir -p $D
IGGY_CONFIG_PATH=$P/server-config.toml IGGY_SYSTEM_PATH=$D/data $P/iggy-server --fresh --with-default-root-credentials > $D/server.log 2>&1 &
S=$!
for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/8090) 2>/dev/null && break; sleep 0.1; done
/usr/bin/time -f "  bench cpu %U user %S sys %e wall" $P/iggy-bench -m 1024 -P ${PB:-1000} -b ${NB:-1000} pinned-producer --producers 2 --streams 2 tcp --nodelay 2>&1 | tee /tmp/fx/iggybench.log | sed 's/\x1b\[[0-9;]*m//g' | grep "Producers Results" | cut -c1-120
awk '{print "  iggy cpu ticks", $14+$15}' /proc/$S/stat
kill $S; wait $S; rm -rf $D

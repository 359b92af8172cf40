#!/bin/bash
# prints flush count delta and write delta every 0.5 s until killed
prev=$(awk '{print $16, $5}' /sys/block/vda/stat)
while true; do sleep 0.5; cur=$(awk '{print $16, $5}' /sys/block/vda/stat); echo "$(date +%s.%N | cut -c7-14) $cur $prev" | awk '{printf "%s flushes %d writes %d\n", $1, $2-$4, $3-$5}'; prev=$cur; done

#!/usr/bin/env bash
# creates a file and syncs the directory every 300 ms (as rolls do), till killed
i=0; while true; do i=$((i+1)); : > /tmp/rollab/fio/touch.$((i % 20)); python3 -c 'import os; fd=os.open("/tmp/rollab/fio", os.O_RDONLY); os.fsync(fd)'; sleep 0.3; done

# schedstat per thread of broker and bench at t and t+4s
B=$(pgrep -f "data-dir /tmp/fx/data"); C=$(pgrep -f "rill-bench produce")
snap() { for P in $B $C; do for t in /proc/$P/task/*; do echo "$(basename $t) $(cat $t/comm) $(cat $t/schedstat)"; done; done; }
snap > s1.txt; sleep 4; snap > s2.txt
join <(sort s1.txt) <(sort s2.txt) | awk '{printf "%-8s %-18s run %6.0f ms  wait %6.0f ms  slices %d\n", $1, $2, ($6-$3)/1e6, ($7-$4)/1e6, $9-$5}'

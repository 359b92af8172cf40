# run one.sh with diskstats before/after
a=$(grep " vda " /proc/diskstats); t0=$(date +%s.%N)
./one.sh "$@" | grep "^consume" | grep -o "[0-9]* msg/s"
b=$(grep " vda " /proc/diskstats); t1=$(date +%s.%N)
python3 - "$a" "$b" "$t0" "$t1" <<'PY'
import sys
a=sys.argv[1].split(); b=sys.argv[2].split(); dt=float(sys.argv[4])-float(sys.argv[3])
# fields: 3 reads completed, 5 sectors read, 6 ms reading, 12 io_ticks, 13 weighted
f=lambda i:int(b[i])-int(a[i])
print(f"reads {f(3)} MB {f(5)*512/1e6:.0f} avg_read_ms {f(6)/max(f(3),1):.1f} busy_ms {f(12)} avg_queue {f(13)/max(f(12),1):.2f} wall {dt:.1f}s")
PY

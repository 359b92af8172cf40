#!/usr/bin/env bash
# Prints the host facts that matter to a rill broker. Reads only; changes nothing.
# Usage: tuning/check-host.sh [DATA_DIR]   (default ./rill-data)
set -uo pipefail

data_dir=${1:-./rill-data}

say() { printf '%-22s %s\n' "$1" "$2"; }
read_file() { if [ -r "$1" ]; then tr -d '\n' <"$1" | sed 's/ *$//'; else echo unknown; fi; }

echo "== cpu"
say "online cpus" "$(nproc --all 2>/dev/null || echo unknown) (usable by this process: $(nproc 2>/dev/null || echo unknown))"
model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
say "model" "${model:-unknown}"
if [ -r /sys/devices/system/cpu/smt/active ]; then
  say "smt active" "$(read_file /sys/devices/system/cpu/smt/active)"
fi
governors=$(cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
say "cpu governor" "${governors:-not readable (no cpufreq: typical in VMs)}"
if [ -r /sys/devices/system/cpu/isolated ]; then
  iso=$(read_file /sys/devices/system/cpu/isolated)
  say "isolated cpus" "${iso:-none}"
fi

echo "== kernel"
say "kernel" "$(uname -r)"
if [ -r /proc/sys/kernel/io_uring_disabled ]; then
  v=$(read_file /proc/sys/kernel/io_uring_disabled)
  case $v in
    0) say "io_uring" "enabled (io_uring_disabled=0)" ;;
    1) say "io_uring" "restricted to the io_uring_group (io_uring_disabled=1)" ;;
    2) say "io_uring" "DISABLED (io_uring_disabled=2): rill cannot run" ;;
    *) say "io_uring" "io_uring_disabled=$v" ;;
  esac
else
  say "io_uring" "no io_uring_disabled sysctl (older kernel: enabled unless built without it)"
fi
say "transparent hugepages" "$(read_file /sys/kernel/mm/transparent_hugepage/enabled)"

echo "== limits (this shell)"
say "ulimit -l (KiB)" "soft $(ulimit -S -l), hard $(ulimit -H -l)  (glommio needs >= 512 per shard; 'unlimited' is simplest)"
say "ulimit -n" "soft $(ulimit -S -n), hard $(ulimit -H -n)  (one descriptor per connection and segment)"
say "user" "$(id -un 2>/dev/null || echo unknown) (uid $(id -u))"

echo "== data dir"
probe=$data_dir
while [ ! -e "$probe" ] && [ "$probe" != / ] && [ "$probe" != . ]; do
  probe=$(dirname "$probe")
done
if [ "$probe" != "$data_dir" ]; then
  say "data dir" "$data_dir (does not exist yet; facts below are for $probe)"
else
  say "data dir" "$data_dir"
fi
fstype=$(findmnt -n -o FSTYPE -T "$probe" 2>/dev/null || df -P --output=fstype "$probe" 2>/dev/null | tail -n 1)
[ -n "$fstype" ] || fstype=$(stat -f -c %T "$probe" 2>/dev/null || echo unknown)
say "filesystem" "$fstype  (rill uses O_DIRECT: ext4 and xfs work; tmpfs, overlay and network filesystems may refuse it)"
df -hP "$probe" 2>/dev/null | awk 'NR==2 {printf "%-22s %s on %s, %s free of %s\n", "device", $1, $6, $4, $2}'
dev=$(df -P "$probe" 2>/dev/null | awk 'NR==2 {print $1}')
blk=$(basename "$(readlink -f "$dev" 2>/dev/null || echo "$dev")")
parent=$(basename "$(dirname "$(readlink -f "/sys/class/block/$blk" 2>/dev/null)")" 2>/dev/null)
for b in "$blk" "$parent"; do
  q=/sys/block/$b/queue
  if [ -n "$b" ] && [ -d "$q" ]; then
    say "block device" "$b: rotational=$(read_file "$q/rotational"), scheduler=$(read_file "$q/scheduler"), write_cache=$(read_file "$q/write_cache")"
    break
  fi
done
exit 0

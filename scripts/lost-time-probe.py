#!/usr/bin/env python3
"""Measures the time this machine's threads could not run, while a benchmark runs beside it.

Sleeps in steps of STEP_MS and counts each wake-up later than SLACK_MS past its due time as
lost time: a virtual machine stopped by its host (on the 2-core VMs of bench-harness/RESULTS.md
2026-12-05, a host CPU quota with a 100 ms period, spent by the guest's CPU and by each I/O the
host emulates, stopped both vCPUs 10-20 ms of every 100 ms), or both cores busy with runnable
threads. Every latency a benchmark measures then includes it, whatever the system under test.

Runs until SIGTERM or SIGINT, then prints `lost_pct P` (percent of the time lost), `lost_max_us
M` (the longest single loss) and `lost_count N` (losses over SLACK_MS) on stdout, one per line.
Costs 1/STEP_MS wake-ups a second and next to no CPU.

With `--until-quiet WINDOW_S TIMEOUT_S` it waits instead for the machine to settle: until a whole
window of WINDOW_S seconds passed without a loss, or TIMEOUT_S, and prints `settle_s S` (the time
it waited) and `settled 1` or `settled 0`. A benchmark then does not measure what the one before
it left behind (a host still discarding the blocks of a deleted 10 GB data directory stopped
this VM for 13-25 ms in the next run; RESULTS.md 2026-12-06 eighteenth).
"""
import signal
import sys
import time


STEP_MS = 2.0
SLACK_MS = 3.0


def until_quiet(window: float, timeout: float) -> None:
    step, slack = STEP_MS / 1e3, SLACK_MS / 1e3
    start = time.monotonic()
    quiet_since = start
    while True:
        now = time.monotonic()
        if now - quiet_since >= window or now - start >= timeout:
            break
        due = now + step
        time.sleep(step)
        if time.monotonic() - due > slack:
            quiet_since = time.monotonic()
    now = time.monotonic()
    print(f"settle_s {now - start:.1f}")
    print(f"settled {int(now - quiet_since >= window)}")
    sys.stdout.flush()


def main() -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    step, slack = STEP_MS / 1e3, SLACK_MS / 1e3
    start = time.monotonic()
    lost = longest = 0.0
    count = 0
    while not stop:
        due = time.monotonic() + step
        time.sleep(step)
        late = time.monotonic() - due
        if late > slack:
            lost += late
            longest = max(longest, late)
            count += 1
    elapsed = max(time.monotonic() - start, 1e-9)
    print(f"lost_pct {100 * lost / elapsed:.2f}")
    print(f"lost_max_us {longest * 1e6:.0f}")
    print(f"lost_count {count}")
    sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--until-quiet":
        until_quiet(float(sys.argv[2]), float(sys.argv[3]))
    else:
        main()

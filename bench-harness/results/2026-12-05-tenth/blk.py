# reads tracefs trace with block_rq_issue/complete; prints write request count, avg size, avg latency, avg in-flight
import re, sys
reissued = 0; issue = {}; lat = []; sizes = []; events = []
for line in open(sys.argv[1]):
    m = re.search(r"\s(\d+\.\d+): block_rq_(issue|complete): \d+,\d+ (\S+) .*?(\d+) \+ (\d+)", line)
    if not m: continue
    t, kind, rwbs, sector, n = float(m.group(1)), m.group(2), m.group(3), int(m.group(4)), int(m.group(5))
    if "W" not in rwbs or n == 0: continue
    if kind == "issue":
        if sector in issue: reissued += 1; continue
        issue[sector] = t; sizes.append(n * 512); events.append((t, 1))
    elif sector in issue:
        lat.append(t - issue.pop(sector)); events.append((t, -1))
events.sort(); depth = 0; area = 0.0; last = events[0][0] if events else 0
for t, d in events:
    area += depth * (t - last); last = t; depth += d
span = (events[-1][0] - events[0][0]) if events else 1
lat.sort()
print("reissued %d, writes %d, avg %.0f KiB, %.0f MB/s, latency avg %.1f ms p50 %.1f p90 %.1f, avg in flight %.1f" % (
    reissued, len(sizes), sum(sizes) / max(len(sizes), 1) / 1024, sum(sizes) / span / 1e6, sum(lat) / max(len(lat), 1) * 1e3,
    lat[len(lat) // 2] * 1e3 if lat else 0, lat[int(len(lat) * .9)] * 1e3 if lat else 0, area / span))

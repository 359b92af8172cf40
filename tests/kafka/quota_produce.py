"""A confluent-kafka producer that sends as fast as it may for a while, to measure a quota.

  quota_produce.py BOOTSTRAP TOPIC CLIENT_ID SECONDS FROM_S VALUE_BYTES

Prints one JSON line: {"window_bytes": value bytes acknowledged between FROM_S and SECONDS
after the start, "window_s": SECONDS - FROM_S, "failed": deliveries that failed,
"connects": the most connections librdkafka opened to one broker, "disconnects": their sum,
"throttled": whether a response carried a throttle time}.
"""
import json
import sys
import time

import confluent_kafka as ck

bootstrap, topic, client_id = sys.argv[1:4]
seconds, from_s, size = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
stats = {}
throttled = [False]


def on_stats(s):
    d = json.loads(s)
    stats.update(d.get("brokers", {}))
    for b in d.get("brokers", {}).values():
        if b.get("throttle", {}).get("max", 0) > 0:
            throttled[0] = True


p = ck.Producer({
    "bootstrap.servers": bootstrap,
    "client.id": client_id,
    "acks": "1",
    "linger.ms": 5,
    "batch.size": 64 * 1024,
    "queue.buffering.max.kbytes": 4096,
    "statistics.interval.ms": 500,
    "stats_cb": on_stats,
    "broker.address.family": "v4",
})
start = time.monotonic()
acked = []
failed = [0]


def report(err, msg):
    if err is not None:
        failed[0] += 1
    else:
        acked.append((time.monotonic() - start, len(msg.value())))


value = b"x" * size
while time.monotonic() - start < seconds:
    try:
        p.produce(topic, value, on_delivery=report)
    except BufferError:
        p.poll(0.01)
    p.poll(0)
p.flush(60)
time.sleep(1.0)  # a last statistics callback
p.poll(0.6)
window = sum(n for t, n in acked if from_s <= t < seconds)
connects = [b.get("connects", 0) for b in stats.values() if b.get("nodeid", -1) >= 0]
disconnects = sum(b.get("disconnects", 0) for b in stats.values())
print(json.dumps({"window_bytes": window, "window_s": seconds - from_s, "failed": failed[0],
                  "connects": max(connects or [0]), "disconnects": disconnects,
                  "throttled": throttled[0]}))

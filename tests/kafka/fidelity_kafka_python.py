"""kafka-python side of the record-fidelity matrix (tests/kafka_fidelity.rs).

  fidelity_kafka_python.py BOOTSTRAP TOPIC GROUP NATIVE_TOPIC

Produces N=100 records to partition 0 of TOPIC as one batch (one flush), record i being:
  key     "k<i % 7>"                 (repeated keys)
  value   null if i % 5 == 0 (a tombstone), "" if i % 5 == 1, else "v<i>"
  headers none if i % 4 == 3, else a=1, a=2, b=x, a=<i>, e=""
          (repeated names, interleaved; an empty header value. kafka-python cannot send a
          null header value: send() takes (str, bytes) pairs only)
then reads them back three ways, printing one JSON object per record read with its "phase":
  group1  a member of GROUP from the beginning: the first 37 records, then commits offset 37
          (inside the produced batch) and leaves
  group2  a new member of GROUP: resumes at the committed 37, reads the remaining 63
  seek    no group, partition 0 assigned, seek to 50 (inside the batch): reads 50
  native  no group, partition 0 of NATIVE_TOPIC from offset 0: 20 records the test produced
          with rill's own client, null header values among them
Each object: phase, partition, offset, key, value, headers ([[name, value], ...] in the order
received; null stays null). The first line is {"client": "kafka-python", "version": ...}.
Exits non-zero on any error, or if a phase gets fewer records than it wants within 60 s.
"""
import json
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

N = 100
COMMIT_AT = 37
SEEK_TO = 50


def record(i):
    key = f"k{i % 7}".encode()
    value = None if i % 5 == 0 else b"" if i % 5 == 1 else f"v{i}".encode()
    headers = [] if i % 4 == 3 else [
        ("a", b"1"), ("a", b"2"), ("b", b"x"), ("a", str(i).encode()), ("e", b""),
    ]
    return key, value, headers


def text(b):
    return None if b is None else b.decode()


def show(phase, m):
    print(json.dumps({
        "phase": phase,
        "partition": m.partition,
        "offset": m.offset,
        "key": text(m.key),
        "value": text(m.value),
        "headers": [[k, text(v)] for k, v in (m.headers or [])],
    }), flush=True)


def read(consumer, want, phase):
    got = 0
    deadline = time.monotonic() + 60
    while got < want:
        if time.monotonic() > deadline:
            sys.exit(f"{phase}: only {got} of {want} records within 60 s")
        batches = consumer.poll(timeout_ms=500, max_records=want - got)
        for msgs in batches.values():
            for m in msgs:
                show(phase, m)
                got += 1


def main(bootstrap, topic, group, native_topic):
    print(json.dumps({"client": "kafka-python", "version": kafka.__version__}), flush=True)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                      # Nothing leaves before flush(): the 100 records go as one batch.
                      linger_ms=600000, delivery_timeout_ms=700000, batch_size=1 << 20)
    futures = []
    for i in range(N):
        key, value, headers = record(i)
        futures.append(p.send(topic, key=key, value=value, headers=headers, partition=0))
    p.flush(60)
    for f in futures:
        f.get(timeout=60)
    p.close()

    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    c.subscribe([topic])
    read(c, COMMIT_AT, "group1")
    c.commit({tp: OffsetAndMetadata(COMMIT_AT, "", -1)})
    c.close()

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    c.subscribe([topic])
    read(c, N - COMMIT_AT, "group2")
    c.close()

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    c.assign([tp])
    c.seek(tp, SEEK_TO)
    read(c, N - SEEK_TO, "seek")
    c.close()

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    native = TopicPartition(native_topic, 0)
    c.assign([native])
    c.seek(native, 0)
    read(c, 20, "native")
    c.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])

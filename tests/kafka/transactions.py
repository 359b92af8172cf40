"""Kafka client side of the transaction tests: confluent-kafka's transactional producer and
read_committed consumers against rill.

  commit-and-abort BOOTSTRAP TXN_ID TOPIC PARTITIONS GROUP COUNT
        init_transactions; a transaction producing "c<i>" (i < COUNT) to partition i % PARTITIONS
        with send_offsets_to_transaction (GROUP: TOPIC partition p at offset 10 + p) is
        committed; a second producing "a<i>" is aborted. Prints "committed" and "aborted".
  hang BOOTSTRAP TXN_ID TOPIC TIMEOUT_MS COUNT
        init_transactions (transaction.timeout.ms TIMEOUT_MS), begins, produces "h<i>"
        (i < COUNT) to partition 0 and waits for their delivery, prints "produced", then
        sleeps until killed.
  two-phase BOOTSTRAP TXN_ID TOPIC COUNT
        init_transactions, begins, produces "t<i>" (i < COUNT) to partition 0, prints
        "produced", waits for a line on stdin, commits, prints "committed".
  init BOOTSTRAP TXN_ID
        init_transactions (fencing an older instance), then commits one transaction producing
        nothing; prints "ok".
  read BOOTSTRAP TOPIC PARTITIONS ISOLATION
        reads every partition from the beginning to its end (read_committed stops at the last
        stable offset) with isolation.level ISOLATION; prints one value per line.
  committed BOOTSTRAP GROUP TOPIC PARTITIONS
        prints "<partition>\t<committed offset>" per partition.
Exits non-zero on any error.
"""
import json
import os
import sys
import time

import confluent_kafka as ck

EXTRA_CONFIG = json.loads(os.environ.get("KAFKA_CLIENT_CONFIG", "{}"))


def connection(bootstrap):
    return {"bootstrap.servers": bootstrap, **EXTRA_CONFIG}


def producer(bootstrap, txn_id, timeout_ms=60000):
    return ck.Producer({
        **connection(bootstrap),
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
    })


def delivered(err, _msg):
    if err is not None:
        sys.exit(f"delivery failed: {err}")


def commit_and_abort(bootstrap, txn_id, topic, partitions, group, count):
    p = producer(bootstrap, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"c{i}", partition=i % partitions, on_delivery=delivered)
    c = ck.Consumer({**connection(bootstrap), "group.id": group})
    offsets = [ck.TopicPartition(topic, q, 10 + q) for q in range(partitions)]
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 60)
    p.commit_transaction(60)
    print("committed", flush=True)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"a{i}", partition=i % partitions, on_delivery=delivered)
    p.flush(60)
    p.abort_transaction(60)
    print("aborted", flush=True)
    c.close()


def hang(bootstrap, txn_id, topic, timeout_ms, count):
    p = producer(bootstrap, txn_id, timeout_ms)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"h{i}", partition=0, on_delivery=delivered)
    if p.flush(60) != 0:
        sys.exit("not delivered")
    print("produced", flush=True)
    while True:
        time.sleep(60)


def two_phase(bootstrap, txn_id, topic, count):
    p = producer(bootstrap, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(count):
        p.produce(topic, value=f"t{i}", partition=0, on_delivery=delivered)
    if p.flush(60) != 0:
        sys.exit("not delivered")
    print("produced", flush=True)
    sys.stdin.readline()
    p.commit_transaction(120)
    print("committed", flush=True)


def init(bootstrap, txn_id):
    p = producer(bootstrap, txn_id)
    p.init_transactions(120)
    p.begin_transaction()
    p.commit_transaction(60)
    print("ok", flush=True)


def read(bootstrap, topic, partitions, isolation):
    c = ck.Consumer({
        **connection(bootstrap),
        "group.id": "reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
    })
    c.assign([ck.TopicPartition(topic, q, ck.OFFSET_BEGINNING) for q in range(partitions)])
    at_end = set()
    deadline = time.time() + 60
    while len(at_end) < partitions:
        if time.time() > deadline:
            sys.exit(f"not at the end of every partition: {sorted(at_end)}")
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == ck.KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
                continue
            sys.exit(f"consume error: {m.error()}")
        print(m.value().decode(), flush=True)
    c.close()


def committed(bootstrap, group, topic, partitions):
    c = ck.Consumer({**connection(bootstrap), "group.id": group})
    for tp in c.committed([ck.TopicPartition(topic, q) for q in range(partitions)], 60):
        if tp.error:
            sys.exit(f"committed: {tp.error}")
        print(f"{tp.partition}\t{tp.offset}", flush=True)
    c.close()


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "commit-and-abort":
        commit_and_abort(a[0], a[1], a[2], int(a[3]), a[4], int(a[5]))
    elif cmd == "hang":
        hang(a[0], a[1], a[2], int(a[3]), int(a[4]))
    elif cmd == "two-phase":
        two_phase(a[0], a[1], a[2], int(a[3]))
    elif cmd == "init":
        init(a[0], a[1])
    elif cmd == "read":
        read(a[0], a[1], int(a[2]), a[3])
    elif cmd == "committed":
        committed(a[0], a[1], a[2], int(a[3]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

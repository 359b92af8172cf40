"""Kafka client side of the Kafka-protocol tests: confluent-kafka (librdkafka) against rill.

  produce BOOTSTRAP TOPIC COUNT COMPRESSION   keyed messages key<i%50> = "<key>:<i>", header src=ck;
                                              prints "<partition>\t<key>" per delivered message
  consume BOOTSTRAP TOPIC PARTITIONS COUNT    assigns every partition from the beginning, reads
                                              COUNT messages; prints one JSON object per message
  group BOOTSTRAP TOPIC GROUP STRATEGY MAX IDLE_S
                                              subscribes as a member of GROUP (assignor STRATEGY;
                                              "consumer" or "consumer:ASSIGNOR": the KIP-848
                                              protocol, group.protocol=consumer, with that
                                              server-side assignor), reads until MAX messages,
                                              IDLE_S seconds without one or SIGTERM, committing
                                              what it printed (every 200 and at the end,
                                              synchronously) before it closes;
                                              prints {"assigned"|"revoked": [[topic, p], ...]}
                                              events and one JSON object per message
  describe-group BOOTSTRAP GROUP              AdminClient.describe_consumer_groups and
                                              list_consumer_groups: prints one JSON object
                                              {"type", "state", "assignor", "members":
                                              [{"member_id", "assignment": [[topic, p], ...]}],
                                              "listed_type"}
  produce-until-error BOOTSTRAP TOPIC TIMEOUT_MS
                                              produces 1 KiB values to partition 0 (delivery
                                              timeout TIMEOUT_MS, no retries) until one
                                              fails; prints "delivered <n>" and "error <name>"
                                              (exits non-zero if none failed within 20000 sends)
  produce-acked BOOTSTRAP TOPIC COUNT PER_S   acks=all (idempotence off), keyed values of many
                                              sizes at about PER_S a second, retried until
                                              delivered or timed out; prints
                                              "<partition>\t<offset>\t<value>" per delivered
                                              message as it is reported (flushed), then
                                              "failed <n>"
  topics BOOTSTRAP                            lists topic names (AdminClient.list_topics: librdkafka
                                              sends Metadata v12 with trailing bytes)
Exits non-zero on any delivery or consume error.
KAFKA_CLIENT_CONFIG (JSON object, optional) adds settings to every client, e.g. TLS:
{"security.protocol": "SSL", "ssl.ca.location": "ca.pem"}.
"""
import json
import os
import signal
import sys
import time

import confluent_kafka as ck

EXTRA_CONFIG = json.loads(os.environ.get("KAFKA_CLIENT_CONFIG", "{}"))


def connection(bootstrap):
    """How every client connects: the bootstrap broker and KAFKA_CLIENT_CONFIG."""
    return {"bootstrap.servers": bootstrap, **EXTRA_CONFIG}


def message_json(m):
    return json.dumps({
        "partition": m.partition(),
        "offset": m.offset(),
        "key": m.key().decode() if m.key() is not None else None,
        "value": m.value().decode(),
        "headers": [[k, v.decode()] for k, v in (m.headers() or [])],
        "timestamp": m.timestamp()[1],
    })


def produce(bootstrap, topic, count, compression):
    p = ck.Producer({
        **connection(bootstrap),
        # Java's partitioner (murmur2), which rill's client uses too.
        "partitioner": "murmur2_random",
        "compression.type": compression,
        "linger.ms": 5,
    })
    errors = []
    delivered = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.key().decode()))

    for i in range(count):
        key = f"key{i % 50}"
        p.produce(topic, key=key, value=f"{key}:{i}", headers=[("src", b"ck")], on_delivery=report)
        p.poll(0)
    left = p.flush(60)
    if errors or left:
        sys.exit(f"delivery failed: {left} undelivered, errors {errors[:5]}")
    for partition, key in delivered:
        print(f"{partition}\t{key}")


def produce_until_error(bootstrap, topic, timeout_ms):
    p = ck.Producer({
        **connection(bootstrap),
        "message.timeout.ms": timeout_ms,
        # No retries: a broker error is reported as itself, not as a later local timeout.
        "retries": 0,
        "max.in.flight.requests.per.connection": 1,
        "linger.ms": 5,
    })
    errors = []
    delivered = [0]

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[0] += 1

    for i in range(20000):
        p.produce(topic, value=f"ck{i:06}-" + "k" * 1000, partition=0, on_delivery=report)
        p.poll(0)
        if i % 100 == 99:
            p.flush(timeout_ms / 1000 + 60)
        if errors:
            break
    p.flush(timeout_ms / 1000 + 60)
    print(f"delivered {delivered[0]}")
    if not errors:
        sys.exit("no delivery failed")
    # The broker's own error when it answered one, else librdkafka's (a timeout, say).
    print(f"error {errors[0].name()} {errors[0].str()}")


def produce_acked(bootstrap, topic, count, per_s):
    p = ck.Producer({
        **connection(bootstrap),
        "acks": "all",
        "enable.idempotence": False,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "retry.backoff.ms": 200,
        "message.timeout.ms": 120000,
        # Quick to learn of a new leader after one dies.
        "topic.metadata.refresh.interval.ms": 1000,
    })
    failed = [0]

    def report(err, msg):
        if err is not None:
            failed[0] += 1
        else:
            print(f"{msg.partition()}\t{msg.offset()}\t{msg.value().decode()}", flush=True)

    start = time.time()
    for i in range(count):
        key = f"key{i % 50}"
        value = f"{key}:{i}:" + "v" * ((i * 7919) % 2000)
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
        ahead = i / per_s - (time.time() - start)
        if ahead > 0:
            p.poll(ahead)
    left = p.flush(180)
    print(f"failed {failed[0] + left}", flush=True)


def consume(bootstrap, topic, partitions, count):
    c = ck.Consumer({**connection(bootstrap), "group.id": "unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    deadline = time.time() + 120
    while got < count:
        if time.time() > deadline:
            sys.exit(f"only {got} of {count} messages")
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            sys.exit(f"consume error: {m.error()}")
        got += 1
        print(message_json(m))
    c.close()


def consume_to_end(bootstrap, topic, partition):
    """Every message of one partition from the beginning up to the high watermark it had
    when this started (offsets may have gaps: a compacted topic)."""
    c = ck.Consumer({**connection(bootstrap), "group.id": "unused",
                     "enable.auto.commit": False})
    tp = ck.TopicPartition(topic, partition)
    _, high = c.get_watermark_offsets(tp, timeout=30)
    c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    deadline = time.time() + 120
    while c.position([tp])[0].offset < high:
        if time.time() > deadline:
            sys.exit(f"never reached the high watermark {high}")
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            sys.exit(f"consume error: {m.error()}")
        print(message_json(m))
    c.close()


def group(bootstrap, topic, group_id, strategy, max_messages, idle_s):
    def event(kind):
        def cb(consumer, partitions):
            print(json.dumps({kind: [[p.topic, p.partition] for p in partitions]}), flush=True)
        return cb

    settings = {**connection(bootstrap), "group.id": group_id,
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if strategy.startswith("consumer"):
        # KIP-848: the broker assigns and sets the session and heartbeat timing.
        settings["group.protocol"] = "consumer"
        if ":" in strategy:
            settings["group.remote.assignor"] = strategy.split(":", 1)[1]
    else:
        settings.update({"partition.assignment.strategy": strategy,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    c = ck.Consumer(settings)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    c.subscribe([topic], on_assign=event("assigned"), on_revoke=event("revoked"),
                on_lost=event("revoked"))
    got = 0
    last = time.time()
    while got < max_messages and time.time() - last < idle_s and not stop:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            sys.exit(f"consume error: {m.error()}")
        got += 1
        last = time.time()
        print(message_json(m), flush=True)
        if got % 200 == 0:
            c.commit(asynchronous=False)
    if got:
        # The positions after everything printed: a next run resumes exactly here.
        try:
            c.commit(asynchronous=False)
        except ck.KafkaException as e:
            if e.args[0].code() != ck.KafkaError._NO_OFFSET:  # already committed
                raise
    c.close()


def describe_group(bootstrap, group_id):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient(connection(bootstrap))
    d = admin.describe_consumer_groups([group_id], request_timeout=30)[group_id].result()
    listed = admin.list_consumer_groups(request_timeout=30).result()
    listed_type = [str(g.type.name) for g in listed.valid if g.group_id == group_id]
    print(json.dumps({
        "type": d.type.name,
        "state": d.state.name,
        "assignor": d.partition_assignor,
        "members": [{"member_id": m.member_id,
                     "assignment": [[tp.topic, tp.partition]
                                    for tp in m.assignment.topic_partitions]}
                    for m in d.members],
        "listed_type": listed_type[0] if listed_type else None,
    }))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif cmd == "produce-until-error":
        produce_until_error(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "produce-acked":
        produce_acked(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif cmd == "topics":
        from confluent_kafka.admin import AdminClient
        md = AdminClient(connection(sys.argv[2])).list_topics(timeout=30)
        for name in sorted(md.topics):
            print(name)
    elif cmd == "group":
        group(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]),
              float(sys.argv[7]))
    elif cmd == "describe-group":
        describe_group(sys.argv[2], sys.argv[3])
    elif cmd == "consume-to-end":
        consume_to_end(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "consume":
        consume(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(f"unknown command {cmd}")

"""Kafka admin side of the Kafka-protocol tests: confluent-kafka's AdminClient (librdkafka)
and an idempotent producer against rill. Every command prints JSON on stdout.

  create BOOTSTRAP SPEC [validate]     SPEC: JSON list of {"name", "partitions", "rf", "config"}
                                       (partitions/rf -1 = broker default); one line per topic:
                                       {"topic", "error": null | {"code", "name", "message"}}
  delete BOOTSTRAP TOPIC...            one line per topic, as create
  describe-configs BOOTSTRAP KIND NAME KIND topic|broker; {"error", "configs": {name: {"value",
                                       "source", "read_only", "default"}}}
  describe-cluster BOOTSTRAP           {"cluster_id", "controller", "nodes": [[id, host, port]]}
  create-partitions BOOTSTRAP TOPIC COUNT [validate]
                                       one line per topic, as create
  delete-records BOOTSTRAP TOPIC PARTITION OFFSET
                                       {"low_watermark": n} or {"error": ...}
  alter-configs BOOTSTRAP KIND NAME JSON
                                       replace every setting with JSON {key: value};
                                       {"error": null | {...}}
  incremental-alter-configs BOOTSTRAP KIND NAME JSON
                                       JSON [[key, "SET"|"DELETE"|"APPEND"|"SUBTRACT", value]]
  delete-groups BOOTSTRAP GROUP...      one line per group, as create ("topic": the group)
  elect-leaders BOOTSTRAP preferred|unclean TOPIC:PARTITION...
                                       one line per partition: {"topic", "partition",
                                       "error": null | {...}}
  produce-idempotent BOOTSTRAP TOPIC COUNT RUN
                                       enable.idempotence=true, keyed messages key<i%20> =
                                       "<RUN>:<key>:<i>"; {"producer_id", "epoch", "delivered"}
  produce-idempotent-reports BOOTSTRAP TOPIC COUNT RUN
                                       the same, printing {"reports": [[partition, offset,
                                       value]...], "producer_id", "epoch"}
Exits non-zero on anything unexpected (a failed delivery, a fatal producer error).
"""
import json
import sys

import confluent_kafka as ck
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                  NewPartitions, NewTopic, ResourceType)

KINDS = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER}


def error_json(e):
    if e is None:
        return None
    if isinstance(e, ck.KafkaError):
        return {"code": e.code(), "name": e.name(), "message": e.str()}
    err = e.args[0] if e.args and isinstance(e.args[0], ck.KafkaError) else None
    if err is None:
        return {"code": None, "name": type(e).__name__, "message": str(e)}
    return {"code": err.code(), "name": err.name(), "message": err.str()}


def wait_all(futures):
    for name, f in futures.items():
        try:
            f.result()
            error = None
        except Exception as e:  # noqa: BLE001 - reported to the test
            error = error_json(e)
        print(json.dumps({"topic": name, "error": error}))


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap, spec, validate):
    topics = [
        NewTopic(t["name"], t.get("partitions", -1), t.get("rf", -1), config=t.get("config", {}))
        for t in json.loads(spec)
    ]
    a = admin(bootstrap)  # kept alive until every future is done
    wait_all(a.create_topics(topics, operation_timeout=30, validate_only=validate))


def delete(bootstrap, topics):
    a = admin(bootstrap)
    wait_all(a.delete_topics(topics, operation_timeout=30))


def describe_configs(bootstrap, kind, name):
    kinds = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER}
    a = admin(bootstrap)
    [(_, f)] = a.describe_configs([ConfigResource(kinds[kind], name)]).items()
    try:
        entries = f.result()
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": error_json(e), "configs": {}}))
        return
    print(json.dumps({"error": None, "configs": {
        k: {"value": v.value, "source": getattr(v.source, "value", v.source), "read_only": v.is_read_only,
            "default": v.is_default}
        for k, v in entries.items()
    }}))


def describe_cluster(bootstrap):
    a = admin(bootstrap)
    c = a.describe_cluster(request_timeout=30).result()
    print(json.dumps({
        "cluster_id": c.cluster_id,
        "controller": c.controller.id if c.controller else None,
        "nodes": sorted([n.id, n.host, n.port] for n in c.nodes),
    }))


def create_partitions(bootstrap, topic, count, validate):
    a = admin(bootstrap)
    wait_all(a.create_partitions([NewPartitions(topic, count)], operation_timeout=30,
                                 validate_only=validate))


def delete_records(bootstrap, topic, partition, offset):
    a = admin(bootstrap)
    [(_, f)] = a.delete_records([ck.TopicPartition(topic, partition, offset)],
                                operation_timeout=30).items()
    try:
        deleted = f.result()
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": error_json(e)}))
        return
    print(json.dumps({"low_watermark": deleted.low_watermark}))


def one_result(futures):
    [(_, f)] = futures.items()
    try:
        f.result()
        print(json.dumps({"error": None}))
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": error_json(e)}))


def alter_configs(bootstrap, kind, name, spec):
    a = admin(bootstrap)
    one_result(a.alter_configs([ConfigResource(KINDS[kind], name, set_config=json.loads(spec))]))


def incremental_alter_configs(bootstrap, kind, name, spec):
    entries = [
        ConfigEntry(k, v, incremental_operation=getattr(AlterConfigOpType, op))
        for k, op, v in json.loads(spec)
    ]
    a = admin(bootstrap)
    one_result(a.incremental_alter_configs(
        [ConfigResource(KINDS[kind], name, incremental_configs=entries)]))


def delete_groups(bootstrap, groups):
    a = admin(bootstrap)
    wait_all(a.delete_consumer_groups(groups, request_timeout=30))


def elect_leaders(bootstrap, kind, partitions):
    tps = []
    for tp in partitions:
        topic, partition = tp.rsplit(":", 1)
        tps.append(ck.TopicPartition(topic, int(partition)))
    election = {"preferred": ck.ElectionType.PREFERRED, "unclean": ck.ElectionType.UNCLEAN}[kind]
    # (confluent-kafka 2.16 fails on any keyword argument here; the client must outlive the
    # future.)
    a = admin(bootstrap)
    results = a.elect_leaders(election, tps).result()
    for tp, e in sorted(results.items(), key=lambda r: (r[0].topic, r[0].partition)):
        print(json.dumps({"topic": tp.topic, "partition": tp.partition, "error": error_json(e)}))


def produce_idempotent(bootstrap, topic, count, run, reports=False):
    fatal = []
    stats = {}

    def on_error(e):
        if e.fatal():
            fatal.append(str(e))

    def on_stats(s):
        eos = json.loads(s).get("eos", {})
        if eos.get("idemp_state") == "Assigned":
            stats.update(eos)

    p = ck.Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "statistics.interval.ms": 100,
        "error_cb": on_error,
        "stats_cb": on_stats,
    })
    errors = []
    delivered = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append([msg.partition(), msg.offset(), msg.value().decode()])

    for i in range(count):
        key = f"key{i % 20}"
        p.produce(topic, key=key, value=f"{run}:{key}:{i}", on_delivery=report)
        p.poll(0)
    left = p.flush(60)
    # Stats are emitted every 100 ms: wait for one taken with the producer id assigned.
    for _ in range(50):
        if stats:
            break
        p.poll(0.1)
    if errors or left or fatal:
        sys.exit(f"delivery failed: {left} undelivered, errors {errors[:5]}, fatal {fatal}")
    out = {
        "producer_id": stats.get("producer_id"),
        "epoch": stats.get("producer_epoch"),
        "delivered": len(delivered),
    }
    if reports:
        out["reports"] = delivered
    print(json.dumps(out))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "create":
        create(args[0], args[1], len(args) > 2 and args[2] == "validate")
    elif cmd == "delete":
        delete(args[0], args[1:])
    elif cmd == "describe-configs":
        describe_configs(args[0], args[1], args[2])
    elif cmd == "describe-cluster":
        describe_cluster(args[0])
    elif cmd == "create-partitions":
        create_partitions(args[0], args[1], int(args[2]), len(args) > 3 and args[3] == "validate")
    elif cmd == "delete-records":
        delete_records(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "alter-configs":
        alter_configs(args[0], args[1], args[2], args[3])
    elif cmd == "incremental-alter-configs":
        incremental_alter_configs(args[0], args[1], args[2], args[3])
    elif cmd == "delete-groups":
        delete_groups(args[0], args[1:])
    elif cmd == "elect-leaders":
        elect_leaders(args[0], args[1], args[2:])
    elif cmd == "produce-idempotent":
        produce_idempotent(args[0], args[1], int(args[2]), args[3])
    elif cmd == "produce-idempotent-reports":
        produce_idempotent(args[0], args[1], int(args[2]), args[3], reports=True)
    else:
        sys.exit(f"unknown command {cmd}")

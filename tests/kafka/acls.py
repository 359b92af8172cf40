"""ACLs through confluent-kafka (librdkafka) over SASL_PLAINTEXT with SCRAM-SHA-256.
Every command takes USER PASSWORD BOOTSTRAP first and prints one JSON line; USER "ssl" with
PASSWORD "CA,CERT,KEY" connects with mutual TLS instead (the principal: the certificate's
subject).

  add USER PW BOOT allow|deny PRINCIPAL OPERATION TOPIC|group:GROUP [prefixed]
                                  {"error": null | {"code", "name", "message"}}
  delete USER PW BOOT PRINCIPAL   deletes every binding of PRINCIPAL; {"deleted": n} or error
  list USER PW BOOT               {"acls": [[type, name, pattern, principal, host, op, perm]]}
                                  or {"error": ...}
  read USER PW BOOT TOPIC COUNT   reads partition 0 from offset 0 without a group:
                                  {"values": [...]} or {"error": {...}} (the first error,
                                  the topic's metadata error included)
"""
import json
import sys
import time

import confluent_kafka as ck
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)


def conf(user, password, bootstrap):
    if user == "ssl":
        # Mutual TLS: PASSWORD is "CA,CERT,KEY" (PEM files); the principal is the
        # certificate's subject.
        ca, cert, key = password.split(",")
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
            "ssl.certificate.location": cert,
            "ssl.key.location": key,
            "broker.address.family": "v4",
        }
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
        "broker.address.family": "v4",
    }


def error_json(e):
    err = e if isinstance(e, ck.KafkaError) else (
        e.args[0] if e.args and isinstance(e.args[0], ck.KafkaError) else None)
    if err is None:
        return {"code": None, "name": type(e).__name__, "message": str(e)}
    return {"code": err.code(), "name": err.name(), "message": err.str()}


def main():
    cmd, user, password, bootstrap = sys.argv[1:5]
    args = sys.argv[5:]
    c = conf(user, password, bootstrap)
    # Kept alive until the futures are done (a temporary client's are cancelled).
    admin = AdminClient(c)
    if cmd == "add":
        perm, principal, op, topic = args[:4]
        pattern = ResourcePatternType.PREFIXED if args[4:] == ["prefixed"] else \
            ResourcePatternType.LITERAL
        restype = ResourceType.TOPIC
        if topic.startswith("group:"):
            restype, topic = ResourceType.GROUP, topic[len("group:"):]
        b = AclBinding(restype, topic, pattern, principal, "*",
                       AclOperation[op.upper()],
                       AclPermissionType.ALLOW if perm == "allow" else AclPermissionType.DENY)
        try:
            admin.create_acls([b], request_timeout=30)[b].result()
            print(json.dumps({"error": None}))
        except Exception as e:  # noqa: BLE001 - reported to the test
            print(json.dumps({"error": error_json(e)}))
    elif cmd == "delete":
        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, args[0], None,
                             AclOperation.ANY, AclPermissionType.ANY)
        try:
            deleted = admin.delete_acls([f], request_timeout=30)[f].result()
            print(json.dumps({"deleted": len(deleted)}))
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"error": error_json(e)}))
    elif cmd == "list":
        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
        try:
            acls = admin.describe_acls(f, request_timeout=30).result()
            print(json.dumps({"acls": sorted(
                [a.restype.name, a.name, a.resource_pattern_type.name, a.principal, a.host,
                 a.operation.name, a.permission_type.name] for a in acls)}))
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"error": error_json(e)}))
    elif cmd == "read":
        topic, count = args[0], int(args[1])
        consumer = ck.Consumer(dict(c, **{"group.id": "unused", "enable.auto.commit": False}))
        # A topic the principal may not describe is refused in the metadata already.
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if md is not None and md.error is not None:
            print(json.dumps({"error": error_json(md.error)}))
            consumer.close()
            return
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        values = []
        deadline = time.time() + 30
        try:
            while len(values) < count and time.time() < deadline:
                m = consumer.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    print(json.dumps({"error": error_json(m.error())}))
                    return
                values.append(m.value().decode())
            print(json.dumps({"values": values}))
        finally:
            consumer.close()
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

"""confluent-kafka (librdkafka) reading one partition at an isolation level, for
tests/transactions_partition.rs.

  BOOTSTRAP TOPIC PARTITION ISOLATION STOP   assigns the partition from the beginning with
                                             isolation.level ISOLATION (read_committed or
                                             read_uncommitted) and reads until its position
                                             reaches STOP; prints one value per line
Exits non-zero on a consume error or if STOP is not reached within 60 s.
"""
import sys
import time

import confluent_kafka as ck


def main(bootstrap, topic, partition, isolation, stop):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "isolation.level": isolation})
    tp = ck.TopicPartition(topic, partition)
    c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    deadline = time.time() + 60
    while c.position([tp])[0].offset < stop:
        if time.time() > deadline:
            sys.exit(f"position {c.position([tp])[0].offset} never reached {stop}")
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            sys.exit(f"consume error: {m.error()}")
        print(m.value().decode(), flush=True)
    c.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))

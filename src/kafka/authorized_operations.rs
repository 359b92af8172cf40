//! The `*_authorized_operations` bit sets of Metadata, DescribeCluster and DescribeGroups.
//!
//! rill has no authorizer yet (ACLs are a later issue), so it answers as Kafka does without
//! one: every operation the resource type supports (Kafka's `AclEntry.supportedOperations`).
//! A field the client did not ask for stays `i32::MIN`, Kafka's "not provided".

/// Kafka's `AclOperation` codes.
const READ: i32 = 3;
const WRITE: i32 = 4;
const CREATE: i32 = 5;
const DELETE: i32 = 6;
const ALTER: i32 = 7;
const DESCRIBE: i32 = 8;
const CLUSTER_ACTION: i32 = 9;
const DESCRIBE_CONFIGS: i32 = 10;
const ALTER_CONFIGS: i32 = 11;
const IDEMPOTENT_WRITE: i32 = 12;

const CLUSTER: &[i32] = &[
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
];
const TOPIC: &[i32] = &[
    READ,
    WRITE,
    CREATE,
    DESCRIBE,
    DELETE,
    ALTER,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
];
const GROUP: &[i32] = &[READ, DESCRIBE, DELETE];

/// Kafka's value for "not asked for".
const NOT_PROVIDED: i32 = i32::MIN;

fn bits(asked: bool, operations: &[i32]) -> i32 {
    if asked {
        operations.iter().map(|op| 1 << op).sum()
    } else {
        NOT_PROVIDED
    }
}

pub fn cluster(asked: bool) -> i32 {
    bits(asked, CLUSTER)
}

pub fn topic(asked: bool) -> i32 {
    bits(asked, TOPIC)
}

pub fn group(asked: bool) -> i32 {
    bits(asked, GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_resource_gets_its_operations_and_unasked_is_not_provided() {
        // Bit n set for each operation code n of the resource type.
        assert_eq!(cluster(true), 0b1_1111_1010_0000);
        assert_eq!(topic(true), 0b1101_1111_1000);
        assert_eq!(group(true), 0b1_0100_1000);
        for f in [cluster, topic, group] {
            assert_eq!(f(false), i32::MIN);
        }
    }
}

//! ACLs on the Kafka listener (issue 18): a principal without READ on a topic is refused its
//! fetch with TOPIC_AUTHORIZATION_FAILED and reads once an ALLOW exists; a DENY overrides an
//! ALLOW; only a principal allowed to alter the cluster (here a `--super-users` one) manages
//! ACLs; ACLs survive a restart. Driven by confluent-kafka (`tests/kafka/acls.py`) over
//! SASL_PLAINTEXT with SCRAM.

use std::process::Command;

use rill::client::ProducerRecord;
use rill_testkit::{producer, TestBroker};
use serde_json::Value;

fn acls_py(args: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/acls.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): run .ci/run, or pip install confluent-kafka")
        });
    assert!(
        out.status.success(),
        "acls.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn error_name(v: &Value) -> Option<&str> {
    v["error"]["name"].as_str()
}

#[test]
fn read_needs_an_allow_a_deny_wins_only_cluster_admins_manage_acls_and_they_survive_a_restart() {
    let mut b = TestBroker::start_kafka(
        1,
        &[
            "--kafka-sasl-mechanisms",
            "SCRAM-SHA-256",
            "--super-users",
            "User:admin",
        ],
    );
    for (user, pw) in [
        ("admin", "admin-pw"),
        ("alice", "alice-pw"),
        ("bob", "bob-pw"),
    ] {
        let out = b.cli(&["user", "create", user, "--password", pw], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    b.client().create_topic("paid", 1, 1, vec![]).unwrap();
    let producer = producer(&b, 16 << 10);
    for i in 0..10 {
        let v = format!("v{i}");
        producer
            .send(ProducerRecord::new("paid", v.as_bytes()))
            .unwrap();
    }
    producer.flush().unwrap();
    let kafka = b.kafka_bootstrap();
    let admin = |args: &[&str]| {
        let mut a = vec![args[0], "admin", "admin-pw", kafka.as_str()];
        a.extend_from_slice(&args[1..]);
        acls_py(&a)
    };
    let as_user = |user: &str, pw: &str, args: &[&str]| {
        let mut a = vec![args[0], user, pw, kafka.as_str()];
        a.extend_from_slice(&args[1..]);
        acls_py(&a)
    };
    let alice_reads = || as_user("alice", "alice-pw", &["read", "paid", "10"]);
    let want: Vec<Value> = (0..10).map(|i| Value::from(format!("v{i}"))).collect();

    // No ACL: refused.
    let v = alice_reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");
    // A principal that may not alter the cluster cannot grant itself anything.
    let v = as_user(
        "bob",
        "bob-pw",
        &["add", "allow", "User:bob", "read", "paid"],
    );
    assert_eq!(error_name(&v), Some("CLUSTER_AUTHORIZATION_FAILED"), "{v}");
    // (A refused DescribeAcls carries CLUSTER_AUTHORIZATION_FAILED too, but librdkafka 2.16
    // drops a DescribeAcls top-level error and reports no bindings.)
    assert_eq!(
        as_user("bob", "bob-pw", &["list"])["acls"],
        Value::from(Vec::<Value>::new())
    );

    // An ALLOW of READ (which implies DESCRIBE, for the metadata) lets alice read.
    for args in [
        ["add", "allow", "User:alice", "read", "pa", "prefixed"].as_slice(),
        &["add", "allow", "User:*", "read", "group:unused"],
    ] {
        let v = admin(args);
        assert_eq!(v["error"], Value::Null, "{args:?}: {v}");
    }
    let v = alice_reads();
    assert_eq!(v["values"], Value::from(want.clone()), "{v}");
    // bob, with no ACL of his own, still cannot.
    let v = as_user("bob", "bob-pw", &["read", "paid", "10"]);
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");

    // A DENY overrides the ALLOW.
    let v = admin(&["add", "deny", "User:alice", "read", "paid"]);
    assert_eq!(v["error"], Value::Null, "{v}");
    let v = alice_reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");

    // The bindings survive a restart (they are controller metadata).
    let listed = admin(&["list"]);
    assert_eq!(listed["acls"].as_array().map(Vec::len), Some(3), "{listed}");
    assert!(b.terminate().success());
    b.start_again();
    assert_eq!(admin(&["list"]), listed);
    let v = alice_reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");

    // Deleting alice's bindings takes the DENY and the ALLOW; the wildcard one stays.
    let v = admin(&["delete", "User:alice"]);
    assert_eq!(v["deleted"], Value::from(2), "{v}");
    let v = admin(&["add", "allow", "User:alice", "read", "paid"]);
    assert_eq!(v["error"], Value::Null, "{v}");
    let v = alice_reads();
    assert_eq!(v["values"], Value::from(want), "{v}");
}

#[test]
fn rill_acl_adds_lists_and_removes_bindings_that_the_kafka_listener_enforces() {
    let b = TestBroker::start_kafka(1, &["--kafka-sasl-mechanisms", "SCRAM-SHA-256"]);
    let cli = |args: &[&str]| {
        let out = b.cli(args, None);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, _, err) = cli(&["user", "create", "carol", "--password", "carol-pw"]);
    assert!(ok, "{err}");
    b.client().create_topic("orders", 1, 1, vec![]).unwrap();
    let producer = producer(&b, 16 << 10);
    producer.send(ProducerRecord::new("orders", b"o1")).unwrap();
    producer.flush().unwrap();
    let kafka = b.kafka_bootstrap();
    let carol_reads = || acls_py(&["read", "carol", "carol-pw", &kafka, "orders", "1"]);
    let v = carol_reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");

    let (ok, out, err) = cli(&[
        "acl",
        "add",
        "--allow-principal",
        "User:carol",
        "--operation",
        "read",
        "--topic",
        "orders",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "added\tUser:carol\tALLOW\tREAD\thost=*\ttopic:literal:orders"
    );
    let (ok, out, err) = cli(&[
        "acl",
        "add",
        "--allow-principal",
        "User:*",
        "--operation",
        "READ",
        "--group",
        "unused",
    ]);
    assert!(ok, "{err}{out}");
    let v = carol_reads();
    assert_eq!(v["values"], serde_json::json!(["o1"]), "{v}");

    let (ok, out, _) = cli(&["acl", "list", "--principal", "User:carol"]);
    assert!(ok);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec!["User:carol\tALLOW\tREAD\thost=*\ttopic:literal:orders"]
    );
    let (ok, out, _) = cli(&["acl", "list"]);
    assert!(ok);
    assert_eq!(out.lines().count(), 2, "{out}");

    // Bad input: a one-line error each, nothing changed.
    for (args, why) in [
        (
            vec![
                "acl",
                "add",
                "--allow-principal",
                "User:x",
                "--operation",
                "fly",
                "--topic",
                "t",
            ],
            "unknown operation 'fly'",
        ),
        (
            vec![
                "acl",
                "add",
                "--allow-principal",
                "carol",
                "--operation",
                "read",
                "--topic",
                "t",
            ],
            "not of the form User:<name>",
        ),
        (
            vec![
                "acl",
                "add",
                "--allow-principal",
                "User:x",
                "--operation",
                "read",
                "--topic",
                "t",
                "--group",
                "g",
            ],
            "name one resource",
        ),
        (vec!["acl", "remove"], "name a resource"),
    ] {
        let (ok, _, err) = cli(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let (_, out, _) = cli(&["acl", "list"]);
    assert_eq!(out.lines().count(), 2, "{out}");

    let (ok, out, err) = cli(&["acl", "remove", "--topic", "orders"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let v = carol_reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");
}

#[test]
fn a_mutual_tls_client_is_the_principal_its_certificate_names() {
    let certs = rill_testkit::tls::TestCerts::new();
    let flags = certs.broker_flags("kafka", &certs.server, true);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let b = TestBroker::start_kafka(1, &flags);
    b.client().create_topic("certified", 1, 1, vec![]).unwrap();
    let producer = producer(&b, 16 << 10);
    producer
        .send(ProducerRecord::new("certified", b"c1"))
        .unwrap();
    producer.flush().unwrap();
    let kafka = b.kafka_bootstrap();
    let identity = format!(
        "{},{},{}",
        certs.ca_str(),
        certs.client.cert_str(),
        certs.client.key_str()
    );
    let reads = || acls_py(&["read", "ssl", &identity, &kafka, "certified", "1"]);
    // ACLs apply as soon as the listener authenticates, by certificate here.
    let v = reads();
    assert_eq!(error_name(&v), Some("TOPIC_AUTHORIZATION_FAILED"), "{v}");
    for args in [["--topic", "certified"].as_slice(), &["--group", "unused"]] {
        let mut a = vec![
            "acl",
            "add",
            "--allow-principal",
            "User:CN=client",
            "--operation",
            "read",
        ];
        a.extend_from_slice(args);
        let out = b.cli(&a, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v = reads();
    assert_eq!(v["values"], serde_json::json!(["c1"]), "{v}");
}

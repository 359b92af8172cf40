//! SASL and ACLs on the native listener (issue 18): SCRAM and PLAIN for the client library
//! and the CLI, ACLs enforced once authenticated (a DENY over an ALLOW), the inter-broker
//! user created at start (a new cluster's first user, a super user), refusals with
//! Kafka's codes, a connection that never authenticates closed, malformed SASL bytes
//! answered without harm, and a cluster whose brokers replicate to each other as the
//! inter-broker user.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rill::auth::scram::Mechanism;
use rill::client::{Client, ClientConfig, ClientError, SaslCredentials};
use rill::protocol::frame::{encode_meta, encode_request, RequestHeader};
use rill::protocol::messages::SaslAuthenticateRequest;
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{wait_partition, TestBroker, TestCluster, DEADLINE, FAST_FENCING};

const ADMIN_PASSWORD: &str = "admin-secret";

fn creds(mechanism: &str, user: &str, password: &str) -> SaslCredentials {
    SaslCredentials {
        mechanism: mechanism.into(),
        username: user.into(),
        password: password.into(),
    }
}

/// The flags of a broker whose native listener requires SASL, with `admin` as the
/// inter-broker user.
fn sasl_flags(mechanisms: &str) -> Vec<String> {
    [
        "--native-sasl-mechanisms",
        mechanisms,
        "--inter-broker-sasl-username",
        "admin",
        "--inter-broker-sasl-password",
        ADMIN_PASSWORD,
    ]
    .map(String::from)
    .to_vec()
}

fn start(extra: &[&str]) -> TestBroker {
    let mut args = sasl_flags("SCRAM-SHA-512,PLAIN");
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut b = TestBroker::unstarted(1, &args);
    b.client_sasl = Some(creds("SCRAM-SHA-512", "admin", ADMIN_PASSWORD));
    b.launch();
    b.wait_ready();
    b
}

/// An ACL binding for alice on topic `t`.
fn acl(t: &str, operation: &str, permission: &str) -> rill::protocol::messages::AclEntry {
    rill::protocol::messages::AclEntry {
        resource_type: "topic".into(),
        name: t.into(),
        pattern: "literal".into(),
        principal: "User:alice".into(),
        host: "*".into(),
        operation: operation.into(),
        permission: permission.into(),
    }
}

fn connect_as(b: &TestBroker, sasl: Option<SaslCredentials>) -> Result<Client, ClientError> {
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.sasl = sasl;
    Client::connect(cfg)
}

#[test]
fn native_clients_authenticate_with_scram_or_plain_and_others_are_refused() {
    let b = start(&[]);
    // The inter-broker user exists from the start: it creates the others.
    let mut admin = b.client();
    admin
        .upsert_user("alice", "alice-pw", Mechanism::ScramSha512, 4096)
        .expect("create alice");
    admin.create_topic("t", 2, 1, vec![]).expect("create topic");

    for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
        let mut alice =
            connect_as(&b, Some(creds(mechanism, "alice", "alice-pw"))).expect(mechanism);
        alice.refresh_metadata().expect("metadata as alice");
        // Metadata lists only the topics alice may describe: none yet.
        assert!(alice.metadata().partitions("t").is_err(), "{mechanism}");
    }
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.sasl = Some(creds("SCRAM-SHA-512", "alice", "alice-pw"));
    // ACLs apply on an authenticating listener: without one alice may not even get a
    // producer id, nor write, nor delete a topic.
    let refused = rill::client::Producer::new(cfg.clone(), Default::default()).err();
    assert_eq!(
        refused.and_then(|e| e.code()),
        Some(ErrorCode::ClusterAuthorizationFailed)
    );
    let mut alice = connect_as(&b, cfg.sasl.clone()).expect("alice");
    assert_eq!(
        alice.delete_topic("t").err().and_then(|e| e.code()),
        Some(ErrorCode::TopicAuthorizationFailed)
    );
    assert_eq!(
        alice
            .create_acls(vec![acl("t", "WRITE", "ALLOW")])
            .err()
            .and_then(|e| e.code()),
        Some(ErrorCode::ClusterAuthorizationFailed),
        "only the cluster's ALTER right grants"
    );
    admin
        .create_acls(
            ["WRITE", "READ", "DESCRIBE"]
                .map(|op| acl("t", op, "ALLOW"))
                .to_vec(),
        )
        .expect("grant alice");
    alice.refresh_metadata().expect("metadata as alice");
    assert_eq!(
        alice.metadata().partitions("t").unwrap(),
        2,
        "now described"
    );
    // Produce and consume through the pipelined connections, authenticated too.
    let producer = rill::client::Producer::new(cfg.clone(), Default::default()).expect("producer");
    let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    let reports: Vec<_> = values
        .iter()
        .map(|v| {
            producer
                .send(rill::client::ProducerRecord::new("t", v.as_bytes()).partition(0))
                .expect("send")
        })
        .collect();
    producer.flush().expect("flush");
    for r in reports {
        r.wait().expect("delivered");
    }
    let mut consumer =
        rill::client::Consumer::new(cfg, Default::default()).expect("consumer as alice");
    consumer
        .assign("t", Some(vec![0]), rill::client::StartFrom::Beginning)
        .expect("assign");
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < values.len() {
        let records = consumer.poll(Duration::from_millis(200)).expect("poll");
        got.extend(
            records
                .iter()
                .map(|r| String::from_utf8(r.value().unwrap().to_vec()).unwrap()),
        );
        assert!(start.elapsed() < DEADLINE, "consumed {got:?}");
    }
    assert_eq!(got, values);
    // A DENY overrides the ALLOW.
    admin
        .create_acls(vec![acl("t", "READ", "DENY")])
        .expect("deny alice");
    let mut denied = rill::client::Consumer::new(
        ClientConfig {
            sasl: Some(creds("SCRAM-SHA-512", "alice", "alice-pw")),
            ..ClientConfig::new(b.bootstrap())
        },
        Default::default(),
    )
    .expect("consumer");
    denied
        .assign("t", Some(vec![0]), rill::client::StartFrom::Beginning)
        .expect("assign");
    let start = Instant::now();
    let e = loop {
        match denied.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty(), "read while denied"),
        }
        assert!(start.elapsed() < DEADLINE, "never refused");
    };
    assert_eq!(e.code(), Some(ErrorCode::TopicAuthorizationFailed), "{e}");

    // A wrong password, an unknown user, a mechanism the listener does not enable, and no
    // authentication at all: each refused with Kafka's code.
    let code = |r: Result<Client, ClientError>| r.err().and_then(|e| e.code());
    assert_eq!(
        code(connect_as(
            &b,
            Some(creds("SCRAM-SHA-512", "alice", "nope"))
        )),
        Some(ErrorCode::SaslAuthenticationFailed)
    );
    assert_eq!(
        code(connect_as(&b, Some(creds("PLAIN", "alice", "nope")))),
        Some(ErrorCode::SaslAuthenticationFailed)
    );
    assert_eq!(
        code(connect_as(&b, Some(creds("SCRAM-SHA-512", "mallory", "x")))),
        Some(ErrorCode::SaslAuthenticationFailed)
    );
    assert_eq!(
        code(connect_as(
            &b,
            Some(creds("SCRAM-SHA-256", "alice", "alice-pw"))
        )),
        Some(ErrorCode::UnsupportedSaslMechanism)
    );
    assert_eq!(
        code(connect_as(&b, None)),
        Some(ErrorCode::SaslAuthenticationFailed)
    );
}

#[test]
fn rights_on_groups_and_transactional_ids_are_checked_too() {
    let b = start(&[]);
    let mut admin = b.client();
    admin
        .upsert_user("alice", "alice-pw", Mechanism::ScramSha512, 4096)
        .expect("create alice");
    admin.create_topic("g", 1, 1, vec![]).expect("create topic");
    admin
        .create_acls(
            ["WRITE", "READ", "DESCRIBE"]
                .map(|op| acl("g", op, "ALLOW"))
                .to_vec(),
        )
        .expect("grant alice the topic");
    let alice = || {
        let mut cfg = ClientConfig::new(b.bootstrap());
        cfg.sasl = Some(creds("SCRAM-SHA-512", "alice", "alice-pw"));
        cfg
    };
    // A group alice has no right on.
    let mut c = Client::connect(alice()).expect("alice");
    let coordinator = c.find_coordinator("team");
    assert_eq!(
        coordinator.err().and_then(|e| e.code()),
        Some(ErrorCode::GroupAuthorizationFailed)
    );
    // Nor a transactional id.
    let txn = rill::client::TransactionalProducer::init(
        alice(),
        Default::default(),
        rill::client::TransactionConfig::new("alice-txn"),
    );
    assert_eq!(
        txn.err().and_then(|e| e.code()),
        Some(ErrorCode::TransactionalIdAuthorizationFailed)
    );
    // Granted, both work.
    let grant = |resource_type: &str, name: &str, op: &str| rill::protocol::messages::AclEntry {
        resource_type: resource_type.into(),
        name: name.into(),
        ..acl(name, op, "ALLOW")
    };
    admin
        .create_acls(vec![
            grant("group", "team", "READ"),
            grant("group", "team", "DESCRIBE"),
            grant("transactional-id", "alice-txn", "WRITE"),
            grant("transactional-id", "alice-txn", "DESCRIBE"),
        ])
        .expect("grant");
    c.find_coordinator("team").expect("the group's coordinator");
    let p = rill::client::TransactionalProducer::init(
        alice(),
        Default::default(),
        rill::client::TransactionConfig::new("alice-txn"),
    )
    .expect("transactional producer");
    p.begin().expect("begin");
    p.send(rill::client::ProducerRecord::new("g", b"in a transaction"))
        .expect("send");
    p.commit().expect("commit");
}

/// `rill` with its `--sasl-*` flags, the password in the environment.
fn rill_as(b: &TestBroker, user: Option<(&str, &str)>, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(rill_testkit::rill_bin());
    cmd.args(["-b", &b.bootstrap()]);
    if let Some((u, pw)) = user {
        cmd.args(["--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", u])
            .env("RILL_SASL_PASSWORD", pw);
    }
    cmd.args(args).output().expect("rill")
}

#[test]
fn the_cli_authenticates_with_its_sasl_flags() {
    let b = start(&[]);
    let ok = rill_as(
        &b,
        Some(("admin", ADMIN_PASSWORD)),
        &["topic", "create", "c", "--partitions", "1"],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let listed = rill_as(&b, Some(("admin", ADMIN_PASSWORD)), &["topic", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains('c'));
    let refused = rill_as(&b, Some(("admin", "wrong")), &["topic", "list"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("SASL_AUTHENTICATION_FAILED"), "{err}");
    let anonymous = rill_as(&b, None, &["topic", "list"]);
    assert!(!anonymous.status.success());
    let half = std::process::Command::new(rill_testkit::rill_bin())
        .args([
            "-b",
            &b.bootstrap(),
            "--sasl-username",
            "admin",
            "topic",
            "list",
        ])
        .output()
        .expect("rill");
    assert!(String::from_utf8_lossy(&half.stderr).contains("go together"));
}

/// One raw frame on `s`: the response's error code (frame level or in the body's first
/// field), or `None` if the broker closed the connection.
fn raw_request<T: rill::protocol::frame::EncodeMeta>(
    s: &mut TcpStream,
    api: ApiKey,
    meta: &T,
) -> Option<ErrorCode> {
    let header = RequestHeader {
        api_key: api as u16,
        api_version: 0,
        correlation_id: 7,
        client_id: "raw".into(),
    };
    let wire = encode_request(&header, &encode_meta(meta).unwrap(), &[]).unwrap();
    s.write_all(&wire).ok()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    let frame = rill::protocol::ResponseFrame::parse({
        let mut b = rill::protocol::frame::FrameBuf::with_capacity(body.len());
        b.extend_from_slice(&body);
        b
    })
    .ok()?;
    Some(frame.error)
}

/// Whether the broker closed `s` (reads EOF within the deadline).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

#[test]
fn a_client_that_never_authenticates_is_closed_and_bad_sasl_bytes_harm_nothing() {
    let b = start(&["--sasl-authentication-timeout-ms", "500"]);
    let addr = b.bootstrap();
    // Silent: closed after the authentication timeout.
    let mut silent = TcpStream::connect(&addr).unwrap();
    let t = Instant::now();
    assert!(closed(&mut silent));
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    // SaslAuthenticate before any handshake, and garbage after one: answered, then closed.
    let mut early = TcpStream::connect(&addr).unwrap();
    let junk = SaslAuthenticateRequest {
        auth_bytes: b"\xff\xfe garbage".to_vec(),
    };
    raw_request(&mut early, ApiKey::SaslAuthenticate, &junk);
    assert!(closed(&mut early));
    let mut bad = TcpStream::connect(&addr).unwrap();
    let hs = rill::protocol::messages::SaslHandshakeRequest {
        mechanism: "SCRAM-SHA-512".into(),
    };
    assert_eq!(
        raw_request(&mut bad, ApiKey::SaslHandshake, &hs),
        Some(ErrorCode::None)
    );
    raw_request(&mut bad, ApiKey::SaslAuthenticate, &junk);
    assert!(closed(&mut bad));
    // A request before authentication: refused and closed.
    let mut eager = TcpStream::connect(&addr).unwrap();
    let md = rill::protocol::messages::MetadataRequest {
        topics: None,
        create: Vec::new(),
    };
    assert_eq!(
        raw_request(&mut eager, ApiKey::Metadata, &md),
        Some(ErrorCode::SaslAuthenticationFailed)
    );
    assert!(closed(&mut eager));
    // The broker serves authenticated clients all along.
    b.client().refresh_metadata().expect("still serving");
}

#[test]
fn brokers_whose_native_listeners_authenticate_replicate_as_the_inter_broker_user() {
    let mut flags: Vec<String> = sasl_flags("SCRAM-SHA-256");
    flags.extend(FAST_FENCING.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let c = TestCluster::start_sasl(
        3,
        1,
        &flags,
        creds("SCRAM-SHA-256", "admin", ADMIN_PASSWORD),
    );
    c.wait_leader(&[1, 2, 3]);
    rill_testkit::create_topic_rf3(&c, "r", 1, &[("min.insync.replicas", "3")]);
    // acks=all with min.insync.replicas 3: acknowledged only once both followers fetched it,
    // over authenticated connections.
    let p = rill::client::Producer::new(c.nodes[0].client_config(), Default::default())
        .expect("producer");
    let reports: Vec<_> = (0..20)
        .map(|i| {
            p.send(rill::client::ProducerRecord::new(
                "r",
                format!("x{i}").as_bytes(),
            ))
            .expect("send")
        })
        .collect();
    p.flush().expect("flush");
    for r in reports {
        r.wait().expect("acknowledged by all three replicas");
    }
    wait_partition(&c.nodes[0], "r", 0, "a full ISR", |m| m.isr.len() == 3);
}

//! SASL on the Kafka listener (`--kafka-sasl-mechanisms`, `--sasl-authentication-timeout-ms`):
//! users made with `rill user create` (salted SCRAM credentials held by the controller);
//! confluent-kafka over SASL_SSL with SCRAM-SHA-256/512 and PLAIN; on the wire, a wrong
//! password answered SASL_AUTHENTICATION_FAILED and the connection closed, requests before
//! authentication and malformed SASL messages closed, a client that never authenticates
//! closed after the timeout, while others are served; users survive a restart and are
//! managed with Kafka's AlterUserScramCredentials and DescribeUserScramCredentials.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, MetadataRequest,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rill::auth::scram::Mechanism;
use rill_testkit::tls::TestCerts;
use rill_testkit::{scrape_metrics as scrape, TestBroker, DEADLINE};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn sasl_broker(extra: &[&str]) -> TestBroker {
    let mut flags = vec![
        "--kafka-sasl-mechanisms".to_string(),
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    TestBroker::start_tls(1, true, &flags, None)
}

fn create_user(b: &TestBroker, user: &str, password: &str) {
    let out = b.cli(&["user", "create", user, "--password", password], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn confluent_kafka_over_sasl_ssl_with_scram_and_plain() {
    let certs = TestCerts::new();
    let mut flags = certs.broker_flags("kafka", &certs.server, false);
    // Authentication is what is tested here: alice may do anything (ACLs: tests/acls.rs).
    flags.extend([
        "--kafka-sasl-mechanisms".to_string(),
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string(),
        "--super-users".to_string(),
        "User:alice".to_string(),
    ]);
    let b = TestBroker::start_tls(1, true, &flags, None);
    create_user(&b, "alice", "wonder land");
    let list = b.cli(&["user", "list"], None);
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.contains("alice\tSCRAM-SHA-256(iterations=4096),SCRAM-SHA-512(iterations=4096)"),
        "{list}"
    );
    let raft = std::fs::read(b.data_dir().join("controller/raft.log")).unwrap();
    assert!(
        !raft
            .windows(b"wonder land".len())
            .any(|w| w == b"wonder land"),
        "the password reached the controller's log"
    );
    b.client().create_topic("auth", 2, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let config = |mechanism: &str, password: &str| {
        format!(
            r#"{{"security.protocol": "SASL_SSL", "ssl.ca.location": "{}",
                "sasl.mechanism": "{mechanism}", "sasl.username": "alice",
                "sasl.password": "{password}"}}"#,
            certs.ca_str()
        )
    };
    let scram = config("SCRAM-SHA-256", "wonder land");
    let produced = python(&scram, &["produce", &kafka, "auth", "400", "none"]);
    assert_eq!(produced.lines().count(), 400, "every message delivered");
    let consumed = python(
        &config("SCRAM-SHA-512", "wonder land"),
        &["consume", &kafka, "auth", "2", "400"],
    );
    let mut got: Vec<String> = consumed
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    got.sort_by_key(|v| v.rsplit(':').next().unwrap().parse::<u32>().unwrap());
    let want: Vec<String> = (0..400).map(|i| format!("key{}:{i}", i % 50)).collect();
    assert_eq!(got, want, "every message read back over SASL_SSL");
    let topics = python(&config("PLAIN", "wonder land"), &["topics", &kafka]);
    assert!(topics.lines().any(|t| t == "auth"), "{topics}");

    // kcat (Debian's librdkafka 2.0) lists metadata over SASL_SSL with SCRAM-SHA-512; with a
    // wrong password it fails on the broker's SASL_AUTHENTICATION_FAILED message.
    let kcat = |password: &str| {
        rill_testkit::external("kcat")
            .args(["-b", &kafka, "-m", "10", "-L"])
            .args([
                "-X",
                "security.protocol=SASL_SSL",
                "-X",
                "sasl.mechanisms=SCRAM-SHA-512",
            ])
            .args(["-X", &format!("ssl.ca.location={}", certs.ca_str())])
            .args([
                "-X",
                "sasl.username=alice",
                "-X",
                &format!("sasl.password={password}"),
            ])
            .stdin(Stdio::null())
            .output()
            .expect("kcat (run .ci/run, or apt-get install kcat)")
    };
    let ok = kcat("wonder land");
    let md = String::from_utf8_lossy(&ok.stdout);
    assert!(
        md.contains("topic \"auth\" with 2 partitions"),
        "{md}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = kcat("wrong");
    assert!(
        !refused.status.success(),
        "kcat with a wrong password got metadata"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("Authentication failed"), "{stderr}");
}

#[test]
fn wrong_passwords_early_requests_and_malformed_messages_close_the_connection() {
    let metrics = format!("127.0.0.1:{}", rill_testkit::free_ports(1));
    let b = sasl_broker(&["--metrics-listen", &metrics]);
    create_user(&b, "bob", "right");
    let kafka = b.kafka_bootstrap();

    // A wrong SCRAM password: SASL_AUTHENTICATION_FAILED, then the connection closes.
    let mut c = KafkaConn::open(&kafka);
    assert_eq!(c.handshake("SCRAM-SHA-256"), 0);
    let (code, _) = c.scram(Mechanism::ScramSha256, "bob", "wrong");
    assert_eq!(code, 58, "SASL_AUTHENTICATION_FAILED");
    c.assert_closed();

    // A wrong PLAIN password, and an unknown user: the same answer.
    for (user, password) in [("bob", "wrong"), ("nobody", "right")] {
        let mut c = KafkaConn::open(&kafka);
        assert_eq!(c.handshake("PLAIN"), 0);
        let r = c
            .authenticate(format!("\0{user}\0{password}").as_bytes())
            .unwrap();
        assert_eq!(r.error_code, 58);
        c.assert_closed();
    }

    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM naming the enabled ones.
    let mut c = KafkaConn::open(&kafka);
    let r: SaslHandshakeResponse = c
        .call(ApiKey::SaslHandshake, 1, &handshake_request("GSSAPI"))
        .unwrap();
    assert_eq!(r.error_code, 33);
    let names: Vec<String> = r.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(names, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    c.assert_closed();

    // SaslHandshake v0 (unframed tokens follow it) is listed for librdkafka but not served.
    let mut c = KafkaConn::open(&kafka);
    assert!(c
        .call::<_, SaslHandshakeResponse>(ApiKey::SaslHandshake, 0, &handshake_request("PLAIN"))
        .is_none());

    // A request before authentication: closed without an answer.
    let mut c = KafkaConn::open(&kafka);
    assert!(c
        .call::<_, kafka_protocol::messages::MetadataResponse>(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default()
        )
        .is_none());

    // Malformed SCRAM and PLAIN messages.
    for (mechanism, bytes) in [
        ("SCRAM-SHA-512", &b"\xff\xfe garbage"[..]),
        ("SCRAM-SHA-512", b"n,,r=nonce-without-user"),
        ("SCRAM-SHA-256", b"p=tls-unique,,n=bob,r=x"),
        ("PLAIN", b"no separators"),
        ("PLAIN", b""),
    ] {
        let mut c = KafkaConn::open(&kafka);
        assert_eq!(c.handshake(mechanism), 0);
        let r = c.authenticate(bytes).unwrap();
        assert_eq!(r.error_code, 58, "{mechanism} {bytes:?}");
        c.assert_closed();
    }

    // A right password: authenticated, then served; the broker served others throughout.
    let mut c = KafkaConn::open(&kafka);
    assert_eq!(c.handshake("SCRAM-SHA-512"), 0);
    let (code, verified) = c.scram(Mechanism::ScramSha512, "bob", "right");
    assert_eq!(code, 0);
    assert!(verified, "the server's signature checks out");
    let md: kafka_protocol::messages::MetadataResponse = c
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .expect("served once authenticated");
    assert_eq!(md.brokers.len(), 1);
    let mut c = KafkaConn::open(&kafka);
    assert_eq!(c.handshake("PLAIN"), 0);
    assert_eq!(c.authenticate(b"\0bob\0right").unwrap().error_code, 0);

    // The refusals are counted: 3 wrong credentials and 5 malformed messages.
    let text = scrape(&metrics);
    let failed = "rill_request_errors_total{shard=\"0\",listener=\"kafka\",api=\"SaslAuthenticate\",code=\"SASL_AUTHENTICATION_FAILED\"} 8";
    assert!(text.contains(failed), "{text}");
    let unsupported = "api=\"SaslHandshake\",code=\"UNSUPPORTED_SASL_MECHANISM\"} 1";
    assert!(text.contains(unsupported), "{text}");
}

#[test]
fn a_client_that_never_authenticates_is_closed_after_the_timeout() {
    let b = sasl_broker(&["--sasl-authentication-timeout-ms", "1000"]);
    create_user(&b, "carol", "pw");
    let kafka = b.kafka_bootstrap();
    let start = Instant::now();
    // Silent, and stuck after a handshake: both closed.
    let mut silent = KafkaConn::open(&kafka);
    let mut stuck = KafkaConn::open(&kafka);
    assert_eq!(stuck.handshake("SCRAM-SHA-256"), 0);
    silent.assert_closed();
    stuck.assert_closed();
    // The idle timeout is 10 minutes: a close within the deadline is the authentication's.
    assert!(start.elapsed() < DEADLINE);
    assert!(b
        .log_text()
        .contains("(--sasl-authentication-timeout-ms); closing"));
    // Others are served.
    let mut c = KafkaConn::open(&kafka);
    assert_eq!(c.handshake("SCRAM-SHA-256"), 0);
    assert_eq!(c.scram(Mechanism::ScramSha256, "carol", "pw").0, 0);
}

#[test]
fn users_through_kafka_admin_apis_and_a_restart() {
    let mut b = sasl_broker(&["--super-users", "User:admin"]);
    create_user(&b, "admin", "adminpw");
    let kafka = b.kafka_bootstrap();
    let authed = |b: &TestBroker| {
        let mut c = KafkaConn::open(&b.kafka_bootstrap());
        assert_eq!(c.handshake("SCRAM-SHA-256"), 0);
        assert_eq!(c.scram(Mechanism::ScramSha256, "admin", "adminpw").0, 0);
        c
    };
    // AlterUserScramCredentials: the client salts; rill keeps StoredKey and ServerKey.
    let m = Mechanism::ScramSha512;
    let salt = b"0123456789abcdef".to_vec();
    let mut up = kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
    up.name = StrBytes::from_static_str("dave");
    up.mechanism = m.kafka_type();
    up.iterations = 8192;
    up.salt = Bytes::from(salt.clone());
    up.salted_password = Bytes::from(m.salted_password(b"davepw", &salt, 8192));
    let mut del = kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion::default();
    del.name = StrBytes::from_static_str("nobody");
    del.mechanism = 1;
    let mut req = AlterUserScramCredentialsRequest::default();
    req.upsertions = vec![up];
    req.deletions = vec![del];
    let r: AlterUserScramCredentialsResponse = authed(&b)
        .call(ApiKey::AlterUserScramCredentials, 0, &req)
        .unwrap();
    let codes: Vec<(String, i16)> = r
        .results
        .iter()
        .map(|x| (x.user.to_string(), x.error_code))
        .collect();
    assert_eq!(codes, [("nobody".into(), 91), ("dave".into(), 0)]);

    let describe = |b: &TestBroker| -> Vec<(String, Vec<(i8, i32)>)> {
        let r: DescribeUserScramCredentialsResponse = authed(b)
            .call(
                ApiKey::DescribeUserScramCredentials,
                0,
                &DescribeUserScramCredentialsRequest::default(),
            )
            .unwrap();
        r.results
            .iter()
            .map(|u| {
                (
                    u.user.to_string(),
                    u.credential_infos
                        .iter()
                        .map(|c| (c.mechanism, c.iterations))
                        .collect(),
                )
            })
            .collect()
    };
    let want = vec![
        ("admin".to_string(), vec![(1, 4096), (2, 4096)]),
        ("dave".to_string(), vec![(2, 8192)]),
    ];
    assert_eq!(describe(&b), want);
    let mut c = KafkaConn::open(&kafka);
    assert_eq!(c.handshake("SCRAM-SHA-512"), 0);
    assert_eq!(c.scram(m, "dave", "davepw").0, 0, "dave authenticates");

    // The users are the controller's metadata: they survive a restart.
    b.restart();
    assert_eq!(describe(&b), want);
    let mut c = KafkaConn::open(&b.kafka_bootstrap());
    assert_eq!(c.handshake("PLAIN"), 0);
    assert_eq!(c.authenticate(b"\0dave\0davepw").unwrap().error_code, 0);

    // rill user delete: dave is gone.
    let out = b.cli(&["user", "delete", "dave"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = KafkaConn::open(&b.kafka_bootstrap());
    assert_eq!(c.handshake("PLAIN"), 0);
    assert_eq!(c.authenticate(b"\0dave\0davepw").unwrap().error_code, 58);
    let out = b.cli(&["user", "delete", "dave"], None);
    assert!(!out.status.success(), "deleting a deleted user");
}

fn handshake_request(mechanism: &str) -> SaslHandshakeRequest {
    let mut r = SaslHandshakeRequest::default();
    r.mechanism = StrBytes::from_string(mechanism.to_string());
    r
}

/// One Kafka connection, requests one at a time.
struct KafkaConn {
    s: TcpStream,
    correlation: i32,
}

impl KafkaConn {
    fn open(addr: &str) -> KafkaConn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        KafkaConn { s, correlation: 0 }
    }

    /// The answer, or `None` when the broker closed the connection instead.
    fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Option<Resp> {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("sasl-test"));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api.request_header_version(version))
            .unwrap();
        req.encode(&mut body, version).unwrap();
        self.s.write_all(&(body.len() as i32).to_be_bytes()).ok()?;
        self.s.write_all(&body).ok()?;
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).ok()?;
        let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
        self.s.read_exact(&mut resp).ok()?;
        let mut resp = Bytes::from(resp);
        let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
        assert_eq!(h.correlation_id, self.correlation);
        let r = Resp::decode(&mut resp, version).unwrap();
        assert_eq!(resp.remaining(), 0);
        Some(r)
    }

    fn handshake(&mut self, mechanism: &str) -> i16 {
        let r: SaslHandshakeResponse = self
            .call(ApiKey::SaslHandshake, 1, &handshake_request(mechanism))
            .expect("a handshake answer");
        r.error_code
    }

    fn authenticate(&mut self, bytes: &[u8]) -> Option<SaslAuthenticateResponse> {
        let mut r = SaslAuthenticateRequest::default();
        r.auth_bytes = Bytes::copy_from_slice(bytes);
        self.call(ApiKey::SaslAuthenticate, 2, &r)
    }

    /// A SCRAM exchange as a client: the error code of the last answer, and whether the
    /// server's signature was right.
    fn scram(&mut self, m: Mechanism, user: &str, password: &str) -> (i16, bool) {
        let first_bare = format!("n={user},r=clientnonce42");
        let r = self
            .authenticate(format!("n,,{first_bare}").as_bytes())
            .expect("server-first");
        if r.error_code != 0 {
            return (r.error_code, false);
        }
        let server_first = String::from_utf8(r.auth_bytes.to_vec()).unwrap();
        let attr = |k: &str| {
            server_first
                .split(',')
                .find_map(|a| a.strip_prefix(&format!("{k}=")))
                .unwrap()
                .to_string()
        };
        assert!(attr("r").starts_with("clientnonce42"));
        let salt = B64.decode(attr("s")).unwrap();
        let salted = m.salted_password(password.as_bytes(), &salt, attr("i").parse().unwrap());
        let cred = rill::auth::scram::Credential::from_salted_password(m, salt, 0, &salted);
        let without_proof = format!("c=biws,r={}", attr("r"));
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let (alg, hash) = match m {
            Mechanism::ScramSha256 => (ring::hmac::HMAC_SHA256, &ring::digest::SHA256),
            Mechanism::ScramSha512 => (ring::hmac::HMAC_SHA512, &ring::digest::SHA512),
        };
        let client_key = ring::hmac::sign(&ring::hmac::Key::new(alg, &salted), b"Client Key");
        assert_eq!(
            ring::digest::digest(hash, client_key.as_ref()).as_ref(),
            &cred.stored_key[..]
        );
        let sig = ring::hmac::sign(
            &ring::hmac::Key::new(alg, &cred.stored_key),
            auth.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(sig.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let Some(r) =
            self.authenticate(format!("{without_proof},p={}", B64.encode(proof)).as_bytes())
        else {
            return (-1, false);
        };
        let server_sig = ring::hmac::sign(
            &ring::hmac::Key::new(alg, &cred.server_key),
            auth.as_bytes(),
        );
        let verified = r.auth_bytes == format!("v={}", B64.encode(server_sig)).as_bytes();
        (r.error_code, verified)
    }

    /// Waits until the broker closes the connection.
    fn assert_closed(&mut self) {
        self.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 1024];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return,
            }
            assert!(
                start.elapsed() < DEADLINE,
                "the broker never closed the connection"
            );
        }
    }
}

fn python(extra_config: &str, args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
    let out: Output = Command::new("python3")
        .arg(script)
        .args(args)
        .env("KAFKA_CLIENT_CONFIG", extra_config)
        .stdin(Stdio::null())
        .output()
        .expect("python3 (run .ci/run, or pip install confluent-kafka)");
    assert!(
        out.status.success(),
        "clients.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

//! Test certificates, made in the test with rcgen: a CA the clients trust, a broker
//! certificate it signed (for 127.0.0.1 and localhost), a client certificate for mutual TLS,
//! and the refused kinds: a broker certificate from a CA nobody trusts, an expired one, and a
//! client certificate from the untrusted CA. Written as PEM files into a temp dir.

use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    pub fn cert_str(&self) -> &str {
        self.cert.to_str().expect("utf-8 path")
    }
    pub fn key_str(&self) -> &str {
        self.key.to_str().expect("utf-8 path")
    }
}

pub struct TestCerts {
    _dir: tempfile::TempDir,
    /// The CA clients trust (`--tls-ca`) and the broker accepts clients of
    /// (`--tls-client-ca`).
    pub ca: PathBuf,
    /// The broker's certificate, signed by `ca`, for 127.0.0.1 and localhost.
    pub server: CertFiles,
    /// A client certificate signed by `ca` (mutual TLS).
    pub client: CertFiles,
    /// A broker certificate for 127.0.0.1 signed by a CA that `ca` is not.
    pub untrusted_server: CertFiles,
    /// A broker certificate signed by `ca` whose validity ended in 2021.
    pub expired_server: CertFiles,
    /// A client certificate signed by the untrusted CA.
    pub untrusted_client: CertFiles,
}

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let pem = params.self_signed(&key).expect("CA certificate").pem();
    Ca { params, key, pem }
}

fn leaf(dir: &Path, name: &str, by: &Ca, expired: bool) -> CertFiles {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    if expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    }
    let issuer = Issuer::from_params(&by.params, &by.key);
    let cert = params.signed_by(&key, &issuer).expect("certificate");
    let files = CertFiles {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, cert.pem()).expect("write certificate");
    std::fs::write(&files.key, key.serialize_pem()).expect("write key");
    files
}

impl TestCerts {
    pub fn new() -> TestCerts {
        let dir = tempfile::tempdir().expect("tempdir");
        let trusted = ca("rill test CA");
        let other = ca("untrusted CA");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &trusted.pem).expect("write CA");
        let d = dir.path();
        TestCerts {
            server: leaf(d, "server", &trusted, false),
            client: leaf(d, "client", &trusted, false),
            untrusted_server: leaf(d, "untrusted-server", &other, false),
            expired_server: leaf(d, "expired-server", &trusted, true),
            untrusted_client: leaf(d, "untrusted-client", &other, false),
            ca,
            _dir: dir,
        }
    }

    pub fn ca_str(&self) -> &str {
        self.ca.to_str().expect("utf-8 path")
    }

    /// A client's TLS settings trusting `ca`, with the client certificate when `mutual`.
    pub fn client_tls(&self, mutual: bool) -> rill::tls::ClientTls {
        let cert = mutual.then_some((self.client.cert.as_path(), self.client.key.as_path()));
        rill::tls::ClientTls::load(&self.ca, cert, None).expect("client TLS settings")
    }

    /// The broker flags serving `listeners` (`native`, `kafka` or both) with `server`.
    pub fn broker_flags(&self, listeners: &str, server: &CertFiles, mutual: bool) -> Vec<String> {
        let mut flags = vec![
            "--tls-listeners".to_string(),
            listeners.to_string(),
            "--tls-cert".to_string(),
            server.cert_str().to_string(),
            "--tls-key".to_string(),
            server.key_str().to_string(),
        ];
        if mutual {
            flags.extend(["--tls-client-ca".to_string(), self.ca_str().to_string()]);
        }
        flags
    }
}

impl Default for TestCerts {
    fn default() -> Self {
        TestCerts::new()
    }
}

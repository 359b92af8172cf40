//! SCRAM-SHA-256 and SCRAM-SHA-512, the server side (RFC 5802; Kafka's KIP-84), and the
//! credential a user is stored as: salt, iterations, StoredKey and ServerKey. The password
//! itself and the salted password are never kept.

use base64::Engine;
use ring::{digest, hmac, pbkdf2};

use super::AuthError;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Kafka's bounds on SCRAM iterations (`ScramMechanism.minIterations` is 4096; 16384 max).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism, with Kafka's wire numbers (ScramMechanism: 1 and 2).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Mechanism {
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's `ScramMechanism` type number.
    pub fn kafka_type(self) -> i8 {
        match self {
            Mechanism::ScramSha256 => 1,
            Mechanism::ScramSha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::ScramSha256 => hmac::HMAC_SHA256,
            Mechanism::ScramSha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::ScramSha256 => &digest::SHA256,
            Mechanism::ScramSha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::ScramSha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::ScramSha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest().output_len()
    }

    /// Hi(password, salt, i) of RFC 5802: PBKDF2 with this hash.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        let i = std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), i, salt, password, &mut out);
        out
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }
}

/// What a user is stored as for one mechanism (Kafka's ScramCredential).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// From a salted password (what Kafka's AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: Mechanism,
        salt: Vec<u8>,
        iterations: u32,
        salted_password: &[u8],
    ) -> Credential {
        let client_key = mechanism.mac(salted_password, b"Client Key");
        Credential {
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.mac(salted_password, b"Server Key"),
            salt,
            iterations,
        }
    }

    /// From a password, salted with `salt` and `iterations`.
    pub fn from_password(
        mechanism: Mechanism,
        password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Credential {
        let salted = mechanism.salted_password(password, &salt, iterations);
        Credential::from_salted_password(mechanism, salt, iterations, &salted)
    }

    /// Whether `password` is this credential's (PLAIN): recomputes StoredKey, compared in
    /// constant time.
    pub fn verifies(&self, mechanism: Mechanism, password: &[u8]) -> bool {
        let salted = mechanism.salted_password(password, &self.salt, self.iterations);
        let client_key = mechanism.mac(&salted, b"Client Key");
        constant_time_eq(&mechanism.hash(&client_key), &self.stored_key)
    }
}

/// A fresh random salt for a new credential (32 bytes).
pub fn random_salt() -> Vec<u8> {
    use ring::rand::SecureRandom;
    let mut salt = vec![0u8; 32];
    // The system RNG does not fail on Linux.
    let _ = ring::rand::SystemRandom::new().fill(&mut salt);
    salt
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

enum State {
    /// Waiting for client-first.
    Start,
    /// Sent server-first; waiting for client-final.
    Challenged {
        user: String,
        credential: Credential,
        nonce: String,
        /// client-first-message-bare + "," + server-first-message, for the AuthMessage.
        messages: String,
        /// The gs2 header the client-final's channel binding must repeat.
        gs2_header: String,
    },
    Done,
}

/// The server side of one SCRAM exchange: two client messages in, two server messages out.
pub struct ScramServer {
    mechanism: Mechanism,
    server_nonce: String,
    state: State,
}

const MALFORMED: fn(&'static str) -> AuthError = |why| AuthError::Malformed {
    mechanism: "SCRAM",
    why,
};

impl ScramServer {
    /// `server_nonce`: printable ASCII without ',' (the shell makes it random).
    pub fn new(mechanism: Mechanism, server_nonce: String) -> ScramServer {
        debug_assert!(server_nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b','));
        ScramServer {
            mechanism,
            server_nonce,
            state: State::Start,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Whether client-first was answered (client-final is due next).
    pub fn challenged(&self) -> bool {
        !matches!(self.state, State::Start)
    }

    /// client-first-message in, server-first-message out. An unknown user fails here (after
    /// the caller's lookup).
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, State::Start) {
            return Err(AuthError::OutOfOrder);
        }
        self.state = State::Done;
        let text = std::str::from_utf8(message).map_err(|_| MALFORMED("not UTF-8"))?;
        // gs2-header: "n,," or "n,a=authzid," (no channel binding: "y" or "p" refused).
        let mut parts = text.splitn(3, ',');
        let cbind = parts.next().ok_or(MALFORMED("no gs2 header"))?;
        let authzid = parts.next().ok_or(MALFORMED("no gs2 header"))?;
        let bare = parts
            .next()
            .ok_or(MALFORMED("no client-first-message-bare"))?;
        if cbind != "n" && cbind != "y" {
            return Err(MALFORMED("channel binding is not supported"));
        }
        if !authzid.is_empty() && !authzid.starts_with("a=") {
            return Err(MALFORMED("bad authzid"));
        }
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", v)) => user = Some(unescape_name(v)?),
                Some(("r", v)) => client_nonce = Some(v),
                // Extensions (Kafka's tokenauth) are ignored; "m" (reserved) is refused.
                Some(("m", _)) => return Err(MALFORMED("reserved attribute m")),
                _ => {}
            }
        }
        let user = user.ok_or(MALFORMED("no user name"))?;
        let client_nonce = client_nonce.ok_or(MALFORMED("no client nonce"))?;
        if client_nonce.is_empty() || client_nonce.contains(',') {
            return Err(MALFORMED("bad client nonce"));
        }
        let credential = lookup(&user).ok_or_else(|| AuthError::UnknownUser(user.clone()))?;
        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        self.state = State::Challenged {
            user,
            credential,
            nonce,
            messages: format!("{bare},{server_first}"),
            gs2_header: format!("{cbind},{authzid},"),
        };
        Ok(server_first.into_bytes())
    }

    /// client-final-message in; server-final-message and the authenticated user out.
    pub fn client_final(&mut self, message: &[u8]) -> Result<(Vec<u8>, String), AuthError> {
        let State::Challenged {
            user,
            credential,
            nonce,
            messages,
            gs2_header,
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(AuthError::OutOfOrder);
        };
        let text = std::str::from_utf8(message).map_err(|_| MALFORMED("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(MALFORMED("no client proof"))?;
        let mut binding = None;
        let mut final_nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("c", v)) => binding = Some(v),
                Some(("r", v)) => final_nonce = Some(v),
                _ => {}
            }
        }
        if binding != Some(B64.encode(gs2_header.as_bytes()).as_str()) {
            return Err(MALFORMED("channel binding does not match the gs2 header"));
        }
        // RFC 5802 wants the combined nonce echoed exactly; librdkafka 2.0 (Debian's kcat)
        // sends the client nonce before it once more, which Kafka 3.x accepts by checking
        // only that the nonce ends with the combined one. The proof covers the nonce as sent
        // and the fresh server nonce must end it, so accepting that costs no replay safety.
        if !final_nonce.is_some_and(|n| n.ends_with(nonce.as_str())) {
            return Err(MALFORMED("nonce does not match"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| MALFORMED("client proof is not base64"))?;
        let m = self.mechanism;
        if proof.len() != m.len() {
            return Err(MALFORMED("client proof has the wrong length"));
        }
        let auth_message = format!("{messages},{without_proof}");
        let client_signature = m.mac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !constant_time_eq(&m.hash(&client_key), &credential.stored_key) {
            return Err(AuthError::WrongPassword(user));
        }
        let server_signature = m.mac(&credential.server_key, auth_message.as_bytes());
        Ok((
            format!("v={}", B64.encode(server_signature)).into_bytes(),
            user,
        ))
    }
}

/// The client side of one SCRAM exchange (the native client, and a broker reaching another
/// broker): client-first out, server-first in, client-final out, server-final checked, so
/// a client also knows it talks to a broker that holds its credential.
pub struct ScramClient {
    mechanism: Mechanism,
    password: Vec<u8>,
    /// client-first-message-bare.
    first_bare: String,
    client_nonce: String,
    /// The ServerSignature client-final expects in server-final, once computed.
    expected: Option<Vec<u8>>,
}

impl ScramClient {
    /// `client_nonce`: printable ASCII without ',' (the caller makes it random).
    pub fn new(mechanism: Mechanism, user: &str, password: &[u8], client_nonce: String) -> Self {
        let escaped = user.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            mechanism,
            password: password.to_vec(),
            first_bare: format!("n={escaped},r={client_nonce}"),
            client_nonce,
            expected: None,
        }
    }

    /// client-first-message (no channel binding, no authorization id).
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.first_bare).into_bytes()
    }

    /// server-first-message in, client-final-message out.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, AuthError> {
        if self.expected.is_some() {
            return Err(AuthError::OutOfOrder);
        }
        let text = std::str::from_utf8(server_first).map_err(|_| MALFORMED("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                Some(("m", _)) => return Err(MALFORMED("reserved attribute m")),
                _ => {}
            }
        }
        let nonce = nonce.ok_or(MALFORMED("no nonce"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(MALFORMED("the server nonce does not extend the client's"));
        }
        let salt = B64
            .decode(salt.ok_or(MALFORMED("no salt"))?)
            .map_err(|_| MALFORMED("salt is not base64"))?;
        // Kafka's bounds: a server asking for more is refused (a PBKDF2 cost it chose).
        let iterations = iterations
            .filter(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(i))
            .ok_or(MALFORMED("bad iteration count"))?;
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &salt, iterations);
        let client_key = m.mac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(b"n,,"));
        let auth_message = format!("{},{text},{without_proof}", self.first_bare);
        let signature = m.mac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.mac(&salted, b"Server Key");
        self.expected = Some(m.mac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks server-final-message: the server proved it holds the credential.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), AuthError> {
        let expected = self.expected.as_ref().ok_or(AuthError::OutOfOrder)?;
        let text = std::str::from_utf8(server_final).map_err(|_| MALFORMED("not UTF-8"))?;
        if let Some(e) = text.strip_prefix("e=") {
            log::debug!("SCRAM server error: {e}");
            return Err(MALFORMED("the server refused the exchange"));
        }
        let v = text
            .strip_prefix("v=")
            .ok_or(MALFORMED("no server signature"))?;
        let got = B64
            .decode(v)
            .map_err(|_| MALFORMED("server signature is not base64"))?;
        match constant_time_eq(&got, expected) {
            true => Ok(()),
            false => Err(MALFORMED("the server signature does not match")),
        }
    }
}

/// saslname: "=2C" is ',' and "=3D" is '='; any other '=' is malformed.
fn unescape_name(v: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(MALFORMED("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(MALFORMED("empty user name"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example exchange.
    #[test]
    fn rfc7677_exchange() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = Credential::from_password(Mechanism::ScramSha256, b"pencil", salt, 4096);
        let mut s = ScramServer::new(
            Mechanism::ScramSha256,
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(),
        );
        let first = s
            .client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", |u| {
                (u == "user").then(|| cred.clone())
            })
            .unwrap();
        assert_eq!(
            String::from_utf8(first).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (last, user) = s
            .client_final(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(user, "user");
    }

    /// A client computing its proof from `password` (what librdkafka does).
    fn client_final(m: Mechanism, password: &[u8], first_bare: &str, server_first: &str) -> String {
        client_final_with(m, password, first_bare, server_first, "")
    }

    /// `nonce_prefix` goes before the combined nonce in client-final (librdkafka 2.0's habit).
    fn client_final_with(
        m: Mechanism,
        password: &[u8],
        first_bare: &str,
        server_first: &str,
        nonce_prefix: &str,
    ) -> String {
        let attrs: Vec<(&str, &str)> = server_first
            .split(',')
            .filter_map(|a| a.split_once('='))
            .collect();
        let get = |k| attrs.iter().find(|(a, _)| *a == k).unwrap().1;
        let salt = B64.decode(get("s")).unwrap();
        let salted = m.salted_password(password, &salt, get("i").parse().unwrap());
        let client_key = m.mac(&salted, b"Client Key");
        let stored = m.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce_prefix}{}", get("r"));
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = m.mac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn sha512_round_trip_and_wrong_password() {
        let m = Mechanism::ScramSha512;
        let cred = Credential::from_password(m, b"s3cret", b"salty".to_vec(), MIN_ITERATIONS);
        for (password, ok) in [(&b"s3cret"[..], true), (&b"guess"[..], false)] {
            let mut s = ScramServer::new(m, "SERVERNONCE".into());
            let first = s
                .client_first(b"n,,n=al=3Dice,r=abc", |u| {
                    assert_eq!(u, "al=ice");
                    Some(cred.clone())
                })
                .unwrap();
            let fin = client_final(
                m,
                password,
                "n=al=3Dice,r=abc",
                std::str::from_utf8(&first).unwrap(),
            );
            let result = s.client_final(fin.as_bytes());
            match ok {
                true => assert_eq!(result.unwrap().1, "al=ice"),
                false => assert_eq!(
                    result.unwrap_err(),
                    AuthError::WrongPassword("al=ice".into())
                ),
            }
        }
        // librdkafka 2.0's client-final repeats the client nonce before the combined one.
        let mut s = ScramServer::new(m, "SERVERNONCE".into());
        let first = s
            .client_first(b"n,,n=al=3Dice,r=abc", |_| Some(cred.clone()))
            .unwrap();
        let first = std::str::from_utf8(&first).unwrap();
        let fin = client_final_with(m, b"s3cret", "n=al=3Dice,r=abc", first, "abc");
        assert_eq!(s.client_final(fin.as_bytes()).unwrap().1, "al=ice");
        assert!(cred.verifies(m, b"s3cret"));
        assert!(!cred.verifies(m, b"s3cre"));
    }

    /// Hostile bytes (random, and valid messages with bytes flipped) never panic and never
    /// authenticate.
    #[test]
    fn random_and_mutated_messages_never_authenticate() {
        let m = Mechanism::ScramSha256;
        let cred = Credential::from_password(m, b"pw", b"salt".to_vec(), MIN_ITERATIONS);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let first = b"n,,n=user,r=abc".to_vec();
        for round in 0..2000 {
            let mut msg: Vec<u8> = match round % 2 {
                0 => (0..next() % 64).map(|_| next() as u8).collect(),
                _ => first.clone(),
            };
            if round % 2 == 1 {
                let i = (next() as usize) % msg.len();
                msg[i] = next() as u8;
            }
            let mut s = ScramServer::new(m, "N".into());
            if let Ok(server_first) = s.client_first(&msg, |_| Some(cred.clone())) {
                let server_first = String::from_utf8(server_first).unwrap();
                let bare = std::str::from_utf8(&msg)
                    .unwrap()
                    .splitn(3, ',')
                    .nth(2)
                    .unwrap()
                    .to_string();
                let mut fin = client_final(m, b"pw", &bare, &server_first).into_bytes();
                let i = (next() as usize) % fin.len();
                let flipped = fin[i] ^ (1 + (next() % 255) as u8);
                fin[i] = flipped;
                assert!(
                    s.client_final(&fin).is_err(),
                    "{:?}",
                    String::from_utf8_lossy(&fin)
                );
            }
            let _ = super::super::plain::authenticate(&msg, |_| Some((m, cred.clone())));
        }
    }

    #[test]
    fn malformed_and_out_of_order_messages_are_refused() {
        let m = Mechanism::ScramSha256;
        let cred = Credential::from_password(m, b"p", b"s".to_vec(), MIN_ITERATIONS);
        let bad_firsts: [&[u8]; 8] = [
            b"",
            b"\xff\xfe",
            b"n,,",
            b"n,,n=user",
            b"n,,r=abc",
            b"p=tls-unique,,n=user,r=abc",
            b"n,,n=us=er,r=abc",
            b"n,,m=x,n=user,r=abc",
        ];
        for msg in bad_firsts {
            let mut s = ScramServer::new(m, "N".into());
            assert!(
                matches!(
                    s.client_first(msg, |_| Some(cred.clone())),
                    Err(AuthError::Malformed { .. })
                ),
                "{msg:?}"
            );
            // Nothing follows a failure.
            assert_eq!(
                s.client_final(b"c=biws,r=abcN,p=AAAA").unwrap_err(),
                AuthError::OutOfOrder
            );
        }
        let mut s = ScramServer::new(m, "N".into());
        assert_eq!(
            s.client_first(b"n,,n=nobody,r=abc", |_| None).unwrap_err(),
            AuthError::UnknownUser("nobody".into())
        );
        for fin in [
            &b"c=biws,r=abcN"[..],
            b"c=eSws,r=abcN,p=AAAA",
            b"c=biws,r=abcX,p=AAAA",
            b"c=biws,r=abcN,p=!!!",
            b"c=biws,r=abcN,p=AAAA",
        ] {
            let mut s = ScramServer::new(m, "N".into());
            s.client_first(b"n,,n=user,r=abc", |_| Some(cred.clone()))
                .unwrap();
            assert!(
                matches!(s.client_final(fin), Err(AuthError::Malformed { .. })),
                "{fin:?}"
            );
        }
        let mut s = ScramServer::new(m, "N".into());
        assert_eq!(
            s.client_final(b"c=biws").unwrap_err(),
            AuthError::OutOfOrder
        );
    }

    /// The client and the server agree with each other, for both mechanisms, a user name
    /// that needs escaping included; a wrong password fails on the server, a server without
    /// the credential fails the client's check.
    #[test]
    fn client_and_server_complete_an_exchange() {
        for m in Mechanism::ALL {
            let user = "a,b=c";
            let cred = Credential::from_password(m, b"secret", b"salty".to_vec(), 4096);
            let mut client = ScramClient::new(m, user, b"secret", "cnonce".into());
            let mut server = ScramServer::new(m, "snonce".into());
            let first = server
                .client_first(&client.client_first(), |u| {
                    (u == user).then(|| cred.clone())
                })
                .unwrap();
            let last = client.client_final(&first).unwrap();
            let (server_final, who) = server.client_final(&last).unwrap();
            assert_eq!(who, user);
            client.verify_server_final(&server_final).unwrap();

            let mut wrong = ScramClient::new(m, user, b"nope", "cnonce".into());
            let mut server = ScramServer::new(m, "snonce".into());
            let first = server
                .client_first(&wrong.client_first(), |_| Some(cred.clone()))
                .unwrap();
            let last = wrong.client_final(&first).unwrap();
            assert_eq!(
                server.client_final(&last).unwrap_err(),
                AuthError::WrongPassword(user.into())
            );
            // A forged server final is caught.
            assert!(client.verify_server_final(b"v=AAAA").is_err());
        }
    }
}

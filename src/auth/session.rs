//! One connection's SASL exchange, the same on both listeners: the mechanism the client
//! picks (SaslHandshake), then its messages checked against the stored credentials (PLAIN's
//! one, SCRAM's two) until it is authenticated as a user. Each listener carries the bytes in
//! its own messages; no re-authentication.

use super::scram::{Credential, Mechanism, ScramClient, ScramServer};
use super::{plain, AuthError};

pub const PLAIN: &str = "PLAIN";

/// The stored credentials an exchange is checked against (the shard's applied users).
pub trait Credentials {
    /// The user's credential for `mechanism`.
    fn of(&self, user: &str, mechanism: Mechanism) -> Option<Credential>;
    /// Any credential of the user (PLAIN checks the password against it).
    fn any(&self, user: &str) -> Option<(Mechanism, Credential)>;
}

enum Stage {
    /// Nothing yet: a handshake is due.
    Start,
    Plain,
    Scram(ScramServer),
    /// Authenticated as this user.
    Done(String),
}

/// Why a handshake is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// The mechanism is not enabled on this listener (UNSUPPORTED_SASL_MECHANISM).
    Unsupported,
    /// A mechanism was picked already (ILLEGAL_SASL_STATE).
    Again,
}

/// See the module docs.
pub struct SaslSession {
    mechanisms: Vec<String>,
    stage: Stage,
}

impl SaslSession {
    /// A session on a listener enabling `mechanisms` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    pub fn new(mechanisms: Vec<String>) -> SaslSession {
        SaslSession {
            mechanisms,
            stage: Stage::Start,
        }
    }

    /// The mechanisms the listener enables (a handshake's answer lists them).
    pub fn mechanisms(&self) -> &[String] {
        &self.mechanisms
    }

    /// The authenticated user, once the exchange succeeded.
    pub fn user(&self) -> Option<&str> {
        match &self.stage {
            Stage::Done(u) => Some(u),
            _ => None,
        }
    }

    /// The client picks `mechanism`.
    pub fn handshake(&mut self, mechanism: &str) -> Result<(), HandshakeError> {
        if !self.mechanisms.iter().any(|m| m == mechanism) {
            return Err(HandshakeError::Unsupported);
        }
        let stage = match Mechanism::from_name(mechanism) {
            Some(m) => Stage::Scram(ScramServer::new(m, random_nonce())),
            None if mechanism == PLAIN => Stage::Plain,
            None => return Err(HandshakeError::Unsupported),
        };
        if !matches!(self.stage, Stage::Start) {
            return Err(HandshakeError::Again);
        }
        self.stage = stage;
        Ok(())
    }

    /// One client message in; the server's answer out (empty for PLAIN). After the last
    /// message [`user`](Self::user) names who authenticated. An error ends the exchange.
    pub fn authenticate(
        &mut self,
        message: &[u8],
        credentials: &impl Credentials,
    ) -> Result<Vec<u8>, AuthError> {
        let (reply, user) = match std::mem::replace(&mut self.stage, Stage::Start) {
            Stage::Plain => {
                let user = plain::authenticate(message, |u| credentials.any(u))?;
                (Vec::new(), Some(user))
            }
            Stage::Scram(mut server) if !server.challenged() => {
                let mechanism = server.mechanism();
                let first = server.client_first(message, |u| credentials.of(u, mechanism))?;
                self.stage = Stage::Scram(server);
                (first, None)
            }
            Stage::Scram(mut server) => {
                let (last, user) = server.client_final(message)?;
                (last, Some(user))
            }
            stage @ (Stage::Start | Stage::Done(_)) => {
                self.stage = stage;
                return Err(AuthError::OutOfOrder);
            }
        };
        if let Some(user) = user {
            self.stage = Stage::Done(user);
        }
        Ok(reply)
    }
}

/// The mechanism a broker authenticates to its peers with: the strongest its native listener
/// enables (every broker of a cluster enables the same).
pub fn inter_broker_mechanism(enabled: &[String]) -> Option<&'static str> {
    ["SCRAM-SHA-512", "SCRAM-SHA-256", PLAIN]
        .into_iter()
        .find(|m| enabled.iter().any(|e| e == m))
}

/// A fresh SCRAM nonce: 24 random bytes as hex (printable, no ',').
pub fn random_nonce() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 24];
    // The system RNG does not fail on Linux; a zero nonce would still be unique per exchange
    // (the other side's nonce is random).
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The client side of an exchange, for a mechanism the client chose: the messages it sends,
/// given the server's answers.
pub enum SaslClient {
    Plain {
        message: Vec<u8>,
    },
    Scram {
        client: ScramClient,
        sent_final: bool,
    },
}

impl SaslClient {
    /// A client of `mechanism` for `user` and `password`; `None` for a mechanism this client
    /// does not speak.
    pub fn new(mechanism: &str, user: &str, password: &str) -> Option<SaslClient> {
        if mechanism == PLAIN {
            let mut message = vec![0u8];
            message.extend_from_slice(user.as_bytes());
            message.push(0);
            message.extend_from_slice(password.as_bytes());
            return Some(SaslClient::Plain { message });
        }
        let m = Mechanism::from_name(mechanism)?;
        Some(SaslClient::Scram {
            client: ScramClient::new(m, user, password.as_bytes(), random_nonce()),
            sent_final: false,
        })
    }

    /// The first message to send.
    pub fn first(&self) -> Vec<u8> {
        match self {
            SaslClient::Plain { message } => message.clone(),
            SaslClient::Scram { client, .. } => client.client_first(),
        }
    }

    /// The server answered `reply`: the next message to send, or `None` when the exchange
    /// is complete (and the server proved itself, with SCRAM).
    pub fn next(&mut self, reply: &[u8]) -> Result<Option<Vec<u8>>, AuthError> {
        match self {
            SaslClient::Plain { .. } => Ok(None),
            SaslClient::Scram { client, sent_final } if !*sent_final => {
                *sent_final = true;
                client.client_final(reply).map(Some)
            }
            SaslClient::Scram { client, .. } => client.verify_server_final(reply).map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Users(Vec<(String, Mechanism, Credential)>);

    impl Credentials for Users {
        fn of(&self, user: &str, mechanism: Mechanism) -> Option<Credential> {
            self.0
                .iter()
                .find(|(u, m, _)| u == user && *m == mechanism)
                .map(|(_, _, c)| c.clone())
        }
        fn any(&self, user: &str) -> Option<(Mechanism, Credential)> {
            self.0
                .iter()
                .find(|(u, _, _)| u == user)
                .map(|(_, m, c)| (*m, c.clone()))
        }
    }

    fn users() -> Users {
        let m = Mechanism::ScramSha512;
        let c = Credential::from_password(m, b"pw", b"salt".to_vec(), 4096);
        Users(vec![("alice".into(), m, c)])
    }

    /// Drives a session with a client to the end: the user, or the first error.
    fn run(mechanism: &str, user: &str, password: &str) -> Result<String, AuthError> {
        let mut s = SaslSession::new(vec![PLAIN.into(), "SCRAM-SHA-512".into()]);
        s.handshake(mechanism).expect("handshake");
        let mut c = SaslClient::new(mechanism, user, password).expect("client");
        let mut msg = c.first();
        loop {
            let reply = s.authenticate(&msg, &users())?;
            match c.next(&reply)? {
                Some(next) => msg = next,
                None => return Ok(s.user().expect("authenticated").to_string()),
            }
        }
    }

    #[test]
    fn plain_and_scram_authenticate_a_user_and_refuse_a_wrong_password() {
        for mech in [PLAIN, "SCRAM-SHA-512"] {
            assert_eq!(run(mech, "alice", "pw").unwrap(), "alice", "{mech}");
            assert_eq!(
                run(mech, "alice", "nope").unwrap_err(),
                AuthError::WrongPassword("alice".into()),
                "{mech}"
            );
            assert_eq!(
                run(mech, "bob", "pw").unwrap_err(),
                AuthError::UnknownUser("bob".into()),
                "{mech}"
            );
        }
    }

    #[test]
    fn handshakes_are_checked_and_messages_must_follow_one() {
        let mut s = SaslSession::new(vec!["SCRAM-SHA-512".into()]);
        assert_eq!(s.authenticate(b"x", &users()), Err(AuthError::OutOfOrder));
        assert_eq!(s.handshake(PLAIN), Err(HandshakeError::Unsupported));
        assert_eq!(s.handshake("SCRAM-SHA-1"), Err(HandshakeError::Unsupported));
        assert_eq!(s.handshake("SCRAM-SHA-512"), Ok(()));
        assert_eq!(s.handshake("SCRAM-SHA-512"), Err(HandshakeError::Again));
        assert!(s.user().is_none());
    }
}

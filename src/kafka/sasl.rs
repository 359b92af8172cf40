//! SASL on the Kafka listener (`--kafka-sasl-mechanisms`): SaslHandshake v1 then
//! SaslAuthenticate, as Kafka's SaslServerAuthenticator does. Until a connection is
//! authenticated it may send only ApiVersions, SaslHandshake and SaslAuthenticate; anything
//! else, or a failed authentication, closes it (after the SASL_AUTHENTICATION_FAILED answer).
//! A connection not authenticated within `--sasl-authentication-timeout-ms` is closed. The
//! exchanges themselves are `crate::auth`'s sans-IO machines over the credentials this shard
//! applied from the controller.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::auth::scram::{Mechanism, ScramServer};
use crate::auth::{plain, AuthError};
use crate::broker::{users, Shard};
use crate::protocol::ErrorCode;

pub const PLAIN: &str = "PLAIN";

/// Where a connection's authentication stands.
enum Stage {
    /// Nothing yet: a SaslHandshake is due.
    Start,
    /// The client picked PLAIN.
    Plain,
    /// The client picked a SCRAM mechanism; the exchange is under way.
    Scram(ScramServer),
    /// Authenticated as this user.
    Done(String),
}

/// What the connection does with a request seen before authentication ended.
pub enum Gate {
    /// Not a SASL matter (authenticated already, or ApiVersions): handle it as usual.
    Pass,
    /// Answer this; `close` after it is written (a failed authentication).
    Answer {
        response: Box<ResponseKind>,
        close: bool,
    },
    /// Close without an answer (a request before authentication, as Kafka does).
    Refuse(String),
}

/// One connection's SASL state.
pub struct Sasl {
    mechanisms: Vec<String>,
    stage: Stage,
}

impl Sasl {
    pub fn new(mechanisms: Vec<String>) -> Sasl {
        Sasl {
            mechanisms,
            stage: Stage::Start,
        }
    }

    pub fn user(&self) -> Option<&str> {
        match &self.stage {
            Stage::Done(u) => Some(u),
            _ => None,
        }
    }

    /// Looks at one request of the connection.
    pub fn gate(
        &mut self,
        shard: &Shard,
        api: ApiKey,
        version: i16,
        request: &RequestKind,
    ) -> Gate {
        let authenticated = matches!(self.stage, Stage::Done(_));
        match (api, request) {
            (ApiKey::ApiVersions, _) => Gate::Pass,
            (ApiKey::SaslHandshake, _) if version == 0 => {
                Gate::Refuse("SaslHandshake v0 (unframed SASL tokens) is not served".into())
            }
            (ApiKey::SaslHandshake, RequestKind::SaslHandshake(r)) if !authenticated => {
                self.handshake(r.mechanism.as_str())
            }
            (ApiKey::SaslAuthenticate, RequestKind::SaslAuthenticate(r)) if !authenticated => {
                self.authenticate(shard, r)
            }
            (ApiKey::SaslHandshake | ApiKey::SaslAuthenticate, _) => Gate::Refuse(format!(
                "{api:?} after authentication (re-authentication is not supported)"
            )),
            _ if authenticated => Gate::Pass,
            _ => Gate::Refuse(format!("{api:?} before SASL authentication")),
        }
    }

    fn handshake(&mut self, mechanism: &str) -> Gate {
        let mut r = SaslHandshakeResponse::default();
        r.mechanisms = self
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        let enabled = self.mechanisms.iter().any(|m| m == mechanism);
        let stage = match (enabled, mechanism, Mechanism::from_name(mechanism)) {
            (true, PLAIN, _) => Some(Stage::Plain),
            (true, _, Some(m)) => Some(Stage::Scram(ScramServer::new(m, server_nonce()))),
            _ => None,
        };
        match (stage, &self.stage) {
            (Some(stage), Stage::Start) => {
                self.stage = stage;
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslHandshake(r)),
                    close: false,
                }
            }
            (Some(_), _) => {
                r.error_code = ErrorCode::IllegalSaslState.code();
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslHandshake(r)),
                    close: true,
                }
            }
            (None, _) => {
                r.error_code = ErrorCode::UnsupportedSaslMechanism.code();
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslHandshake(r)),
                    close: true,
                }
            }
        }
    }

    fn authenticate(&mut self, shard: &Shard, req: &SaslAuthenticateRequest) -> Gate {
        let bytes = &req.auth_bytes[..];
        let outcome: Result<(Option<Vec<u8>>, Option<String>), AuthError> = match &mut self.stage {
            Stage::Plain => plain::authenticate(bytes, |u| users::any_credential(shard, u))
                .map(|user| (None, Some(user))),
            Stage::Scram(server) if !server.challenged() => {
                let mechanism = server.mechanism();
                server
                    .client_first(bytes, |u| users::credential(shard, u, mechanism))
                    .map(|first| (Some(first), None))
            }
            Stage::Scram(server) => server
                .client_final(bytes)
                .map(|(last, user)| (Some(last), Some(user))),
            Stage::Start | Stage::Done(_) => Err(AuthError::OutOfOrder),
        };
        let mut r = SaslAuthenticateResponse::default();
        match outcome {
            Ok((reply, user)) => {
                r.auth_bytes = Bytes::from(reply.unwrap_or_default());
                if let Some(user) = user {
                    self.stage = Stage::Done(user);
                }
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslAuthenticate(r)),
                    close: false,
                }
            }
            Err(e) => {
                log::info!("SASL authentication failed: {e}");
                r.error_code = match e {
                    AuthError::OutOfOrder => ErrorCode::IllegalSaslState,
                    _ => ErrorCode::SaslAuthenticationFailed,
                }
                .code();
                // The client learns that it failed, not why (a user's existence stays private).
                r.error_message = Some(StrBytes::from_static_str(
                    "Authentication failed: invalid credentials",
                ));
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslAuthenticate(r)),
                    close: true,
                }
            }
        }
    }
}

/// A fresh SCRAM server nonce: 24 random bytes as hex (printable, no ',').
fn server_nonce() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 24];
    // The system RNG does not fail on Linux; a zero nonce would still be unique per client
    // nonce, which the client makes random.
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// With SASL off: a SaslHandshake is answered UNSUPPORTED_SASL_MECHANISM (no mechanisms)
/// and a SaslAuthenticate ILLEGAL_SASL_STATE, then the connection closes; the rest passes.
pub fn gate_off(api: ApiKey) -> Gate {
    match api {
        ApiKey::SaslHandshake => {
            let mut r = SaslHandshakeResponse::default();
            r.error_code = ErrorCode::UnsupportedSaslMechanism.code();
            Gate::Answer {
                response: Box::new(ResponseKind::SaslHandshake(r)),
                close: true,
            }
        }
        ApiKey::SaslAuthenticate => {
            let mut r = SaslAuthenticateResponse::default();
            r.error_code = ErrorCode::IllegalSaslState.code();
            Gate::Answer {
                response: Box::new(ResponseKind::SaslAuthenticate(r)),
                close: true,
            }
        }
        _ => Gate::Pass,
    }
}

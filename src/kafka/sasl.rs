//! SASL on the Kafka listener (`--kafka-sasl-mechanisms`): SaslHandshake v1 then
//! SaslAuthenticate, as Kafka's SaslServerAuthenticator does. Until a connection is
//! authenticated it may send only ApiVersions, SaslHandshake and SaslAuthenticate; anything
//! else, or a failed authentication, closes it (after the SASL_AUTHENTICATION_FAILED answer).
//! A connection not authenticated within `--sasl-authentication-timeout-ms` is closed. The
//! exchange itself is [`crate::auth::session`]'s, over the credentials this shard applied
//! from the controller.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::auth::session::{HandshakeError, SaslSession};
use crate::auth::AuthError;
use crate::broker::users::AppliedUsers;
use crate::broker::Shard;
use crate::protocol::ErrorCode;

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
    session: SaslSession,
}

impl Sasl {
    pub fn new(mechanisms: Vec<String>) -> Sasl {
        Sasl {
            session: SaslSession::new(mechanisms),
        }
    }

    pub fn user(&self) -> Option<&str> {
        self.session.user()
    }

    /// Looks at one request of the connection.
    pub fn gate(
        &mut self,
        shard: &Shard,
        api: ApiKey,
        version: i16,
        request: &RequestKind,
    ) -> Gate {
        let authenticated = self.session.user().is_some();
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
            .session
            .mechanisms()
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        let refused = match self.session.handshake(mechanism) {
            Ok(()) => None,
            Err(HandshakeError::Again) => Some(ErrorCode::IllegalSaslState),
            Err(HandshakeError::Unsupported) => Some(ErrorCode::UnsupportedSaslMechanism),
        };
        if let Some(code) = refused {
            r.error_code = code.code();
        }
        Gate::Answer {
            response: Box::new(ResponseKind::SaslHandshake(r)),
            close: refused.is_some(),
        }
    }

    fn authenticate(&mut self, shard: &Shard, req: &SaslAuthenticateRequest) -> Gate {
        let mut r = SaslAuthenticateResponse::default();
        match self
            .session
            .authenticate(&req.auth_bytes, &AppliedUsers(shard))
        {
            Ok(reply) => {
                r.auth_bytes = Bytes::from(reply);
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslAuthenticate(r)),
                    close: false,
                }
            }
            Err(e) => {
                log::info!("SASL authentication failed: {e}");
                r.error_code = e.code().code();
                // The client learns that it failed, not why (a user's existence stays private).
                r.error_message = Some(StrBytes::from_static_str(AuthError::CLIENT_MESSAGE));
                Gate::Answer {
                    response: Box::new(ResponseKind::SaslAuthenticate(r)),
                    close: true,
                }
            }
        }
    }
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

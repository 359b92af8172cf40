//! SASL on the native listener (`--native-sasl-mechanisms`): SaslHandshake (key 42) then
//! SaslAuthenticate (key 43) messages carry [`crate::auth::session`]'s exchange, checked
//! against the credentials this shard applied from the controller, as on the Kafka listener.

use super::Reply;
use crate::auth::session::{HandshakeError, SaslSession};
use crate::auth::AuthError;
use crate::broker::users::AppliedUsers;
use crate::broker::Shard;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use crate::protocol::{ApiKey, ErrorCode};

/// A request the connection answers itself (a SASL step, or a refusal before one).
pub struct Gated {
    pub reply: Reply,
    /// Close the connection once the reply is written.
    pub close: bool,
    /// Why it closes (for the log).
    pub why: String,
}

fn answer(reply: Reply) -> Option<Gated> {
    Some(Gated {
        reply,
        close: false,
        why: String::new(),
    })
}

fn closing(reply: Reply, why: impl Into<String>) -> Option<Gated> {
    Some(Gated {
        reply,
        close: true,
        why: why.into(),
    })
}

/// Looks at one request of a connection whose SASL state is `session` (`None`: the listener
/// does not authenticate). `None`: handle it as usual.
pub fn gate(
    shard: &Shard,
    session: Option<&mut SaslSession>,
    api: Option<ApiKey>,
    frame: &RequestFrame,
) -> Option<Gated> {
    let sasl_api = matches!(api, Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate));
    let Some(session) = session else {
        return match api {
            Some(ApiKey::SaslHandshake) => closing(
                handshake_reply(ErrorCode::UnsupportedSaslMechanism, Vec::new()),
                "SaslHandshake on a listener without SASL",
            ),
            Some(ApiKey::SaslAuthenticate) => closing(
                Reply::Error(
                    ErrorCode::IllegalSaslState,
                    "this listener does not authenticate".into(),
                ),
                "SaslAuthenticate on a listener without SASL",
            ),
            _ => None,
        };
    };
    if session.user().is_some() {
        return sasl_api.then(|| Gated {
            reply: Reply::Error(
                ErrorCode::IllegalSaslState,
                "already authenticated (re-authentication is not supported)".into(),
            ),
            close: true,
            why: "a second SASL exchange".into(),
        });
    }
    match api {
        Some(ApiKey::ApiVersions) => None,
        Some(ApiKey::SaslHandshake) => {
            let req: SaslHandshakeRequest = match frame.decode_meta() {
                Ok(r) => r,
                Err(e) => return closing(e.into(), "a malformed SaslHandshake"),
            };
            let mechanisms = session.mechanisms().to_vec();
            match session.handshake(&req.mechanism) {
                Ok(()) => answer(handshake_reply(ErrorCode::None, mechanisms)),
                Err(e) => {
                    let code = match e {
                        HandshakeError::Unsupported => ErrorCode::UnsupportedSaslMechanism,
                        HandshakeError::Again => ErrorCode::IllegalSaslState,
                    };
                    closing(
                        handshake_reply(code, mechanisms),
                        format!(
                            "SaslHandshake for {:?} refused: {}",
                            req.mechanism,
                            code.name()
                        ),
                    )
                }
            }
        }
        Some(ApiKey::SaslAuthenticate) => {
            let req: SaslAuthenticateRequest = match frame.decode_meta() {
                Ok(r) => r,
                Err(e) => return closing(e.into(), "a malformed SaslAuthenticate"),
            };
            match session.authenticate(&req.auth_bytes, &AppliedUsers(shard)) {
                Ok(auth_bytes) => answer(Reply::meta(&SaslAuthenticateResponse {
                    error_code: 0,
                    message: String::new(),
                    auth_bytes,
                })),
                Err(e) => closing(
                    Reply::meta(&SaslAuthenticateResponse {
                        error_code: e.code().code(),
                        message: AuthError::CLIENT_MESSAGE.into(),
                        auth_bytes: Vec::new(),
                    }),
                    format!("SASL authentication failed: {e}"),
                ),
            }
        }
        _ => closing(
            Reply::Error(
                ErrorCode::SaslAuthenticationFailed,
                "this listener requires SASL authentication first (SaslHandshake, \
                 SaslAuthenticate)"
                    .into(),
            ),
            format!(
                "{} before SASL authentication",
                api.map_or("an unknown request", ApiKey::name)
            ),
        ),
    }
}

fn handshake_reply(code: ErrorCode, mechanisms: Vec<String>) -> Reply {
    Reply::meta(&SaslHandshakeResponse {
        error_code: code.code(),
        message: match code {
            ErrorCode::None => String::new(),
            c => c.name().to_string(),
        },
        mechanisms,
    })
}

//! Authentication and authorization as sans-IO state machines: ACLs and their decision
//! (`acl.rs`); SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and
//! PLAIN (RFC 4616) checked against salted, iterated credentials, never a stored password.
//! Bytes in, bytes or a verdict out; the caller supplies the credential lookup and the
//! server nonce, so the exchanges are tested with the RFC's vectors.

pub mod acl;
pub mod plain;
pub mod scram;
pub mod session;

use crate::protocol::ErrorCode;

/// Why an authentication failed. Kafka answers every one as SASL_AUTHENTICATION_FAILED and
/// closes the connection; the message is for the broker's log (a client learns only that it
/// failed, not whether the user exists).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("malformed {mechanism} message: {why}")]
    Malformed {
        mechanism: &'static str,
        why: &'static str,
    },
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    #[error("wrong password for user {0:?}")]
    WrongPassword(String),
    #[error("the exchange is over or out of order")]
    OutOfOrder,
}

impl AuthError {
    /// What a client is told (never why: a user's existence stays private).
    pub const CLIENT_MESSAGE: &'static str = "Authentication failed: invalid credentials";

    /// The error code a failed exchange is answered with, on either listener.
    pub fn code(&self) -> ErrorCode {
        match self {
            AuthError::OutOfOrder => ErrorCode::IllegalSaslState,
            _ => ErrorCode::SaslAuthenticationFailed,
        }
    }
}

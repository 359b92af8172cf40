//! Authentication and authorization as sans-IO state machines: ACLs and their decision
//! (`acl.rs`); SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and
//! PLAIN (RFC 4616) checked against salted, iterated credentials, never a stored password.
//! Bytes in, bytes or a verdict out; the caller supplies the credential lookup and the
//! server nonce, so the exchanges are tested with the RFC's vectors.

pub mod acl;
pub mod plain;
pub mod scram;

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

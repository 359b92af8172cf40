//! Users and their SCRAM credentials in the cluster metadata: replicated through raft like
//! any metadata, so every broker authenticates from its own applied copy. A credential is
//! salt, iterations, StoredKey and ServerKey (`auth::scram::Credential`); a password is never
//! stored, nor the salted password.

use super::metadata::{Applied, ClusterMetadata, Command, MetadataError};
use crate::auth::scram::{MAX_ITERATIONS, MIN_ITERATIONS};
use crate::protocol::error_code::ErrorCode;

/// Longest user name (bytes).
pub const MAX_USER_NAME: usize = 256;
/// Users the metadata holds at most (each costs every broker a copy).
pub const MAX_USERS: usize = 100_000;

impl ClusterMetadata {
    pub(super) fn validate_user(&self, cmd: &Command) -> Result<(), MetadataError> {
        match cmd {
            Command::UpsertScramCredential {
                user,
                mechanism: _,
                credential,
            } => {
                if user.is_empty() || user.len() > MAX_USER_NAME {
                    return Err(MetadataError::new(
                        ErrorCode::UnacceptableCredential,
                        format!("a user name has 1 to {MAX_USER_NAME} bytes"),
                    ));
                }
                if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&credential.iterations) {
                    return Err(MetadataError::new(
                        ErrorCode::UnacceptableCredential,
                        format!(
                            "iterations {} outside {MIN_ITERATIONS}..={MAX_ITERATIONS}",
                            credential.iterations
                        ),
                    ));
                }
                if credential.salt.is_empty() || credential.stored_key.is_empty() {
                    return Err(MetadataError::new(
                        ErrorCode::UnacceptableCredential,
                        "empty salt or key",
                    ));
                }
                if !self.users.contains_key(user) && self.users.len() >= MAX_USERS {
                    return Err(MetadataError::new(
                        ErrorCode::UnacceptableCredential,
                        format!("the cluster holds {MAX_USERS} users at most"),
                    ));
                }
                Ok(())
            }
            Command::DeleteScramCredential { user, mechanism } => {
                match self
                    .users
                    .get(user)
                    .is_some_and(|m| m.contains_key(mechanism))
                {
                    true => Ok(()),
                    false => Err(MetadataError::new(
                        ErrorCode::ResourceNotFound,
                        format!("user {user:?} has no {} credential", mechanism.name()),
                    )),
                }
            }
            _ => Ok(()),
        }
    }

    /// Applies a validated user command.
    pub(super) fn apply_user(&mut self, cmd: &Command) -> Applied {
        match cmd {
            Command::UpsertScramCredential {
                user,
                mechanism,
                credential,
            } => {
                self.users
                    .entry(user.clone())
                    .or_default()
                    .insert(*mechanism, credential.clone());
            }
            Command::DeleteScramCredential { user, mechanism } => {
                if let Some(m) = self.users.get_mut(user) {
                    m.remove(mechanism);
                    if m.is_empty() {
                        self.users.remove(user);
                    }
                }
            }
            _ => {}
        }
        Applied::UserChanged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scram::{Credential, Mechanism};
    use crate::controller::metadata::MetadataLimits;

    fn limits() -> MetadataLimits {
        MetadataLimits::default()
    }

    #[test]
    fn credentials_are_set_replaced_deleted_and_survive_a_snapshot() {
        let mut m = ClusterMetadata::default();
        let cred = |pw: &[u8]| {
            Credential::from_password(Mechanism::ScramSha256, pw, b"salt".to_vec(), 4096)
        };
        let upsert = |user: &str, pw: &[u8]| Command::UpsertScramCredential {
            user: user.into(),
            mechanism: Mechanism::ScramSha256,
            credential: cred(pw),
        };
        m.apply(1, &upsert("alice", b"one"), &limits()).unwrap();
        m.apply(2, &upsert("alice", b"two"), &limits()).unwrap();
        let stored = &m.users["alice"][&Mechanism::ScramSha256];
        assert!(stored.verifies(Mechanism::ScramSha256, b"two"));
        assert!(!stored.verifies(Mechanism::ScramSha256, b"one"));

        // The snapshot (JSON) holds no password and reads back the same.
        let json = serde_json::to_string(&m).unwrap();
        assert!(!json.contains("two"));
        let back: ClusterMetadata = serde_json::from_str(&json).unwrap();
        assert_eq!(back.users, m.users);

        let delete = |mech| Command::DeleteScramCredential {
            user: "alice".into(),
            mechanism: mech,
        };
        let e = m
            .apply(3, &delete(Mechanism::ScramSha512), &limits())
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ResourceNotFound);
        m.apply(4, &delete(Mechanism::ScramSha256), &limits())
            .unwrap();
        assert!(m.users.is_empty(), "the user goes with its last credential");
        assert!(!serde_json::to_string(&m).unwrap().contains("users"));
    }

    #[test]
    fn unacceptable_credentials_are_refused() {
        let mut m = ClusterMetadata::default();
        for (user, iterations) in [
            ("", 4096),
            (&*"u".repeat(MAX_USER_NAME + 1), 4096),
            ("bob", 10),
            ("bob", 1 << 20),
        ] {
            let cmd = Command::UpsertScramCredential {
                user: user.to_string(),
                mechanism: Mechanism::ScramSha512,
                credential: Credential::from_password(
                    Mechanism::ScramSha512,
                    b"p",
                    b"s".to_vec(),
                    iterations.min(20000),
                ),
            };
            let cmd = match cmd {
                Command::UpsertScramCredential {
                    user,
                    mechanism,
                    mut credential,
                } => {
                    credential.iterations = iterations;
                    Command::UpsertScramCredential {
                        user,
                        mechanism,
                        credential,
                    }
                }
                other => other,
            };
            assert_eq!(
                m.apply(1, &cmd, &limits()).unwrap_err().code,
                ErrorCode::UnacceptableCredential
            );
        }
        assert!(m.users.is_empty());
    }
}

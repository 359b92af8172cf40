//! Users and their SCRAM credentials: lookups from this shard's applied metadata (the
//! authentication path, no cross-core hop) and changes as controller proposals, answered once
//! every shard applied them (as topic changes are, `topics.rs`).

use std::rc::Rc;
use std::time::Duration;

use super::topics::propose;
use super::{OpError, Shard};
use crate::auth::scram::{Credential, Mechanism};
use crate::controller::metadata::Command;

/// `user`'s credential for `mechanism`, as this shard last applied the metadata.
pub fn credential(shard: &Shard, user: &str, mechanism: Mechanism) -> Option<Credential> {
    shard
        .metadata
        .borrow()
        .users
        .get(user)?
        .get(&mechanism)
        .cloned()
}

/// Any credential of `user` (PLAIN checks a password against it): SCRAM-SHA-512's first.
pub fn any_credential(shard: &Shard, user: &str) -> Option<(Mechanism, Credential)> {
    let md = shard.metadata.borrow();
    let m = md.users.get(user)?;
    let (mechanism, credential) = m.iter().next_back()?;
    Some((*mechanism, credential.clone()))
}

/// Every user with its mechanisms and their iterations.
pub fn list(shard: &Shard) -> Vec<(String, Vec<(Mechanism, u32)>)> {
    shard
        .metadata
        .borrow()
        .users
        .iter()
        .map(|(u, m)| {
            (
                u.clone(),
                m.iter().map(|(k, c)| (*k, c.iterations)).collect(),
            )
        })
        .collect()
}

/// Sets `user`'s credential for `mechanism`.
pub async fn upsert(
    shard: &Rc<Shard>,
    user: String,
    mechanism: Mechanism,
    credential: Credential,
    timeout: Duration,
) -> Result<(), OpError> {
    let cmd = Command::UpsertScramCredential {
        user,
        mechanism,
        credential,
    };
    propose(shard, cmd, timeout).await
}

/// Removes `user`'s credential for `mechanism` (RESOURCE_NOT_FOUND when it has none).
pub async fn delete(
    shard: &Rc<Shard>,
    user: String,
    mechanism: Mechanism,
    timeout: Duration,
) -> Result<(), OpError> {
    propose(
        shard,
        Command::DeleteScramCredential { user, mechanism },
        timeout,
    )
    .await
}

//! Users and their SCRAM credentials: lookups from this shard's applied metadata (the
//! authentication path, no cross-core hop) and changes as controller proposals, answered once
//! every shard applied them (as topic changes are, `topics.rs`).

use std::rc::Rc;
use std::time::Duration;

use super::topics::propose;
use super::{OpError, Shard};
use crate::auth::scram::{random_salt, Credential, Mechanism};
use crate::auth::session::{inter_broker_mechanism, Credentials};
use crate::controller::metadata::Command;

/// The users as this shard last applied the metadata: what SASL exchanges check against.
pub struct AppliedUsers<'a>(pub &'a Shard);

impl Credentials for AppliedUsers<'_> {
    fn of(&self, user: &str, mechanism: Mechanism) -> Option<Credential> {
        self.0
            .metadata
            .borrow()
            .users
            .get(user)?
            .get(&mechanism)
            .cloned()
    }

    /// SCRAM-SHA-512's first.
    fn any(&self, user: &str) -> Option<(Mechanism, Credential)> {
        let md = self.0.metadata.borrow();
        let m = md.users.get(user)?;
        let (mechanism, credential) = m.iter().next_back()?;
        Some((*mechanism, credential.clone()))
    }
}

/// Makes sure the inter-broker user (`--inter-broker-sasl-username`) exists, so brokers reach
/// each other and a new cluster has its first user: created with its password when missing
/// (asked again each second until the controller takes it); one that exists is left as it is
/// (with a warning if the password does not match: this broker's peers will refuse it).
pub async fn ensure_inter_broker_user(shard: Rc<Shard>) {
    let Some((user, password)) = shard.cfg.inter_broker_sasl.clone() else {
        return;
    };
    // PLAIN checks against a stored SCRAM credential.
    let mechanism = inter_broker_mechanism(&shard.cfg.native_sasl_mechanisms)
        .and_then(Mechanism::from_name)
        .unwrap_or(Mechanism::ScramSha512);
    loop {
        if let Some(c) = AppliedUsers(&shard).of(&user, mechanism) {
            if !c.verifies(mechanism, password.as_bytes()) {
                log::warn!(
                    "the inter-broker user {user:?} exists with another password: other \
                     brokers will refuse this one (--inter-broker-sasl-password)"
                );
            }
            return;
        }
        let credential = Credential::from_password(
            mechanism,
            password.as_bytes(),
            random_salt(),
            crate::auth::scram::MIN_ITERATIONS,
        );
        match upsert(&shard, user.clone(), mechanism, credential, PROPOSE_TIMEOUT).await {
            Ok(()) => {
                log::info!(
                    "created the inter-broker user {user:?} ({})",
                    mechanism.name()
                );
                return;
            }
            Err(e) => {
                log::debug!(
                    "creating the inter-broker user {user:?} (retried): {}",
                    e.message
                );
                shard.deadlines.sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// How long one proposal of the inter-broker user may wait for the controller.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(30);

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

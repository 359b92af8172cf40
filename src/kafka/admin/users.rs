//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): Kafka's tools manage
//! rill's users (`kafka-configs --alter --add-config SCRAM-SHA-256=...`, confluent-kafka's
//! `alter_user_scram_credentials`). The client sends the salt and the salted password; the
//! broker keeps only StoredKey and ServerKey ([`crate::auth::scram::Credential`]), through the
//! same controller proposals `rill user` makes ([`crate::broker::users`]).

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::s;
use crate::auth::scram::{Credential, Mechanism};
use crate::broker::{users, Shard};
use crate::protocol::ErrorCode;

/// How long one alteration may wait for the controller.
const ALTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub fn describe_user_scram_credentials(
    shard: &Shard,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let all = users::list(shard);
    let asked: Option<Vec<String>> = req
        .users
        .as_ref()
        // Null or empty: every user (as Kafka answers).
        .filter(|u| !u.is_empty())
        .map(|u| u.iter().map(|n| n.name.to_string()).collect());
    let mut r = DescribeUserScramCredentialsResponse::default();
    let result = |user: &str, mechanisms: Option<&Vec<(Mechanism, u32)>>| {
        let mut d = DescribeUserScramCredentialsResult::default();
        d.user = s(user);
        match mechanisms {
            Some(m) => {
                d.credential_infos = m
                    .iter()
                    .map(|(mech, iterations)| {
                        let mut c = CredentialInfo::default();
                        c.mechanism = mech.kafka_type();
                        c.iterations = i32::try_from(*iterations).unwrap_or(i32::MAX);
                        c
                    })
                    .collect();
            }
            None => {
                d.error_code = ErrorCode::ResourceNotFound.code();
                d.error_message = Some(s(format!(
                    "attempt to describe a user credential that does not exist: {user}"
                )));
            }
        }
        d
    };
    r.results = match asked {
        None => all.iter().map(|(u, m)| result(u, Some(m))).collect(),
        Some(names) => {
            let mut seen = BTreeSet::new();
            names
                .iter()
                .filter(|n| seen.insert(n.as_str()))
                .map(|n| result(n, all.iter().find(|(u, _)| u == n).map(|(_, m)| m)))
                .collect()
        }
    };
    r
}

pub async fn alter_user_scram_credentials(
    shard: &Rc<Shard>,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut r = AlterUserScramCredentialsResponse::default();
    let answer = |user: &str, outcome: Result<(), (ErrorCode, String)>| {
        let mut a = AlterUserScramCredentialsResult::default();
        a.user = s(user);
        if let Err((code, message)) = outcome {
            a.error_code = code.code();
            a.error_message = Some(s(message));
        }
        a
    };
    for d in req.deletions {
        let user = d.name.to_string();
        let outcome = match Mechanism::from_kafka_type(d.mechanism) {
            None => Err((
                ErrorCode::UnsupportedSaslMechanism,
                "unknown SCRAM mechanism".into(),
            )),
            Some(m) => users::delete(shard, user.clone(), m, ALTER_TIMEOUT)
                .await
                .map_err(|e| (e.code, e.message)),
        };
        r.results.push(answer(&user, outcome));
    }
    for u in req.upsertions {
        let user = u.name.to_string();
        let outcome = match Mechanism::from_kafka_type(u.mechanism) {
            None => Err((
                ErrorCode::UnsupportedSaslMechanism,
                "unknown SCRAM mechanism".into(),
            )),
            Some(m) if u.salt.is_empty() || u.salted_password.is_empty() => {
                let _ = m;
                Err((
                    ErrorCode::UnacceptableCredential,
                    "empty salt or salted password".into(),
                ))
            }
            Some(m) => {
                let iterations = u32::try_from(u.iterations).unwrap_or(0);
                let credential = Credential::from_salted_password(
                    m,
                    u.salt.to_vec(),
                    iterations,
                    &u.salted_password,
                );
                users::upsert(shard, user.clone(), m, credential, ALTER_TIMEOUT)
                    .await
                    .map_err(|e| (e.code, e.message))
            }
        };
        r.results.push(answer(&user, outcome));
    }
    r
}

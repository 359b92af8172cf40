//! AlterUser and ListUsers (native keys 28-29) over [`crate::broker::users`]: what
//! `rill user create|delete|list` sends. The native listener has no authentication yet: bind
//! it where only operators reach it (loopback) when the Kafka listener requires SASL.

use std::rc::Rc;

use super::{status, Reply};
use crate::auth::scram::{Credential, Mechanism};
use crate::broker::{request_timeout, users, OpError, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AlterUserRequest, AlterUserResponse, ListUsersResponse, UserEntry, UserMechanism,
};
use crate::protocol::{ApiKey, ErrorCode};

pub async fn alter_user(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AlterUserRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let r = match Mechanism::from_name(&req.mechanism) {
        None => Err(OpError::new(
            ErrorCode::UnsupportedSaslMechanism,
            format!("unknown SCRAM mechanism {:?}", req.mechanism),
        )),
        Some(m) if req.delete => users::delete(shard, req.user, m, timeout).await,
        Some(_) if req.salt.is_empty() || req.salted_password.is_empty() => Err(OpError::new(
            ErrorCode::UnacceptableCredential,
            "empty salt or salted password",
        )),
        Some(m) => {
            let credential =
                Credential::from_salted_password(m, req.salt, req.iterations, &req.salted_password);
            users::upsert(shard, req.user, m, credential, timeout).await
        }
    };
    let (error_code, message) = status(shard, ApiKey::AlterUser, &r);
    Reply::meta(&AlterUserResponse {
        error_code,
        message,
    })
}

pub fn list_users(shard: &Shard) -> Reply {
    let users = users::list(shard)
        .into_iter()
        .map(|(user, mechanisms)| UserEntry {
            user,
            mechanisms: mechanisms
                .into_iter()
                .map(|(m, iterations)| UserMechanism {
                    mechanism: m.name().to_string(),
                    iterations,
                })
                .collect(),
        })
        .collect();
    Reply::meta(&ListUsersResponse { users })
}

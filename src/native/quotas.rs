//! AlterClientQuota and DescribeClientQuotas (native keys 53-54) over
//! [`crate::broker::quotas`]: what `rill quota set|list` sends (not authorized: the native
//! listener has no authentication).

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::{quotas, request_timeout, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AlterClientQuotaRequest, AlterClientQuotaResponse, DescribeClientQuotasResponse, QuotaEntry,
    QuotaName, QuotaValue,
};
use crate::protocol::ApiKey;

pub async fn alter(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AlterClientQuotaRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let entity = req.entry.entity();
    let set = req
        .entry
        .values
        .into_iter()
        .map(|v| (v.key, v.value))
        .collect();
    let r = quotas::alter(shard, entity, set, req.remove, timeout).await;
    let (error_code, message) = status(shard, ApiKey::AlterClientQuota, &r);
    Reply::meta(&AlterClientQuotaResponse {
        error_code,
        message,
    })
}

pub fn describe(shard: &Shard) -> Reply {
    let entries = quotas::list(shard)
        .into_iter()
        .map(|(e, values)| QuotaEntry {
            user: e.user.as_ref().map(QuotaName::of),
            client_id: e.client_id.as_ref().map(QuotaName::of),
            values: values
                .into_iter()
                .map(|(key, value)| QuotaValue { key, value })
                .collect(),
        })
        .collect();
    Reply::meta(&DescribeClientQuotasResponse { entries })
}

//! `rill quota set|list`: client quotas kept by the controller (Kafka's model: a user, a
//! client id or both, each possibly the default).

use super::args::QuotaCommand;
use crate::client::Client;
use crate::protocol::messages::{QuotaEntry, QuotaName, QuotaValue};
use crate::quota::{CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_RATE};

pub fn run(client: &mut Client, cmd: QuotaCommand) -> Result<(), String> {
    match cmd {
        QuotaCommand::Set {
            user,
            user_default,
            client_id,
            client_id_default,
            producer_byte_rate,
            consumer_byte_rate,
            request_rate,
            remove,
        } => {
            let side = |name: Option<String>, default: bool| match (name, default) {
                (Some(n), _) => Some(QuotaName::Name(n)),
                (None, true) => Some(QuotaName::Default),
                (None, false) => None,
            };
            let entry = QuotaEntry {
                user: side(user, user_default),
                client_id: side(client_id, client_id_default),
                values: [
                    (PRODUCER_BYTE_RATE, producer_byte_rate),
                    (CONSUMER_BYTE_RATE, consumer_byte_rate),
                    (REQUEST_RATE, request_rate),
                ]
                .into_iter()
                .filter_map(|(k, v)| {
                    v.map(|value| QuotaValue {
                        key: k.to_string(),
                        value,
                    })
                })
                .collect(),
            };
            if entry.user.is_none() && entry.client_id.is_none() {
                return Err(
                    "name --user, --user-default, --client-id or --client-id-default".into(),
                );
            }
            if entry.values.is_empty() && remove.is_empty() {
                return Err(
                    "set --producer-byte-rate, --consumer-byte-rate or --request-rate, \
                            or --remove a key"
                        .into(),
                );
            }
            let what = entry.entity().describe();
            client
                .alter_client_quota(entry, remove)
                .map_err(|e| format!("cannot set quotas of {what}: {e}"))?;
            println!("quotas of {what} set");
            Ok(())
        }
        QuotaCommand::List => {
            for e in client.describe_client_quotas().map_err(|e| e.to_string())? {
                let values: Vec<String> = e
                    .values
                    .iter()
                    .map(|v| format!("{}={}", v.key, v.value))
                    .collect();
                println!("{}\t{}", e.entity().describe(), values.join(","));
            }
            Ok(())
        }
    }
}

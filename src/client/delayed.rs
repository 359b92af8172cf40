//! Delayed messages: a record appended to its partition at a given time, not now (the
//! broker keeps it durably until then; [`crate::delay`]). Not part of the batching producer:
//! a delayed record is a new append when due, outside any producer's sequence.

use super::producer::ProducerRecord;
use super::{Client, ClientError};
use crate::batch::BatchBuilder;
use crate::partitioner::partition_for_key;
use crate::protocol::messages::{DelayedProduceRequest, DelayedProduceResponse};
use crate::protocol::{ApiKey, ErrorCode};

impl Client {
    /// Sends `record` to be appended to its partition at `deliver_at_ms` (milliseconds since
    /// the epoch; at most the broker's `--max-delay-ms` ahead); returns once the broker holds
    /// it durably. Its offset is assigned when it is appended. The partition is the record's,
    /// else its key's (as the producer's partitioner), else 0.
    pub fn produce_delayed(
        &mut self,
        record: &ProducerRecord<'_>,
        deliver_at_ms: i64,
    ) -> Result<(), ClientError> {
        let route = |c: &Client| -> Result<u32, ClientError> {
            let n = c.metadata().partitions(record.topic)?;
            Ok(record
                .partition
                .unwrap_or_else(|| record.key.map_or(0, |k| partition_for_key(k, n))))
        };
        let partition = match route(self) {
            Ok(p) => p,
            Err(_) => {
                self.refresh_metadata()?;
                route(self)?
            }
        };
        let addr = self.metadata().route(record.topic, partition)?.addr;
        let mut b = BatchBuilder::new();
        record.push_into(
            &mut b,
            record.timestamp_ms.unwrap_or_else(crate::clock::now_ms),
        );
        let batch = b.build().map_err(|e| ClientError::Invalid(e.to_string()))?;
        let req = DelayedProduceRequest {
            topic: record.topic.to_string(),
            partition,
            deliver_at_ms,
        };
        let (resp, _): (DelayedProduceResponse, _) =
            self.call(addr, ApiKey::DelayedProduce, &req, &[&batch])?;
        if resp.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(resp.error_code),
                resp.message,
            ));
        }
        Ok(())
    }
}

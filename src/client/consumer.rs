//! An assign-mode consumer: fetches from each assigned partition's leader shard.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Client, ClientError};
use crate::batch::BatchIter;
use crate::protocol::messages::{
    FetchPartition, FetchRequest, FetchResponse, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
};
use crate::protocol::{ApiKey, ErrorCode};

/// Where a consumer starts reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Beginning,
    End,
    Offset(u64),
    /// The first record at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// A record copied out of a fetched batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub tags: Vec<String>,
}

pub struct Consumer {
    client: Client,
    topic: String,
    /// partition -> next offset to read.
    positions: BTreeMap<u32, u64>,
    pub max_bytes: u32,
    pub partition_max_bytes: u32,
}

impl Consumer {
    /// Assigns `partitions` of `topic` (all when `None`), positioned by `from`.
    pub fn assign(
        mut client: Client,
        topic: &str,
        partitions: Option<Vec<u32>>,
        from: StartFrom,
    ) -> Result<Consumer, ClientError> {
        let n = match client.metadata().partitions(topic) {
            Ok(n) => n,
            Err(_) => {
                client.refresh_metadata()?;
                client.metadata().partitions(topic)?
            }
        };
        let parts = partitions.unwrap_or_else(|| (0..n).collect());
        let mut positions = BTreeMap::new();
        for p in parts {
            if p >= n {
                return Err(ClientError::UnknownPartition {
                    topic: topic.into(),
                    partition: p,
                    partitions: n,
                });
            }
            let at = match from {
                StartFrom::Beginning => client
                    .list_offset(topic, p, EARLIEST_TIMESTAMP)?
                    .unwrap_or(0),
                StartFrom::End => client.list_offset(topic, p, LATEST_TIMESTAMP)?.unwrap_or(0),
                StartFrom::Offset(o) => o,
                StartFrom::Timestamp(ts) => match client.list_offset(topic, p, ts)? {
                    Some(o) => o,
                    None => client.list_offset(topic, p, LATEST_TIMESTAMP)?.unwrap_or(0),
                },
            };
            positions.insert(p, at);
        }
        Ok(Consumer {
            client,
            topic: topic.to_string(),
            positions,
            max_bytes: 8 << 20,
            partition_max_bytes: 4 << 20,
        })
    }

    pub fn position(&self, partition: u32) -> Option<u64> {
        self.positions.get(&partition).copied()
    }

    /// Fetches what is available, waiting up to `max_wait` when nothing is.
    pub fn poll(&mut self, max_wait: Duration) -> Result<Vec<ConsumedRecord>, ClientError> {
        let mut by_addr: BTreeMap<SocketAddr, Vec<FetchPartition>> = BTreeMap::new();
        for (&p, &offset) in &self.positions {
            let route = match self.client.metadata().route(&self.topic, p) {
                Ok(r) => r,
                Err(_) => {
                    self.client.refresh_metadata()?;
                    self.client.metadata().route(&self.topic, p)?
                }
            };
            by_addr.entry(route.addr).or_default().push(FetchPartition {
                topic: self.topic.clone(),
                partition: p,
                offset,
                max_bytes: self.partition_max_bytes,
            });
        }
        let groups = by_addr.len().max(1) as u32;
        let wait = max_wait / groups;
        let mut out = Vec::new();
        for (addr, partitions) in by_addr {
            let req = FetchRequest {
                max_wait_ms: if out.is_empty() {
                    wait.as_millis() as u32
                } else {
                    0
                },
                min_bytes: 1,
                max_bytes: self.max_bytes,
                partitions,
            };
            if let Ok(c) = self.client.connection(addr) {
                c.set_read_timeout(Some(Duration::from_secs(30) + wait));
            }
            let (resp, frame): (FetchResponse, _) =
                self.client.call(addr, ApiKey::Fetch, &req, &[])?;
            for r in resp.partitions {
                match ErrorCode::from_code(r.error_code) {
                    ErrorCode::None => {}
                    ErrorCode::OffsetOutOfRange => {
                        // Reset to the earliest offset still stored (auto.offset.reset=earliest).
                        let start = self
                            .client
                            .list_offset(&self.topic, r.partition, EARLIEST_TIMESTAMP)?
                            .unwrap_or(0);
                        log::warn!(
                            "{}-{}: offset out of range, reset to {start}",
                            self.topic,
                            r.partition
                        );
                        self.positions.insert(r.partition, start);
                        continue;
                    }
                    code if code.is_retriable() => {
                        let _ = self.client.refresh_metadata();
                        continue;
                    }
                    code => return Err(ClientError::broker(code, r.message)),
                }
                let payload = frame
                    .payload_slice(r.payload_offset, r.payload_len)
                    .map_err(|e| ClientError::Invalid(e.to_string()))?;
                let mut next = self.positions[&r.partition];
                for batch in BatchIter::new(payload) {
                    let batch = match batch {
                        Ok(b) => b,
                        // A sendfile range may end inside a batch: the rest comes next fetch.
                        Err(crate::batch::BatchError::Truncated { .. }) => break,
                        Err(e) => {
                            return Err(ClientError::broker(
                                ErrorCode::CorruptMessage,
                                e.to_string(),
                            ))
                        }
                    };
                    let records = batch.records().map_err(|e| {
                        ClientError::broker(ErrorCode::CorruptMessage, e.to_string())
                    })?;
                    for rec in records {
                        if rec.offset < next {
                            continue;
                        }
                        out.push(ConsumedRecord {
                            topic: self.topic.clone(),
                            partition: r.partition,
                            offset: rec.offset,
                            timestamp_ms: rec.timestamp_ms,
                            key: rec.key().map(<[u8]>::to_vec),
                            value: rec.value().to_vec(),
                            headers: rec
                                .headers()
                                .map(|(k, v)| (k.to_string(), v.to_vec()))
                                .collect(),
                            tags: rec.tags().map(str::to_string).collect(),
                        });
                        next = rec.offset + 1;
                    }
                }
                self.positions.insert(r.partition, next);
            }
        }
        Ok(out)
    }
}

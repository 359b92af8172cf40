//! A batching producer: per-partition batches, Kafka's key partitioner, a sticky partition
//! for unkeyed records, and retries on retriable errors.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::murmur2::partition_for_key;
use super::{Client, ClientError};
use crate::batch::BatchBuilder;

/// The durability a producer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: no response.
    None,
    /// The leader stored it as durably as its `--fsync` promises.
    Leader,
    /// Every in-sync replica has it (the leader alone until replication exists).
    All,
}

impl Acks {
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> Result<Acks, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            _ => Err(format!("bad acks '{s}': expected 0, 1 or all")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub acks: Acks,
    /// How long a batch may wait for more records before it is sent.
    pub linger: Duration,
    /// A batch is sent once its records reach this many bytes.
    pub batch_bytes: usize,
    /// Retries of a retriable failure, within `delivery_timeout`.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub delivery_timeout: Duration,
    pub request_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_bytes: 256 << 10,
            retries: 10,
            retry_backoff: Duration::from_millis(100),
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Where a sent batch landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub topic: String,
    pub partition: u32,
    /// `None` with acks=0.
    pub base_offset: Option<u64>,
    pub records: u32,
}

struct Pending {
    builder: BatchBuilder,
    since: Instant,
}

pub struct Producer {
    client: Client,
    cfg: ProducerConfig,
    batches: HashMap<(String, u32), Pending>,
    sticky: HashMap<String, u32>,
    sticky_seq: u32,
}

impl Producer {
    pub fn new(client: Client, cfg: ProducerConfig) -> Producer {
        Producer {
            client,
            cfg,
            batches: HashMap::new(),
            sticky: HashMap::new(),
            sticky_seq: 0,
        }
    }

    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The partition a record goes to: explicit, by key hash, or the topic's sticky one.
    pub fn choose_partition(
        &mut self,
        topic: &str,
        partition: Option<u32>,
        key: Option<&[u8]>,
    ) -> Result<u32, ClientError> {
        let n = match self.client.metadata().partitions(topic) {
            Ok(n) => n,
            Err(_) => {
                self.client.refresh_metadata()?;
                self.client.metadata().partitions(topic)?
            }
        };
        if let Some(p) = partition {
            if p >= n {
                return Err(ClientError::UnknownPartition {
                    topic: topic.into(),
                    partition: p,
                    partitions: n,
                });
            }
            return Ok(p);
        }
        if let Some(k) = key {
            return Ok(partition_for_key(k, n));
        }
        let seq = &mut self.sticky_seq;
        Ok(*self.sticky.entry(topic.to_string()).or_insert_with(|| {
            *seq = seq.wrapping_add(1);
            (std::process::id().wrapping_add(*seq)) % n
        }))
    }

    /// Buffers one record; sends its partition's batch when it is full. Returns deliveries
    /// of batches sent by this call.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        topic: &str,
        partition: Option<u32>,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(String, Vec<u8>)],
        tags: &[String],
        timestamp_ms: i64,
    ) -> Result<Vec<Delivery>, ClientError> {
        let p = self.choose_partition(topic, partition, key)?;
        let entry = self
            .batches
            .entry((topic.to_string(), p))
            .or_insert_with(|| Pending {
                builder: BatchBuilder::new(),
                since: Instant::now(),
            });
        entry.builder.push(timestamp_ms, key, value, headers, tags);
        let full = entry.builder.estimated_bytes() >= self.cfg.batch_bytes;
        let mut out = Vec::new();
        if full {
            out.push(self.send_batch(topic.to_string(), p)?);
        }
        out.extend(self.send_lingered()?);
        Ok(out)
    }

    /// Sends batches older than the linger time.
    pub fn send_lingered(&mut self) -> Result<Vec<Delivery>, ClientError> {
        let now = Instant::now();
        let due: Vec<_> = self
            .batches
            .iter()
            .filter(|(_, b)| now.duration_since(b.since) >= self.cfg.linger)
            .map(|(k, _)| k.clone())
            .collect();
        due.into_iter()
            .map(|(t, p)| self.send_batch(t, p))
            .collect()
    }

    /// Sends every buffered batch and waits for their acknowledgements.
    pub fn flush(&mut self) -> Result<Vec<Delivery>, ClientError> {
        let keys: Vec<_> = self.batches.keys().cloned().collect();
        keys.into_iter()
            .map(|(t, p)| self.send_batch(t, p))
            .collect()
    }

    fn send_batch(&mut self, topic: String, partition: u32) -> Result<Delivery, ClientError> {
        let Some(pending) = self.batches.remove(&(topic.clone(), partition)) else {
            return Err(ClientError::Invalid("no batch".into()));
        };
        if self.sticky.get(&topic) == Some(&partition) {
            // Kafka's sticky partitioner moves on once a batch is sent.
            self.sticky.remove(&topic);
        }
        let records = pending.builder.len() as u32;
        let bytes = pending
            .builder
            .build()
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            match self.client.produce_raw(
                &topic,
                partition,
                &[&bytes],
                self.cfg.acks.wire(),
                self.cfg.request_timeout,
            ) {
                Ok(r) => {
                    return Ok(Delivery {
                        topic,
                        partition,
                        base_offset: r.map(|r| r.base_offset as u64),
                        records,
                    })
                }
                Err(e)
                    if e.is_retriable()
                        && attempt < self.cfg.retries
                        && started.elapsed() < self.cfg.delivery_timeout =>
                {
                    attempt += 1;
                    log::debug!("produce to {topic}-{partition} failed ({e}); retry {attempt}");
                    std::thread::sleep(self.cfg.retry_backoff);
                    let _ = self.client.refresh_metadata();
                }
                Err(e) => return Err(e),
            }
        }
    }
}

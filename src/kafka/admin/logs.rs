//! DeleteRecords and DescribeLogDirs: the logs of the partitions this node (shard) leads,
//! through the same operations as `rill topic truncate` and `topic describe`
//! ([`crate::broker::log_admin`]).

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
    TopicName,
};

use super::s;
use crate::broker::log_admin::{delete_records as truncate, describe_partition};
use crate::broker::{OpError, Shard};
use crate::protocol::ErrorCode;

/// DeleteRecords' offset meaning "up to the high watermark" (everything readable).
const HIGH_WATERMARK: i64 = -1;

pub async fn delete_records(
    shard: &Rc<Shard>,
    req: &DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut r = DeleteRecordsResponse::default();
    for t in &req.topics {
        let topic = t.name.0.as_str();
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            let outcome = match u32::try_from(p.partition_index) {
                Err(_) => Err(OpError::new(ErrorCode::UnknownTopicOrPartition, "")),
                Ok(i) => {
                    let before = match p.offset {
                        HIGH_WATERMARK => {
                            describe_partition(shard, topic, i).map(|st| st.high_watermark)
                        }
                        o => u64::try_from(o).map_err(|_| {
                            OpError::new(ErrorCode::OffsetOutOfRange, format!("offset {o}"))
                        }),
                    };
                    match before {
                        Ok(before) => truncate(shard, topic, i, before).await,
                        Err(e) => Err(e),
                    }
                }
            };
            match outcome {
                Ok(low) => pr.low_watermark = low as i64,
                Err(e) => pr.error_code = e.code.code(),
            }
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

/// The filesystem's total and usable bytes under the data directory, off the shard thread;
/// -1 each when it cannot be read.
async fn disk_space(shard: &Shard) -> (i64, i64) {
    let dir = shard.cfg.data_dir.clone();
    rill_shards::rt::spawn_blocking(move || {
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
            return (-1, -1);
        };
        // SAFETY: statvfs is plain old data; all zeroes is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `path` is a valid NUL-terminated string and `st` a writable statvfs that
        // the call fills in.
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return (-1, -1);
        }
        let frag = st.f_frsize as i64;
        (st.f_blocks as i64 * frag, st.f_bavail as i64 * frag)
    })
    .await
}

/// One log directory (the data dir) listing the asked partitions this node leads, or all of
/// them when none are asked; partitions led elsewhere are not listed, as Kafka lists only
/// the replicas a broker hosts.
pub async fn describe_log_dirs(
    shard: &Rc<Shard>,
    version: i16,
    req: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let asked: Vec<(String, Vec<u32>)> = match &req.topics {
        Some(topics) => topics
            .iter()
            .map(|t| {
                let parts = t
                    .partitions
                    .iter()
                    .filter_map(|&p| u32::try_from(p).ok())
                    .collect();
                (t.topic.0.to_string(), parts)
            })
            .collect(),
        None => {
            let mut all: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
            for p in shard.all_partitions() {
                all.entry(p.topic.to_string()).or_default().push(p.index);
            }
            all.into_iter().collect()
        }
    };
    let mut dir = DescribeLogDirsResult::default();
    dir.log_dir = s(shard.cfg.data_dir.join("topics").display().to_string());
    // Only v4 has the fields (the encoder refuses a set field an older version lacks).
    if version >= 4 {
        (dir.total_bytes, dir.usable_bytes) = disk_space(shard).await;
    }
    for (topic, mut parts) in asked {
        parts.sort_unstable();
        let mut dt = DescribeLogDirsTopic::default();
        dt.name = TopicName(s(topic.as_str()));
        for i in parts {
            if let Ok(st) = describe_partition(shard, &topic, i) {
                let mut dp = DescribeLogDirsPartition::default();
                dp.partition_index = i as i32;
                dp.partition_size = st.size_bytes as i64;
                dp.offset_lag = 0;
                dt.partitions.push(dp);
            }
        }
        if !dt.partitions.is_empty() {
            dir.topics.push(dt);
        }
    }
    let mut r = DescribeLogDirsResponse::default();
    r.results.push(dir);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{round_trip, served};
    use kafka_protocol::messages::ApiKey;

    /// Both responses, filled as the handlers fill them, encode at every served version.
    #[test]
    fn responses_encode_at_every_served_version() {
        let mut deleted = DeleteRecordsResponse::default();
        let mut t = DeleteRecordsTopicResult::default();
        t.name = TopicName(s("t"));
        let mut p = DeleteRecordsPartitionResult::default();
        p.low_watermark = 7;
        t.partitions.push(p);
        deleted.topics.push(t);
        round_trip(&deleted, served(ApiKey::DeleteRecords));

        let (lo, hi) = served(ApiKey::DescribeLogDirs);
        for version in lo..=hi {
            let mut dir = DescribeLogDirsResult::default();
            dir.log_dir = s("/data/topics");
            if version >= 4 {
                (dir.total_bytes, dir.usable_bytes) = (100, 50);
            }
            let mut dt = DescribeLogDirsTopic::default();
            dt.name = TopicName(s("t"));
            let mut dp = DescribeLogDirsPartition::default();
            dp.partition_size = 4096;
            dt.partitions.push(dp);
            dir.topics.push(dt);
            let mut r = DescribeLogDirsResponse::default();
            r.results.push(dir);
            round_trip(&r, (version, version));
        }
    }
}

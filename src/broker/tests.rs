//! The broker's operations driven directly, with no listener in between: what both codecs
//! rely on. One real shard and a real single-voter controller in a temporary directory.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rill_shards::rt::spawn_local;

use super::fetch::{fetch, FetchPartition, FetchRequest};
use super::list_offsets::{list_offset, OffsetQuery};
use super::produce::{await_acks, Acks, Origin, Produce};
use super::shard::{AppliedIndexes, Shard};
use super::{groups, offsets, topics, BrokerConfig, OpError};
use crate::batch::{BatchBuilder, BatchIter};
use crate::controller::metadata::{BrokerInfo, Command};
use crate::controller::{self, ControllerConfig};
use crate::group::offsets_log::PartitionOffset;
use crate::log::{FileReads, ReadChunk};
use crate::protocol::error_code::ErrorCode;

const WAIT: Duration = Duration::from_secs(60);

/// Runs `f` on one shard of a one-node broker whose data dir is a fresh temporary directory
/// (the controller started, the broker registered, `__consumer_offsets` with one partition).
pub(crate) fn on_broker<F, Fut>(f: F)
where
    F: Fn(Rc<Shard>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_path_buf();
    let controller = controller::start(ControllerConfig::new(&data, 1)).expect("controller");
    let handle = controller.handle();
    handle.wait_ready(WAIT).expect("ready");
    let propose = |cmd| {
        handle
            .propose(cmd)
            .recv_timeout(WAIT)
            .expect("answered")
            .expect("applied");
    };
    let listen = "127.0.0.1:1".parse().expect("address");
    propose(Command::RegisterBroker(BrokerInfo {
        node_id: 1,
        host: "127.0.0.1".into(),
        port: 1,
        shards: 1,
        kafka_port: None,
    }));
    propose(Command::CreateTopic {
        name: super::group_host::OFFSETS_TOPIC.into(),
        partitions: 1,
        replication_factor: 1,
        configs: BTreeMap::new(),
    });
    let mut cfg = BrokerConfig::new(data.clone(), listen, vec![0]);
    cfg.preallocate_step_bytes = 64 << 10;
    let cfg = Arc::new(cfg);
    let applied = AppliedIndexes::new(1);
    let scfg = rill_shards::ShardConfig {
        cpus: vec![rill_shards::ShardConfig::all_cores()[0]],
        prime_dir: data,
        name: "rill-ops-test".into(),
        io_memory_bytes: 1 << 20,
        ..rill_shards::ShardConfig::default()
    };
    let h = handle.clone();
    let set = rill_shards::start_shards(scfg, move |ctx| {
        let shard = Shard::new(
            ctx.id,
            ctx.count,
            cfg.clone(),
            h.clone(),
            applied.clone(),
            ctx.deadlines.clone(),
            None,
        );
        let updates = h.subscribe(16);
        let run = f(shard.clone());
        let h = h.clone();
        async move {
            shard.apply_metadata(h.metadata()).await;
            super::coordination::wait_single_replica_loads(&shard).await;
            spawn_local(shard.group_commit.clone().run()).detach();
            let s = shard.clone();
            spawn_local(async move {
                while let Ok(md) = updates.recv_async().await {
                    s.apply_metadata(md).await;
                }
            })
            .detach();
            run.await;
        }
    })
    .expect("shard");
    for r in set.join() {
        r.expect("the shard ran");
    }
    controller.shutdown();
}

pub(crate) async fn create(shard: &Rc<Shard>, name: &str, partitions: u32) {
    let cmd = Command::CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: 1,
        configs: BTreeMap::new(),
    };
    topics::propose(shard, cmd, WAIT).await.expect("created");
}

/// One batch of `values`, as a producer sends it.
fn batch(values: &[&str]) -> rkyv::util::AlignedVec<16> {
    let mut b = BatchBuilder::new();
    for v in values {
        b.push(1, None, v.as_bytes(), &[], &[]);
    }
    b.build().expect("batch")
}

/// Produces `values` to `topic`-`partition` and waits for the acknowledgement: base offset.
pub(crate) async fn produce(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
    values: &[&str],
) -> u64 {
    produce_batch(shard, topic, partition, batch(values)).await
}

/// Produces one batch to `topic`-`partition` and waits for the acknowledgement: base offset.
async fn produce_batch(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
    bytes: rkyv::util::AlignedVec<16>,
) -> u64 {
    let mut p = Produce::new();
    p.stage(shard, topic, partition, &bytes, 0, Origin::Client)
        .expect("staged");
    let a = p
        .append(shard, bytes, 0, 7)
        .pop()
        .unwrap()
        .expect("appended");
    let failed = await_acks(shard, vec![a.ack(0)], std::time::Instant::now() + WAIT).await;
    assert!(failed.is_empty(), "{:?}", failed);
    a.base_offset
}

fn read_values(chunks: &[ReadChunk]) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for c in chunks {
        let bytes = crate::batch::aligned16(c.as_slice().expect("copied bytes"));
        for b in BatchIter::new(&bytes) {
            for r in b.expect("valid batch").records().expect("records") {
                let v = String::from_utf8(r.value().unwrap_or_default().to_vec()).expect("utf-8");
                out.push((r.offset, v));
            }
        }
    }
    out
}

fn fetch_of(topic: &str, partition: u32, offset: u64) -> FetchPartition {
    FetchPartition {
        topic: topic.into(),
        partition,
        offset,
        max_bytes: 1 << 20,
    }
}

fn request(partitions: Vec<FetchPartition>, min_bytes: usize, wait: Duration) -> FetchRequest {
    FetchRequest {
        partitions,
        min_bytes,
        max_wait: wait,
        max_bytes: 1 << 20,
        file_reads: FileReads::Copy,
        filter: None,
        isolation: crate::protocol::Isolation::ReadUncommitted,
    }
}

#[test]
fn produce_fetch_and_list_offsets_through_the_operations() {
    on_broker(|shard| async move {
        create(&shard, "t", 2).await;
        assert_eq!(produce(&shard, "t", 1, &["a", "b"]).await, 0);
        assert_eq!(produce(&shard, "t", 1, &["c"]).await, 2);
        let got = fetch(&shard, &request(vec![fetch_of("t", 1, 0)], 1, WAIT)).await;
        let read = got.into_iter().next().unwrap().expect("read");
        assert_eq!(read.high_watermark, 3);
        assert_eq!(
            read_values(&read.chunks),
            vec![(0, "a".into()), (1, "b".into()), (2, "c".into())]
        );
        let at = |q| list_offset(&shard, "t", 1, q);
        assert_eq!(at(OffsetQuery::Latest).await.unwrap().unwrap().offset, 3);
        assert_eq!(at(OffsetQuery::Earliest).await.unwrap().unwrap().offset, 0);
        // Every record was stamped with append time 7: a later time finds nothing.
        assert_eq!(at(OffsetQuery::AtOrAfter(8)).await.unwrap(), None);
        assert_eq!(
            at(OffsetQuery::AtOrAfter(0)).await.unwrap().unwrap().offset,
            0
        );
    });
}

#[test]
fn max_timestamp_finds_the_first_record_with_the_largest_create_time() {
    on_broker(|shard| async move {
        create(&shard, "t", 1).await;
        let at = |q| list_offset(&shard, "t", 0, q);
        assert_eq!(at(OffsetQuery::MaxTimestamp).await.unwrap(), None, "empty");
        let timed = |records: &[i64]| {
            let mut b = BatchBuilder::new();
            for &ts in records {
                b.push(ts, None, b"v", &[], &[]);
            }
            b.build().expect("batch")
        };
        // Create times out of order: the largest (900) first at offset 4, again at 6.
        produce_batch(&shard, "t", 0, timed(&[100, 500, 200])).await;
        produce_batch(&shard, "t", 0, timed(&[300, 900, 50])).await;
        produce_batch(&shard, "t", 0, timed(&[900, 10])).await;
        let found = at(OffsetQuery::MaxTimestamp).await.unwrap().unwrap();
        assert_eq!((found.offset, found.timestamp), (4, Some(900)));
        assert_eq!(
            OffsetQuery::from_timestamp(-3).unwrap(),
            OffsetQuery::MaxTimestamp
        );
        // -4, earliest local: every segment is local.
        assert_eq!(
            OffsetQuery::from_timestamp(-4).unwrap(),
            OffsetQuery::Earliest
        );
    });
}

#[test]
fn refusals_are_typed_with_the_wire_code_and_say_why() {
    on_broker(|shard| async move {
        create(&shard, "t", 2).await;
        let code = |r: Result<usize, OpError>| r.unwrap_err().code;
        let bytes = batch(&["x"]);
        let mut p = Produce::new();
        let e = p
            .stage(&shard, "nope", 0, &bytes, 0, Origin::Client)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownTopicOrPartition);
        assert!(e.message.contains("nope"), "{e}");
        let e = p
            .stage(&shard, "t", 5, &bytes, 0, Origin::Client)
            .unwrap_err();
        assert!(e.message.contains("has 2 partitions"), "{e}");
        p.stage(&shard, "t", 0, &bytes, 0, Origin::Client)
            .expect("first");
        // A second staging of one partition would be stamped from the same log end.
        assert_eq!(
            code(p.stage(&shard, "t", 0, &bytes, 0, Origin::Client)),
            ErrorCode::InvalidRequest
        );
        let mut damaged = bytes.to_vec();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(
            code(Produce::new().stage(&shard, "t", 1, &damaged, 0, Origin::Client)),
            ErrorCode::CorruptMessage
        );
        assert_eq!(
            Acks::parse(2).unwrap_err().code,
            ErrorCode::InvalidRequiredAcks
        );
        assert_eq!(
            OffsetQuery::from_timestamp(-5).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        // An unknown partition answers at once, with data for the others.
        produce(&shard, "t", 1, &["y"]).await;
        let got = fetch(
            &shard,
            &request(
                vec![fetch_of("gone", 0, 0), fetch_of("t", 1, 0)],
                1 << 20,
                WAIT,
            ),
        )
        .await;
        assert_eq!(
            got[0].as_ref().err().map(|e| e.code),
            Some(ErrorCode::UnknownTopicOrPartition)
        );
        assert_eq!(
            read_values(&got[1].as_ref().unwrap().chunks),
            vec![(0, "y".into())]
        );
    });
}

#[test]
fn a_long_poll_wakes_on_new_data_and_ends_at_its_deadline() {
    on_broker(|shard| async move {
        create(&shard, "t", 1).await;
        // Nothing there: answered empty once the (short) wait is over.
        let got = fetch(
            &shard,
            &request(vec![fetch_of("t", 0, 0)], 1, Duration::from_millis(50)),
        )
        .await;
        assert!(got[0].as_ref().unwrap().is_empty());
        // Waiting (for as long as the test may take), then woken by a produce.
        let s = shard.clone();
        let poll =
            spawn_local(
                async move { fetch(&s, &request(vec![fetch_of("t", 0, 0)], 1, WAIT)).await },
            );
        produce(&shard, "t", 0, &["late"]).await;
        let got = poll.await;
        assert_eq!(
            read_values(&got[0].as_ref().unwrap().chunks),
            vec![(0, "late".into())]
        );
    });
}

#[test]
fn offsets_commit_durably_and_read_back_only_at_the_coordinator() {
    on_broker(|shard| async move {
        // One offsets partition, on this shard: every group is coordinated here.
        groups::coordinated_here(&shard, "g").expect("coordinator");
        assert_eq!(
            groups::coordinated_here(&shard, "").unwrap_err().code,
            ErrorCode::InvalidGroupId
        );
        let (broker, s) = groups::coordinator(&shard, "g").expect("found");
        assert_eq!((broker.node_id, s), (1, 0));
        let committed = vec![PartitionOffset::new("t", 0, 42)];
        offsets::commit(&shard, "g", "", None, -1, committed)
            .await
            .expect("committed");
        let got = offsets::committed(&shard, "g", Some(vec![("t".into(), 0), ("t".into(), 1)]))
            .expect("fetched");
        assert_eq!(got[0].offset.as_ref().map(|o| o.offset), Some(42));
        assert_eq!(got[1].offset, None);
        let all = offsets::committed(&shard, "g", None).expect("all");
        assert_eq!((all.len(), all[0].partition), (1, 0));
        // The commit is in the log, not only in memory.
        let p = shard
            .partition(super::group_host::OFFSETS_TOPIC, 0)
            .expect("open");
        assert_eq!(p.high_watermark(), 1);
        assert_eq!(groups::describe(&shard, "g").unwrap().state, "Empty");
    });
}

#[test]
fn an_unanswered_produce_keeps_its_request_memory_until_durable() {
    on_broker(|shard| async move {
        create(&shard, "t", 1).await;
        let before = shard.request_memory.used();
        let mut grant = shard.request_memory.empty();
        grant.grow(1000).await.expect("budget");
        let bytes = batch(&["unanswered"]);
        let mut p = Produce::new();
        p.stage(&shard, "t", 0, &bytes, 0, Origin::Client)
            .expect("staged");
        let a = p
            .append(&shard, bytes, 0, 7)
            .pop()
            .unwrap()
            .expect("appended");
        let (partition, next) = (a.partition.clone(), a.next_offset);
        super::produce::hold_until_acked(&shard, vec![a.ack(0)], grant);
        // Not durable yet (the group commit has not run): still charged.
        assert_eq!(shard.request_memory.used(), before + 1000);
        let deadline = std::time::Instant::now() + WAIT;
        while shard.request_memory.used() > before {
            assert!(std::time::Instant::now() < deadline, "never released");
            shard.deadlines.sleep(Duration::from_millis(1)).await;
        }
        // Released only once the write is below the high watermark.
        assert!(partition.high_watermark() >= next);
    });
}

#[test]
fn offset_for_leader_epoch_answers_from_the_epoch_cache_and_checks_the_askers_epoch() {
    use super::leader_epochs::offset_for_leader_epoch;
    use crate::replication::EpochEnd;
    on_broker(|shard| async move {
        create(&shard, "t", 1).await;
        produce(&shard, "t", 0, &["a", "b"]).await;
        let ask = |current, epoch| offset_for_leader_epoch(&shard, "t", 0, current, epoch);
        let end = |epoch, end_offset| EpochEnd { epoch, end_offset };
        assert_eq!(ask(None, 0).expect("epoch 0"), end(0, 2));
        assert_eq!(ask(Some(0), 7).expect("the latest"), end(0, 2));
        // A new leadership (the controller's election, here by hand) starts at the log end.
        let p = shard.partition("t", 0).expect("open");
        p.lead(2).await.expect("lead at 2");
        produce(&shard, "t", 0, &["c"]).await;
        assert_eq!(ask(Some(2), 0).expect("epoch 0"), end(0, 2));
        assert_eq!(ask(Some(2), 1).expect("below 2"), end(0, 2));
        assert_eq!(ask(None, 2).expect("epoch 2"), end(2, 3));
        let code = |r: Result<EpochEnd, OpError>| r.map_err(|e| e.code);
        assert_eq!(code(ask(Some(1), 0)), Err(ErrorCode::FencedLeaderEpoch));
        assert_eq!(code(ask(Some(3), 0)), Err(ErrorCode::UnknownLeaderEpoch));
        assert_eq!(
            code(offset_for_leader_epoch(&shard, "nope", 0, None, 0)),
            Err(ErrorCode::UnknownTopicOrPartition)
        );
        // Every batch carries the epoch it was appended in.
        let got = fetch(&shard, &request(vec![fetch_of("t", 0, 0)], 1, WAIT)).await;
        let read = got.into_iter().next().unwrap().expect("read");
        let mut epochs = Vec::new();
        for c in &read.chunks {
            let bytes = crate::batch::aligned16(c.as_slice().expect("copied bytes"));
            for b in BatchIter::new(&bytes) {
                let h = *b.expect("valid").header();
                epochs.push((h.base_offset, h.leader_epoch));
            }
        }
        assert_eq!(epochs, vec![(0, 0), (2, 2)]);
    });
}

#[test]
fn a_group_is_answered_for_only_once_its_offsets_partition_is_loaded_here() {
    on_broker(|shard| async move {
        let committed = vec![PartitionOffset::new("t", 0, 9)];
        offsets::commit(&shard, "g", "", None, -1, committed)
            .await
            .expect("committed");
        let epoch = shard
            .metadata
            .borrow()
            .topic(super::group_host::OFFSETS_TOPIC)
            .expect("offsets topic")
            .partitions[0]
            .leader_epoch;
        // Loading again (as a new leader would): the group waits, its offsets are gone from
        // memory until the replay.
        shard.groups.begin_load(0, 1, epoch);
        assert_eq!(
            groups::coordinated_here(&shard, "g").unwrap_err().code,
            ErrorCode::CoordinatorLoadInProgress
        );
        let p = shard
            .partition(super::group_host::OFFSETS_TOPIC, 0)
            .expect("open");
        assert!(super::offsets_log::replay(&shard, &p, || true).await);
        assert!(shard.groups.finish_load(0, epoch));
        let got = offsets::committed(&shard, "g", None).expect("loaded");
        assert_eq!(got[0].offset.as_ref().map(|o| o.offset), Some(9));
        // Led no longer: NOT a coordinator's state any more.
        shard.groups.unload(0, 1);
        assert_eq!(
            groups::coordinated_here(&shard, "g").unwrap_err().code,
            ErrorCode::CoordinatorLoadInProgress,
            "the metadata still names this shard: it waits for the next load"
        );
        assert!(shard.groups.all_committed("g").is_empty());
    });
}

//! Acknowledged data across restarts and damage, against real broker processes: many small
//! batches in segments far larger than any read buffer, flipped header bytes in closed
//! segments, a missing segment, a cut active tail. Damage is an error to every consumer
//! (native and Kafka), never a silent hole, a loop or a reused offset.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rill::client::{
    ClientConfig, ClientError, ConsumedRecord, Consumer, ConsumerConfig, ProducerConfig,
    ProducerRecord, StartFrom,
};
use rill::protocol::ErrorCode;
use rill_testkit::{
    consume_exactly, partition_dir, produce_values, producer, segment_files, values, TestBroker,
    DEADLINE,
};

/// The byte position of the batch holding `offset` in a segment file.
fn position_of(path: &Path, offset: u64) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let mut at = 0usize;
    loop {
        let h = rill::batch::BatchHeader::decode(&bytes[at..]).expect("a batch header");
        if h.next_offset() > offset {
            return at as u64;
        }
        at += h.length as usize;
    }
}

fn flip(path: &Path, position: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, position).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, position).unwrap();
    f.sync_all().unwrap();
}

fn base_of(path: &Path) -> u64 {
    rill::log::segment::parse_segment_file_name(path.file_name().unwrap().to_str().unwrap())
        .unwrap()
}

/// Polls from the beginning until an error: returns the records read before it and the error.
fn read_until_error(b: &TestBroker, topic: &str) -> (Vec<ConsumedRecord>, ClientError) {
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default())
        .expect("consumer");
    c.assign(topic, None, StartFrom::Beginning).unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    loop {
        match c.poll(Duration::from_millis(200)) {
            Ok(r) => got.extend(r.to_owned()),
            Err(e) => return (got, e),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no error after {} records",
            got.len()
        );
    }
}

/// The offset a partition's high watermark checkpoint holds, once there is one.
fn checkpointed_high_watermark(dir: &Path) -> Option<u64> {
    let bytes = std::fs::read(dir.join("high-watermark")).ok()?;
    Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}

fn assert_corrupt(e: &ClientError, what: &str) {
    match e {
        ClientError::Broker { code, message } => {
            assert_eq!(*code, ErrorCode::CorruptMessage, "{message}");
            assert!(message.contains(what), "{message} (wanted {what})");
        }
        other => panic!("expected CORRUPT_MESSAGE, got {other}"),
    }
}

/// A produce to a partition that must refuse writes fails with KAFKA_STORAGE_ERROR, quickly.
fn assert_produce_refused(b: &TestBroker, topic: &str) {
    let p = rill::client::Producer::new(
        ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            delivery_timeout: Duration::from_secs(3),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let r = p
        .send(ProducerRecord::new(topic, &b"late"[..]).partition(0))
        .unwrap();
    let _ = p.flush();
    let e = r.wait().expect_err("a failed partition takes no writes");
    assert!(e.to_string().contains("KAFKA_STORAGE_ERROR"), "{e}");
}

#[test]
fn a_hundred_thousand_single_record_batches_survive_sigterm_and_sigkill() {
    // Observed: 120,000 single-record batches, SIGTERM, restart: 8,738 left. 128 MiB segments
    // (the default), ~13 MiB per partition: every partition's scan crosses 4 MiB read ends.
    let mut b = TestBroker::start(2, &[]);
    b.client().create_topic("many", 4, 1, vec![]).unwrap();
    const N: usize = 120_000;
    let p = producer(&b, 512);
    let pad = "x".repeat(330);
    let reports: Vec<_> = (0..N)
        .map(|i| {
            let v = format!("{i:08}{pad}");
            p.send(ProducerRecord::new("many", v.as_bytes()).key(format!("k{}", i % 61).as_bytes()))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
    drop(p);
    let check = |b: &TestBroker, when: &str| {
        let got = consume_exactly(b, "many", StartFrom::Beginning, N);
        let mut seen: Vec<usize> = got
            .iter()
            .map(|r| {
                std::str::from_utf8(&r.value.as_deref().unwrap_or_default()[..8])
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        seen.sort_unstable();
        assert!(
            seen.iter().copied().eq(0..N),
            "{when}: records lost or doubled"
        );
    };
    assert!(b.terminate().success());
    b.start_again();
    check(&b, "after SIGTERM");
    b.kill();
    b.start_again();
    check(&b, "after SIGKILL");
    assert!(
        !b.log_text().contains("torn"),
        "nothing was torn: {}",
        b.log_text()
    );
}

#[test]
fn a_flipped_header_byte_in_a_closed_segment_is_an_error_to_every_consumer() {
    for file_reads in ["sendfile", "copy"] {
        let mut b = TestBroker::start_kafka(
            1,
            &[
                "--segment-bytes",
                "65536",
                "--tail-cache-bytes",
                "0",
                "--file-reads",
                file_reads,
            ],
        );
        b.client().create_topic("flip", 1, 1, vec![]).unwrap();
        produce_values(
            &b,
            "flip",
            0,
            (0..3000).map(|i| format!("m{i:05}-{}", "y".repeat(60))),
        );
        assert!(b.terminate().success());
        let dir = partition_dir(&b.data_dir(), "flip", 0);
        let files = segment_files(&dir);
        assert!(files.len() >= 3, "closed segments to damage");
        // The base offset of a batch in the middle of the second segment (closed, indexed).
        let base = base_of(&files[1]);
        let victim = base + 200;
        let pos = position_of(&files[1], victim);
        let bytes = std::fs::read(&files[1]).unwrap();
        let h = rill::batch::BatchHeader::decode(&bytes[pos as usize..]).unwrap();
        flip(&files[1], pos + 9, 0x01);
        b.start_again();

        // Native: every record before the damaged batch, then CORRUPT_MESSAGE naming it.
        let (got, e) = read_until_error(&b, "flip");
        assert_eq!(got.len() as u64, h.base_offset, "{file_reads}");
        let want: Vec<String> = (0..h.base_offset)
            .map(|i| format!("m{i:05}-{}", "y".repeat(60)))
            .collect();
        assert_eq!(values(&got), want, "{file_reads}");
        assert_corrupt(&e, &format!("offset {}", h.base_offset));

        // The CLI stops with a one-line error and a non-zero exit, not exit 0 at the hole.
        let out = b.cli(
            &[
                "consume",
                "flip",
                "--from",
                "beginning",
                "--timeout-ms",
                "20000",
            ],
            None,
        );
        assert!(!out.status.success(), "{file_reads}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("CORRUPT_MESSAGE"), "{file_reads}: {err}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count() as u64,
            h.base_offset
        );

        // A Kafka consumer gets an error too, instead of retrying silently forever.
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
        let out = Command::new("python3")
            .args([script, "consume", &b.kafka_bootstrap(), "flip", "1", "3000"])
            .stdin(Stdio::null())
            .output()
            .expect("python3 with confluent-kafka (run .ci/run)");
        assert!(!out.status.success(), "{file_reads}: read past the damage");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("consume error"), "{file_reads}: {err}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count() as u64,
            h.base_offset,
            "{file_reads}: the Kafka consumer reads everything before the damage"
        );
    }
}

#[test]
fn a_missing_middle_segment_is_a_loud_hole_not_a_shorter_log() {
    let mut b = TestBroker::start(1, &["--segment-bytes", "65536"]);
    b.client().create_topic("holes", 1, 1, vec![]).unwrap();
    produce_values(
        &b,
        "holes",
        0,
        (0..3000).map(|i| format!("h{i:05}-{}", "z".repeat(60))),
    );
    let end_before = b.client().describe_topic("holes").unwrap().partitions[0].log_end_offset;
    assert!(b.terminate().success());
    let dir = partition_dir(&b.data_dir(), "holes", 0);
    let files = segment_files(&dir);
    assert!(files.len() >= 4);
    let (from, to) = (base_of(&files[1]), base_of(&files[2]));
    for ext in ["log", "index", "timeindex"] {
        let _ = std::fs::remove_file(files[1].with_extension(ext));
    }
    b.start_again();
    // The log end does not move back, reads stop at the hole with an error naming it.
    let d = b.client().describe_topic("holes").unwrap();
    assert_eq!(d.partitions[0].log_end_offset, end_before);
    let (got, e) = read_until_error(&b, "holes");
    assert_eq!(got.len() as u64, from);
    assert_corrupt(&e, &format!("{from}..{to}"));
    // Past the hole the data is still there.
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default()).unwrap();
    c.assign("holes", None, StartFrom::Offset(to)).unwrap();
    let mut after = Vec::new();
    let start = Instant::now();
    while (after.len() as u64) < end_before - to {
        after.extend(c.poll(Duration::from_millis(200)).unwrap().to_owned());
        assert!(start.elapsed() < DEADLINE);
    }
    assert_eq!(after[0].offset, to);
    assert_produce_refused(&b, "holes");
}

#[test]
fn acknowledged_offsets_are_never_handed_out_again_after_the_tail_is_cut() {
    for stop in ["sigterm", "sigkill"] {
        let mut b = TestBroker::start(
            1,
            &["--replica-high-watermark-checkpoint-interval-ms", "100"],
        );
        b.client().create_topic("cut", 1, 1, vec![]).unwrap();
        produce_values(&b, "cut", 0, (0..100).map(|i| format!("c{i}")));
        let dir = partition_dir(&b.data_dir(), "cut", 0);
        if stop == "sigterm" {
            assert!(b.terminate().success());
        } else {
            // The checkpoint is periodic: wait until it covers the acknowledged records.
            let start = Instant::now();
            while checkpointed_high_watermark(&dir) != Some(100) {
                assert!(start.elapsed() < DEADLINE, "no high watermark checkpoint");
                std::thread::sleep(Duration::from_millis(20));
            }
            b.kill();
        }
        let seg = segment_files(&dir).pop().unwrap();
        let cut = position_of(&seg, 60);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(cut)
            .unwrap();
        b.start_again();
        let d = b.client().describe_topic("cut").unwrap();
        assert_eq!(
            d.partitions[0].log_end_offset, 100,
            "{stop}: log end went back"
        );

        let (got, e) = read_until_error(&b, "cut");
        let want: Vec<String> = (0..got.len()).map(|i| format!("c{i}")).collect();
        assert_eq!(values(&got), want);
        assert!(got.len() <= 60);
        assert_corrupt(&e, "..100");
        assert_produce_refused(&b, "cut");
        assert!(b.log_text().contains("acknowledged"), "{}", b.log_text());
    }
}

/// `--replica-high-watermark-checkpoint-bytes`: a shard checkpoints once it wrote that many
/// bytes, long before the interval (an hour here) comes round (`--fsync never`: with `always`
/// every round is synced and the trigger is not used). Below 1 MiB it is refused.
#[test]
fn a_shard_checkpoints_its_high_watermarks_once_it_wrote_the_checkpoint_bytes() {
    let mut bad = TestBroker::unstarted(
        1,
        &[
            "--replica-high-watermark-checkpoint-bytes".into(),
            "65536".into(),
        ],
    );
    bad.launch();
    assert!(!bad.wait_exit().success());
    assert!(
        bad.log_text()
            .contains("--replica-high-watermark-checkpoint-bytes must be 0 (by time only) or at least 1048576"),
        "{}",
        bad.log_text()
    );

    let b = TestBroker::start(
        1,
        &[
            "--fsync",
            "never",
            "--replica-high-watermark-checkpoint-interval-ms",
            "3600000",
            "--replica-high-watermark-checkpoint-bytes",
            "1048576",
        ],
    );
    b.client().create_topic("bytes", 1, 1, vec![]).unwrap();
    // 3,000 records of 1 KiB: about 3 MiB written, past the 1 MiB trigger.
    let value = "v".repeat(1024);
    produce_values(&b, "bytes", 0, (0..3000).map(|_| value.clone()));
    let dir = partition_dir(&b.data_dir(), "bytes", 0);
    let start = Instant::now();
    let mut checkpointed = None;
    while checkpointed.is_none_or(|hw| hw == 0) {
        assert!(
            start.elapsed() < DEADLINE,
            "no checkpoint after 3 MiB written: {checkpointed:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
        checkpointed = checkpointed_high_watermark(&dir);
    }
    // A checkpoint never claims more than was acknowledged.
    assert!(
        checkpointed.is_some_and(|hw| hw <= 3000),
        "{checkpointed:?}"
    );
}

/// A shard checkpoints its partitions' high watermarks several at once: each partition's
/// file holds its own high watermark.
#[test]
fn a_checkpoint_of_many_partitions_records_each_its_own_high_watermark() {
    let metrics = format!("127.0.0.1:{}", rill_testkit::free_ports(1));
    let b = TestBroker::start(
        1,
        &[
            "--fsync",
            "never",
            "--replica-high-watermark-checkpoint-interval-ms",
            "100",
            "--replica-high-watermark-checkpoint-threads",
            "3",
            "--metrics-listen",
            &metrics,
        ],
    );
    let partitions = 12u32;
    b.client()
        .create_topic("many", partitions, 1, vec![])
        .unwrap();
    for p in 0..partitions {
        produce_values(&b, "many", p, (0..=p).map(|i| format!("p{p}-{i}")));
    }
    let start = Instant::now();
    for p in 0..partitions {
        let dir = partition_dir(&b.data_dir(), "many", p);
        let want = u64::from(p) + 1;
        while checkpointed_high_watermark(&dir) != Some(want) {
            assert!(
                start.elapsed() < DEADLINE,
                "partition {p}: checkpoint {:?}, {want} acknowledged",
                checkpointed_high_watermark(&dir)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Each checkpoint that wrote files is timed.
    let text = rill_testkit::scrape_metrics(&metrics);
    let timed: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"rill_high_watermark_checkpoint_duration_seconds_count{shard="0"} "#)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no checkpoint duration in {text}"));
    assert!(timed >= 1.0, "{text}");
}

/// Bytes the files under `dir` occupy on disk (allocated blocks, as `du` counts them).
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            allocated_bytes(&e.path())
        } else {
            m.blocks() * 512
        };
    }
    total
}

#[test]
fn two_hundred_empty_partitions_hold_one_preallocation_step_each() {
    // Observed: every partition fallocated a whole 128 MiB segment at once, so a few hundred
    // small topics filled a 90 GB disk.
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("wide", 200, 1, vec![]).unwrap();
    let used = allocated_bytes(&b.data_dir());
    let step = 16u64 << 20;
    // 200 partitions and the 8 of __consumer_offsets, one step each, plus metadata.
    assert!(used < 4 << 30, "{used} bytes for empty partitions");
    assert!(used <= (200 + 8) * step + (64 << 20), "{used} bytes");
    // Writes go on past the first step (and a restart finds them all).
    let p = producer(&b, 256 << 10);
    let value = vec![b'w'; 4000];
    let reports: Vec<_> = (0..10_000)
        .map(|_| {
            p.send(ProducerRecord::new("wide", &value[..]).partition(7))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
    let dir = partition_dir(&b.data_dir(), "wide", 7);
    let seg = segment_files(&dir).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    assert!(
        len > step && len.is_multiple_of(step),
        "grown in steps: {len}"
    );
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default()).unwrap();
    c.assign("wide", Some(vec![7]), StartFrom::Beginning)
        .unwrap();
    let mut n = 0;
    let start = Instant::now();
    while n < 10_000 {
        n += c.poll(Duration::from_millis(200)).unwrap().iter().count();
        assert!(start.elapsed() < DEADLINE, "read {n}");
    }
    assert_eq!(n, 10_000);
}

/// `--write-caching` (bare, as a switch): records are acknowledged from memory and read back
/// exactly; a clean stop writes everything behind before it exits, so a restart finds all of
/// it, also what `--write-caching-flush-ms` still held back. Also per topic:
/// `write.caching=false` overrides the flag. A zero bound and an over-long delay are refused.
#[test]
fn write_caching_reads_back_exactly_and_a_clean_stop_writes_everything_behind() {
    for (flag, value, why) in [
        (
            "--write-caching-max-bytes",
            "0",
            "--write-caching-max-bytes must be at least 1",
        ),
        (
            "--write-caching-flush-ms",
            "3600001",
            "--write-caching-flush-ms is at most 3600000",
        ),
    ] {
        let mut bad = TestBroker::unstarted(1, &[flag.into(), value.into()]);
        bad.launch();
        assert!(!bad.wait_exit().success());
        assert!(bad.log_text().contains(why), "{}", bad.log_text());
    }

    // Written behind after an hour or at 1 MiB pending: the last few hundred KiB of each
    // cached partition are still unwritten when the broker is told to stop.
    let mut b = TestBroker::start(
        2,
        &[
            "--write-caching",
            "--fsync",
            "always",
            "--write-caching-flush-ms",
            "3600000",
        ],
    );
    b.client().create_topic("cached", 4, 1, vec![]).unwrap();
    let off = vec![("write.caching".to_string(), "false".to_string())];
    b.client().create_topic("uncached", 2, 1, off).unwrap();
    const N: usize = 20_000;
    let mut rng = rill_testkit::Rng::seeded();
    let sent: Vec<String> = (0..N)
        .map(|i| format!("{i:08}{}", "y".repeat(rng.below(3_000) as usize)))
        .collect();
    for topic in ["cached", "uncached"] {
        let p = producer(&b, 64 << 10);
        let reports: Vec<_> = sent
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = format!("k{}", i % 97);
                p.send(ProducerRecord::new(topic, v.as_bytes()).key(key.as_bytes()))
                    .unwrap()
            })
            .collect();
        p.flush().unwrap();
        for r in reports {
            r.wait().unwrap();
        }
    }
    let check = |b: &TestBroker, when: &str| {
        for topic in ["cached", "uncached"] {
            let mut got = values(&consume_exactly(b, topic, StartFrom::Beginning, N));
            got.sort_unstable();
            let mut want = sent.clone();
            want.sort_unstable();
            assert!(
                got == want,
                "{when}: {topic}: records lost, doubled or changed"
            );
        }
    };
    check(&b, "while running");
    assert!(b.terminate().success());
    b.start_again();
    check(&b, "after SIGTERM");
}

/// The open flags (octal, as `/proc/PID/fdinfo` prints them) of every descriptor process
/// `pid` holds on `path`.
fn open_flags(pid: u32, path: &Path) -> Vec<u32> {
    let path = path.canonicalize().unwrap();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == path))
        .map(|fd| {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .expect("a flags line");
            u32::from_str_radix(flags.trim(), 8).unwrap()
        })
        .collect()
}

/// With `--fsync always` the active segment is written O_DSYNC (each write durable when it
/// completes, no fdatasync after it), unless `--fsync-o-dsync false`; with `never` it is not.
/// Either way every acknowledged record is read back after a restart.
#[test]
fn with_fsync_always_the_active_segment_is_written_o_dsync() {
    for (fsync, o_dsync, dsync) in [
        ("always", "true", true),
        ("always", "false", false),
        ("never", "true", false),
    ] {
        let mut b = TestBroker::start(1, &["--fsync", fsync, "--fsync-o-dsync", o_dsync]);
        b.client().create_topic("d", 1, 1, vec![]).unwrap();
        produce_values(&b, "d", 0, (0..200).map(|i| format!("{fsync}-{i}")));
        let dir = partition_dir(&b.data_dir(), "d", 0);
        let active = segment_files(&dir).pop().expect("a segment");
        let flags = open_flags(b.pid().expect("running"), &active);
        let written = flags
            .iter()
            .filter(|&&f| f & libc::O_ACCMODE as u32 == libc::O_RDWR as u32)
            .collect::<Vec<_>>();
        let mode = format!("--fsync {fsync} --fsync-o-dsync {o_dsync}");
        assert_eq!(written.len(), 1, "{mode}: descriptors {flags:?}");
        assert_eq!(
            written[0] & libc::O_DSYNC as u32 != 0,
            dsync,
            "{mode}: flags {:o}",
            written[0]
        );
        assert!(b.terminate().success());
        b.start_again();
        let got = consume_exactly(&b, "d", StartFrom::Beginning, 200);
        assert_eq!(
            values(&got),
            (0..200).map(|i| format!("{fsync}-{i}")).collect::<Vec<_>>()
        );
    }
}

/// A flipped byte inside a stored batch's records (its header intact) in a closed segment:
/// the Kafka listener converts what it reads (the segment reader checks each batch's CRC),
/// so a Kafka fetch gets every record before the damaged batch, then CORRUPT_MESSAGE there,
/// never the wrong value under a fresh Kafka CRC.
#[test]
fn a_flipped_record_byte_on_disk_is_corrupt_message_to_a_kafka_fetch() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    use kafka_protocol::records::RecordBatchDecoder;
    let mut b = TestBroker::start_kafka(1, &["--segment-bytes", "65536"]);
    b.client().create_topic("rot", 1, 1, vec![]).unwrap();
    let value = |i: u64| format!("r{i:05}-{}", "z".repeat(60));
    produce_values(&b, "rot", 0, (0..3000).map(value));
    assert!(b.terminate().success());
    let files = segment_files(&partition_dir(&b.data_dir(), "rot", 0));
    assert!(files.len() >= 3, "closed segments to damage");
    let pos = position_of(&files[1], base_of(&files[1]) + 200);
    let bytes = std::fs::read(&files[1]).unwrap();
    let h = rill::batch::BatchHeader::decode(&bytes[pos as usize..]).unwrap();
    // The body starts after the 80-byte header with the records' bytes: a value's byte.
    let at_byte = pos + 80 + 40;
    assert_eq!(bytes[at_byte as usize], b'z', "a value byte");
    flip(&files[1], at_byte, 0x01);
    b.start_again();

    let mut at = 0u64;
    let mut got = Vec::new();
    let start = Instant::now();
    loop {
        let req = rill_testkit::kafka_fetch_request("rot", 0, at as i64, -1);
        let r: FetchResponse =
            rill_testkit::kafka_call(&b.kafka_bootstrap(), ApiKey::Fetch, 12, &req);
        let pd = &r.responses[0].partitions[0];
        if let Some(records) = pd.records.clone().filter(|r| !r.is_empty()) {
            for set in RecordBatchDecoder::decode_all(&mut records.clone()).unwrap() {
                let from = at;
                for rec in set.records.iter().filter(|r| r.offset as u64 >= from) {
                    assert_eq!(rec.offset as u64, at);
                    got.push(String::from_utf8(rec.value.clone().unwrap().to_vec()).unwrap());
                    at += 1;
                }
            }
        }
        if pd.error_code != 0 {
            assert_eq!(pd.error_code, ErrorCode::CorruptMessage.code());
            break;
        }
        assert!(start.elapsed() < DEADLINE, "no error after {at} records");
    }
    assert_eq!(at, h.base_offset, "served up to the damaged batch");
    assert_eq!(got, (0..h.base_offset).map(value).collect::<Vec<_>>());
}

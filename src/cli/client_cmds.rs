//! The client commands: topic, produce, consume, group, cluster.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use super::args::{ClusterCommand, Command, ConsumeArgs, ProduceArgs, TopicCommand};
use crate::batch::TagFilter;
use crate::client::{
    Acks, Client, ClientConfig, ClientError, Consumer, ConsumerConfig, ConsumerRecord, Delivery,
    DeliveryFuture, GroupConsumer, GroupConsumerConfig, Isolation, OffsetReset, PendingCommit,
    Producer, ProducerConfig, ProducerRecord, StartFrom, TransactionConfig, TransactionalProducer,
};

pub fn run(target: &ClientConfig, cmd: Command) -> Result<(), String> {
    match cmd {
        Command::Broker(_) | Command::Tune(_) => unreachable!("handled by the caller"),
        Command::Group(g) => super::group_cmds::run(target, g),
        Command::Topic(t) => topic(connect(target)?, t),
        Command::Produce(p) => produce(target, p),
        Command::Consume(c) => consume(target, c),
        Command::User(u) => super::user_cmds::run(&mut connect(target)?, u),
        Command::Acl(a) => super::acl_cmds::run(&mut connect(target)?, a),
        Command::Quota(q) => super::quota_cmds::run(&mut connect(target)?, q),
        Command::Cluster(ClusterCommand::Info) => cluster_info(connect(target)?),
        Command::Cluster(ClusterCommand::DrainBroker {
            node_id,
            wait,
            timeout_ms,
        }) => drain_broker(
            connect(target)?,
            node_id,
            wait.then(|| Duration::from_millis(timeout_ms)),
        ),
        Command::Cluster(ClusterCommand::ElectPreferred { topic, partition }) => {
            let changed = connect(target)?
                .elect_preferred(topic.as_deref(), partition)
                .map_err(|e| format!("cannot elect preferred leaders: {e}"))?;
            println!("{changed} partitions moved to their preferred leader");
            Ok(())
        }
    }
}

fn connect(target: &ClientConfig) -> Result<Client, String> {
    Client::connect(target.clone()).map_err(|e| e.to_string())
}

fn topic(mut client: Client, cmd: TopicCommand) -> Result<(), String> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let kv = parse_configs(&configs)?;
            client
                .create_topic(&name, partitions, replication_factor, kv)
                .map_err(|e| format!("cannot create topic '{name}': {e}"))?;
            println!("created topic {name} with {partitions} partitions");
            Ok(())
        }
        TopicCommand::AlterConfig { name, configs } => {
            let kv = parse_configs(&configs)?;
            client
                .alter_topic_config(&name, kv)
                .map_err(|e| format!("cannot alter topic '{name}': {e}"))?;
            println!("altered topic {name}");
            Ok(())
        }
        TopicCommand::List => {
            for n in client.list_topics().map_err(|e| e.to_string())? {
                println!("{n}");
            }
            Ok(())
        }
        TopicCommand::Describe { name } => describe(&mut client, &name),
        TopicCommand::Delete { name } => {
            client
                .delete_topic(&name)
                .map_err(|e| format!("cannot delete topic '{name}': {e}"))?;
            println!("deleted topic {name}");
            Ok(())
        }
        TopicCommand::Decommission { name, partition } => {
            client
                .decommission(&name, partition)
                .map_err(|e| format!("cannot decommission {name}-{partition}: {e}"))?;
            println!(
                "{name}-{partition}: writes stopped; its files go once its data is past retention"
            );
            Ok(())
        }
        TopicCommand::AddPartitions { name, count } => {
            client
                .add_partitions(&name, count)
                .map_err(|e| format!("cannot add partitions to '{name}': {e}"))?;
            println!("topic {name} now has {count} partitions (keys may map to other partitions from now on)");
            Ok(())
        }
        TopicCommand::Reassign {
            name,
            partition,
            replicas,
            cancel,
        } => {
            let target = (!cancel).then_some(replicas);
            client
                .reassign_partition(&name, partition, target.clone())
                .map_err(|e| format!("cannot reassign {name}-{partition}: {e}"))?;
            match target {
                Some(r) => println!(
                    "{name}-{partition}: reassigning to replicas {r:?} (see `rill topic describe {name}`)"
                ),
                None => println!("{name}-{partition}: reassignment cancelled"),
            }
            Ok(())
        }
        TopicCommand::Truncate {
            name,
            partition,
            before,
        } => {
            let start = client
                .truncate(&name, partition, before)
                .map_err(|e| format!("cannot truncate {name}-{partition}: {e}"))?;
            println!("{name}-{partition}: log start offset is now {start}");
            Ok(())
        }
    }
}

fn parse_configs(configs: &[String]) -> Result<Vec<(String, String)>, String> {
    configs
        .iter()
        .map(|c| {
            c.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--config '{c}': expected KEY=VALUE"))
        })
        .collect()
}

fn describe(client: &mut Client, name: &str) -> Result<(), String> {
    let t = client.describe_topic(name).map_err(|e| e.to_string())?;
    println!(
        "topic {} id {} partitions {}",
        t.name,
        t.id,
        t.partitions.len()
    );
    for (k, v) in &t.configs {
        println!("  config {k}={v}");
    }
    for p in &t.partitions {
        let leader = match &p.route {
            Some(r) => format!(
                "leader broker {} shard {} address {}",
                r.broker, r.shard, r.addr
            ),
            None => "leader none (offline)".to_string(),
        };
        println!(
            "  partition {} {leader} epoch {} replicas {:?} isr {:?} log-start {} log-end {} segments {} bytes {}",
            p.partition,
            p.leader_epoch,
            p.replicas,
            p.isr,
            p.log_start_offset,
            p.log_end_offset,
            p.segments,
            p.size_bytes
        );
        if !p.adding.is_empty() || !p.removing.is_empty() {
            println!(
                "    reassigning adding {:?} removing {:?}",
                p.adding, p.removing
            );
        }
    }
    Ok(())
}

/// Submits a drain of broker `node`; with `wait`, polls the metadata until no partition
/// has a replica on it any more.
fn drain_broker(mut client: Client, node: u32, wait: Option<Duration>) -> Result<(), String> {
    let moves = client
        .drain_broker(node)
        .map_err(|e| format!("cannot drain broker {node}: {e}"))?;
    let mut refused = 0;
    for m in &moves {
        if m.error_code == 0 {
            println!(
                "{}-{}: reassigning to replicas {:?}",
                m.topic, m.partition, m.replicas
            );
        } else {
            refused += 1;
            eprintln!("{}-{}: {}", m.topic, m.partition, m.message);
        }
    }
    if refused > 0 {
        return Err(format!(
            "drain of broker {node}: {refused} of {} partitions were not submitted",
            moves.len()
        ));
    }
    let Some(timeout) = wait else {
        println!("broker {node}: {} reassignments submitted", moves.len());
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    loop {
        let md = client.refresh_metadata().map_err(|e| e.to_string())?;
        let left = md
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.replicas.contains(&node))
            .count();
        if left == 0 {
            println!("broker {node} holds no partition replicas");
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "broker {node} still holds {left} partition replicas after {} ms",
                timeout.as_millis()
            ));
        }
        std::thread::sleep(DRAIN_POLL);
    }
}

/// How often `drain-broker --wait` looks at the metadata.
const DRAIN_POLL: Duration = Duration::from_millis(250);

fn cluster_info(mut client: Client) -> Result<(), String> {
    let info = client.cluster_info().map_err(|e| e.to_string())?;
    println!("cluster {}", info.cluster_id);
    println!("controller {}", info.controller_id);
    println!(
        "voters {}",
        info.voters
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    for b in &info.brokers {
        println!(
            "broker {} {} host {} shards {} ports {}-{}{}",
            b.node_id,
            b.state,
            b.host,
            b.shards,
            b.port,
            u32::from(b.port) + b.shards.max(1) - 1,
            b.rack
                .as_ref()
                .map(|r| format!(" rack {r}"))
                .unwrap_or_default()
        );
    }
    println!("topics {}", info.topics);
    Ok(())
}

fn produce(target: &ClientConfig, a: ProduceArgs) -> Result<(), String> {
    if let Some(ms) = a.delay_ms.filter(|ms| *ms < 0) {
        return Err(format!("--delay-ms {ms}: a delay cannot be negative"));
    }
    let acks: Acks = a.acks.parse().map_err(|e| format!("--acks: {e}"))?;
    if a.batch_bytes == 0 {
        return Err("--batch-bytes must be at least 1".into());
    }
    // In the order given, repeated names kept: Kafka headers are a list. A bare `K` is a
    // header with a null value (as kcat's -H), `K=` one with an empty value.
    let headers: Vec<(String, Option<Vec<u8>>)> = a
        .headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.as_bytes().to_vec())),
            None => (h.clone(), None),
        })
        .collect();
    let cfg = ProducerConfig {
        acks,
        linger: Duration::from_millis(a.linger_ms),
        batch_bytes: a.batch_bytes,
        ..ProducerConfig::default()
    };
    let producer = match &a.transactional_id {
        Some(id) => {
            if a.delay_ms.is_some() {
                return Err("--delay-ms cannot be used with --transactional-id".into());
            }
            if acks != Acks::All {
                return Err("--transactional-id needs --acks all".into());
            }
            let txn = TransactionConfig {
                transactional_id: id.clone(),
                transaction_timeout: Duration::from_millis(a.transaction_timeout_ms),
            };
            let p =
                TransactionalProducer::init(target.clone(), cfg, txn).map_err(|e| e.to_string())?;
            p.begin().map_err(|e| e.to_string())?;
            Sink::Transactional(Box::new(p))
        }
        None => Sink::Plain(Producer::new(target.clone(), cfg).map_err(|e| e.to_string())?),
    };
    let r = produce_lines(target, &a, &headers, &producer);
    match (producer, r) {
        (Sink::Transactional(p), Ok(())) => p.commit().map_err(|e| format!("commit: {e}")),
        (Sink::Transactional(p), Err(e)) => match p.abort() {
            Ok(()) => Err(format!("{e} (the transaction was aborted)")),
            Err(abort) => Err(format!("{e} (and the abort failed: {abort})")),
        },
        (Sink::Plain(_), r) => r,
    }
}

/// Where `rill produce` sends: a plain producer, or one transaction for the whole input.
enum Sink {
    Plain(Producer),
    Transactional(Box<TransactionalProducer>),
}

impl Sink {
    fn partitions_for(&self, topic: &str) -> Result<u32, ClientError> {
        match self {
            Sink::Plain(p) => p.partitions_for(topic),
            Sink::Transactional(p) => p.partitions_for(topic),
        }
    }
    fn send(&self, r: ProducerRecord<'_>) -> Result<DeliveryFuture, ClientError> {
        match self {
            Sink::Plain(p) => p.send(r),
            Sink::Transactional(p) => p.send(r),
        }
    }
    fn flush(&self) -> Result<(), ClientError> {
        match self {
            Sink::Plain(p) => p.flush(),
            Sink::Transactional(p) => p.flush(),
        }
    }
}

/// Sends stdin's lines; every delivery report checked.
fn produce_lines(
    target: &ClientConfig,
    a: &ProduceArgs,
    headers: &[(String, Option<Vec<u8>>)],
    producer: &Sink,
) -> Result<(), String> {
    // Fail before reading stdin if the topic or partition does not exist.
    let n = producer
        .partitions_for(&a.topic)
        .map_err(|e| e.to_string())?;
    if let Some(p) = a.partition.filter(|p| *p >= n) {
        return Err(format!(
            "topic '{}' has {n} partitions, no partition {p}",
            a.topic
        ));
    }
    // Reports are checked in order as they come in, so a failure stops the run early and
    // memory stays bounded by the producer's buffer.
    let mut reports = std::collections::VecDeque::new();
    // Delayed messages go one by one, each answered once the broker holds it durably.
    let mut delayed = match a.delay_ms {
        Some(ms) => Some((
            Client::connect(target.clone()).map_err(|e| e.to_string())?,
            ms,
        )),
        None => None,
    };
    let check = |r: DeliveryFuture| r.wait().map(|_| ()).map_err(|e| e.to_string());
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let (key, value) = match &a.key_separator {
            Some(sep) if !sep.is_empty() => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.as_bytes()), v.as_bytes()),
                None => (None, line.as_bytes()),
            },
            _ => (None, line.as_bytes()),
        };
        let mut record = ProducerRecord::new(&a.topic, value)
            .headers(headers)
            .tags(&a.tags);
        record.key = key;
        record.partition = a.partition;
        if let Some((client, ms)) = delayed.as_mut() {
            let at = crate::clock::now_ms().saturating_add(*ms);
            client
                .produce_delayed(&record, at)
                .map_err(|e| e.to_string())?;
            continue;
        }
        reports.push_back(producer.send(record).map_err(|e| e.to_string())?);
        while reports
            .front()
            .is_some_and(|r: &DeliveryFuture| r.try_get().is_some())
        {
            check(reports.pop_front().expect("checked"))?;
        }
    }
    producer.flush().map_err(|e| e.to_string())?;
    for r in reports {
        check(r)?;
    }
    Ok(())
}

fn parse_from(v: &str) -> Result<StartFrom, String> {
    match v {
        "beginning" | "earliest" => Ok(StartFrom::Beginning),
        "end" | "latest" => Ok(StartFrom::End),
        _ => {
            if let Some(ms) = v.strip_prefix('@') {
                return ms
                    .parse()
                    .map(StartFrom::Timestamp)
                    .map_err(|_| format!("--from '{v}': expected @UNIX_MS"));
            }
            v.parse().map(StartFrom::Offset).map_err(|_| {
                format!("--from '{v}': expected beginning, end, an offset or @UNIX_MS")
            })
        }
    }
}

/// `--isolation read_uncommitted|read_committed` (Kafka's `isolation.level`; default
/// read_uncommitted). Tag filters read uncommitted: the two do not combine.
fn parse_isolation(a: &ConsumeArgs) -> Result<Isolation, String> {
    let isolation: Isolation = match &a.isolation {
        Some(i) => i.parse().map_err(|e| format!("--isolation: {e}"))?,
        None => Isolation::default(),
    };
    if isolation == Isolation::ReadCommitted && !a.tags.is_empty() {
        return Err("--isolation read_committed cannot be used with --tags".into());
    }
    Ok(isolation)
}

fn consume(target: &ClientConfig, a: ConsumeArgs) -> Result<(), String> {
    if a.tags_all && a.tags.is_empty() {
        return Err("--tags-all needs --tags".into());
    }
    let isolation = parse_isolation(&a)?;
    let from = parse_from(&a.from)?;
    if let Some(group) = &a.group {
        return consume_in_group(target, group, from, &a);
    }
    let cfg = ConsumerConfig {
        tags: TagFilter::new(a.tags.clone(), a.tags_all),
        isolation,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(target.clone(), cfg).map_err(|e| e.to_string())?;
    consumer
        .assign(&a.topic, a.partition.map(|p| vec![p]), from)
        .map_err(|e| e.to_string())?;
    let mut idle = Idle::new(a.timeout_ms);
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    loop {
        if a.count.is_some_and(|n| printed >= n) {
            break;
        }
        let records = consumer.poll(idle.wait()).map_err(|e| e.to_string())?;
        if records.is_empty() {
            out.flush().map_err(|e| e.to_string())?;
            if idle.expired() {
                break;
            }
            continue;
        }
        idle.saw_message();
        for r in records.iter() {
            if a.count.is_some_and(|n| printed >= n) {
                break;
            }
            print_record(&mut out, &r, a.print_key)?;
            printed += 1;
        }
    }
    out.flush().map_err(|e| e.to_string())?;
    Ok(())
}

/// Writes one record as the CLI prints it.
fn print_record(
    out: &mut impl Write,
    r: &ConsumerRecord<'_>,
    print_key: bool,
) -> Result<(), String> {
    if print_key {
        out.write_all(r.key().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        out.write_all(b"\t").map_err(|e| e.to_string())?;
    }
    // A null value prints as an empty line, as kcat prints it.
    out.write_all(r.value().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    out.write_all(b"\n").map_err(|e| e.to_string())
}

/// `consume --group`: a member of the group. At-least-once commits the positions of what was
/// printed and flushed (exactly those, so `-n` never commits a record it did not print);
/// at-most-once commits each poll's records before printing them.
fn consume_in_group(
    target: &ClientConfig,
    group: &str,
    from: StartFrom,
    a: &ConsumeArgs,
) -> Result<(), String> {
    if a.partition.is_some() {
        return Err("--partition cannot be used with --group: the group assigns partitions".into());
    }
    let mut cfg = GroupConsumerConfig::new(group);
    cfg.consumer.isolation = parse_isolation(a)?;
    cfg.delivery = match a.delivery.as_str() {
        "at-least-once" => Delivery::Manual,
        "at-most-once" => Delivery::AtMostOnce,
        other => {
            return Err(format!(
                "--delivery '{other}': expected at-least-once or at-most-once"
            ))
        }
    };
    cfg.consumer.auto_offset_reset = match from {
        StartFrom::Beginning => OffsetReset::Earliest,
        StartFrom::End => OffsetReset::Latest,
        _ => {
            return Err(format!(
                "--from '{}' cannot be used with --group: a group starts at its committed \
                 offsets (beginning or end only apply where it has none; move them with \
                 `rill group reset-offsets`)",
                a.from
            ))
        }
    };
    cfg.consumer.tags = TagFilter::new(a.tags.clone(), a.tags_all);
    cfg.session_timeout = Duration::from_millis(a.session_timeout_ms);
    cfg.heartbeat_interval = (cfg.session_timeout / 10).max(Duration::from_millis(100));
    let at_least_once = cfg.delivery == Delivery::Manual;
    let mut consumer = GroupConsumer::new(target.clone(), cfg).map_err(|e| e.to_string())?;
    consumer.subscribe(&[&a.topic]).map_err(|e| e.to_string())?;
    let mut idle = Idle::new(a.timeout_ms);
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut pending: Option<PendingCommit> = None;
    while a.count.is_none_or(|n| printed < n) {
        let records = consumer.poll(idle.wait()).map_err(|e| e.to_string())?;
        if records.is_empty() {
            if idle.expired() {
                break;
            }
            continue;
        }
        idle.saw_message();
        let mut done: BTreeMap<(String, u32), u64> = BTreeMap::new();
        for r in records.iter() {
            if a.count.is_some_and(|n| printed >= n) {
                break;
            }
            print_record(&mut out, &r, a.print_key)?;
            done.insert((r.topic.to_string(), r.partition), r.offset() + 1);
            printed += 1;
        }
        out.flush().map_err(|e| e.to_string())?;
        if at_least_once {
            // Commits are sent in order; a failed one is covered by the next (its failure is
            // logged if it is known by then).
            if let Some(Err(e)) = pending.take().and_then(|p| p.try_result()) {
                log::warn!("commit failed: {e}");
            }
            let offsets: crate::client::Offsets = done
                .into_iter()
                .map(|(tp, o)| (tp, crate::client::OffsetAndMetadata::new(o)))
                .collect();
            pending = Some(consumer.commit_offsets_async(&offsets));
        }
    }
    out.flush().map_err(|e| e.to_string())?;
    if let Some(p) = pending {
        let _ = p.wait();
    }
    consumer.close().map_err(|e| e.to_string())
}

/// `consume --timeout-ms`: stop after this long without a new message.
struct Idle {
    limit: Option<Duration>,
    last_message: Instant,
}

impl Idle {
    /// Longest single poll: short enough to notice the limit, and Ctrl-C, promptly.
    const POLL: Duration = Duration::from_millis(500);

    fn new(timeout_ms: Option<u64>) -> Idle {
        Idle {
            limit: timeout_ms.map(Duration::from_millis),
            last_message: Instant::now(),
        }
    }
    fn wait(&self) -> Duration {
        self.limit.map_or(Self::POLL, |l| {
            l.saturating_sub(self.last_message.elapsed())
                .min(Self::POLL)
        })
    }
    fn expired(&self) -> bool {
        self.limit.is_some_and(|l| self.last_message.elapsed() >= l)
    }
    fn saw_message(&mut self) {
        self.last_message = Instant::now();
    }
}

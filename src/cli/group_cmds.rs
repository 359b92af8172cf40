//! `rill group`: list, describe, reset-offsets.
//!
//! `describe` shows the group as its coordinator sees it (DescribeGroups), its committed
//! offsets (OffsetFetch of every partition) and each partition's high watermark: one row per
//! partition the group has assigned or committed. LAG is LOG-END - COMMITTED, and `-` when
//! nothing is committed (as Kafka's tool shows it); it can be negative when a commit is past
//! the log (a topic re-created, say).
//!
//! `reset-offsets` commits as a tool outside the group (member id "" and generation -1), which
//! the coordinator accepts only while the group has no members.

use std::collections::{BTreeMap, HashMap};

use super::args::GroupCommand;
use crate::client::coordinator::{FetchedOffset, MemberInfo};
use crate::client::{Client, ClientConfig, ClientError};
use crate::group::consumer_protocol::MemberAssignment;
use crate::protocol::ErrorCode;

pub fn run(target: &ClientConfig, cmd: GroupCommand) -> Result<(), String> {
    match cmd {
        GroupCommand::List => {
            let mut client = connect(target)?;
            for (group, _state) in client.list_groups().map_err(|e| e.to_string())? {
                println!("{group}");
            }
            Ok(())
        }
        GroupCommand::Describe { group } => describe(&mut connect(target)?, &group),
        GroupCommand::ResetOffsets { group, topic, to } => {
            let to = ResetTo::parse(&to)?;
            reset_offsets(&mut connect(target)?, &group, &topic, to)
        }
    }
}

fn connect(target: &ClientConfig) -> Result<Client, String> {
    Client::connect(target.clone()).map_err(|e| e.to_string())
}

fn describe(client: &mut Client, group: &str) -> Result<(), String> {
    let cannot = |e: ClientError| format!("cannot describe group '{group}': {e}");
    let d = client.describe_group(group).map_err(cannot)?;
    if d.state == "Dead" {
        return Err(format!("group '{group}' does not exist"));
    }
    let at = client.find_coordinator(group).map_err(cannot)?;
    let committed = client
        .fetch_offsets(at, group, Vec::new())
        .map_err(cannot)?;
    let (member_rows, assigned) = members_table(&d.members);
    // The log end (high watermark) of every partition of every topic in a row.
    let mut topics: Vec<&str> = assigned.keys().map(|(t, _)| t.as_str()).collect();
    topics.extend(committed.iter().map(|(t, _, _, _)| t.as_str()));
    topics.sort_unstable();
    topics.dedup();
    let mut log_ends = HashMap::new();
    for topic in topics {
        match client.describe_topic(topic) {
            Ok(t) => {
                for p in t.partitions {
                    log_ends.insert((topic.to_string(), p.partition), p.log_end_offset);
                }
            }
            // Deleted since the group used it: its rows show `-`.
            Err(ClientError::UnknownTopic(_)) => {}
            Err(e) => return Err(format!("cannot describe topic '{topic}': {e}")),
        }
    }
    println!(
        "group {} state {} protocol-type {} protocol {} generation {} leader {}",
        d.group,
        d.state,
        dash_if_empty(&d.protocol_type),
        dash_if_empty(&d.protocol),
        d.generation,
        dash_if_empty(&d.leader)
    );
    println!();
    if member_rows.len() > 1 {
        print!("{}", table(&member_rows));
    } else {
        println!("no live members");
    }
    println!();
    let rows = partitions_table(&assigned, &committed, &log_ends);
    if rows.len() > 1 {
        print!("{}", table(&rows));
    } else {
        println!("no partitions assigned or committed");
    }
    Ok(())
}

/// (topic, partition) -> the members assigned it (one, unless a leader erred).
type Assigned = BTreeMap<(String, u32), Vec<String>>;

/// The members table (header first: MEMBER CLIENT-ID INSTANCE-ID PARTITIONS) and who is
/// assigned each partition. A member whose assignment does not decode (not a rill consumer)
/// shows `?` and owns no row.
fn members_table(members: &[MemberInfo]) -> (Vec<Vec<String>>, Assigned) {
    let mut rows = vec![row(&["MEMBER", "CLIENT-ID", "INSTANCE-ID", "PARTITIONS"])];
    let mut assigned = Assigned::new();
    for m in members {
        let partitions = match MemberAssignment::decode(&m.assignment) {
            Ok(a) => {
                for tp in &a.partitions {
                    assigned
                        .entry(tp.clone())
                        .or_default()
                        .push(m.member_id.clone());
                }
                a.partitions.len().to_string()
            }
            Err(_) => "?".to_string(),
        };
        rows.push(vec![
            m.member_id.clone(),
            dash_if_empty(&m.client_id),
            m.group_instance_id
                .as_deref()
                .map_or_else(|| "-".to_string(), dash_if_empty),
            partitions,
        ]);
    }
    (rows, assigned)
}

/// The partitions table (header first: TOPIC PARTITION MEMBER COMMITTED LOG-END LAG), one row
/// per partition assigned or committed, sorted.
fn partitions_table(
    assigned: &Assigned,
    committed: &[FetchedOffset],
    log_ends: &HashMap<(String, u32), u64>,
) -> Vec<Vec<String>> {
    let mut keys: BTreeMap<(String, u32), Option<u64>> =
        assigned.keys().map(|k| (k.clone(), None)).collect();
    for (t, p, o, _) in committed {
        if o.is_some() {
            keys.insert((t.clone(), *p), *o);
        }
    }
    let mut rows = vec![row(&[
        "TOPIC",
        "PARTITION",
        "MEMBER",
        "COMMITTED",
        "LOG-END",
        "LAG",
    ])];
    for ((topic, partition), offset) in keys {
        let key = (topic, partition);
        let member = assigned.get(&key).map_or("-".to_string(), |m| m.join(","));
        let end = log_ends.get(&key).copied();
        let lag = match (offset, end) {
            (Some(o), Some(e)) => (i128::from(e) - i128::from(o)).to_string(),
            _ => "-".to_string(),
        };
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        rows.push(vec![
            key.0,
            partition.to_string(),
            member,
            show(offset),
            show(end),
            lag,
        ]);
    }
    rows
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

/// Rows as columns aligned on the widest cell, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(x) => *x = (*x).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 < r.len() {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Where `reset-offsets --to` moves a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResetTo {
    Earliest,
    Latest,
    Offset(u64),
}

impl ResetTo {
    fn parse(v: &str) -> Result<ResetTo, String> {
        match v {
            "earliest" => Ok(ResetTo::Earliest),
            "latest" => Ok(ResetTo::Latest),
            _ => v.parse().map(ResetTo::Offset).map_err(|_| {
                format!("--to '{v}': expected earliest, latest or an offset (a number >= 0)")
            }),
        }
    }

    /// The offset for a partition whose log holds [start, end) (end = high watermark), and
    /// whether an explicit offset had to be clamped into [start, end].
    fn target(self, start: u64, end: u64) -> (u64, bool) {
        match self {
            ResetTo::Earliest => (start, false),
            ResetTo::Latest => (end, false),
            ResetTo::Offset(o) => {
                let c = o.clamp(start, end.max(start));
                (c, c != o)
            }
        }
    }
}

/// The refusal when the group has members (`None`: it has some, the count is unknown).
fn live_members(group: &str, count: Option<usize>) -> String {
    match count {
        Some(1) => format!("group '{group}' has 1 live member: stop it before resetting offsets"),
        Some(n) => {
            format!("group '{group}' has {n} live members: stop them before resetting offsets")
        }
        None => format!("group '{group}' has live members: stop them before resetting offsets"),
    }
}

fn reset_offsets(client: &mut Client, group: &str, topic: &str, to: ResetTo) -> Result<(), String> {
    let t = client.describe_topic(topic).map_err(|e| match e {
        ClientError::UnknownTopic(_) => format!("unknown topic '{topic}'"),
        e => format!("cannot describe topic '{topic}': {e}"),
    })?;
    let cannot = |e: ClientError| format!("cannot reset offsets of group '{group}': {e}");
    let d = client.describe_group(group).map_err(cannot)?;
    if !d.members.is_empty() {
        return Err(live_members(group, Some(d.members.len())));
    }
    let mut offsets = Vec::with_capacity(t.partitions.len());
    for p in &t.partitions {
        let (offset, clamped) = to.target(p.log_start_offset, p.log_end_offset);
        if clamped {
            eprintln!(
                "rill: {topic}-{}: offset {} is outside the log [{}, {}]: using {offset}",
                p.partition,
                match to {
                    ResetTo::Offset(o) => o,
                    _ => offset,
                },
                p.log_start_offset,
                p.log_end_offset
            );
        }
        offsets.push((topic.to_string(), p.partition, offset, String::new()));
    }
    let at = client.find_coordinator(group).map_err(cannot)?;
    match client.commit_offsets(at, group, "", -1, offsets.clone()) {
        Ok(()) => {}
        // A member joined since the check: the coordinator refuses commits from outside.
        Err(e) if e.code() == Some(ErrorCode::UnknownMemberId) => {
            let count = client
                .describe_group(group)
                .ok()
                .map(|d| d.members.len())
                .filter(|n| *n > 0);
            return Err(live_members(group, count));
        }
        Err(e) => return Err(cannot(e)),
    }
    let mut rows = vec![row(&["TOPIC", "PARTITION", "NEW-OFFSET"])];
    for (t, p, o, _) in offsets {
        rows.push(vec![t, p.to_string(), o.to_string()]);
    }
    print!("{}", table(&rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_targets_and_clamping() {
        assert_eq!(ResetTo::parse("earliest"), Ok(ResetTo::Earliest));
        assert_eq!(ResetTo::parse("latest"), Ok(ResetTo::Latest));
        assert_eq!(ResetTo::parse("17"), Ok(ResetTo::Offset(17)));
        for bad in ["", "-1", "soon", "1.5", "Earliest"] {
            let e = ResetTo::parse(bad).unwrap_err();
            assert!(e.contains("expected earliest, latest or an offset"), "{e}");
        }
        assert_eq!(ResetTo::Earliest.target(3, 10), (3, false));
        assert_eq!(ResetTo::Latest.target(3, 10), (10, false));
        assert_eq!(ResetTo::Offset(5).target(3, 10), (5, false));
        assert_eq!(ResetTo::Offset(10).target(3, 10), (10, false));
        assert_eq!(ResetTo::Offset(1).target(3, 10), (3, true));
        assert_eq!(ResetTo::Offset(11).target(3, 10), (10, true));
        assert_eq!(ResetTo::Offset(0).target(0, 0), (0, false));
    }

    #[test]
    fn live_member_refusals_name_the_group_and_the_count() {
        assert_eq!(
            live_members("g", Some(2)),
            "group 'g' has 2 live members: stop them before resetting offsets"
        );
        assert!(live_members("g", Some(1)).starts_with("group 'g' has 1 live member:"));
        assert!(live_members("g", None).starts_with("group 'g' has live members:"));
    }

    fn member(id: &str, assignment: Vec<u8>) -> MemberInfo {
        MemberInfo {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "cli".into(),
            assignment,
        }
    }

    #[test]
    fn group_tables_show_assignments_commits_and_lag() {
        let a = MemberAssignment {
            version: 1,
            partitions: vec![("t".into(), 0), ("t".into(), 1)],
            user_data: Vec::new(),
        };
        let members = vec![
            member("m1", a.encode()),
            member("m2", b"not a rill assignment".to_vec()),
        ];
        let (mrows, assigned) = members_table(&members);
        assert_eq!(mrows[1], ["m1", "cli", "-", "2"]);
        assert_eq!(mrows[2], ["m2", "cli", "-", "?"], "undecodable: shown as ?");
        let committed = vec![
            ("t".to_string(), 0, Some(4), String::new()),
            ("u".to_string(), 0, Some(2), String::new()),
            ("gone".to_string(), 0, Some(9), String::new()),
        ];
        let ends: HashMap<_, _> = [
            (("t".to_string(), 0), 10),
            (("t".to_string(), 1), 6),
            (("u".to_string(), 0), 2),
        ]
        .into_iter()
        .collect();
        let rows = partitions_table(&assigned, &committed, &ends);
        assert_eq!(
            rows,
            vec![
                row(&[
                    "TOPIC",
                    "PARTITION",
                    "MEMBER",
                    "COMMITTED",
                    "LOG-END",
                    "LAG"
                ]),
                row(&["gone", "0", "-", "9", "-", "-"]),
                row(&["t", "0", "m1", "4", "10", "6"]),
                row(&["t", "1", "m1", "-", "6", "-"]),
                row(&["u", "0", "-", "2", "2", "0"]),
            ]
        );
        let text = table(&rows[..3]);
        assert_eq!(
            text,
            "TOPIC  PARTITION  MEMBER  COMMITTED  LOG-END  LAG\n\
             gone   0          -       9          -        -\n\
             t      0          m1      4          10       6\n"
        );
    }
}

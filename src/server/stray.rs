//! Topic directories the controller metadata does not know ("strays").
//!
//! At start, a directory `<data>/topics/<name>~<id>` whose topic (name and id) is not in the
//! metadata is never deleted: the metadata may be the thing that is wrong (restored from an old
//! copy, cut short), and the directory may hold the only copy of acknowledged data. It is moved
//! to `<data>/stray/<name>~<id>.stray-<unix ms>` (same filesystem: one rename) and reported with
//! a WARN line. Moving it out of `topics/` matters: topic ids are handed out by the controller,
//! and a metadata that lost a topic may hand its id out again, which would open the old files
//! as the new topic's. A set-aside directory is removed once it has been there longer than
//! `--stray-log-retention-ms` (-1: never), at start and then every
//! `--retention-check-interval-ms` by a broker thread off the shards; or by the operator
//! removing it by hand. Topics deleted with DeleteTopics while the broker runs are still
//! removed at once by their shard (the operator asked for it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::controller::metadata::ClusterMetadata;

/// Directory under the data dir holding set-aside topic directories.
pub const STRAY_DIR: &str = "stray";
/// What separates a set-aside directory's original name from the time it was set aside.
const STRAY_SUFFIX: &str = ".stray-";

/// Setting stray directories aside failed; the broker does not start (leaving an unknown
/// directory under `topics/` could let a new topic open its files).
#[derive(Debug, thiserror::Error)]
#[error("cannot set aside topic directory {}: {why}", path.display())]
pub struct StrayError {
    pub path: PathBuf,
    pub why: String,
}

/// `<name>~<id>` -> (name, id); `None` for anything else (not a topic directory).
pub fn parse_topic_dir(name: &str) -> Option<(&str, u64)> {
    let (topic, id) = name.rsplit_once('~')?;
    if topic.is_empty() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, id.parse().ok()?))
}

/// Names of the topic directories (`<name>~<id>`) under `<data>/topics/`.
pub fn topic_dirs(data_dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(data_dir.join("topics")) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str() {
            if parse_topic_dir(name).is_some() {
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Moves every topic directory the metadata does not know to `<data>/stray/`; returns where
/// each went. Runs at start before the shards, so it never races a topic being created.
pub fn set_aside_unknown_topic_dirs(
    data_dir: &Path,
    md: &ClusterMetadata,
    now_ms: i64,
) -> Result<Vec<PathBuf>, StrayError> {
    let (topics, stray, names) = listed(data_dir)?;
    let mut moved = Vec::new();
    for name in names {
        let Some((topic, id)) = parse_topic_dir(&name) else {
            continue;
        };
        if md.topic(topic).is_some_and(|t| t.id == id) {
            continue;
        }
        let from = topics.join(&name);
        let to = set_aside(&from, &stray, &name, now_ms)?;
        log::warn!(
            "topic directory {} is not in the controller metadata (no topic {topic} with id \
             {id}): set aside as {}, kept for --stray-log-retention-ms",
            from.display(),
            to.display()
        );
        moved.push(to);
    }
    synced(moved, &topics, &stray)
}

/// Sets aside (as [`set_aside_unknown_topic_dirs`] does a topic's) every partition directory
/// of a known topic that the metadata no longer places on broker `node`: a copy left by a
/// reassignment that completed or was cancelled while this broker was down (a running broker
/// removes its copy when it applies that change). `<data>/topics/<name>~<id>/<p>` goes to
/// `<data>/stray/<name>~<id>-<p>.stray-<unix ms>`.
pub fn set_aside_moved_partition_dirs(
    data_dir: &Path,
    md: &ClusterMetadata,
    node: u32,
    now_ms: i64,
) -> Result<Vec<PathBuf>, StrayError> {
    let (topics, stray, names) = listed(data_dir)?;
    let mut moved = Vec::new();
    for name in names {
        let Some((topic, id)) = parse_topic_dir(&name) else {
            continue;
        };
        let Some(t) = md.topic(topic).filter(|t| t.id == id) else {
            continue;
        };
        let dir = topics.join(&name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            if t.partitions
                .get(p)
                .is_none_or(|info| info.replicas.contains(&node))
            {
                continue;
            }
            let from = entry.path();
            let to = set_aside(&from, &stray, &format!("{name}-{p}"), now_ms)?;
            log::warn!(
                "partition directory {} is no longer a replica of broker {node} (replicas {:?}): \
                 set aside as {}, kept for --stray-log-retention-ms",
                from.display(),
                t.partitions[p].replicas,
                to.display()
            );
            moved.push(to);
        }
    }
    synced(moved, &topics, &stray)
}

/// `<data>/topics`, `<data>/stray` and the topic directory names in the former.
fn listed(data_dir: &Path) -> Result<(PathBuf, PathBuf, Vec<String>), StrayError> {
    let topics = data_dir.join("topics");
    let names = topic_dirs(data_dir).map_err(|e| StrayError {
        path: topics.clone(),
        why: format!("read: {e}"),
    })?;
    Ok((topics, data_dir.join(STRAY_DIR), names))
}

/// Makes the set-aside moves durable on both sides.
fn synced(moved: Vec<PathBuf>, topics: &Path, stray: &Path) -> Result<Vec<PathBuf>, StrayError> {
    if !moved.is_empty() {
        sync_dir(topics);
        sync_dir(stray);
    }
    Ok(moved)
}

/// Moves `from` to `<stray>/<name>.stray-<ms>`; two set-asides of one name in one
/// millisecond get distinct names.
fn set_aside(from: &Path, stray: &Path, name: &str, now_ms: i64) -> Result<PathBuf, StrayError> {
    std::fs::create_dir_all(stray).map_err(|e| StrayError {
        path: from.to_path_buf(),
        why: format!("create {}: {e}", stray.display()),
    })?;
    let mut ms = now_ms;
    let mut to = stray.join(format!("{name}{STRAY_SUFFIX}{ms}"));
    while to.exists() {
        ms += 1;
        to = stray.join(format!("{name}{STRAY_SUFFIX}{ms}"));
    }
    std::fs::rename(from, &to).map_err(|e| StrayError {
        path: from.to_path_buf(),
        why: format!("rename to {}: {e}", to.display()),
    })?;
    Ok(to)
}

/// Makes renames in `dir` durable; a failure only means a crash may undo a move, which the
/// next start redoes.
fn sync_dir(dir: &Path) {
    if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        log::warn!("fsync {}: {e}", dir.display());
    }
}

/// When a set-aside directory name says it was set aside (unix ms).
fn set_aside_at(name: &str) -> Option<i64> {
    let (_, ms) = name.rsplit_once(STRAY_SUFFIX)?;
    ms.parse().ok()
}

/// Removes set-aside directories older than `retention` (`None`: keep forever); returns the
/// ones removed. Entries whose name does not carry a time are left alone.
pub fn remove_expired_strays(
    data_dir: &Path,
    retention: Option<Duration>,
    now_ms: i64,
) -> Vec<PathBuf> {
    let Some(retention) = retention else {
        return Vec::new();
    };
    let stray = data_dir.join(STRAY_DIR);
    let entries = match std::fs::read_dir(&stray) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            log::warn!("reading {}: {e}", stray.display());
            return Vec::new();
        }
    };
    let keep_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(at) = name.to_str().and_then(set_aside_at) else {
            continue;
        };
        if now_ms.saturating_sub(at) < keep_ms {
            continue;
        }
        let path = entry.path();
        let res = if path.is_dir() {
            crate::log::file_removal::remove_dir_all(&path)
        } else {
            crate::log::file_removal::remove_file(&path)
        };
        match res {
            Ok(()) => {
                log::info!(
                    "removed stray topic directory {} (set aside {} ms ago, past \
                     --stray-log-retention-ms {keep_ms})",
                    path.display(),
                    now_ms.saturating_sub(at)
                );
                removed.push(path);
            }
            Err(e) => log::warn!("removing stray {}: {e}", path.display()),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_dir_names() {
        assert_eq!(parse_topic_dir("orders~7"), Some(("orders", 7)));
        assert_eq!(parse_topic_dir("a~b~12"), Some(("a~b", 12)));
        assert_eq!(parse_topic_dir("orders"), None);
        assert_eq!(parse_topic_dir("orders~"), None);
        assert_eq!(parse_topic_dir("~3"), None);
        assert_eq!(parse_topic_dir("orders~7.stray-123"), None);
        assert_eq!(parse_topic_dir("orders~+7"), None);
    }

    #[test]
    fn partition_dirs_moved_off_this_broker_are_set_aside_intact() {
        let data = tempfile::tempdir().unwrap();
        let topics = data.path().join("topics");
        for d in ["t~1/0", "t~1/1", "t~1/7"] {
            std::fs::create_dir_all(topics.join(d)).unwrap();
        }
        std::fs::write(topics.join("t~1/1/00000000000000000000.log"), b"old").unwrap();
        let part = |p: u32, replicas: Vec<u32>| crate::controller::metadata::PartitionInfo {
            partition: p,
            replicas,
            ..Default::default()
        };
        let mut md = ClusterMetadata::default();
        md.topics.insert(
            "t".into(),
            crate::controller::metadata::TopicInfo {
                name: "t".into(),
                id: 1,
                partitions: vec![part(0, vec![2, 3]), part(1, vec![3, 4])],
                ..Default::default()
            },
        );
        let moved = set_aside_moved_partition_dirs(data.path(), &md, 2, 5).unwrap();
        let stray = data.path().join(STRAY_DIR);
        assert_eq!(moved, vec![stray.join("t~1-1.stray-5")]);
        assert_eq!(
            std::fs::read(stray.join("t~1-1.stray-5/00000000000000000000.log")).unwrap(),
            b"old"
        );
        assert!(topics.join("t~1/0").is_dir(), "still a replica here");
        assert!(
            topics.join("t~1/7").is_dir(),
            "a partition the metadata does not have yet is left alone"
        );
    }

    #[test]
    fn unknown_dirs_are_set_aside_intact_and_removed_only_after_retention() {
        let data = tempfile::tempdir().unwrap();
        let topics = data.path().join("topics");
        for d in ["known~1/0", "known~9/0", "ghost~3/0", "not-a-topic"] {
            std::fs::create_dir_all(topics.join(d)).unwrap();
        }
        std::fs::write(topics.join("ghost~3/0/00000000000000000000.log"), b"data").unwrap();
        let mut md = ClusterMetadata::default();
        md.topics.insert(
            "known".into(),
            crate::controller::metadata::TopicInfo {
                name: "known".into(),
                id: 1,
                ..Default::default()
            },
        );
        let moved = set_aside_unknown_topic_dirs(data.path(), &md, 1_000).unwrap();
        let stray = data.path().join(STRAY_DIR);
        assert_eq!(
            moved,
            vec![
                stray.join("ghost~3.stray-1000"),
                stray.join("known~9.stray-1000")
            ]
        );
        assert_eq!(
            std::fs::read(stray.join("ghost~3.stray-1000/0/00000000000000000000.log")).unwrap(),
            b"data"
        );
        assert!(topics.join("known~1/0").is_dir());
        assert!(topics.join("not-a-topic").is_dir());
        assert_eq!(
            topic_dirs(data.path()).unwrap(),
            vec!["known~1".to_string()]
        );

        // The same name again in the same millisecond does not overwrite the first.
        std::fs::create_dir_all(topics.join("ghost~3/0")).unwrap();
        let again = set_aside_unknown_topic_dirs(data.path(), &md, 1_000).unwrap();
        assert_eq!(again, vec![stray.join("ghost~3.stray-1001")]);

        let day = Duration::from_secs(86_400);
        assert!(remove_expired_strays(data.path(), None, i64::MAX).is_empty());
        assert!(remove_expired_strays(data.path(), Some(day), 1_000 + 86_399_000).is_empty());
        let mut gone = remove_expired_strays(data.path(), Some(day), 1_000 + 86_400_000);
        gone.sort();
        assert_eq!(
            gone,
            vec![
                stray.join("ghost~3.stray-1000"),
                stray.join("known~9.stray-1000")
            ]
        );
        assert!(stray.join("ghost~3.stray-1001/0").is_dir());
    }
}

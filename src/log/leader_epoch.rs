//! The leader-epoch file of a partition replica: `(leader epoch, start offset)` entries
//! (`replication::LeaderEpochs` keeps them in memory). Rewritten whole at every change
//! (temporary file, fsync, rename, fsync the directory), so it is never torn: any damage is
//! corruption, an error that names the file. A missing file is an empty cache (a new replica,
//! or one from before leader epochs).
//!
//! Layout (little endian): magic `RLEP`, version u8 (1), 3 zero bytes, entry count u32, the
//! entries (epoch u32, start offset u64), CRC32C of everything before it (u32).

use std::path::Path;

use super::partition_log::replace_file;
use super::LogError;

pub const LEADER_EPOCH_FILE: &str = "leader-epoch";
const MAGIC: &[u8; 4] = b"RLEP";
const VERSION: u8 = 1;
const HEADER: usize = 12;
const ENTRY: usize = 12;
/// More epochs than any partition sees in its life (each is a leader election).
pub const MAX_LEADER_EPOCH_ENTRIES: usize = 1 << 20;

/// Reads the entries in `dir`; empty when there is no file.
pub fn read_leader_epochs(dir: &Path) -> Result<Vec<(u32, u64)>, LogError> {
    let path = dir.join(LEADER_EPOCH_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io(&path, e)),
    };
    let corrupt = |position: usize, what: &str| LogError::Corrupt {
        path: path.clone(),
        position: position as u64,
        what: format!("leader-epoch file: {what}"),
    };
    if bytes.len() < HEADER + 4 || &bytes[..4] != MAGIC {
        return Err(corrupt(0, "no RLEP header"));
    }
    if bytes[4] != VERSION {
        return Err(corrupt(4, &format!("unknown version {}", bytes[4])));
    }
    let count = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if count > MAX_LEADER_EPOCH_ENTRIES || bytes.len() != HEADER + count * ENTRY + 4 {
        return Err(corrupt(
            8,
            &format!("{count} entries in {} bytes", bytes.len()),
        ));
    }
    let body = bytes.len() - 4;
    let stored = u32::from_le_bytes([
        bytes[body],
        bytes[body + 1],
        bytes[body + 2],
        bytes[body + 3],
    ]);
    if crc32c::crc32c(&bytes[..body]) != stored {
        return Err(corrupt(body, "checksum mismatch"));
    }
    let entries = bytes[HEADER..body]
        .chunks_exact(ENTRY)
        .map(|e| {
            let mut epoch = [0u8; 4];
            let mut start = [0u8; 8];
            epoch.copy_from_slice(&e[..4]);
            start.copy_from_slice(&e[4..]);
            (u32::from_le_bytes(epoch), u64::from_le_bytes(start))
        })
        .collect();
    Ok(entries)
}

/// Replaces the file in `dir` with `entries`, durably. Blocking.
pub fn write_leader_epochs(dir: &Path, entries: &[(u32, u64)]) -> Result<(), LogError> {
    assert!(
        entries.len() <= MAX_LEADER_EPOCH_ENTRIES,
        "{} leader epochs",
        entries.len()
    );
    let mut bytes = Vec::with_capacity(HEADER + entries.len() * ENTRY + 4);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[VERSION, 0, 0, 0]);
    bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (epoch, start) in entries {
        bytes.extend_from_slice(&epoch.to_le_bytes());
        bytes.extend_from_slice(&start.to_le_bytes());
    }
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    replace_file(dir, LEADER_EPOCH_FILE, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_leader_epochs(dir.path()).expect("empty"), vec![]);
        let entries: Vec<(u32, u64)> = (0..1000u32).map(|e| (e * 3, u64::from(e) << 20)).collect();
        write_leader_epochs(dir.path(), &entries).expect("write");
        assert_eq!(read_leader_epochs(dir.path()).expect("read"), entries);
        write_leader_epochs(dir.path(), &entries[..2]).expect("rewrite");
        assert_eq!(read_leader_epochs(dir.path()).expect("read"), entries[..2]);
        assert!(!dir.path().join("leader-epoch.tmp").exists());
    }

    #[test]
    fn every_damage_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_leader_epochs(dir.path(), &[(1, 0), (4, 77)]).expect("write");
        let path = dir.path().join(LEADER_EPOCH_FILE);
        let good = std::fs::read(&path).expect("read");
        let mut damaged: Vec<Vec<u8>> = Vec::new();
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x40;
            damaged.push(b);
        }
        for len in [0, 3, HEADER, good.len() - 1] {
            damaged.push(good[..len].to_vec());
        }
        let mut longer = good.clone();
        longer.push(0);
        damaged.push(longer);
        for bytes in damaged {
            std::fs::write(&path, &bytes).expect("write");
            match read_leader_epochs(dir.path()) {
                Err(e @ LogError::Corrupt { .. }) => {
                    assert!(e.to_string().contains("leader-epoch"), "{e}");
                }
                other => panic!("{bytes:?} read as {other:?}"),
            }
        }
    }
}

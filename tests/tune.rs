//! `rill tune check` on this host, through the real binary: every check printed by name, the
//! O_DIRECT probe on this disk (and its temp file gone), bad data dirs as clear lines, and the
//! exit code: 1 exactly when a check is BAD.

use std::path::Path;
use std::process::{Command, Output};

use rill_testkit::rill_bin;

const CHECKS: &[&str] = &[
    "cpu governor",
    "transparent hugepages",
    "locked memory",
    "io_uring",
    "data dir",
    "filesystem",
    "O_DIRECT",
    "disk scheduler",
    "NIC IRQ affinity",
];

fn tune_check(data_dir: &Path, extra: &[&str]) -> (Output, String) {
    let out = Command::new(rill_bin())
        .args(["tune", "check", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env_remove("RILL_DATA_DIR")
        .output()
        .expect("run rill tune check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

/// The status and value of the check called `name` in text output.
fn line<'a>(text: &'a str, name: &str) -> (&'a str, &'a str) {
    text.lines()
        .find_map(|l| {
            let (status, rest) = l.split_once(' ')?;
            let value = rest.trim_start().strip_prefix(name)?;
            (!status.is_empty()).then_some((status, value.trim()))
        })
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
}

/// The exit code is 1 exactly when some check is BAD.
fn assert_exit_follows_statuses(out: &Output, text: &str) {
    let bad = CHECKS.iter().any(|n| line(text, n).0 == "BAD");
    assert_eq!(out.status.code(), Some(i32::from(bad)), "{text}");
}

/// A temp dir on the disk the build is on (not a tmpfs /tmp).
fn disk_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

#[test]
fn every_check_is_printed_with_its_recommendation_and_the_exit_code_follows() {
    let dir = disk_tempdir();
    let (out, text) = tune_check(dir.path(), &[]);
    for name in CHECKS {
        let (status, value) = line(&text, name);
        assert!(
            ["ok", "advise", "BAD", "unknown"].contains(&status),
            "{name}: {status} in\n{text}"
        );
        assert!(!value.is_empty(), "{name} has no value:\n{text}");
    }
    assert_eq!(
        text.matches("recommended: ").count(),
        CHECKS.len(),
        "{text}"
    );
    assert_eq!(text.matches("set with: ").count(), CHECKS.len(), "{text}");
    assert_exit_follows_statuses(&out, &text);

    // The JSON form has the same checks with the same statuses.
    let (json_out, json) = tune_check(dir.path(), &["--json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&json).expect("a JSON array");
    let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, CHECKS);
    for c in &list {
        let name = c["name"].as_str().unwrap_or_default();
        assert_eq!(
            c["status"].as_str(),
            Some(line(&text, name).0.to_ascii_lowercase().as_str()),
            "{c}"
        );
        assert!(c["recommended"].is_string() && c["fix"].is_string(), "{c}");
    }
    assert_eq!(json_out.status.code(), out.status.code());
}

#[test]
fn o_direct_is_supported_on_this_disk_and_the_probe_file_is_removed() {
    let dir = disk_tempdir();
    std::fs::write(dir.path().join("keep"), b"x").expect("write");
    let (out, text) = tune_check(dir.path(), &[]);
    let (status, value) = line(&text, "O_DIRECT");
    assert_eq!(status, "ok", "{text}");
    assert!(value.starts_with("supported"), "{text}");
    assert_eq!(line(&text, "data dir").0, "ok", "{text}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("keep")]);
    assert_exit_follows_statuses(&out, &text);
}

#[test]
fn a_missing_data_dir_is_checked_at_its_nearest_parent_and_not_created() {
    let dir = disk_tempdir();
    let missing = dir.path().join("not/yet");
    let (out, text) = tune_check(&missing, &[]);
    let (status, value) = line(&text, "data dir");
    assert_eq!(status, "ok", "{text}");
    let parent = format!("checked at {}", dir.path().display());
    assert!(value.contains(&parent), "{text}");
    assert_eq!(line(&text, "O_DIRECT").0, "ok", "{text}");
    assert!(!dir.path().join("not").exists());
    assert_eq!(std::fs::read_dir(dir.path()).expect("read_dir").count(), 0);
    assert_exit_follows_statuses(&out, &text);
}

#[test]
fn a_file_as_data_dir_is_a_bad_line_and_exit_code_1() {
    let dir = disk_tempdir();
    let file = dir.path().join("segments");
    std::fs::write(&file, b"not a dir").expect("write");
    let (out, text) = tune_check(&file, &[]);
    let (status, value) = line(&text, "data dir");
    assert_eq!(status, "BAD", "{text}");
    assert!(value.ends_with("NOT A DIRECTORY"), "{text}");
    assert_eq!(line(&text, "O_DIRECT").0, "unknown", "{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(std::fs::read(&file).expect("read"), b"not a dir");
}

#[test]
fn an_unwritable_data_dir_is_a_bad_line_and_exit_code_1() {
    // Nobody, root included, creates files in /proc: the check lands on /proc itself.
    let (out, text) = tune_check(Path::new("/proc/rill-tune-test/data"), &[]);
    let (status, value) = line(&text, "data dir");
    assert_eq!(status, "BAD", "{text}");
    assert!(value.contains("checked at /proc"), "{text}");
    assert!(value.contains("NOT WRITABLE"), "{text}");
    let (status, value) = line(&text, "O_DIRECT");
    assert_eq!(status, "unknown", "{text}");
    assert!(
        value.starts_with("unknown (cannot create a file in /proc"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
}

#[test]
fn check_host_sh_runs_rill_tune_check() {
    let dir = disk_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/check-host.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(dir.path())
        .arg("--json")
        .env("RILL", rill_bin())
        .output()
        .expect("run check-host.sh");
    let json = String::from_utf8_lossy(&out.stdout);
    let list: Vec<serde_json::Value> = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{e}: {json} {}", String::from_utf8_lossy(&out.stderr)));
    let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, CHECKS);
    let bad = list.iter().any(|c| c["status"] == "bad");
    assert_eq!(out.status.code(), Some(i32::from(bad)), "{json}");
}

#[test]
fn help_says_what_the_o_direct_probe_writes() {
    let out = Command::new(rill_bin())
        .args(["tune", "check", "--help"])
        .output()
        .expect("run rill tune check --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(
        help.contains("writes and removes one 4 KiB temp file"),
        "{help}"
    );
    assert!(
        help.contains("--data-dir") && help.contains("--json"),
        "{help}"
    );
}

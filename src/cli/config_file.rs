//! `--config FILE`: a TOML table whose keys are flag names. A value there is used when neither
//! the command line nor a `RILL_*` variable sets the flag (precedence: flag > env > file >
//! default), by exporting it as the flag's `RILL_*` variable before parsing.

use std::path::Path;

/// Finds `--config FILE` (or `--config=FILE`) in the raw arguments, before the subcommand's
/// own `--config KEY=VALUE` (topic create) can be confused with it: only a value without '='
/// naming a file is taken.
pub fn find_config_file(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            if let Some(v) = it.next() {
                if !v.contains('=') {
                    return Some(v.clone());
                }
            }
        } else if let Some(v) = a.strip_prefix("--config=") {
            if !v.contains('=') {
                return Some(v.to_string());
            }
        }
    }
    None
}

/// Reads the file and returns (env var, value) pairs for keys in `known` (flag names).
pub fn load(path: &Path, known: &[String]) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("config file {}: {}", path.display(), e.message()))?;
    let mut out = Vec::new();
    for (key, value) in table {
        let flag = key.replace('_', "-");
        if !known.contains(&flag) {
            return Err(format!(
                "config file {}: unknown key '{key}'",
                path.display()
            ));
        }
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Float(f) => f.to_string(),
            other => {
                return Err(format!(
                    "config file {}: key '{key}' has an unsupported value {other}",
                    path.display()
                ))
            }
        };
        out.push((
            format!("RILL_{}", flag.replace('-', "_").to_uppercase()),
            value,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_file_not_topic_config() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            find_config_file(&a(&["rill", "broker", "--config", "b.toml"])),
            Some("b.toml".into())
        );
        assert_eq!(
            find_config_file(&a(&[
                "rill",
                "topic",
                "create",
                "t",
                "--config",
                "retention.ms=5"
            ])),
            None
        );
        assert_eq!(
            find_config_file(&a(&["rill", "--config=x.toml", "broker"])),
            Some("x.toml".into())
        );
    }

    #[test]
    fn loads_known_keys_and_refuses_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "fsync = \"never\"\nsegment_bytes = 1048576\n").unwrap();
        let known = vec!["fsync".to_string(), "segment-bytes".to_string()];
        let mut got = load(&p, &known).unwrap();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("RILL_FSYNC".to_string(), "never".to_string()),
                ("RILL_SEGMENT_BYTES".to_string(), "1048576".to_string())
            ]
        );
        std::fs::write(&p, "bogus = 1\n").unwrap();
        assert!(load(&p, &known)
            .unwrap_err()
            .contains("unknown key 'bogus'"));
        std::fs::write(&p, "fsync = \n").unwrap();
        assert!(load(&p, &known).is_err());
    }
}

//! `rill tune check`: prints every host check, as text or JSON; the exit code is 1 when one
//! is known bad, so scripts can gate on it.

use super::args::TuneCheckArgs;
use crate::tune::{check_host, Check, Status};

/// Runs the checks and returns the process exit code.
pub fn check(args: &TuneCheckArgs) -> i32 {
    let checks = check_host(&args.data_dir);
    if args.json {
        println!("{}", to_json(&checks));
    } else {
        print!("{}", to_text(&checks));
    }
    i32::from(checks.iter().any(|c| c.status == Status::Bad))
}

const NAME_WIDTH: usize = 22;

fn to_text(checks: &[Check]) -> String {
    let indent = " ".repeat(8 + NAME_WIDTH);
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "{:<7} {:<NAME_WIDTH$}{}\n{indent}recommended: {}\n{indent}set with: {}\n",
            c.status.label(),
            c.name,
            c.value,
            c.recommended,
            c.fix
        ));
    }
    let bad = checks.iter().filter(|c| c.status == Status::Bad).count();
    let advise = checks.iter().filter(|c| c.status == Status::Advise).count();
    out.push_str(&format!(
        "{} checks: {bad} bad, {advise} to tune\n",
        checks.len()
    ));
    out
}

fn to_json(checks: &[Check]) -> String {
    let list: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "status": c.status.label().to_ascii_lowercase(),
                "value": c.value,
                "recommended": c.recommended,
                "fix": c.fix,
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

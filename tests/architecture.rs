//! The layering rules of ARCHITECTURE.md ("Invariants"), checked from the source: which
//! module may name which. A change that breaks one fails here with the rule's name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A rule: code under `dir` must not name any of `forbidden` (top-level modules of the
/// `rill` crate as `crate::X`, or other tokens such as external crates).
struct Rule {
    name: &'static str,
    /// A directory (every `.rs` file under it) or a single file.
    dir: &'static str,
    /// Files under `dir` the rule does not cover (the shell around a sans-IO core).
    except: &'static [&'static str],
    forbidden_modules: &'static [&'static str],
    forbidden_tokens: &'static [&'static str],
}

/// What a sans-IO module must not name: the runtime, the clock, threads, sockets, files.
const SANS_IO: &[&str] = &[
    "rill_shards",
    "glommio",
    "Instant::now",
    "SystemTime",
    "std::thread",
    "std::net",
    "std::fs",
];

/// What a sans-IO core must not name of the crate: the layers above it, storage, the clock.
const SANS_IO_ABOVE: &[&str] = &[
    "server",
    "broker",
    "native",
    "net",
    "kafka",
    "log",
    "partition",
    "clock",
    "cli",
];

/// Every module above plain data (formats, settings): what those must not name.
const ABOVE_THE_DATA: &[&str] = &[
    "server",
    "broker",
    "native",
    "net",
    "kafka",
    "client",
    "log",
    "partition",
    "controller",
    "group",
    "clock",
    "cli",
];

const RULES: &[Rule] = &[
    Rule {
        name: "storage knows no network, no client, no broker process",
        dir: "src/log",
        except: &[],
        forbidden_modules: &[
            "server",
            "broker",
            "native",
            "net",
            "kafka",
            "client",
            "partition",
            "group",
            "controller",
            "cli",
        ],
        forbidden_tokens: &["std::net", "TcpStream", "TcpListener"],
    },
    Rule {
        name: "the client knows only the wire format",
        dir: "src/client",
        except: &[],
        forbidden_modules: &[
            "server",
            "broker",
            "native",
            "net",
            "kafka",
            "log",
            "partition",
            "controller",
            "cli",
        ],
        forbidden_tokens: &["rill_shards", "glommio"],
    },
    Rule {
        name: "the group coordinator is sans-IO: no runtime, no clock, no I/O",
        dir: "src/group",
        except: &[],
        forbidden_modules: SANS_IO_ABOVE,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "the controller core and its state machine are sans-IO",
        dir: "src/controller",
        // The thread shell, the durable raft storage, the voters' TCP transport, a non-voter's
        // shell, a member broker's heartbeat thread and their tests do the I/O (the membership
        // logic they drive is cluster.rs's ClusterManager, sans-IO).
        except: &[
            "mod.rs",
            "raft_log.rs",
            "transport.rs",
            "tests.rs",
            "observer.rs",
            "broker_session.rs",
        ],
        forbidden_modules: SANS_IO_ABOVE,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "the transaction coordinator is sans-IO: no runtime, no clock, no I/O",
        dir: "src/transactions",
        except: &[],
        forbidden_modules: SANS_IO_ABOVE,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "the replication core is sans-IO: no runtime, no clock, no I/O",
        dir: "src/replication",
        except: &[],
        forbidden_modules: SANS_IO_ABOVE,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "topic settings are plain data: no controller, no broker, no I/O",
        dir: "src/topic_config.rs",
        except: &[],
        forbidden_modules: ABOVE_THE_DATA,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "a partition knows nothing of the controller, the listeners or the process",
        dir: "src/partition",
        except: &[],
        forbidden_modules: &["controller", "server", "broker", "native", "net", "kafka"],
        forbidden_tokens: &[],
    },
    Rule {
        name: "the broker's operations know no wire format and no listener",
        dir: "src/broker",
        except: &[],
        forbidden_modules: &["native", "kafka", "server", "client", "cli"],
        forbidden_tokens: &[
            "crate::protocol::frame",
            "crate::protocol::messages",
            "kafka_protocol",
        ],
    },
    Rule {
        name: "the native listener does not import the Kafka listener",
        dir: "src/native",
        except: &[],
        forbidden_modules: &["kafka", "server", "client", "cli"],
        forbidden_tokens: &["kafka_protocol"],
    },
    Rule {
        name: "the Kafka listener does not import the native listener",
        dir: "src/kafka",
        except: &[],
        forbidden_modules: &["native", "server", "client", "cli"],
        forbidden_tokens: &[
            "crate::protocol::messages",
            "crate::protocol::frame::RequestFrame",
        ],
    },
    Rule {
        name: "connection plumbing knows neither protocol's messages nor the broker",
        dir: "src/net",
        except: &[],
        forbidden_modules: &["broker", "native", "kafka", "server", "client", "cli"],
        forbidden_tokens: &["crate::protocol::messages", "kafka_protocol"],
    },
    Rule {
        name: "authentication exchanges are sans-IO: no runtime, no clock, no I/O",
        dir: "src/auth",
        except: &[],
        forbidden_modules: ABOVE_THE_DATA,
        forbidden_tokens: SANS_IO,
    },
    Rule {
        name: "TLS settings are configuration only: no sockets, no runtime, nothing above",
        dir: "src/tls",
        except: &[],
        forbidden_modules: ABOVE_THE_DATA,
        forbidden_tokens: &["rill_shards", "glommio", "TcpStream", "TcpListener"],
    },
    Rule {
        name: "metrics are plain counters and encoding: no broker, listener or controller",
        dir: "src/metrics",
        except: &[],
        forbidden_modules: ABOVE_THE_DATA,
        forbidden_tokens: &["rill_shards", "glommio", "kafka_protocol"],
    },
    Rule {
        name: "the batch format and the wire protocol know nothing above them",
        dir: "src/batch",
        except: &[],
        forbidden_modules: ABOVE_THE_DATA,
        forbidden_tokens: &["rill_shards", "glommio"],
    },
    Rule {
        name: "the runtime knows nothing of the broker",
        dir: "shards/src",
        except: &[],
        forbidden_modules: &[],
        forbidden_tokens: &["rill::", "use rill;"],
    },
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments (line, block and doc comments), so prose naming a module
/// is not a dependency.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        if in_str {
            if b[i] == b'\\' && i + 1 < b.len() {
                out.push_str(&src[i..i + 2]);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            out.push(b[i] as char);
            i += 1;
        } else if b[i] == b'"' {
            in_str = true;
            out.push('"');
            i += 1;
        } else if src[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if src[i..].starts_with("/*") {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The source before its unit-test module (`#[cfg(test)] mod ...`, last in a file by the
/// project's convention): the rules are about what runs.
fn production_code(src: &str) -> String {
    let mut at = 0;
    while let Some(i) = src[at..].find("#[cfg(test)]") {
        let after = src[at + i + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") {
            return src[..at + i].to_string();
        }
        at += i + 1;
    }
    src.to_string()
}

/// The top-level `crate::` modules a source names, with `use crate::{a, b::c}` groups.
fn crate_modules(src: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = src;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `rill_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c == ',' {
                    push_first(&item, &mut found);
                    item.clear();
                } else {
                    item.push(c);
                }
            }
            push_first(&item, &mut found);
        } else {
            push_first(rest, &mut found);
        }
    }
    found
}

fn push_first(path: &str, found: &mut BTreeSet<String>) {
    let ident: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if !ident.is_empty() && ident != "self" {
        found.insert(ident);
    }
}

fn violations(rule: &Rule) -> Vec<String> {
    let mut dir = root().join(rule.dir);
    let mut files = Vec::new();
    if dir.is_file() {
        files.push(dir.clone());
        dir.pop();
    } else {
        rust_files(&dir, &mut files);
    }
    assert!(
        !files.is_empty(),
        "{}: no sources under {}",
        rule.name,
        rule.dir
    );
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&dir).unwrap().to_string_lossy().to_string();
        if rule.except.contains(&rel.as_str()) {
            continue;
        }
        let shown = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
        let src = production_code(&strip_comments(&std::fs::read_to_string(&f).unwrap()));
        for m in crate_modules(&src) {
            if rule.forbidden_modules.contains(&m.as_str()) {
                bad.push(format!("{shown} names crate::{m}"));
            }
        }
        for t in rule.forbidden_tokens {
            if src.contains(t) {
                bad.push(format!("{shown} names {t}"));
            }
        }
    }
    bad
}

#[test]
fn every_layering_rule_holds() {
    let mut failures = Vec::new();
    for rule in RULES {
        for v in violations(rule) {
            failures.push(format!("rule \"{}\": {v}", rule.name));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_checker_sees_imports_in_every_form() {
    let src = strip_comments(
        "use crate::{batch::X, server::{a, b}, log};\n\
         // crate::kafka in a comment is no dependency\n\
         /* nor crate::client here */\n\
         fn f() { crate::partition::Partition::new(); let s = \"// not a comment\"; }\n\
         use crate::protocol::ErrorCode;",
    );
    let got: Vec<String> = crate_modules(&src).into_iter().collect();
    assert_eq!(
        got,
        ["batch", "log", "partition", "protocol", "server"].map(String::from)
    );
}

#[test]
fn a_broken_rule_is_reported_with_its_name() {
    // A rule over this very directory that forbids what these tests name.
    let rule = Rule {
        name: "tests must not name the kafka listener",
        dir: "tests",
        except: &[],
        forbidden_modules: &[],
        forbidden_tokens: &["kafka_bootstrap"],
    };
    let v = violations(&rule);
    assert!(
        v.iter().any(|l| l.contains("kafka_bootstrap")),
        "the checker found nothing: {v:?}"
    );
}

//! The `rill` command line.
pub mod acl_cmds;
pub mod args;
pub mod broker_cmd;
pub mod client_cmds;
pub mod config_file;
pub mod group_cmds;
pub mod quota_cmds;
pub mod tune_cmd;
pub mod user_cmds;

use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;

/// Parses the command line (with `--config FILE` and `RILL_*` fallbacks) and runs it.
/// Returns the process exit code; errors are printed as one line.
pub fn main() -> i32 {
    let raw: Vec<String> = std::env::args().collect();
    if let Some(file) = config_file::find_config_file(&raw) {
        let cmd = Cli::command();
        let mut known: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        for sub in cmd.get_subcommands() {
            known.extend(
                sub.get_arguments()
                    .filter_map(|a| a.get_long().map(str::to_string)),
            );
        }
        match config_file::load(std::path::Path::new(&file), &known) {
            Ok(vars) => {
                for (k, v) in vars {
                    if std::env::var_os(&k).is_none() {
                        std::env::set_var(k, v);
                    }
                }
            }
            Err(e) => {
                eprintln!("rill: error: {e}");
                return 2;
            }
        }
    }
    let cli = match Cli::command()
        .try_get_matches_from(&raw)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return 0;
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!("rill: {}", first.trim());
            return 2;
        }
    };
    crate::logging::init(match &cli.command {
        args::Command::Broker(b) => b.log_format,
        _ => crate::logging::LogFormat::Text,
    });
    let target = client_config(&cli);
    let result = match cli.command {
        args::Command::Broker(b) => broker_cmd::run(*b),
        args::Command::Tune(args::TuneCommand::Check(t)) => return tune_cmd::check(&t),
        other => target.and_then(|t| client_cmds::run(&t, other)),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let line = e.lines().next().unwrap_or("failed");
            crate::logging::announce_line(::log::Level::Error, &format!("rill: error: {line}"));
            1
        }
    }
}

/// The client settings of `-b` commands: the bootstrap broker and TLS (`--tls-ca`,
/// `--tls-client-cert`, `--tls-client-key`, `--tls-server-name`).
fn client_config(cli: &args::Cli) -> Result<crate::client::ClientConfig, String> {
    let mut cfg = crate::client::ClientConfig::new(cli.bootstrap.clone());
    let client_cert = match (&cli.tls_client_cert, &cli.tls_client_key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (None, None) => None,
        _ => return Err("--tls-client-cert and --tls-client-key go together".into()),
    };
    cfg.tls = match &cli.tls_ca {
        Some(ca) => Some(
            crate::tls::ClientTls::load(ca, client_cert, cli.tls_server_name.as_deref())
                .map_err(|e| format!("TLS: {e}"))?,
        ),
        None if client_cert.is_some() || cli.tls_server_name.is_some() => {
            return Err("--tls-client-cert and --tls-server-name need --tls-ca FILE".into())
        }
        None => None,
    };
    cfg.sasl = match (&cli.sasl_mechanism, &cli.sasl_username, &cli.sasl_password) {
        (None, None, None) => None,
        (Some(m), Some(u), Some(p)) => {
            if crate::auth::session::SaslClient::new(m, u, p).is_none() {
                return Err(format!(
                    "--sasl-mechanism '{m}': expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                ));
            }
            Some(crate::client::SaslCredentials {
                mechanism: m.clone(),
                username: u.clone(),
                password: p.clone(),
            })
        }
        _ => {
            return Err("--sasl-mechanism, --sasl-username and --sasl-password \
                        (RILL_SASL_PASSWORD) go together"
                .into())
        }
    };
    Ok(cfg)
}

//! `rill user create|delete|list`: users Kafka clients authenticate as, kept by the
//! controller as salted, iterated SCRAM credentials.

use super::args::UserCommand;
use crate::auth::scram::Mechanism;
use crate::client::Client;

pub fn run(client: &mut Client, cmd: UserCommand) -> Result<(), String> {
    match cmd {
        UserCommand::Create {
            name,
            password,
            mechanism,
            iterations,
        } => {
            if password.is_empty() {
                return Err("--password must not be empty".into());
            }
            for m in mechanisms(&mechanism)? {
                client
                    .upsert_user(&name, &password, m, iterations)
                    .map_err(|e| format!("cannot set {} for user '{name}': {e}", m.name()))?;
            }
            println!("user {name} set ({mechanism})");
            Ok(())
        }
        UserCommand::Delete { name, mechanism } => {
            let all = mechanism == "all";
            let mut deleted = 0;
            for m in mechanisms(&mechanism)? {
                match client.delete_user(&name, m) {
                    Ok(()) => deleted += 1,
                    // "all" removes what there is.
                    Err(e) if all && e.to_string().contains("RESOURCE_NOT_FOUND") => {}
                    Err(e) => return Err(format!("cannot delete user '{name}': {e}")),
                }
            }
            if deleted == 0 {
                return Err(format!("cannot delete user '{name}': no such user"));
            }
            println!("user {name} deleted ({mechanism})");
            Ok(())
        }
        UserCommand::List => {
            let users = client.list_users().map_err(|e| e.to_string())?;
            for u in users {
                let m: Vec<String> = u
                    .mechanisms
                    .iter()
                    .map(|m| format!("{}(iterations={})", m.mechanism, m.iterations))
                    .collect();
                println!("{}\t{}", u.user, m.join(","));
            }
            Ok(())
        }
    }
}

fn mechanisms(name: &str) -> Result<Vec<Mechanism>, String> {
    match name {
        "all" => Ok(Mechanism::ALL.to_vec()),
        n => Mechanism::from_name(n).map(|m| vec![m]).ok_or_else(|| {
            format!("--mechanism: unknown '{n}' (SCRAM-SHA-256, SCRAM-SHA-512 or all)")
        }),
    }
}

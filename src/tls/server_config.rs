//! The broker's TLS server configuration: its certificate chain and key, and, for mutual
//! TLS, the CAs a client certificate must chain to (`--tls-cert`, `--tls-key`,
//! `--tls-client-ca`).

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use super::pem::{certificates, private_key, root_store, TlsFileError};

/// Builds the server configuration once at start; every shard's TLS listeners share it.
/// With `client_ca`, a client must present a certificate signed by one of its CAs.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsFileError> {
    let chain = certificates(cert)?;
    let key = private_key(key)?;
    let builder = ServerConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileError::Config(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(root_store(ca)?),
                super::provider(),
            )
            .build()
            .map_err(|e| TlsFileError::Config(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsFileError::Config(format!("certificate and key: {e}")))?;
    // No TLS 1.3 session tickets: clients reconnect rarely, and a ticket sent after the
    // handshake would sit unread in an idle blocking client connection (rill's client checks
    // an idle pooled connection for unexpected bytes before reusing it).
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

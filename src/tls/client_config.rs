//! The client's TLS settings: the CAs it trusts (`--tls-ca`), its own certificate and key
//! for mutual TLS, and the name it checks the broker's certificate against.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use super::pem::{certificates, private_key, root_store, TlsFileError};

/// How a client connects over TLS; cheap to clone (shared configuration).
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub config: Arc<ClientConfig>,
    /// The name the broker's certificate must carry; without one, the address connected to
    /// (an IP address subject alternative name).
    pub server_name: Option<ServerName<'static>>,
}

impl ClientTls {
    /// Trusts the CAs of `ca`; with `cert` and `key`, presents that certificate (mutual TLS).
    pub fn load(
        ca: &Path,
        cert_and_key: Option<(&Path, &Path)>,
        server_name: Option<&str>,
    ) -> Result<ClientTls, TlsFileError> {
        let builder = ClientConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsFileError::Config(e.to_string()))?
            .with_root_certificates(root_store(ca)?);
        let config = match cert_and_key {
            Some((cert, key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|e| TlsFileError::Config(format!("client certificate and key: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| TlsFileError::Config(format!("server name {n:?}: {e}")))
            })
            .transpose()?;
        Ok(ClientTls {
            config: Arc::new(config),
            server_name,
        })
    }

    /// The name checked for a connection to `addr`.
    pub fn name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }

    /// The name checked for a connection to `addr`, which `host` resolved to: the DNS name
    /// `host` when it is one, else as [`ClientTls::name_for`].
    pub fn name_for_host(&self, host: &str, addr: SocketAddr) -> ServerName<'static> {
        if let Some(n) = &self.server_name {
            return n.clone();
        }
        match ServerName::try_from(host.to_string()) {
            Ok(n @ ServerName::DnsName(_)) => n,
            _ => self.name_for(addr),
        }
    }
}

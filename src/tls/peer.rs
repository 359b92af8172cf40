//! TLS between brokers (`--inter-broker-tls-ca`): what a broker presents to the others and
//! whom it accepts. Replica fetches and transaction markers dial the native listeners with
//! [`PeerTls::client`]; the controller quorum's port speaks mutual TLS both ways: it asks
//! every peer for a certificate chaining to the same CAs ([`PeerTls::server`]).

use std::path::Path;
use std::sync::Arc;

use super::pem::TlsFileError;
use super::{server_config, ClientTls};

#[derive(Debug, Clone)]
pub struct PeerTls {
    /// Trusting the inter-broker CAs, presenting this broker's certificate.
    pub client: ClientTls,
    /// This broker's certificate, asking peers for one of the inter-broker CAs'.
    pub server: Arc<rustls::ServerConfig>,
}

impl PeerTls {
    /// `cert` and `key` are this broker's (`--tls-cert`, `--tls-key`), `ca` the CAs its
    /// peers' certificates chain to, `server_name` the name they carry if not their address.
    pub fn load(
        cert: &Path,
        key: &Path,
        ca: &Path,
        server_name: Option<&str>,
    ) -> Result<PeerTls, TlsFileError> {
        Ok(PeerTls {
            client: ClientTls::load(ca, Some((cert, key)), server_name)?,
            server: server_config(cert, key, Some(ca))?,
        })
    }
}

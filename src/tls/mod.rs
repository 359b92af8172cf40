//! TLS settings shared by the broker's listeners and the client: certificates and keys read
//! from PEM files ([`pem`]), the broker's rustls server configuration ([`server_config`]) and
//! the client's ([`client_config`]). rustls is sans-IO: the bytes are moved by the broker's
//! shard (`net::tls_stream`) or the client's threads (`client::tls_socket`); nothing here
//! touches a socket or a runtime.

pub mod client_config;
pub mod peer;
pub mod pem;
pub mod principal;
pub mod server_config;

pub use client_config::ClientTls;
pub use peer::PeerTls;
pub use pem::TlsFileError;
pub use server_config::server_config;

/// The crypto provider every configuration uses (ring: see ARCHITECTURE.md, Dependencies).
fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

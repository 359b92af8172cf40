//! Certificates and private keys from PEM files, with errors that name the file.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS file or setting cannot be used; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("{path}: no certificate in the file (expected PEM `BEGIN CERTIFICATE` blocks)")]
    NoCertificate { path: PathBuf },
    #[error("TLS settings refused: {0}")]
    Config(String),
}

/// Every certificate of a PEM file, in file order (a chain: the leaf first).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsFileError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsFileError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsFileError::File {
        path: path.to_path_buf(),
        why: format!("no usable private key: {e}"),
    })
}

/// A root store holding every certificate of a PEM file (the CAs to trust).
pub fn root_store(path: &Path) -> Result<rustls::RootCertStore, TlsFileError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| TlsFileError::File {
            path: path.to_path_buf(),
            why: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

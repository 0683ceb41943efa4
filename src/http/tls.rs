//! The node's HTTPS: a certificate chain and its key read from PEM files (`http.tls_cert`,
//! `http.tls_key`), served by rustls with the `ring` provider, and replaced while the node runs
//! ([`Certificates::reload`], on SIGHUP) without restarting the listener: every handshake asks
//! the resolver for the pair it holds now.
//!
//! Invariant: the resolver always holds a pair that loaded whole (the certificate parsed, the
//! key parsed, the one matching the other); a new pair that fails any of these is refused and
//! the old one kept.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate or key file cannot be used; names the file.
#[derive(Debug, thiserror::Error)]
#[error("{key} {}: {reason}", file.display())]
pub struct TlsError {
    /// `http.tls_cert` or `http.tls_key`.
    pub key: &'static str,
    /// The file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The pair the server presents, replaceable while it runs.
pub struct Certificates {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificates")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl Certificates {
    /// Loads the pair from `cert_file` and `key_file`.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Self>, TlsError> {
        let pair = load_pair(cert_file, key_file)?;
        Ok(Arc::new(Self {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: RwLock::new(Arc::new(pair)),
        }))
    }

    /// Rereads both files; on any error the pair in use stays, and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let pair = load_pair(&self.cert_file, &self.key_file)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// The rustls configuration of the listener: TLS 1.2 and 1.3 with the `ring` provider,
    /// no client certificates, this pair for every name.
    pub fn server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError {
                key: "http.tls_cert",
                file: self.cert_file.clone(),
                reason: format!("no TLS version available: {e}"),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        Ok(config)
    }
}

#[derive(Debug)]
struct Resolver(Arc<Certificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

fn load_pair(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_error = |reason: String| TlsError {
        key: "http.tls_cert",
        file: cert_file.to_path_buf(),
        reason,
    };
    let key_error = |reason: String| TlsError {
        key: "http.tls_key",
        file: key_file.to_path_buf(),
        reason,
    };
    let cert_pem = std::fs::read(cert_file).map_err(|e| cert_error(format!("cannot read: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(cert_error(
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    let key_pem = std::fs::read(key_file).map_err(|e| key_error(format!("cannot read: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        key_error(format!(
            "not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"
        ))
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| key_error(format!("unusable private key: {e}")))?;
    let pair = CertifiedKey::new(chain, signer);
    pair.keys_match().map_err(|e| {
        key_error(format!(
            "does not belong to the certificate in {}: {e}",
            cert_file.display()
        ))
    })?;
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tls")
            .join(name)
    }

    #[test]
    fn a_pair_loads_and_a_bad_one_names_its_file() {
        let (a_crt, a_key, b_key) = (fixture("a.crt"), fixture("a.key"), fixture("b.key"));
        assert!(Certificates::load(&a_crt, &a_key).is_ok());

        let missing = Certificates::load(&fixture("nope.crt"), &a_key).unwrap_err();
        assert_eq!(missing.key, "http.tls_cert");
        assert!(
            missing.to_string().contains("nope.crt: cannot read"),
            "{missing}"
        );

        // A key where the certificate belongs: no certificate in it.
        let swapped = Certificates::load(&a_key, &a_key).unwrap_err();
        assert_eq!(swapped.key, "http.tls_cert");
        assert!(swapped.reason.contains("no certificate"), "{swapped}");

        let no_key = Certificates::load(&a_crt, &a_crt).unwrap_err();
        assert_eq!(no_key.key, "http.tls_key");
        assert!(no_key.reason.contains("not a PEM private key"), "{no_key}");

        let mismatch = Certificates::load(&a_crt, &b_key).unwrap_err();
        assert_eq!(mismatch.key, "http.tls_key");
        assert!(mismatch.reason.contains("does not belong"), "{mismatch}");
    }

    #[test]
    fn a_failed_reload_keeps_the_pair_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::copy(fixture("a.crt"), &crt).unwrap();
        std::fs::copy(fixture("a.key"), &key).unwrap();
        let certs = Certificates::load(&crt, &key).unwrap();
        let served = |c: &Certificates| c.current.read().unwrap().cert[0].clone();
        let a = served(&certs);

        std::fs::write(&crt, "garbage").unwrap();
        assert!(certs.reload().is_err());
        assert_eq!(served(&certs), a, "a bad pair is refused, the old one kept");

        std::fs::copy(fixture("b.crt"), &crt).unwrap();
        assert!(certs.reload().is_err(), "b's certificate with a's key");
        assert_eq!(served(&certs), a);

        std::fs::copy(fixture("b.key"), &key).unwrap();
        certs.reload().unwrap();
        assert_ne!(served(&certs), a, "a good new pair replaces the old");
    }
}

//! HTTPS for `gitstate serve`: a rustls listener that `axum::serve` accepts like a TCP one.
//!
//! Handshakes run in their own tasks (with a deadline), so a client that connects and says
//! nothing cannot hold up the accept loop; only finished handshakes reach the server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificates of a PEM file (`what` names it in messages); at least one.
fn certificates(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .map_err(|e| format!("cannot read the {what} {}: {e}", file.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the {what} {} is not valid PEM: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} file {} holds no certificate",
            file.display()
        ));
    }
    Ok(certs)
}

/// Reads a PEM certificate chain and private key into a server configuration (HTTP/1.1). With
/// `client_ca`, every client must present a certificate chaining to one of its CA certificates
/// (mTLS): the handshake of a client without one, or with another CA's, fails.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, String> {
    let certs = certificates(cert_file, "TLS certificate")?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("cannot read a private key from {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates(ca_file, "client CA certificate")? {
                roots.add(ca).map_err(|e| {
                    format!(
                        "the client CA certificate {} cannot be used: {e}",
                        ca_file.display()
                    )
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| {
                format!(
                    "the client CA certificates {} cannot verify clients: {e}",
                    ca_file.display()
                )
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "the TLS certificate {} and key {} do not form a usable pair: {e}",
            cert_file.display(),
            key_file.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A listener yielding TLS streams whose handshake completed.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `listener` and completes handshakes with `config` in the background.
    pub fn new(
        listener: TcpListener,
        config: rustls::ServerConfig,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, rx) = mpsc::channel(64);
        let failures = Arc::new(FailureLog::default());
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    break;
                }
                let acceptor = acceptor.clone();
                let ready = tx.clone();
                let failures = failures.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = ready.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => failures.log(peer, &e.to_string()),
                        Err(_) => failures.log(peer, "the handshake did not finish in time"),
                    }
                });
            }
        });
        Ok(TlsListener { local, ready: rx })
    }
}

/// At most this many failed handshakes are logged a second; the others are counted and said
/// with the next line logged.
const FAILURES_LOGGED_PER_SECOND: u32 = 5;

/// Failed TLS handshakes (no client certificate, one from another CA, expired, X.509 v1, the
/// wrong key usage, a plain-HTTP client) at WARN with the peer and rustls's reason, a few lines
/// a second at most: an operator sees why a client is refused, and a flood does not fill the log.
#[derive(Debug, Default)]
struct FailureLog {
    state: std::sync::Mutex<(Option<std::time::Instant>, u32, u64)>,
}

impl FailureLog {
    fn log(&self, peer: SocketAddr, reason: &str) {
        let Some(also) = self.admit(std::time::Instant::now()) else {
            return;
        };
        let reason = gitstate_core::text::escape_controls(reason);
        tracing::warn!(%peer, %reason, not_logged_before = also, "TLS handshake failed");
    }

    /// Whether a failure at `now` is logged: `Some(n)` with the failures not logged since the
    /// last line, `None` past [`FAILURES_LOGGED_PER_SECOND`] in the current second.
    fn admit(&self, now: std::time::Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (window, logged, suppressed) = &mut *state;
        if window.is_none_or(|start| now.duration_since(start) >= Duration::from_secs(1)) {
            *window = Some(now);
            *logged = 0;
        }
        if *logged >= FAILURES_LOGGED_PER_SECOND {
            *suppressed += 1;
            return None;
        }
        *logged += 1;
        Some(std::mem::take(suppressed))
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept task only ends when this receiver is gone; never reached while serving.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_handshakes_are_logged_a_few_a_second() {
        let log = FailureLog::default();
        let start = std::time::Instant::now();
        let logged: Vec<Option<u64>> = (0..8).map(|_| log.admit(start)).collect();
        assert_eq!(&logged[..5], &[Some(0); 5]);
        assert_eq!(&logged[5..], &[None; 3]);
        // The next second: logged again, saying how many were not.
        assert_eq!(log.admit(start + Duration::from_millis(1_001)), Some(3));
        assert_eq!(log.admit(start + Duration::from_millis(1_002)), Some(0));
    }
}

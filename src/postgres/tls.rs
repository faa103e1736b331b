//! TLS for Postgres connections with rustls (ring provider), in two modes:
//!
//! - encrypt only (libpq `sslmode=prefer|require`): handshake signatures are checked, any
//!   certificate is accepted;
//! - `verify-ca`: the certificate must chain to a configured CA. The name is not checked: the
//!   agent connects to a pod IP on its own node, which certificates issued for service names do
//!   not carry (libpq's `verify-ca` has the same meaning).
//!
//! Either way the stream offers `tls-server-end-point` channel binding, so a SCRAM server that
//! supports it (SCRAM-SHA-256-PLUS) can tell a relaying man in the middle from us, and the
//! decrypted stream is [`Guarded`]: only SCRAM may ask for the password.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ClientConfig;
use rustls::pki_types::{InvalidDnsNameError, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::TlsConnector;

use super::guard::Guarded;

/// Makes TLS connections; see the module comment for the two modes.
#[derive(Clone)]
pub struct EncryptOnlyTls {
    config: Arc<ClientConfig>,
}

pub use crate::ca::CaError;

impl EncryptOnlyTls {
    pub fn new() -> Result<Self, rustls::Error> {
        Ok(Self {
            config: Arc::new(crate::ca::encrypt_only()?),
        })
    }

    /// Verifies the server's chain against the CA certificates in `pem` (`path` names it in
    /// errors), for any name.
    pub fn verify_ca(path: &str, pem: &[u8]) -> Result<Self, CaError> {
        Ok(Self {
            config: Arc::new(crate::ca::chain_only(path, pem)?),
        })
    }
}

impl<S> MakeTlsConnect<S> for EncryptOnlyTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = ConnectOne;
    type Error = InvalidDnsNameError;

    /// tokio-postgres asks for a connector before it knows whether TLS will be used, with an
    /// empty name for a Unix socket: refusing here would fail even `sslmode=disable`, so a name
    /// that is not one fails only if TLS is actually attempted.
    fn make_tls_connect(&mut self, domain: &str) -> Result<ConnectOne, InvalidDnsNameError> {
        Ok(ConnectOne {
            name: ServerName::try_from(domain.to_string()).map_err(|_| domain.to_string()),
            connector: TlsConnector::from(self.config.clone()),
        })
    }
}

pub struct ConnectOne {
    /// The server's name, or the text that is not one.
    name: Result<ServerName<'static>, String>,
    connector: TlsConnector,
}

type ConnectFuture<S> = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

impl<S> TlsConnect<S> for ConnectOne
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = ConnectFuture<S>;

    fn connect(self, stream: S) -> ConnectFuture<S> {
        Box::pin(async move {
            let name = self.name.map_err(|text| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("TLS needs a host name, and '{text}' is not one (a Unix socket takes sslmode=disable)"),
                )
            })?;
            let tls = self.connector.connect(name, stream).await?;
            let binding = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|leaf| server_end_point(leaf.as_ref()));
            Ok(RustlsStream {
                inner: Guarded::from_startup(Box::new(tls)),
                binding,
            })
        })
    }
}

pub struct RustlsStream<S> {
    inner: Guarded<Box<tokio_rustls::client::TlsStream<S>>>,
    binding: Option<Vec<u8>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        match &self.binding {
            Some(hash) => ChannelBinding::tls_server_end_point(hash.clone()),
            None => ChannelBinding::none(),
        }
    }
}

/// RFC 5929 `tls-server-end-point`: the certificate's hash, with its signature's hash function,
/// SHA-256 for MD5, SHA-1 and anything not recognised.
fn server_end_point(der: &[u8]) -> Vec<u8> {
    // DER of the signature algorithm OIDs that name SHA-384 and SHA-512.
    const SHA384: [&[u8]; 2] = [
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c],
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],
    ];
    const SHA512: [&[u8]; 2] = [
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d],
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04],
    ];
    let has = |oids: [&[u8]; 2]| oids.iter().any(|o| der.windows(o.len()).any(|w| w == *o));
    let algorithm = if has(SHA512) {
        &ring::digest::SHA512
    } else if has(SHA384) {
        &ring::digest::SHA384
    } else {
        &ring::digest::SHA256
    };
    ring::digest::digest(algorithm, der).as_ref().to_vec()
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

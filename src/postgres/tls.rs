//! TLS for `sslmode=prefer|require` with rustls (ring provider).
//!
//! libpq's `require` encrypts without verifying the server certificate, and headroom connects to
//! a pod IP on its own node, where certificates issued for service names would not match anyway:
//! so this connector encrypts and checks handshake signatures but accepts any certificate.
//! `verify-ca`/`verify-full` are not supported (tokio-postgres refuses them when parsing a DSN).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::TlsConnector;

/// Makes encrypt-only TLS connections (libpq `sslmode=require` semantics).
#[derive(Clone)]
pub struct EncryptOnlyTls {
    config: Arc<ClientConfig>,
}

impl EncryptOnlyTls {
    pub fn new() -> Result<Self, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
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
            Ok(RustlsStream(Box::new(tls)))
        })
    }
}

pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // Channel binding proves the certificate, which this connector does not check anyway.
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

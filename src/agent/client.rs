//! The agent's Kubernetes client: every request and every watch multiplexed over one HTTP/2
//! connection (ALPN `h2`), as the kubelet does for its per-object watches. kube's default client
//! speaks HTTP/1.1, which costs one TLS connection per open watch: one per claim, on every node.
//!
//! Plain `http://` servers (the test suite's fault proxy) keep HTTP/1.1: h2 without TLS would need
//! prior knowledge, which no real API server endpoint advertises.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use tower::ServiceBuilder;

use super::AgentError;
use super::api_metrics::CountRequests;

/// Pings keep an idle connection honest: a server that vanished without a FIN (a node reboot, a
/// dropped route) is noticed within interval + timeout, and every watch restarts on a new one.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub fn build(config: kube::Config, counted: &CountRequests) -> Result<kube::Client, AgentError> {
    let https = config.cluster_url.scheme_str() == Some("https");
    let tls = config.rustls_client_config()?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(config.connect_timeout.unwrap_or(CONNECT_TIMEOUT)));
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = if https {
        builder.enable_http2().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    let mut hyper = hyper_util::client::legacy::Builder::new(TokioExecutor::new());
    if https {
        // http2_only: concurrent first requests wait for the one connection instead of racing
        // to open several.
        hyper
            .http2_only(true)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true);
    }
    let client = hyper.build(connector);
    let default_ns = config.default_namespace.clone();
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(counted.clone())
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, default_ns))
}

//! The webhook's HTTPS listener: TLS handshakes and request heads within deadlines, bounded
//! connections and bodies, POST only. A slow or hostile client costs one connection slot for a
//! few seconds at most.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::handle::Reviewer;
use super::metrics::Outcome;

/// The API server sends objects of at most 3 MiB (etcd's default request limit, 1.5 MiB, is
/// lower); a review body is the object plus a little.
const MAX_BODY: usize = 4 << 20;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 32;

fn reply(status: StatusCode, body: Vec<u8>, json: bool) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let ct = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    r.headers_mut()
        .insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static(ct));
    r
}

/// The answer to one request, counted and timed.
async fn answer(reviewer: &Reviewer, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = std::time::Instant::now();
    let (outcome, response) = route(reviewer, req).await;
    reviewer.metrics.answered(outcome, started.elapsed());
    response
}

async fn route(reviewer: &Reviewer, req: Request<Incoming>) -> (Outcome, Response<Full<Bytes>>) {
    if req.method() != Method::POST {
        let r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            b"POST an AdmissionReview\n".to_vec(),
            false,
        );
        return (Outcome::Refused, r);
    }
    // One deadline for the whole review, body included: a client that trickles it is dropped.
    let started = tokio::time::Instant::now();
    let body = tokio::time::timeout(
        reviewer.deadline,
        Limited::new(req.into_body(), MAX_BODY).collect(),
    )
    .await;
    let bytes = match body {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "webhook: request body refused");
            let r = reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                b"body refused\n".to_vec(),
                false,
            );
            return (Outcome::Refused, r);
        }
        Err(_) => {
            let r = reply(
                StatusCode::REQUEST_TIMEOUT,
                b"body too slow\n".to_vec(),
                false,
            );
            return (Outcome::Refused, r);
        }
    };
    let left = reviewer.deadline.saturating_sub(started.elapsed());
    let (outcome, body) = reviewer.review(&bytes, left).await;
    (outcome, reply(StatusCode::OK, body, true))
}

/// Serves reviews until `shutdown` completes; open connections are then dropped.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    reviewer: Arc<Reviewer>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        while conns.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook: accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let reviewer = Arc::clone(&reviewer);
        let http = http.clone();
        conns.spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "webhook: TLS handshake");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| {
                let reviewer = Arc::clone(&reviewer);
                async move { Ok::<_, Infallible>(answer(&reviewer, req).await) }
            });
            if let Err(e) = http.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(error = %e, "webhook connection");
            }
        });
    }
    conns.abort_all();
}

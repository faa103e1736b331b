//! Counts every request the agent's client makes (watches included) by verb and HTTP status, as
//! a tower layer under kube's client, so no call site can forget to. It also tells which
//! requests are still waiting for an answer: a watch request to an API server that accepts
//! connections but never answers neither fails nor yields, and only shows as a request that
//! has waited too long.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower::{Layer, Service};

/// Told about each request's life.
pub trait ApiObserver: Send + Sync {
    /// A request is sent; the token comes back in [`ApiObserver::ended`].
    fn sent(&self) -> u64;
    /// Its response head arrived (`Some(status)`), it failed without one (`Some(0)`), or the
    /// caller stopped waiting (`None`: a timeout dropped it).
    fn ended(&self, token: u64, verb: &'static str, status: Option<u16>);
}

#[derive(Clone)]
pub struct CountRequests(pub Arc<dyn ApiObserver>);

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            on: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    on: Arc<dyn ApiObserver>,
}

/// Reports the request as abandoned if its future is dropped before an answer.
struct Pending {
    on: Arc<dyn ApiObserver>,
    token: u64,
    verb: &'static str,
    status: Option<u16>,
}

impl Pending {
    fn answered(mut self, status: u16) {
        self.status = Some(status);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.on.ended(self.token, self.verb, self.status);
    }
}

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        let pending = Pending {
            token: self.on.sent(),
            on: self.on.clone(),
            verb,
            status: None,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            pending.answered(result.as_ref().map_or(0, |r| r.status().as_u16()));
            result
        })
    }
}

/// The Kubernetes verb of a request, from its method and path (`/api/v1/namespaces/ns/pods` is a
/// list, `/api/v1/namespaces/ns/pods/x` a get, `?watch=true` a watch).
pub fn verb(method: &Method, path: &str, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match *method {
        Method::GET if watch => "watch",
        Method::GET => {
            let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
            // Skip "api/v1" or "apis/group/version", then "namespaces/<ns>".
            let mut rest: &[&str] = match parts.first() {
                Some(&"apis") => parts.get(3..).unwrap_or(&[]),
                _ => parts.get(2..).unwrap_or(&[]),
            };
            if rest.len() >= 3 && rest[0] == "namespaces" {
                rest = &rest[2..];
            }
            if rest.len() == 1 { "list" } else { "get" }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs() {
        let get = Method::GET;
        assert_eq!(
            verb(&get, "/api/v1/namespaces/db/persistentvolumeclaims", None),
            "list"
        );
        assert_eq!(
            verb(&get, "/api/v1/namespaces/db/persistentvolumeclaims/x", None),
            "get"
        );
        assert_eq!(
            verb(
                &get,
                "/api/v1/pods",
                Some("fieldSelector=spec.nodeName%3Dn")
            ),
            "list"
        );
        assert_eq!(
            verb(&get, "/api/v1/pods", Some("fieldSelector=x&watch=true")),
            "watch"
        );
        assert_eq!(
            verb(&get, "/apis/storage.k8s.io/v1/storageclasses", None),
            "list"
        );
        assert_eq!(
            verb(&get, "/api/v1/nodes/n/proxy/stats/summary", None),
            "get"
        );
        assert_eq!(
            verb(
                &Method::PATCH,
                "/api/v1/namespaces/db/persistentvolumeclaims/x",
                None
            ),
            "patch"
        );
        assert_eq!(
            verb(
                &Method::POST,
                "/apis/events.k8s.io/v1/namespaces/db/events",
                None
            ),
            "create"
        );
    }
}

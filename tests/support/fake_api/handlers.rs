//! HTTP front: routing of kube-apiserver paths, fault injection, the request log, and the
//! read-side verbs (GET, LIST, WATCH, node proxy). Writes are in `write.rs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use serde_json::{Value, json};

use super::resources::{self, Res};
use super::selectors::{FieldSelector, Filter, LabelSelector};
use super::status::ApiError;
use super::watch::{self, WatchStart, Watcher};
use super::{RequestRecord, Shared, lock, write};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub enum Reply {
    Json(u16, Value),
    Stream(Body),
}

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Self {
        Reply::Json(e.code, e.to_json())
    }
}

/// One request, as parsed from the URL and headers.
pub struct Call<'a> {
    pub method: &'a str,
    pub query: HashMap<String, String>,
    pub content_type: &'a str,
    pub body: &'a [u8],
}

impl Call<'_> {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }
}

/// A request for objects of one resource type.
pub struct Target {
    pub res: Res,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status` for the status subresource.
    pub sub: Option<String>,
}

impl Target {
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

enum Route {
    Version,
    Object(Target),
    NodeProxy { node: String, path: String },
}

pub async fn serve(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or("").to_string();
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_string());
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    lock(&shared.arrivals).push(RequestRecord {
        method: method.clone(),
        path: path.clone(),
        query: raw_query.clone(),
        status: 0,
        content_type: content_type.clone(),
        body: (!body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned()),
    });
    let delay = lock(&shared.faults).delay_for(&method, &path);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let injected = lock(&shared.faults).take(&method, &path);
    let reply = match injected {
        Some(code) => ApiError::injected(code).into(),
        None => {
            let call = Call {
                method: &method,
                query: form_urlencoded::parse(raw_query.as_bytes())
                    .into_owned()
                    .collect(),
                content_type: content_type.as_deref().unwrap_or(""),
                body: &body,
            };
            route(&shared, &path, &call).unwrap_or_else(Reply::from)
        }
    };
    let (status, response) = match reply {
        Reply::Json(code, v) => (code, json_response(code, &v)),
        Reply::Stream(b) => (200, stream_response(b)),
    };
    lock(&shared.log).push(RequestRecord {
        method,
        path,
        query: raw_query,
        status,
        content_type,
        body: (!body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned()),
    });
    Ok(response)
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *r.status_mut() =
        hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn stream_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn parse_route(path: &str) -> Result<Route, ApiError> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (group, version, rest) = match parts.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::route_not_found()),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, more @ ..] => (Some(ns.to_string()), {
            let mut v = vec![*plural];
            v.extend_from_slice(more);
            v
        }),
        _ => (None, rest.to_vec()),
    };
    let [plural, more @ ..] = rest.as_slice() else {
        return Err(ApiError::route_not_found());
    };
    let res = resources::find(group, version, plural).ok_or_else(ApiError::route_not_found)?;
    if namespace.is_some() && !res.ty().namespaced {
        return Err(ApiError::route_not_found());
    }
    let name = more.first().map(|s| s.to_string());
    if res.is("", "nodes")
        && let (Some(node), Some(&"proxy")) = (&name, more.get(1))
    {
        return Ok(Route::NodeProxy {
            node: node.clone(),
            path: more[2..].join("/"),
        });
    }
    let sub = (more.len() > 1).then(|| more[1..].join("/"));
    if let Some(s) = &sub
        && !(s == "status" && res.ty().status_subresource)
    {
        return Err(ApiError::route_not_found());
    }
    if name.is_some() && res.ty().namespaced && namespace.is_none() {
        return Err(ApiError::route_not_found());
    }
    Ok(Route::Object(Target {
        res,
        namespace,
        name,
        sub,
    }))
}

fn route(shared: &Shared, path: &str, call: &Call) -> Result<Reply, ApiError> {
    let target = match parse_route(path)? {
        Route::Version => return Ok(version(shared)),
        Route::NodeProxy { node, path } => return node_proxy(shared, call, &node, &path),
        Route::Object(t) => t,
    };
    match (call.method, target.name.is_some()) {
        ("GET", false) if call.flag("watch") => start_watch(shared, &target, call),
        ("GET", false) => list(shared, &target, call),
        ("GET", true) => get(shared, &target),
        ("POST", false) if target.namespace.is_some() || !target.res.ty().namespaced => {
            write::create(shared, &target, call)
        }
        ("PUT", true) => write::replace(shared, &target, call),
        ("PATCH", true) => write::patch(shared, &target, call),
        ("DELETE", true) => write::delete(shared, &target, call),
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}

fn version(shared: &Shared) -> Reply {
    let minor = if lock(&shared.features).recover_from_expansion_failure {
        "34"
    } else {
        "33"
    };
    Reply::Json(
        200,
        json!({ "major": "1", "minor": minor, "gitVersion": format!("v1.{minor}.0+fake"), "platform": "linux/amd64" }),
    )
}

fn node_proxy(shared: &Shared, call: &Call, node: &str, path: &str) -> Result<Reply, ApiError> {
    if call.method != "GET" {
        return Err(ApiError::method_not_allowed(call.method));
    }
    match (path, lock(&shared.stats).get(node)) {
        ("stats/summary", Some(summary)) => Ok(Reply::Json(200, summary.clone())),
        _ => Err(ApiError::route_not_found()),
    }
}

fn get(shared: &Shared, t: &Target) -> Result<Reply, ApiError> {
    let name = t.name.as_deref().unwrap_or("");
    let store = lock(&shared.store);
    let obj = store
        .get(t.res, t.ns(), name)
        .ok_or_else(|| ApiError::not_found(t.res.ty(), name))?;
    Ok(Reply::Json(200, obj.clone()))
}

fn filter(t: &Target, call: &Call) -> Result<Filter, ApiError> {
    Ok(Filter {
        res: t.res,
        namespace: t.namespace.clone(),
        fields: FieldSelector::parse(call.param("fieldSelector").unwrap_or(""), t.res.ty())?,
        labels: LabelSelector::parse(call.param("labelSelector").unwrap_or(""))?,
    })
}

/// LIST, paginated with `limit`/`continue`. A continue token holds the list's resourceVersion
/// and the last key; later pages show the objects as they are now (not a snapshot), which a
/// watch from the list's resourceVersion then reconciles, as with the real server's pages.
fn list(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let filter = filter(t, call)?;
    let limit: Option<usize> = match call.param("limit") {
        Some(l) => Some(
            l.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    let store = lock(&shared.store);
    let (list_rv, after) = match call.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, ns, name): (u64, String, String) = serde_json::from_str(token)
                .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
            if store.is_compacted(rv) {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter.",
                ));
            }
            (rv, Some((ns, name)))
        }
        None => (store.resource_version(), None),
    };
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    for ((_, ns, name), obj) in store.list(&filter) {
        if after.as_ref().is_some_and(|a| (ns, name) <= (&a.0, &a.1)) {
            continue;
        }
        if limit.is_some_and(|l| l > 0 && items.len() >= l) {
            more = true;
            break;
        }
        let mut obj = obj.clone();
        // Items of a typed list carry no apiVersion/kind on the wire.
        if let Some(m) = obj.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        items.push(obj);
        last = Some((ns.clone(), name.clone()));
    }
    let mut meta = json!({ "resourceVersion": list_rv.to_string() });
    if let (true, Some((ns, name))) = (more, last) {
        meta["continue"] = json!(json!([list_rv, ns, name]).to_string());
    }
    let ty = t.res.ty();
    Ok(Reply::Json(
        200,
        json!({ "kind": format!("{}List", ty.kind), "apiVersion": ty.api_version(), "metadata": meta, "items": items }),
    ))
}

fn start_watch(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let filter = filter(t, call)?;
    let bookmarks = call.flag("allowWatchBookmarks");
    let timeout = match call.param("timeoutSeconds") {
        Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))
        })?)),
        None => None,
    };
    let start = if call.flag("sendInitialEvents") {
        if call.param("resourceVersionMatch") != Some("NotOlderThan") || !bookmarks {
            return Err(ApiError::bad_request(
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
            ));
        }
        WatchStart::InitialEvents
    } else {
        match call.param("resourceVersion").unwrap_or("") {
            "" | "0" => WatchStart::Now,
            rv => WatchStart::After(rv.parse().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: Invalid value: {rv:?}"))
            })?),
        }
    };
    let (watcher, rx) = Watcher::new(filter, bookmarks);
    match lock(&shared.store).watch(watcher, start) {
        Ok(()) => Ok(Reply::Stream(watch::body(rx, timeout))),
        Err(e) => Ok(Reply::Stream(watch::error_body(&e))),
    }
}

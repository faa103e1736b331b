//! Watch streams: newline-delimited JSON events over a chunked HTTP/1.1 body, fed by the store
//! through an unbounded channel so a slow reader never blocks a writer.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;

use super::handlers::Body;
use super::selectors::Filter;
use super::status::ApiError;
use super::store::{Change, ChangeKind};

/// Where a watch starts, from its `resourceVersion` and `sendInitialEvents` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// `resourceVersion` unset or "0": synthetic ADDED events for the current state, then live.
    Now,
    /// A resourceVersion: every change after it, then live (410 if it is no longer kept).
    After(u64),
    /// `sendInitialEvents=true` (streaming list): the current state, then a BOOKMARK annotated
    /// `k8s.io/initial-events-end`, then live.
    InitialEvents,
}

pub struct Watcher {
    pub filter: Filter,
    bookmarks: bool,
    tx: UnboundedSender<Bytes>,
}

impl Watcher {
    pub fn new(filter: Filter, bookmarks: bool) -> (Self, UnboundedReceiver<Bytes>) {
        let (tx, rx) = unbounded_channel();
        (
            Self {
                filter,
                bookmarks,
                tx,
            },
            rx,
        )
    }

    fn send(&self, event_type: &str, object: &Value) -> bool {
        let mut line = json!({ "type": event_type, "object": object }).to_string();
        line.push('\n');
        self.tx.send(Bytes::from(line)).is_ok()
    }

    pub fn alive(&self) -> bool {
        !self.tx.is_closed()
    }

    pub fn added(&self, obj: &Value) -> bool {
        self.send("ADDED", obj)
    }

    /// Offers one change; returns false once the reader is gone. An object that starts or stops
    /// matching the selectors is seen as ADDED or DELETED, as the real watch cache does.
    pub fn offer(&self, change: &Change) -> bool {
        let now = self.filter.matches(change.res, &change.new);
        let event = match change.kind {
            ChangeKind::Added => now.then_some("ADDED"),
            ChangeKind::Deleted => now.then_some("DELETED"),
            ChangeKind::Modified => {
                let before = change
                    .old
                    .as_ref()
                    .is_some_and(|o| self.filter.matches(change.res, o));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        };
        match event {
            Some(t) => self.send(t, &change.new),
            None => self.alive(),
        }
    }

    pub fn bookmark(&self, rv: u64, initial_events_end: bool) -> bool {
        if !self.bookmarks {
            return self.alive();
        }
        let ty = self.filter.res.ty();
        let mut meta = json!({ "resourceVersion": rv.to_string() });
        if initial_events_end {
            meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let obj = json!({ "kind": ty.kind, "apiVersion": ty.api_version(), "metadata": meta });
        self.send("BOOKMARK", &obj)
    }
}

/// The response body of an open watch: ends when the store drops the sender (drop_watches),
/// or at `timeoutSeconds`.
pub fn body(rx: UnboundedReceiver<Bytes>, timeout: Option<Duration>) -> Body {
    let deadline = timeout.map(|t| Instant::now() + t);
    let stream = futures::stream::unfold(rx, move |mut rx| async move {
        let next = match deadline {
            Some(d) => tokio::select! {
                m = rx.recv() => m,
                _ = tokio::time::sleep_until(d) => None,
            },
            None => rx.recv().await,
        };
        next.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// A watch that fails at once with an ERROR event, as the real server answers an expired
/// resourceVersion: HTTP 200, one `{"type":"ERROR","object":<Status>}` line, end of stream.
pub fn error_body(err: &ApiError) -> Body {
    let mut line = json!({ "type": "ERROR", "object": err.to_json() }).to_string();
    line.push('\n');
    let stream = futures::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from(line)))]);
    StreamBody::new(stream).boxed_unsync()
}

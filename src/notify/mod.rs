//! Notifications: what the agent did or refused, posted to HTTP sinks people already watch (a
//! Slack-compatible webhook, or any endpoint taking JSON), configured centrally in the agent's
//! ConfigMap (`notifications.yaml`, [`config`]) with each URL read from a Secret in the agent's
//! own namespace.
//!
//! Nothing here is on a scan's path: the scan hands a [`Message`] to [`Notifier::send`], which
//! only offers it to each sink's bounded queue (`try_send`); a sink's own task posts it, with a
//! deadline per request and retries with exponential backoff ([`retry`]). A sink that hangs or
//! answers 500 fills its own queue, and what overflows is counted as dropped. What is announced
//! is decided by the Events' "on change" rule (`crate::events::Events::update`), so a claim
//! blocked for an hour is one message, not one per scan.
//!
//! A message carries names, sizes, reasons and times only: never an Event's free text (it can
//! quote a tenant's replication slot or a driver's error), never the sink's URL.

pub mod config;
pub mod message;
pub mod post;
pub mod proxy;
pub mod retry;
pub mod sink;
pub mod supervise;
#[cfg(test)]
mod tests;

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

pub use config::{Format, SinkSpec};
pub use message::Message;
pub use sink::{Count, Settings, SinkHandle};

/// What a message is about; a sink's `events` lists the kinds it wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// A claim was grown (the `Resized` Event).
    Grown,
    /// Growth is needed but refused (at its limit, budget spent, WAL unsafe, ...).
    Blocked,
    /// The storage did not carry out a resize (infeasible, stuck, filesystem not expanded).
    ResizeFailed,
    /// A grow waits for a person (`enforcement: recommend | approve`; the `GrowRecommended`
    /// Event).
    Recommended,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Grown,
        Kind::Blocked,
        Kind::ResizeFailed,
        Kind::Recommended,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Grown => "grown",
            Kind::Blocked => "blocked",
            Kind::ResizeFailed => "resizeFailed",
            Kind::Recommended => "recommended",
        }
    }
}

/// A sink that could not be set up or reached. Never holds the URL: it is a credential.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("ConfigMap {configmap} key {key}: {detail}")]
    Config {
        configmap: String,
        key: &'static str,
        detail: String,
    },
    #[error("sink {sink}: {detail}")]
    Endpoint { sink: String, detail: String },
    #[error("sink {sink}: {detail}")]
    Post { sink: String, detail: String },
    #[error("sink {sink}: no answer within {millis} ms")]
    Timeout { sink: String, millis: u128 },
    #[error("sink {sink}: {object} {name}: {detail}")]
    Read {
        sink: String,
        object: &'static str,
        name: String,
        detail: String,
    },
}

/// The agent's handle: cheap to clone, shared by every volume's work. Without sinks,
/// [`Notifier::send`] does nothing.
#[derive(Clone, Default)]
pub struct Notifier {
    sinks: Arc<RwLock<Vec<SinkHandle>>>,
    config: Option<tokio::sync::watch::Sender<Option<String>>>,
}

impl Notifier {
    /// A notifier over sinks already running, configured by nothing (tests); the agent's comes
    /// from [`supervise::start`].
    pub fn with_sinks(sinks: Vec<SinkHandle>) -> Self {
        Notifier {
            sinks: Arc::new(RwLock::new(sinks)),
            config: None,
        }
    }

    pub(crate) fn supervised(
        sinks: Arc<RwLock<Vec<SinkHandle>>>,
        config: tokio::sync::watch::Sender<Option<String>>,
    ) -> Self {
        Notifier {
            sinks,
            config: Some(config),
        }
    }

    /// Offers `msg` to every sink that wants its kind, without waiting: a full queue drops it
    /// (counted), so a slow sink never slows the caller.
    pub fn send(&self, msg: Message) {
        let Ok(sinks) = self.sinks.read() else {
            return;
        };
        let msg = Arc::new(msg);
        for s in sinks.iter() {
            s.offer(&msg);
        }
    }

    /// The ConfigMap's `notifications.yaml` as the last scan read it; the supervisor acts only
    /// when it changed.
    pub fn configure(&self, text: Option<&str>) {
        if let Some(tx) = &self.config {
            tx.send_if_modified(|cur| {
                let new = text.map(str::to_string);
                let changed = *cur != new;
                *cur = new;
                changed
            });
        }
    }
}

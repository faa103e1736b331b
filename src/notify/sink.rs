//! One sink: its bounded queue and the task that empties it. The queue is the only thing a sink
//! shares with the scan, and the scan only offers to it ([`SinkHandle::offer`]), so a sink that
//! hangs costs its own queue and nothing else.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::Kind;
use super::config::SinkSpec;
use super::message::Message;
use super::post::Endpoint;
use super::retry::{Answer, Backoff, Step};
use crate::metrics::labels::NotificationOutcome;

/// Counts `n` messages of `sink` with an outcome (0 exports the series).
pub type Count = Arc<dyn Fn(&str, NotificationOutcome, u64) + Send + Sync>;

/// How a sink delivers, apart from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub events: Vec<Kind>,
    /// Messages waiting, besides the one being delivered.
    pub queue: usize,
    /// Deadline of one request.
    pub timeout: Duration,
    /// A message not delivered this long after it was queued is given up (failed).
    pub retry_for: Duration,
    pub backoff: Backoff,
}

impl Settings {
    pub fn of(spec: &SinkSpec) -> Settings {
        Settings {
            events: spec.events.clone(),
            queue: spec.queue,
            timeout: spec.timeout,
            retry_for: spec.retry_for,
            backoff: Backoff::default(),
        }
    }
}

struct Queued {
    msg: Arc<Message>,
    at: tokio::time::Instant,
}

/// A running sink. Dropping it closes its queue: what is queued is still delivered, then its
/// task ends.
pub struct SinkHandle {
    name: Arc<str>,
    settings: Settings,
    tx: mpsc::Sender<Queued>,
    endpoint: watch::Sender<Option<Arc<Endpoint>>>,
    count: Count,
}

impl SinkHandle {
    /// Starts the sink's task; with no endpoint yet (its Secret unread) messages wait for one.
    pub fn spawn(
        name: &str,
        settings: Settings,
        endpoint: Option<Endpoint>,
        count: Count,
    ) -> SinkHandle {
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let (ep_tx, ep_rx) = watch::channel(endpoint.map(Arc::new));
        let name: Arc<str> = Arc::from(name);
        for outcome in NotificationOutcome::ALL {
            count(&name, outcome, 0);
        }
        tokio::spawn(work(
            name.clone(),
            settings.clone(),
            rx,
            ep_rx,
            count.clone(),
        ));
        SinkHandle {
            name,
            settings,
            tx,
            endpoint: ep_tx,
            count,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A new URL or CA (a rotated Secret): the queue is kept.
    pub fn set_endpoint(&self, endpoint: Endpoint) {
        self.endpoint.send_replace(Some(Arc::new(endpoint)));
    }

    /// Queues `msg` if this sink wants its kind; never waits. A full queue drops it, counted.
    pub fn offer(&self, msg: &Arc<Message>) {
        if !self.settings.events.contains(&msg.kind) {
            return;
        }
        let queued = Queued {
            msg: msg.clone(),
            at: tokio::time::Instant::now(),
        };
        if self.tx.try_send(queued).is_err() {
            tracing::debug!(sink = %self.name, "notification queue full: message dropped");
            (self.count)(&self.name, NotificationOutcome::Dropped, 1);
        }
    }
}

async fn work(
    name: Arc<str>,
    settings: Settings,
    mut rx: mpsc::Receiver<Queued>,
    mut endpoint: watch::Receiver<Option<Arc<Endpoint>>>,
    count: Count,
) {
    while let Some(q) = rx.recv().await {
        let outcome = deliver(&name, &settings, &mut endpoint, &q).await;
        count(&name, outcome, 1);
    }
}

/// Tries `q` until it is delivered, refused, or `retry_for` has passed since it was queued.
async fn deliver(
    name: &str,
    settings: &Settings,
    endpoint: &mut watch::Receiver<Option<Arc<Endpoint>>>,
    q: &Queued,
) -> NotificationOutcome {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let ep = endpoint.borrow_and_update().clone();
        let answer = match ep {
            None => Answer::Transient,
            Some(ep) => match ep.post(q.msg.payload(ep.format), settings.timeout).await {
                Ok(status) => {
                    let answer = Answer::of_status(status);
                    if answer != Answer::Delivered {
                        tracing::debug!(sink = name, status, attempt, "notification not accepted");
                    }
                    answer
                }
                Err(e) => {
                    tracing::debug!(error = %e, attempt, "notification not delivered");
                    Answer::Transient
                }
            },
        };
        let step = (settings.backoff).next(answer, attempt, q.at.elapsed(), settings.retry_for);
        match step {
            Step::Sent => return NotificationOutcome::Sent,
            Step::Failed => {
                tracing::warn!(sink = name, attempt, kind = q.msg.kind.as_str(), claim = %format!("{}/{}", q.msg.namespace, q.msg.claim), "notification given up");
                return NotificationOutcome::Failed;
            }
            // A new endpoint (the Secret fixed) is tried at once.
            Step::Wait(d) => {
                // Closed (the sink was reconfigured away; its queue drains): just wait.
                if let Ok(Err(_)) = tokio::time::timeout(d, endpoint.changed()).await {
                    tokio::time::sleep(d).await;
                }
            }
        }
    }
}

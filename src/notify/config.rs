//! `notifications.yaml` in the agent's ConfigMap: the sinks. The URL is a credential (a Slack
//! webhook's path is its secret), so it is never written here: each sink names a Secret key in
//! the agent's own namespace, read by name (RBAC can limit `get` to those names).
//!
//! ```yaml
//! sinks:
//!   - name: db-team
//!     format: slack                # or json
//!     urlSecret: { name: headroom-notifications, key: db-team }
//!     caBundle: { configMap: corp-ca, key: ca.crt }   # optional: a private CA
//!     events: [grown, blocked, resizeFailed]           # default: all (recommended too)
//!     queue: 100                   # messages held while the sink is slow or down
//!     timeout: 5s                  # deadline of one request
//!     retryFor: 1h                 # a message not delivered by then is counted failed
//! ```

use std::str::FromStr;
use std::time::Duration;

use jiff::SignedDuration;
use serde::Deserialize;

use super::{Kind, NotifyError};

pub const KEY: &str = "notifications.yaml";
pub const MAX_SINKS: usize = 16;
pub const MAX_QUEUE: usize = 10_000;
const DEFAULT_QUEUE: usize = 100;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(3600);
const MAX_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"text": "..."}`: Slack's incoming webhooks, and the many chat tools that copy them.
    Slack,
    /// The message's fields ([`super::Message`]).
    Json,
}

/// A key of a Secret or ConfigMap in the agent's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRef {
    pub name: String,
    pub key: String,
}

/// Where a private CA bundle (PEM) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    Secret(KeyRef),
    ConfigMap(KeyRef),
}

/// One sink, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkSpec {
    pub name: String,
    pub format: Format,
    pub url_secret: KeyRef,
    pub ca_bundle: Option<CaSource>,
    pub events: Vec<Kind>,
    pub queue: usize,
    pub timeout: Duration,
    pub retry_for: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    sinks: Vec<RawSink>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSink {
    name: String,
    format: Format,
    url_secret: RawRef,
    #[serde(default)]
    ca_bundle: Option<RawCa>,
    #[serde(default)]
    events: Option<Vec<Kind>>,
    #[serde(default)]
    queue: Option<usize>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retry_for: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRef {
    name: String,
    key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCa {
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    config_map: Option<String>,
    key: String,
}

/// Parses the key's text; an error names the ConfigMap, the sink and the field. One bad sink
/// refuses the whole key: a typo must not silently leave a team without its messages.
pub fn parse(configmap: &str, text: &str) -> Result<Vec<SinkSpec>, NotifyError> {
    let bad = |detail: String| NotifyError::Config {
        configmap: configmap.to_string(),
        key: KEY,
        detail,
    };
    let raw: Raw = serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))?;
    if raw.sinks.len() > MAX_SINKS {
        return Err(bad(format!("at most {MAX_SINKS} sinks")));
    }
    let mut sinks: Vec<SinkSpec> = Vec::new();
    for (i, s) in raw.sinks.into_iter().enumerate() {
        let spec = sink(s).map_err(|(field, m)| bad(format!("sinks[{i}].{field}: {m}")))?;
        if sinks.iter().any(|o| o.name == spec.name) {
            return Err(bad(format!("sinks[{i}].name: '{}' named twice", spec.name)));
        }
        sinks.push(spec);
    }
    Ok(sinks)
}

type FieldError = (&'static str, String);

fn sink(s: RawSink) -> Result<SinkSpec, FieldError> {
    if !is_name(&s.name) {
        return Err((
            "name",
            "lowercase letters, digits and '-', at most 63".into(),
        ));
    }
    let url_secret = key_ref("urlSecret", s.url_secret.name, s.url_secret.key)?;
    let ca_bundle = match s.ca_bundle {
        None => None,
        Some(RawCa {
            secret: Some(name),
            config_map: None,
            key,
        }) => Some(CaSource::Secret(key_ref("caBundle", name, key)?)),
        Some(RawCa {
            secret: None,
            config_map: Some(name),
            key,
        }) => Some(CaSource::ConfigMap(key_ref("caBundle", name, key)?)),
        Some(_) => return Err(("caBundle", "one of secret or configMap, with key".into())),
    };
    let events = s.events.unwrap_or_else(|| Kind::ALL.to_vec());
    if events.is_empty() {
        return Err(("events", "empty: leave it out for every kind".into()));
    }
    let queue = s.queue.unwrap_or(DEFAULT_QUEUE);
    if !(1..=MAX_QUEUE).contains(&queue) {
        return Err(("queue", format!("between 1 and {MAX_QUEUE}")));
    }
    Ok(SinkSpec {
        name: s.name,
        format: s.format,
        url_secret,
        ca_bundle,
        events,
        queue,
        timeout: duration("timeout", s.timeout, DEFAULT_TIMEOUT, MAX_TIMEOUT)?,
        retry_for: duration("retryFor", s.retry_for, DEFAULT_RETRY_FOR, MAX_RETRY_FOR)?,
    })
}

/// A DNS label: what Secret keys and sink names need here (it is also a metric label value).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn key_ref(field: &'static str, name: String, key: String) -> Result<KeyRef, FieldError> {
    let key_ok = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !is_object_name(&name) || !key_ok {
        return Err((
            field,
            "a Secret or ConfigMap name and key in the agent's namespace".into(),
        ));
    }
    Ok(KeyRef { name, key })
}

fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn duration(
    field: &'static str,
    text: Option<String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, FieldError> {
    let Some(text) = text else {
        return Ok(default);
    };
    let d = SignedDuration::from_str(text.trim())
        .ok()
        .and_then(|d| Duration::try_from(d).ok())
        .filter(|d| !d.is_zero() && *d <= max);
    d.ok_or_else(|| {
        (
            field,
            format!(
                "'{text}' is not a duration between 1s and {}s",
                max.as_secs()
            ),
        )
    })
}

//! The agent's ConfigMap keys read outside the policy (`notifications.yaml`, `postgres.yaml`):
//! a key that cannot be read is ignored (no sink, no credentials), and said where an operator
//! looks: `headroom_config_key_invalid{key}` while it lasts, and one `ConfigKeyInvalid` Warning
//! Event on the ConfigMap per text that fails. The Event's name is made from the key and the
//! text, so the agents of every node post one Event between them (the others' creates are
//! refused, 409), and an agent posts it again only when the text changes, or at its next scan
//! when the create failed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::agent::work::Work;
use crate::decide::recommend::fnv1a;
use crate::events::{Named, Notice};
use crate::metrics::labels::ConfigKey;

pub const REASON: &str = "ConfigKeyInvalid";

/// The longest error said in an Event; the rest is in the agent's log.
const NOTE_MAX: usize = 1000;

/// What this agent has said about each key: the hash of the text its Event was about (or is
/// being created about). A create that fails takes its entry back, so the next scan tries again.
#[derive(Default)]
pub(super) struct ConfigKeys {
    told: Arc<Mutex<BTreeMap<ConfigKey, u64>>>,
}

/// A key's text that could not be read, and why.
pub(super) struct Invalid {
    pub key: ConfigKey,
    pub text: String,
    pub error: String,
}

impl ConfigKeys {
    /// Records this scan's verdict on every key: the gauge, and an Event for a failing text
    /// not yet said (in the background: the scan never waits for it).
    pub(super) fn report(&mut self, work: &Arc<Work>, cm: Option<&ConfigMap>, bad: Vec<Invalid>) {
        let metrics = work.admin.metrics();
        for key in ConfigKey::ALL {
            metrics.config_key_invalid(key, bad.iter().any(|b| b.key == key));
        }
        let Ok(mut told) = self.told.lock() else {
            return;
        };
        told.retain(|k, _| bad.iter().any(|b| b.key == *k));
        let Some(cm) = cm else { return };
        for b in bad {
            let hash = fnv1a(&b.text);
            if told.get(&b.key) == Some(&hash) {
                continue;
            }
            told.insert(b.key, hash);
            let (work, cm, told) = (work.clone(), cm.clone(), self.told.clone());
            tokio::spawn(async move {
                let notice = Notice {
                    warning: true,
                    reason: REASON,
                    note: note(b.key, &b.error),
                };
                let name = event_name(&cm, b.key, hash);
                let publisher = work.events.publisher();
                let named = publisher
                    .publish_named(&cm, &name, &notice, work.cfg.api_timeout)
                    .await;
                if matches!(named, Named::Failed) {
                    tracing::warn!(
                        key = b.key.as_str(),
                        "the ConfigKeyInvalid Event was not created; the next scan tries again"
                    );
                    if let Ok(mut told) = told.lock()
                        && told.get(&b.key) == Some(&hash)
                    {
                        told.remove(&b.key);
                    }
                }
            });
        }
    }
}

fn note(key: ConfigKey, error: &str) -> String {
    let mut note = format!("{} is ignored until it is fixed: {error}", key.as_str());
    if note.len() > NOTE_MAX {
        let mut end = NOTE_MAX;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

/// `<configmap>.config-key-invalid.<key>.<hash>`: a DNS subdomain whatever the ConfigMap's name
/// (itself one), the same on every agent for one text.
fn event_name(cm: &ConfigMap, key: ConfigKey, hash: u64) -> String {
    let cm = cm.metadata.name.as_deref().unwrap_or("headroom");
    let key = key.as_str().replace('.', "-");
    let mut name = format!("{cm}.config-key-invalid.{key}.{hash:016x}");
    // A ConfigMap name near the 253-character bound: the key and hash keep it unique.
    if name.len() > 253 {
        name = format!("headroom.config-key-invalid.{key}.{hash:016x}");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm
    }

    #[test]
    fn one_name_per_text_on_every_agent() {
        let a = event_name(&cm("headroom"), ConfigKey::Notifications, fnv1a("x: 1"));
        let b = event_name(&cm("headroom"), ConfigKey::Notifications, fnv1a("x: 1"));
        let c = event_name(&cm("headroom"), ConfigKey::Notifications, fnv1a("x: 2"));
        let d = event_name(&cm("headroom"), ConfigKey::Postgres, fnv1a("x: 1"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(
            a.starts_with("headroom.config-key-invalid.notifications-yaml."),
            "{a}"
        );
        let long = event_name(&cm(&"a".repeat(253)), ConfigKey::Postgres, 7);
        assert_eq!(
            long,
            "headroom.config-key-invalid.postgres-yaml.0000000000000007"
        );
    }

    #[test]
    fn a_long_error_is_cut_on_a_character() {
        let n = note(ConfigKey::Postgres, &"é".repeat(2000));
        assert!(n.len() <= NOTE_MAX + '…'.len_utf8(), "{}", n.len());
        assert!(n.starts_with("postgres.yaml is ignored until it is fixed: é"));
        assert!(n.ends_with('…'));
    }
}

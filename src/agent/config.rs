//! The agent's settings: its flags read and checked once, at start.

use std::time::Duration;

use jiff::SignedDuration;

use super::{AgentError, kubelet_stats_https};
use crate::cli::AgentArgs;

/// The agent's settings, validated from the command line.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: String,
    pub namespace: String,
    pub configmap: String,
    pub kubelet_root: std::path::PathBuf,
    /// This node's kubelet, when `HOST_IP` is known.
    pub kubelet: Option<kubelet_stats_https::KubeletEndpoint>,
    pub interval: Duration,
    pub dry_run: bool,
    pub resize_timeout: SignedDuration,
    pub api_timeout: Duration,
    /// The most claim and peer-selector watches before namespaces are watched whole.
    pub claim_watches: usize,
    pub probe_timeout: Duration,
    /// The fast measurement loop's period; `None` when off.
    pub measure_interval: Option<Duration>,
    pub listen: String,
    pub shutdown_grace: Duration,
    /// How long a restored or cloned peer claim may stay Pending below its group's size before
    /// it gets a `RestoreTooSmall` Event.
    pub restore_pending_after: SignedDuration,
    /// The claim admission webhook, when served.
    pub webhook: Option<crate::webhook::WebhookConfig>,
    /// The forward proxies of notification sinks.
    pub proxies: crate::notify::proxy::Proxies,
}

fn duration(flag: &'static str, text: &str) -> Result<Duration, AgentError> {
    let d: SignedDuration = text.parse().map_err(|e| AgentError::Flag {
        flag,
        message: format!("'{text}' is not a duration (e.g. 10s, 5m): {e}"),
    })?;
    positive(flag, text, d)
}

/// `d` as a `Duration`, refused when it is not more than zero.
fn positive(flag: &'static str, text: &str, d: SignedDuration) -> Result<Duration, AgentError> {
    Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| AgentError::Flag {
            flag,
            message: format!("'{text}' must be more than zero"),
        })
}

fn signed(flag: &'static str, d: Duration) -> Result<SignedDuration, AgentError> {
    SignedDuration::try_from(d).map_err(|e| AgentError::Flag {
        flag,
        message: e.to_string(),
    })
}

/// A duration that may be counted in days (`90d`), each of 24 hours: a certificate's validity.
fn long_duration(flag: &'static str, text: &str) -> Result<Duration, AgentError> {
    let bad = |message: String| AgentError::Flag { flag, message };
    let span: jiff::Span = text
        .parse()
        .map_err(|e| bad(format!("'{text}' is not a duration (e.g. 90d, 9s): {e}")))?;
    let d = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| bad(format!("'{text}': {e}")))?;
    positive(flag, text, d)
}

impl AgentConfig {
    pub fn from_args(a: &AgentArgs) -> Result<Self, AgentError> {
        if a.node_name.trim().is_empty() {
            return Err(AgentError::Flag {
                flag: "node-name",
                message: "NODE_NAME is empty; set it from the downward API (spec.nodeName)".into(),
            });
        }
        let resize_timeout = duration("resize-timeout", &a.resize_timeout)?;
        Ok(AgentConfig {
            node: a.node_name.clone(),
            namespace: a.namespace.clone(),
            configmap: a.configmap.clone(),
            kubelet_root: a.kubelet_root.clone(),
            kubelet: a
                .host_ip
                .as_deref()
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|host| kubelet_stats_https::KubeletEndpoint {
                    host: host.to_string(),
                    port: a.kubelet_port,
                    ca_file: a.kubelet_ca.clone(),
                    token_file: a.kubelet_token_file.clone(),
                }),
            interval: duration("interval", &a.interval)?,
            dry_run: a.dry_run,
            resize_timeout: signed("resize-timeout", resize_timeout)?,
            api_timeout: duration("api-timeout", &a.api_timeout)?,
            claim_watches: usize::from(a.claim_watches),
            probe_timeout: duration("probe-timeout", &a.probe_timeout)?,
            measure_interval: match a.measure_interval.trim() {
                "0" | "0s" | "off" => None,
                text => Some(duration("measure-interval", text)?),
            },
            listen: a.listen.clone(),
            shutdown_grace: duration("shutdown-grace", &a.shutdown_grace)?,
            restore_pending_after: signed(
                "restore-pending-after",
                duration("restore-pending-after", &a.restore_pending_after)?,
            )?,
            webhook: webhook_config(a)?,
            proxies: crate::notify::proxy::Proxies::new(
                a.https_proxy.as_deref(),
                a.http_proxy.as_deref(),
                a.no_proxy.as_deref(),
            )
            .map_err(|e| AgentError::Flag {
                flag: e.flag,
                message: e.to_string(),
            })?,
        })
    }
}

/// The webhook's settings, when `--webhook-listen` turns it on.
fn webhook_config(a: &AgentArgs) -> Result<Option<crate::webhook::WebhookConfig>, AgentError> {
    use crate::webhook::{Tls, WebhookConfig, certs};
    let Some(listen) = a
        .webhook_listen
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    else {
        return Ok(None);
    };
    let tls = match (&a.webhook_cert_file, &a.webhook_key_file) {
        (Some(cert), Some(key)) => Tls::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: a.webhook_ca_file.clone(),
        },
        _ => Tls::Secret {
            name: a.webhook_secret.clone(),
            names: certs::names(&a.webhook_service, &a.namespace, &a.webhook_extra_names),
        },
    };
    let configuration = Some(a.webhook_configuration.trim())
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    Ok(Some(WebhookConfig {
        listen: listen.to_string(),
        namespace: a.namespace.clone(),
        tls,
        configuration,
        deadline: duration("webhook-deadline", &a.webhook_deadline)?,
        validity: long_duration("webhook-cert-validity", &a.webhook_cert_validity)?,
    }))
}

#[cfg(test)]
mod validity_tests {
    use super::long_duration;
    use std::time::Duration;

    #[test]
    fn a_validity_is_counted_in_days_of_24_hours_or_less() {
        let v = |t: &str| long_duration("webhook-cert-validity", t);
        assert_eq!(v("90d").ok(), Some(Duration::from_secs(90 * 86_400)));
        assert_eq!(v("9s").ok(), Some(Duration::from_secs(9)));
        assert_eq!(v("36h").ok(), Some(Duration::from_secs(36 * 3600)));
        for bad in ["0s", "soon", "", "2mo"] {
            assert!(v(bad).is_err(), "{bad}");
        }
    }
}

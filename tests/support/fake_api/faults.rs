//! Injected failures: answers with an error status, slow answers. Watches already open are
//! untouched except by `drop_watches`, as with a real server that starts failing new requests.

use std::time::Duration;

#[derive(Debug, Clone)]
struct Rule {
    remaining: usize,
    status: u16,
    method: Option<String>,
    path_contains: Option<String>,
}

#[derive(Debug, Default)]
pub struct Faults {
    rules: Vec<Rule>,
    failing: bool,
    delay: Duration,
    /// (method, path fragment, delay): a slow answer for matching requests only.
    slow: Vec<(String, String, Duration)>,
}

impl Faults {
    pub fn fail_next(
        &mut self,
        n: usize,
        status: u16,
        method: Option<&str>,
        path_contains: Option<&str>,
    ) {
        self.rules.push(Rule {
            remaining: n,
            status,
            method: method.map(str::to_ascii_uppercase),
            path_contains: path_contains.map(str::to_string),
        });
    }

    pub fn set_failing(&mut self, failing: bool) {
        self.failing = failing;
    }

    pub fn set_delay(&mut self, delay: Duration) {
        self.delay = delay;
    }

    pub fn set_slow(&mut self, method: &str, path_contains: &str, delay: Duration) {
        self.slow.push((
            method.to_ascii_uppercase(),
            path_contains.to_string(),
            delay,
        ));
    }

    /// How long to hold this request before answering it.
    pub fn delay_for(&self, method: &str, path: &str) -> Duration {
        self.slow
            .iter()
            .filter(|(m, p, _)| m == method && path.contains(p.as_str()))
            .map(|(_, _, d)| *d)
            .fold(self.delay, Duration::max)
    }

    /// The status to answer instead of serving this request, consuming one injected failure.
    pub fn take(&mut self, method: &str, path: &str) -> Option<u16> {
        if self.failing {
            return Some(500);
        }
        let rule = self.rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.method.as_deref().is_none_or(|m| m == method)
                && r.path_contains.as_deref().is_none_or(|p| path.contains(p))
        })?;
        rule.remaining -= 1;
        let status = rule.status;
        self.rules.retain(|r| r.remaining > 0);
        Some(status)
    }
}

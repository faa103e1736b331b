//! What every part of policy validation shares: the volume's known facts ([`Context`]) and the
//! [`Checker`] that reads a key, records a finding under its YAML path and names where a merged
//! value came from.

use super::Finding;
use super::Source;
use super::spec::PolicySpec;
use super::value::integer;

/// Facts about the volume a policy is for, when known; they enable the warnings that need them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    pub current_size: Option<u64>,
    pub wal_has_own_volume: Option<bool>,
    /// The documented rule for resizing a volume of the claim's CSI driver
    /// ([`super::drivers`]), when the driver is known and has one: `modificationInterval: auto`.
    pub driver_rule: Option<super::drivers::Rule>,
    /// The layer `minAvailable` came from, when the policy was merged from a claim's layers: a
    /// floor written on the claim is applied as written, one inherited is not applied while the
    /// claim cannot meet it. `None` (a policy file, which could be either): `validate` says what
    /// each would do.
    pub min_available_source: Option<Source>,
}

pub(super) struct Checker<'a> {
    pub(super) spec: &'a PolicySpec,
    pub(super) errors: Vec<Finding>,
    pub(super) warnings: Vec<Finding>,
}

impl Checker<'_> {
    pub(super) fn finding(&self, path: &str, message: String) -> Finding {
        let message = match self.spec.get(path).and_then(|r| r.origin.as_deref()) {
            Some(origin) => format!("{message} (set by {origin})"),
            None => message,
        };
        Finding {
            field: path.to_string(),
            message,
        }
    }
    pub(super) fn error(&mut self, path: &str, message: String) {
        let f = self.finding(path, message);
        self.errors.push(f);
    }
    pub(super) fn warn(&mut self, path: &str, message: String) {
        let f = self.finding(path, message);
        self.warnings.push(f);
    }
    /// The parsed value of a key; `None` when absent or invalid (then an error is recorded).
    pub(super) fn value<T>(
        &mut self,
        path: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = self.spec.get(path)?.text.clone();
        parse(&text).map_err(|m| self.error(path, m)).ok()
    }
    pub(super) fn percent(&mut self, path: &str, min: u64, max: u64, default: u8) -> u8 {
        let what = format!("a whole percent from {min} to {max}");
        let v = self.value(path, |t| integer(t, min, max, &what));
        v.and_then(|n| u8::try_from(n).ok()).unwrap_or(default)
    }
    pub(super) fn count(&mut self, path: &str, max: u64, default: u32) -> u32 {
        let what = format!("a whole number from 0 to {max}");
        let v = self.value(path, |t| integer(t, 0, max, &what));
        v.and_then(|n| u32::try_from(n).ok()).unwrap_or(default)
    }
}

/// A duration key in `min..=max`, written like `2m` or `90s`.
pub(super) fn duration(
    c: &mut Checker<'_>,
    path: &str,
    default: &str,
    min: jiff::SignedDuration,
    max: jiff::SignedDuration,
) -> jiff::SignedDuration {
    let what = format!("a duration from {:#} to {:#}, e.g. {default}", min, max);
    let v = c.value(path, |t| {
        let d: jiff::SignedDuration = t
            .trim()
            .parse()
            .map_err(|_| format!("'{}' is not a duration; write {what}", t.trim()))?;
        if d < min || d > max {
            return Err(format!("{:#} is out of range; write {what}", d));
        }
        Ok(d)
    });
    // The defaults are constants of this crate, so they parse; the zero fallback is unreachable.
    v.unwrap_or_else(|| default.parse().unwrap_or(min))
}

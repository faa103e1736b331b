//! When the Secret's certificate is renewed, and into what. Every renewal makes a new CA too,
//! in two writes so the API server trusts a certificate before any agent serves it:
//!
//! 1. at half the served certificate's life, the next pair is staged in the Secret and its CA
//!    joins `ca.crt` (the agents copy `ca.crt` into `caBundle`);
//! 2. at two thirds, once `caBundle` holds that CA, the next pair becomes the served one.
//!
//! A CA stays in `ca.crt` until its certificate has expired, so an agent that has not yet
//! swapped is still trusted: old and new overlap. An expired or unreadable certificate is
//! replaced at once (nothing trusts it anyway), and one that outlives the configured validity
//! (an older agent's ten-year certificate, or a shortened `--webhook-cert-validity`) is due now:
//! staged at once, served a sixth of the validity later (see [`staged_a_sixth`]).

use std::time::Duration;

use super::CertError;
use super::certs::{self, Pair, ServingCert};

/// What the Secret should become.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Keep,
    /// Write this over the Secret; the `&str` says why, for the log.
    Write(ServingCert, &'static str),
}

/// How often the agents look at the Secret: thirty times per validity, at least every 5 minutes.
pub fn check_every(validity: Duration) -> Duration {
    (validity / 30).min(Duration::from_secs(300))
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 4)
}

/// `blocks` joined into one PEM bundle.
fn bundle<'a>(blocks: impl IntoIterator<Item = &'a str>) -> String {
    blocks
        .into_iter()
        .map(|b| format!("{}\n", b.trim()))
        .collect()
}

/// Whether `next` was made at least a sixth of its validity before `t` (an unreadable one is
/// served at once: the next step replaces it). In the usual course this holds by two thirds of
/// the served certificate's life; it keeps an overdue certificate from being replaced the moment
/// it is found, while agents of an earlier version, which hold `caBundle` at their own CA, may
/// still be running (a rolling update), and gives a `caBundle` kept by someone else time.
fn staged_a_sixth(next: &Pair, t: i64) -> bool {
    certs::validity(&next.cert).map_or(true, |v| (t - v.not_before) * 6 >= v.lifetime())
}

/// The step for the Secret holding `stored` at `now`. `trusted`: `caBundle` already holds every
/// CA of `stored.ca` (or is not ours to keep), so a staged pair may be served.
pub fn plan(
    stored: &ServingCert,
    names: &[String],
    now: jiff::Timestamp,
    validity: Duration,
    trusted: bool,
) -> Result<Step, CertError> {
    let t = now.as_second();
    let served = match certs::validity(&stored.cert) {
        Ok(v) if v.not_after > t => v,
        _ => {
            let fresh = certs::generate(names, now, validity)?;
            let ca = bundle(
                certs::unexpired(&stored.ca, t)
                    .into_iter()
                    .chain([fresh.ca.as_str()]),
            );
            return Ok(Step::Write(ServingCert { ca, ..fresh }, "expired"));
        }
    };
    // Slack for clocks: a certificate just made by an agent a little ahead is not "too long".
    let slack = secs(validity / 10).max(60);
    let overdue = served.not_after - t > secs(validity) + slack;
    let age = t - served.not_before;
    match &stored.next {
        None if overdue || age * 2 >= served.lifetime() => {
            let next = certs::generate(names, now, validity)?;
            let ca = bundle(
                certs::unexpired(&stored.ca, t)
                    .into_iter()
                    .chain([next.ca.as_str()]),
            );
            let staged = ServingCert {
                ca,
                next: Some(Pair {
                    cert: next.cert,
                    key: next.key,
                }),
                ..stored.clone()
            };
            Ok(Step::Write(staged, "next certificate staged"))
        }
        Some(next)
            if trusted
                && staged_a_sixth(next, t)
                && (overdue || age * 3 >= served.lifetime() * 2) =>
        {
            let renewed = ServingCert {
                ca: bundle(certs::unexpired(&stored.ca, t)),
                cert: next.cert.clone(),
                key: next.key.clone(),
                next: None,
            };
            Ok(Step::Write(renewed, "renewed"))
        }
        _ => Ok(Step::Keep),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;
    const T0: i64 = 1_780_000_000;

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).expect("time")
    }

    fn names() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    fn step(s: &ServingCert, t: i64, trusted: bool) -> Step {
        plan(
            s,
            &names(),
            at(t),
            Duration::from_secs(90 * 86_400),
            trusted,
        )
        .expect("plan")
    }

    fn written(step: Step) -> ServingCert {
        match step {
            Step::Write(s, _) => s,
            Step::Keep => panic!("expected a write"),
        }
    }

    #[test]
    fn staged_at_half_served_at_two_thirds_once_trusted_old_ca_kept_until_it_expires() {
        let first =
            certs::generate(&names(), at(T0), Duration::from_secs(90 * 86_400)).expect("generate");
        assert_eq!(step(&first, T0 + DAY, true), Step::Keep);
        let staged = written(step(&first, T0 + 46 * DAY, true));
        assert_eq!((&staged.cert, &staged.key), (&first.cert, &first.key));
        let next = staged.next.clone().expect("a staged pair");
        assert_eq!(certs::pem_blocks(&staged.ca).len(), 2, "old and next CA");
        assert_eq!(step(&staged, T0 + 50 * DAY, true), Step::Keep);
        // Due, but caBundle does not hold the next CA yet: the old pair is still served.
        assert_eq!(step(&staged, T0 + 61 * DAY, false), Step::Keep);
        let renewed = written(step(&staged, T0 + 61 * DAY, true));
        assert_eq!((&renewed.cert, &renewed.key), (&next.cert, &next.key));
        assert!(renewed.next.is_none());
        assert_eq!(
            renewed.ca, staged.ca,
            "the old CA stays while its certificate is valid"
        );
        // The next round, after the first certificate expired, drops its CA.
        let again = written(step(&renewed, T0 + 92 * DAY, true));
        let blocks = certs::pem_blocks(&again.ca);
        assert_eq!(blocks.len(), 2);
        assert!(!again.ca.contains(certs::pem_blocks(&first.ca)[0]));
        assert!(again.ca.contains(certs::pem_blocks(&staged.ca)[1]));
    }

    #[test]
    fn expired_or_unreadable_is_replaced_at_once_and_ten_years_is_due_now() {
        let first =
            certs::generate(&names(), at(T0), Duration::from_secs(90 * 86_400)).expect("generate");
        let fresh = written(step(&first, T0 + 91 * DAY, false));
        assert_ne!(fresh.cert, first.cert);
        let v = certs::validity(&fresh.cert).expect("validity");
        assert_eq!(v.not_after, T0 + 181 * DAY);
        let mut garbage = first.clone();
        garbage.cert = "not a certificate".into();
        assert_ne!(written(step(&garbage, T0, false)).cert, garbage.cert);
        // An older agent's ten-year certificate: rotated through the same overlap.
        let old = certs::generate(&names(), at(T0), Duration::from_secs(3650 * 86_400))
            .expect("generate");
        let staged = written(step(&old, T0 + DAY, true));
        assert_eq!(staged.cert, old.cert);
        assert!(staged.next.is_some());
        // Served a sixth of the validity later, when an older agent has had time to go.
        assert_eq!(step(&staged, T0 + 15 * DAY, true), Step::Keep);
        assert_ne!(written(step(&staged, T0 + 17 * DAY, true)).cert, old.cert);
    }

    #[test]
    fn a_bundle_read_before_a_renewal_is_behind_the_one_written_after() {
        let first =
            certs::generate(&names(), at(T0), Duration::from_secs(90 * 86_400)).expect("generate");
        let staged = written(step(&first, T0 + 46 * DAY, true));
        let (old, new) = (first.ca.as_bytes(), staged.ca.as_bytes());
        assert!(certs::behind(old, new));
        assert!(!certs::behind(new, old));
        assert!(!certs::behind(new, new));
        assert!(!certs::behind(old, b"not PEM"));
    }

    #[test]
    fn checked_thirty_times_per_validity_at_most_every_five_minutes() {
        assert_eq!(
            check_every(Duration::from_secs(9)),
            Duration::from_millis(300)
        );
        assert_eq!(
            check_every(Duration::from_secs(90 * 86_400)),
            Duration::from_secs(300)
        );
    }
}

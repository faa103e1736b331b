//! The pure parts with time passed in (config, backoff, messages) and the queue as the scan sees
//! it. Delivery over real HTTP is tested in tests/notify_http.rs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

use super::config::{self, CaSource, KeyRef};
use super::retry::{Answer, Backoff, Step};
use super::*;
use crate::decide::{BlockReason, GrowKind, Verdict};
use crate::metrics::labels::NotificationOutcome;
use crate::metrics::tests::report;
use crate::quantity::GI;

const CM: &str = "headroom/headroom";

#[test]
fn a_full_sink_parses_and_defaults_fill_the_rest() {
    let sinks = config::parse(
        CM,
        "sinks:\n\
         - name: db-team\n  format: slack\n  urlSecret: { name: headroom-notifications, key: db-team }\n  caBundle: { configMap: corp-ca, key: ca.crt }\n  events: [blocked, resizeFailed]\n  queue: 7\n  timeout: 2s\n  retryFor: 10m\n\
         - name: audit\n  format: json\n  urlSecret: { name: headroom-notifications, key: audit }\n",
    )
    .expect("valid");
    assert_eq!(sinks.len(), 2);
    let s = &sinks[0];
    assert_eq!(s.format, Format::Slack);
    assert_eq!(
        s.ca_bundle,
        Some(CaSource::ConfigMap(KeyRef {
            name: "corp-ca".into(),
            key: "ca.crt".into()
        }))
    );
    assert_eq!(s.events, vec![Kind::Blocked, Kind::ResizeFailed]);
    assert_eq!(
        (s.queue, s.timeout, s.retry_for),
        (7, Duration::from_secs(2), Duration::from_secs(600))
    );
    let d = &sinks[1];
    assert_eq!(d.events, Kind::ALL.to_vec());
    assert_eq!(
        (d.queue, d.timeout, d.retry_for),
        (100, Duration::from_secs(5), Duration::from_secs(3600))
    );
}

#[test]
fn a_bad_sink_is_refused_naming_the_configmap_and_field() {
    let cases = [
        (
            "sinks:\n- name: a\n  format: slack\n  url: https://hooks.example/x\n  urlSecret: {name: s, key: k}\n",
            "url",
        ),
        (
            "sinks:\n- name: A_b\n  format: json\n  urlSecret: {name: s, key: k}\n",
            "sinks[0].name",
        ),
        (
            "sinks:\n- name: a\n  format: xml\n  urlSecret: {name: s, key: k}\n",
            "xml",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: ../s, key: k}\n",
            "sinks[0].urlSecret",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n  queue: 0\n",
            "sinks[0].queue",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n  timeout: 5 parsecs\n",
            "sinks[0].timeout",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n  caBundle: {secret: a, configMap: b, key: c}\n",
            "sinks[0].caBundle",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n",
            "sinks[1].name",
        ),
        (
            "sinks:\n- name: a\n  format: json\n  urlSecret: {name: s, key: k}\n  events: [deleted]\n",
            "deleted",
        ),
    ];
    for (text, names) in cases {
        let e = config::parse(CM, text).expect_err(text).to_string();
        assert!(
            e.contains("ConfigMap headroom/headroom key notifications.yaml"),
            "{e}"
        );
        assert!(e.contains(names), "{text}: {e}");
    }
}

#[test]
fn backoff_doubles_to_its_cap_and_gives_up_at_retry_for() {
    let b = Backoff::default();
    let delays: Vec<u64> = (1..=9).map(|a| b.delay(a).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert_eq!(b.delay(u32::MAX), Duration::from_secs(60));
    let hour = Duration::from_secs(3600);
    let t = |s| Duration::from_secs(s);
    assert_eq!(b.next(Answer::Delivered, 1, t(0), hour), Step::Sent);
    assert_eq!(b.next(Answer::Refused, 1, t(0), hour), Step::Failed);
    assert_eq!(b.next(Answer::Transient, 3, t(10), hour), Step::Wait(t(4)));
    // A wait that would end past retryFor is not started.
    assert_eq!(b.next(Answer::Transient, 9, t(3541), hour), Step::Failed);
    assert_eq!(
        b.next(Answer::Transient, 9, t(3540), hour),
        Step::Wait(t(60))
    );
    let statuses = [
        (200, Answer::Delivered),
        (204, Answer::Delivered),
        (500, Answer::Transient),
        (503, Answer::Transient),
        (429, Answer::Transient),
        (408, Answer::Transient),
        (404, Answer::Refused),
        (403, Answer::Refused),
        (301, Answer::Refused),
    ];
    for (status, answer) in statuses {
        assert_eq!(Answer::of_status(status), answer, "{status}");
    }
}

fn at() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("time")
}

#[test]
fn a_grow_message_has_names_sizes_and_time_in_both_formats() {
    let mut r = report("data-pg-1", Some(9 * GI));
    r.decision.seconds_to_full = Some(600.0);
    let m = Message::grown(&r, (GrowKind::Grow, 10 * GI, 12 * GI), at());
    let json: serde_json::Value = serde_json::from_slice(&m.payload(Format::Json)).expect("json");
    assert_eq!(
        json,
        serde_json::json!({
            "kind": "grown", "namespace": "db", "claim": "data-pg-1", "node": "n1",
            "reason": "Resized", "grow": "Grow", "fromBytes": 10 * GI, "toBytes": 12 * GI,
            "limitBytes": 100 * GI, "fullAt": "2023-11-14T22:23:20Z", "time": "2023-11-14T22:13:20Z",
        })
    );
    let slack: serde_json::Value = serde_json::from_slice(&m.payload(Format::Slack)).expect("json");
    assert_eq!(
        slack["text"],
        "headroom grew db/data-pg-1 (node n1) from 10Gi to 12Gi (Grow), limit 100Gi; full at 2023-11-14T22:23:20Z at the current rate"
    );
    assert_eq!(slack.as_object().map(|o| o.len()), Some(1));
}

#[test]
fn a_recommendation_carries_its_id_deadline_and_when_it_goes_stale() {
    use crate::decide::recommend::Recommendation;
    let r = report("data-pg-1", Some(9 * GI));
    let rec = Recommendation {
        id: "3f1c9a0b27de".into(),
        kind: crate::decide::GrowKind::Grow,
        predicted: false,
        from_bytes: 10 * GI,
        to_bytes: 12 * GI,
        full_at: Some(at() + jiff::SignedDuration::from_hours(6)),
        used_percent: Some(90),
        made_at: at(),
        stale_at: at() + jiff::SignedDuration::from_hours(1),
    };
    let m = Message::recommended(&r, &rec, at());
    assert_eq!(m.kind, Kind::Recommended);
    let json: serde_json::Value = serde_json::from_slice(&m.payload(Format::Json)).expect("json");
    assert_eq!(json["kind"], "recommended");
    assert_eq!(json["reason"], "GrowRecommended");
    assert_eq!(json["recommendation"], "3f1c9a0b27de");
    assert_eq!(json["toBytes"], 12 * GI);
    assert_eq!(json["fullAt"], "2023-11-15T04:13:20Z");
    assert_eq!(json["until"], "2023-11-14T23:13:20Z");
    assert_eq!(
        m.text(),
        "headroom recommends growing db/data-pg-1 (node n1) from 10Gi to 12Gi (Grow), recommendation 3f1c9a0b27de; approve with headroom approve -n db data-pg-1, limit 100Gi; full at 2023-11-15T04:13:20Z at the current rate; stale at 2023-11-14T23:13:20Z"
    );
}

#[test]
fn a_block_says_its_reason_and_when_it_lifts_and_a_failed_resize_is_its_own_kind() {
    let mut r = report("data-pg-1", Some(9 * GI));
    r.decision.verdict = Verdict::Blocked {
        reason: BlockReason::BudgetExhausted,
    };
    r.decision.next_slot = Some(at() + jiff::SignedDuration::from_hours(3));
    let m = Message::blocked(&r, "BudgetExhausted", at()).expect("blocked");
    assert_eq!(
        (m.kind, m.blocked),
        (Kind::Blocked, Some("budget_exhausted"))
    );
    assert_eq!(m.until, r.decision.next_slot);
    assert!(
        m.text().contains(
            "cannot grow db/data-pg-1 (node n1): budget_exhausted (BudgetExhausted), at 10Gi"
        ),
        "{}",
        m.text()
    );
    r.decision.verdict = Verdict::Blocked {
        reason: BlockReason::ResizeFailed,
    };
    let m = Message::blocked(&r, "ExpansionInfeasible", at()).expect("blocked");
    assert_eq!(m.kind, Kind::ResizeFailed);
    assert_eq!(m.until, None);
    r.decision.verdict = Verdict::NoAction {
        state: crate::decide::State::Balanced,
    };
    assert_eq!(Message::blocked(&r, "x", at()), None);
}

type Counted = Arc<Mutex<Vec<(String, NotificationOutcome, u64)>>>;

fn counter() -> (Counted, Count) {
    let seen: Counted = Arc::default();
    let s = seen.clone();
    let count: Count = Arc::new(move |sink: &str, o, n| {
        s.lock().expect("lock").push((sink.to_string(), o, n));
    });
    (seen, count)
}

fn total(seen: &Counted, outcome: NotificationOutcome) -> u64 {
    seen.lock()
        .expect("lock")
        .iter()
        .filter(|c| c.1 == outcome)
        .map(|c| c.2)
        .sum()
}

fn settings(queue: usize, events: Vec<Kind>) -> Settings {
    Settings {
        events,
        queue,
        timeout: Duration::from_millis(50),
        retry_for: Duration::from_millis(300),
        backoff: Backoff {
            base: Duration::from_millis(20),
            max: Duration::from_millis(40),
        },
    }
}

/// The scan's side of the queue: offering never waits, what does not fit is dropped and
/// counted, kinds a sink did not ask for are not queued at all; with no URL (its Secret not
/// read) what was queued is retried until retryFor, then counted failed.
#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_drops_and_counts_and_undeliverable_messages_fail_after_retry_for() {
    let (seen, count) = counter();
    let full = SinkHandle::spawn("full", settings(2, Kind::ALL.to_vec()), None, count.clone());
    let picky = SinkHandle::spawn("picky", settings(2, vec![Kind::ResizeFailed]), None, count);
    let n = Notifier::with_sinks(vec![full, picky]);
    let r = report("a", None);
    // No await between offers: the sinks' tasks have not run, the queues hold exactly 2.
    let started = std::time::Instant::now();
    for _ in 0..5 {
        n.send(Message::grown(&r, (GrowKind::Grow, GI, 2 * GI), at()));
    }
    assert!(started.elapsed() < Duration::from_millis(50), "send waited");
    assert_eq!(total(&seen, NotificationOutcome::Dropped), 3);
    let zeros = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|c| c.2 == 0)
        .count();
    assert_eq!(zeros, 6, "every series of both sinks is exported from 0");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(total(&seen, NotificationOutcome::Failed), 2);
    assert_eq!(total(&seen, NotificationOutcome::Sent), 0);
    assert!(
        seen.lock()
            .expect("lock")
            .iter()
            .all(|c| c.0 == "full" || c.2 == 0)
    );
}

proptest::proptest! {
    /// The key is the admin's, but a bad edit must be an error, never a panic of the agent.
    #[test]
    fn any_text_parses_or_is_an_error(
        text in "(sinks:\n- |  |name: |format: |urlSecret: |\\{|\\}|events: |\\[|\\]|queue: |timeout: |[a-z0-9 .:,/-]){0,40}"
    ) {
        let _ = config::parse(CM, &text);
    }
}

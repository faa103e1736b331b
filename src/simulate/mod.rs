//! Replays a growth trace through the decision engine with a simulated clock: the dry run users
//! asked other autoresizers for. Pure: the command reads files, the replay does no I/O.

pub mod trace;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::decide::rate::{self, FillRate, Sample};
use crate::decide::{
    Action, ActionResult, BlockReason, ClaimState, Decision, GrowKind, Inputs, Measurement,
    PolicyInput, ResizeState, VolumeFacts, decide,
};
use crate::policy::{Fallback, Policy, drivers};
use crate::report::MeasuredBy;
use crate::resolve::inflight::{self, Seen};
use trace::Trace;

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    #[error("{0}")]
    Policy(String),
    #[error("--{flag}: {message}")]
    Flag { flag: &'static str, message: String },
}

/// How the simulated world behaves around the engine.
#[derive(Debug, Clone)]
pub struct Options {
    pub capacity: u64,
    pub interval: SignedDuration,
    pub resize_delay: SignedDuration,
    pub start: Timestamp,
    pub facts: VolumeFacts,
    /// The storage's rule for resizes (its CSI driver's, [`drivers::rule`]): a resize sent
    /// sooner than its gap after the last one it accepted, past its budget for the window, or
    /// (when it says so) before the last one has landed, is refused and lands nothing.
    pub storage_rule: Option<drivers::Rule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimAction {
    pub at: Timestamp,
    pub seconds: f64,
    pub kind: GrowKind,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// Decided by the predictive trigger, before the threshold was crossed.
    pub predicted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimBlocked {
    pub at: Timestamp,
    pub seconds: f64,
    pub reason: BlockReason,
}

/// A trigger stopped (or started again) being applied as written: `fallback` is what stands in
/// from then on, `None` once the policy applies as written again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimFallback {
    pub at: Timestamp,
    pub seconds: f64,
    pub fallback: Option<Fallback>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub actions: Vec<SimAction>,
    /// Resizes the storage refused: sent inside its modification interval.
    pub refused: Vec<SimAction>,
    pub blocked: Vec<SimBlocked>,
    pub final_capacity_bytes: u64,
    pub peak_used_percent: f64,
    /// The most bytes in use at once (at most the filesystem's size at that moment).
    pub peak_used_bytes: u64,
    /// Time spent with demand at or above the filesystem's capacity (writes failing).
    pub full_seconds: f64,
    pub evaluations: u64,
    /// Distinct notes the engine made (e.g. WAL health unknown), in first-seen order.
    pub notes: Vec<crate::decide::Note>,
    /// When a trigger stopped or started again being applied as written (an invalid or
    /// unreachable `minAvailable`), as the claim's status and Events would say it.
    pub fallbacks: Vec<SimFallback>,
}

/// The agent's `--resize-timeout` default: a resize not seen landed by then is reported failed.
pub const RESIZE_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);

/// The simulated claim and storage around the engine: a resize lands `resize_delay` after it was
/// requested; what is in flight and what landed is read from the history by the agent's own
/// model ([`inflight`]), as the agent would read it from the claim.
struct World {
    capacity: u64,
    request: u64,
    /// When the requested size lands on the filesystem.
    lands_at: Option<f64>,
    /// The rate estimator sees the trace's own rows as the agent would see its samples.
    samples: Vec<Sample>,
    next_row: usize,
    history: Vec<Action>,
    /// When the storage accepted each resize (seconds of the trace).
    accepted: Vec<f64>,
}

impl World {
    /// Lands a resize that is due, and takes the trace's rows up to `t` as samples.
    fn advance(&mut self, trace: &Trace, t: f64) {
        if self.lands_at.is_some_and(|at| t >= at) {
            self.capacity = self.request;
            self.lands_at = None;
        }
        while let Some(row) = trace
            .rows
            .get(self.next_row)
            .filter(|r| r.seconds <= t + 1e-9)
        {
            self.samples.push(Sample {
                seconds: row.seconds,
                used_bytes: (row.used_bytes.round().max(0.0) as u64).min(self.capacity),
            });
            self.next_row += 1;
        }
        if self.samples.len() > 2 * rate::MAX_SAMPLES {
            self.samples.drain(..self.samples.len() - rate::MAX_SAMPLES);
        }
    }

    /// The claim as the agent resolves it from this measurement, and the fill rate.
    fn resolve(&mut self, m: Measurement, now: Timestamp) -> (ClaimState, Option<FillRate>) {
        let seen = Seen {
            measurement: m,
            by: MeasuredBy::Statfs,
            at: now,
        };
        // The simulated agent measures throughout: every landing is watched.
        let since = Timestamp::UNIX_EPOCH;
        inflight::stamp_landing(&mut self.history, Some(&seen), self.capacity, since);
        let claim = ClaimState {
            request_bytes: self.request,
            capacity_bytes: self.capacity,
            resize: if self.request > self.capacity {
                ResizeState::InProgress { since: None }
            } else {
                ResizeState::Idle
            },
        };
        let claim = inflight::resize_state(claim, &self.history, Some(&seen), RESIZE_TIMEOUT, now);
        inflight::stamp_failure(&mut self.history, &claim);
        let fill_rate = rate::estimate(&self.samples).map(|r| FillRate {
            bytes_per_second: r,
            resize_lead: inflight::learned_lead(&self.history),
        });
        (claim, fill_rate)
    }

    /// Would the storage refuse a resize at `t`: inside its gap since the last it took, past its
    /// budget for the window, or with the last one not landed when it must have?
    fn refuses(&self, rule: Option<drivers::Rule>, t: f64) -> bool {
        let Some(rule) = rule else {
            return false;
        };
        let last = self.accepted.last();
        let gap = rule
            .gap
            .zip(last)
            .is_some_and(|(g, at)| t - at < g.as_secs_f64());
        let budget = rule.budget.is_some_and(|b| {
            let window = b.window.as_secs_f64();
            let taken = self.accepted.iter().filter(|at| t - **at < window).count();
            taken >= b.count as usize || (b.after_landed && self.lands_at.is_some())
        });
        gap || budget
    }

    /// A resize the storage refused: in the history as failed, the claim's size unchanged.
    fn refused(&mut self, (to, kind): (u64, GrowKind), from: u64, now: Timestamp) {
        self.history.push(Action {
            node: "simulate".to_string(),
            fs_before: Some(self.capacity),
            result: Some(ActionResult::Failed),
            ..Action::new(now, kind, from, to)
        });
    }

    /// Requests the grow the engine decided, as the actor's PATCH would.
    fn grow(&mut self, (to, kind): (u64, GrowKind), from: u64, now: Timestamp, t: f64, delay: f64) {
        self.accepted.push(t);
        let lands_at = t + delay;
        self.history.push(Action {
            node: "simulate".to_string(),
            fs_before: Some(self.capacity),
            result: Some(ActionResult::Requested),
            ..Action::new(now, kind, from, to)
        });
        self.request = to;
        self.lands_at = Some(lands_at);
    }
}

impl Report {
    fn new(capacity: u64) -> Report {
        Report {
            actions: Vec::new(),
            refused: Vec::new(),
            blocked: Vec::new(),
            final_capacity_bytes: capacity,
            peak_used_percent: 0.0,
            peak_used_bytes: 0,
            full_seconds: 0.0,
            evaluations: 0,
            notes: Vec::new(),
            fallbacks: Vec::new(),
        }
    }

    /// Keeps what one evaluation at `seconds` said that the report shows: its notes, a change of
    /// fallback, a block reason other than the last one (`last_reason`).
    fn record(
        &mut self,
        decision: &Decision,
        (now, seconds): (Timestamp, f64),
        last_reason: &mut Option<BlockReason>,
    ) {
        self.evaluations += 1;
        for note in &decision.notes {
            if !self.notes.contains(note) {
                self.notes.push(note.clone());
            }
        }
        let said = self.fallbacks.last().and_then(|f| f.fallback);
        if decision.fallback.map(Fallback::as_str) != said.map(Fallback::as_str) {
            self.fallbacks.push(SimFallback {
                at: now,
                seconds,
                fallback: decision.fallback,
            });
        }
        let reason = decision.blocked_reason();
        if let Some(r) = reason
            && *last_reason != Some(r)
        {
            self.blocked.push(SimBlocked {
                at: now,
                seconds,
                reason: r,
            });
        }
        *last_reason = reason;
    }
}

/// Runs the trace from its first to its last row, one evaluation every `interval`.
pub fn simulate(policy: &Policy, trace: &Trace, opts: &Options) -> Report {
    let first = trace.rows[0].seconds;
    let last = trace.rows[trace.rows.len() - 1].seconds;
    let step = opts.interval.as_secs_f64().max(0.001);
    let delay = opts.resize_delay.as_secs_f64().max(0.0);
    let mut world = World {
        capacity: opts.capacity,
        request: opts.capacity,
        lands_at: None,
        samples: Vec::new(),
        next_row: 0,
        history: Vec::new(),
        accepted: Vec::new(),
    };
    let mut report = Report::new(opts.capacity);
    let mut last_reason = None;
    let mut k: u64 = 0;
    loop {
        let t = first + step * k as f64;
        if t > last + 1e-9 {
            break;
        }
        k += 1;
        world.advance(trace, t);
        let now = opts.start + SignedDuration::from_secs_f64(t - first);
        let demand = trace.used_at(t).round().max(0.0) as u64;
        let used = demand.min(world.capacity);
        let (inodes_used, inodes_total) = trace.inodes_at(t).unwrap_or((0, 0));
        let measurement = Measurement {
            capacity_bytes: world.capacity,
            used_bytes: used,
            available_bytes: world.capacity - used,
            inodes_total,
            inodes_used,
        };
        report.peak_used_percent = report.peak_used_percent.max(measurement.used_percent());
        report.peak_used_bytes = report.peak_used_bytes.max(used);
        if demand >= world.capacity {
            report.full_seconds += step.min(last - t);
        }
        let (claim, fill_rate) = world.resolve(measurement, now);
        let wal = trace.wal_at(t);
        let decision = decide(&Inputs {
            logical: None,
            policy: PolicyInput::Valid(policy),
            measurement,
            claim: &claim,
            history: &world.history,
            wal: wal.as_ref(),
            facts: opts.facts,
            now,
            fill_rate,
        });
        report.record(&decision, (now, t - first), &mut last_reason);
        if let Some((to, kind)) = decision.grow_to() {
            let from = claim.current_bytes();
            let action = SimAction {
                at: now,
                seconds: t - first,
                kind,
                from_bytes: from,
                to_bytes: to,
                predicted: decision.predicted,
            };
            if world.refuses(opts.storage_rule, t) {
                world.refused((to, kind), from, now);
                report.refused.push(action.clone());
            } else {
                world.grow((to, kind), from, now, t, delay);
            }
            report.actions.push(action);
        }
    }
    if world.lands_at.is_some_and(|at| at <= last) {
        world.capacity = world.request;
    }
    report.final_capacity_bytes = world.capacity;
    report.peak_used_percent = (report.peak_used_percent * 100.0).round() / 100.0;
    report
}

/// The same trace twice: threshold only, then with the predictive trigger.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub threshold_only: Report,
    pub predictive: Report,
}

pub fn compare(policy: &Policy, trace: &Trace, opts: &Options) -> Comparison {
    let mut p = policy.clone();
    p.predictive.enabled = false;
    let threshold_only = simulate(&p, trace, opts);
    p.predictive.enabled = true;
    Comparison {
        threshold_only,
        predictive: simulate(&p, trace, opts),
    }
}

#[cfg(test)]
mod tests;

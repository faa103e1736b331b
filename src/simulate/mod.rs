//! Replays a growth trace through the decision engine with a simulated clock: the dry run users
//! asked other autoresizers for. Pure: the command reads files, the replay does no I/O.

pub mod trace;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::decide::rate::{self, FillRate, Sample};
use crate::decide::{
    Action, BlockReason, ClaimState, GrowKind, Inputs, Measurement, PolicyInput, ResizeState,
    VolumeFacts, decide,
};
use crate::policy::{Fallback, Policy};
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

/// Runs the trace from its first to its last row, one evaluation every `interval`.
pub fn simulate(policy: &Policy, trace: &Trace, opts: &Options) -> Report {
    let first = trace.rows[0].seconds;
    let last = trace.rows[trace.rows.len() - 1].seconds;
    let step = opts.interval.as_secs_f64().max(0.001);
    let delay = opts.resize_delay.as_secs_f64().max(0.0);

    let mut capacity = opts.capacity;
    // (when the new size lands, the size, when it was decided)
    let mut pending: Option<(f64, u64, f64)> = None;
    // The rate estimator sees the trace's own rows as the agent would see its samples.
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_row = 0;
    let mut resize_times: Vec<SignedDuration> = Vec::new();
    let mut history: Vec<Action> = Vec::new();
    let mut report = Report {
        actions: Vec::new(),
        blocked: Vec::new(),
        final_capacity_bytes: capacity,
        peak_used_percent: 0.0,
        peak_used_bytes: 0,
        full_seconds: 0.0,
        evaluations: 0,
        notes: Vec::new(),
        fallbacks: Vec::new(),
    };
    let mut last_reason: Option<BlockReason> = None;
    let mut k: u64 = 0;
    loop {
        let t = first + step * k as f64;
        if t > last + 1e-9 {
            break;
        }
        k += 1;
        if let Some((ready_at, to, decided)) = pending
            && t >= ready_at
        {
            capacity = to;
            pending = None;
            resize_times.push(SignedDuration::from_secs_f64(t - decided));
        }
        while let Some(row) = trace.rows.get(next_row).filter(|r| r.seconds <= t + 1e-9) {
            samples.push(Sample {
                seconds: row.seconds,
                used_bytes: (row.used_bytes.round().max(0.0) as u64).min(capacity),
            });
            next_row += 1;
        }
        if samples.len() > 2 * rate::MAX_SAMPLES {
            samples.drain(..samples.len() - rate::MAX_SAMPLES);
        }
        let fill_rate = rate::estimate(&samples).map(|r| FillRate {
            bytes_per_second: r,
            resize_lead: rate::learned_lead_time(&resize_times),
        });
        let now = opts.start + SignedDuration::from_secs_f64(t - first);
        let demand = trace.used_at(t).round().max(0.0) as u64;
        let used = demand.min(capacity);
        let (inodes_used, inodes_total) = trace.inodes_at(t).unwrap_or((0, 0));
        let measurement = Measurement {
            capacity_bytes: capacity,
            used_bytes: used,
            available_bytes: capacity - used,
            inodes_total,
            inodes_used,
        };
        report.peak_used_percent = report.peak_used_percent.max(measurement.used_percent());
        report.peak_used_bytes = report.peak_used_bytes.max(used);
        if demand >= capacity {
            report.full_seconds += step.min(last - t);
        }
        let claim = ClaimState {
            request_bytes: pending.map_or(capacity, |(_, to, _)| to),
            capacity_bytes: capacity,
            resize: match pending {
                Some(_) => ResizeState::InProgress { since: None },
                None => ResizeState::Idle,
            },
        };
        let wal = trace.wal_at(t);
        let decision = decide(&Inputs {
            policy: PolicyInput::Valid(policy),
            measurement,
            claim: &claim,
            history: &history,
            wal: wal.as_ref(),
            facts: opts.facts,
            now,
            fill_rate,
        });
        report.evaluations += 1;
        for note in &decision.notes {
            if !report.notes.contains(note) {
                report.notes.push(note.clone());
            }
        }
        let said = report.fallbacks.last().and_then(|f| f.fallback);
        if decision.fallback.map(Fallback::as_str) != said.map(Fallback::as_str) {
            report.fallbacks.push(SimFallback {
                at: now,
                seconds: t - first,
                fallback: decision.fallback,
            });
        }
        let reason = decision.blocked_reason();
        if let Some(r) = reason
            && last_reason != Some(r)
        {
            report.blocked.push(SimBlocked {
                at: now,
                seconds: t - first,
                reason: r,
            });
        }
        last_reason = reason;
        if let Some((to, kind)) = decision.grow_to() {
            let from = claim.current_bytes();
            report.actions.push(SimAction {
                at: now,
                seconds: t - first,
                kind,
                from_bytes: from,
                to_bytes: to,
                predicted: decision.predicted,
            });
            history.push(Action {
                at: now,
                kind,
                from,
                to,
                node: "simulate".to_string(),
                fs_before: None,
                landed: None,
                result: None,
                instance: None,
                volume_type: None,
                tablespace: None,
            });
            pending = Some((t + delay, to, t));
        }
    }
    if let Some((ready_at, to, _)) = pending
        && ready_at <= last
    {
        capacity = to;
    }
    report.final_capacity_bytes = capacity;
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

//! A replay as the page shows it, built from the session's event log. A session on the host and a
//! replay in this browser produce the same [`SessionMessage`]s, so they share this state and
//! every chart drawn from it.

use std::collections::BTreeMap;

use shared::protocol::{
    CheckReport, CompareVerdict, Event, OpTiming, Parting, RegionSummary, SessionMessage, SessionState,
};

/// A comparison as it arrives: per op, how many of its passes were judged and how many differ.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompareView {
    /// `op -> (passes judged, passes that differ)`, in op order.
    pub ops: BTreeMap<u32, (u64, u64)>,
    /// The ops in the order they were first judged (the order they ran).
    pub order: Vec<u32>,
    /// Every parting, in the order they happened.
    pub partings: Vec<Parting>,
    pub verdict: Option<CompareVerdict>,
}

impl CompareView {
    /// The first op whose writes differ, in the order they ran.
    pub fn first_divergence(&self) -> Option<u32> {
        self.partings.first().map(|p| p.op)
    }

    /// `Some(true)` when every judged pass of `op` agrees, `Some(false)` when one differs.
    pub fn agrees(&self, op: u32) -> Option<bool> {
        self.ops.get(&op).map(|&(_, differ)| differ == 0)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionView {
    pub state: Option<SessionState>,
    pub device: String,
    pub iterations_planned: u32,
    pub queue_position: Option<u32>,
    /// Time of each iteration, in order.
    pub iteration_ms: Vec<f64>,
    /// Per-op timings of the latest iteration that reported them.
    pub op_timings: Vec<OpTiming>,
    /// Per top-level op, its time in each iteration (for the per-op history chart).
    pub op_history: BTreeMap<u32, Vec<f64>>,
    pub regions: Vec<RegionSummary>,
    pub check: Option<CheckReport>,
    pub total_ms: Option<f64>,
    pub error: Option<String>,
    /// What a comparison session found so far; `None` for a replay.
    pub compare: Option<CompareView>,
    /// Events seen, to detect gaps (`seq` must be 0, 1, 2, ...).
    pub seen: u64,
    pub gap: bool,
}

impl SessionView {
    pub fn apply(&mut self, e: &Event) {
        if e.seq != self.seen {
            self.gap = true;
        }
        self.seen = e.seq + 1;
        self.apply_message(&e.message);
    }

    pub fn apply_message(&mut self, m: &SessionMessage) {
        match m {
            SessionMessage::State { state, .. } => self.state = Some(*state),
            SessionMessage::Queue { position } => self.queue_position = Some(*position),
            SessionMessage::Started { device, iterations, .. } => {
                self.device = device.clone();
                self.iterations_planned = *iterations;
                self.queue_position = None;
            }
            SessionMessage::Iteration { index, time_ms } => {
                let i = *index as usize;
                if self.iteration_ms.len() <= i {
                    self.iteration_ms.resize(i + 1, f64::NAN);
                }
                self.iteration_ms[i] = *time_ms;
            }
            SessionMessage::OpTimings { iteration, ops } => {
                for t in ops {
                    let h = self.op_history.entry(t.op).or_default();
                    let i = *iteration as usize;
                    if h.len() <= i {
                        h.resize(i + 1, f64::NAN);
                    }
                    h[i] = t.time_ms;
                }
                self.op_timings = ops.clone();
            }
            SessionMessage::Region { summary } => {
                self.regions.retain(|r| r.region != summary.region);
                self.regions.push(summary.clone());
            }
            SessionMessage::Compared { ops } => {
                let c = self.compare.get_or_insert_with(Default::default);
                for a in ops {
                    let entry = c.ops.entry(a.op).or_insert_with(|| (0, 0));
                    if entry.0 == 0 {
                        c.order.push(a.op);
                    }
                    entry.0 += 1;
                    entry.1 += u64::from(!a.agree);
                }
            }
            SessionMessage::Parted { parting } => {
                self.compare.get_or_insert_with(Default::default).partings.push(parting.as_ref().clone());
            }
            SessionMessage::Compare { verdict } => {
                self.compare.get_or_insert_with(Default::default).verdict = Some(verdict.clone());
            }
            SessionMessage::Finished { check, total_ms } => {
                self.check = check.clone();
                self.total_ms = Some(*total_ms);
                self.state = Some(SessionState::Finished);
            }
            SessionMessage::Failed { error } => {
                self.error = Some(error.clone());
                self.state = Some(SessionState::Failed);
            }
            SessionMessage::Cancelled => self.state = Some(SessionState::Cancelled),
        }
    }

    /// The slowest ops of the latest iteration, slowest first.
    pub fn slowest_ops(&self, n: usize) -> Vec<&OpTiming> {
        let mut v: Vec<&OpTiming> = self.op_timings.iter().collect();
        v.sort_by(|a, b| b.time_ms.partial_cmp(&a.time_ms).unwrap_or(std::cmp::Ordering::Equal));
        v.truncate(n);
        v
    }

    pub fn verdict(&self, region: u32) -> Option<bool> {
        self.check.as_ref()?.regions.iter().find(|r| r.region == region).map(|r| r.passed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_builds_the_view_and_gaps_are_noticed() {
        let log = r#"[
{"seq":0,"time_us":1,"type":"state","state":"queued"},
{"seq":1,"time_us":2,"type":"state","state":"running"},
{"seq":2,"time_us":3,"type":"started","device":"cpu","iterations":2,"ops":1,"regions":2},
{"seq":3,"time_us":4,"type":"op_timings","iteration":0,"ops":[{"op":0,"kind":"launch","name":"saxpy","time_ms":3.5}]},
{"seq":4,"time_us":5,"type":"iteration","index":0,"time_ms":3.6},
{"seq":5,"time_us":6,"type":"iteration","index":1,"time_ms":2.0},
{"seq":6,"time_us":7,"type":"finished","check":{"passed":true,"regions":[{"region":1,"name":"y","passed":true,"tolerance":"exact","count":4,"mismatches":0,"detail":"ok"}]},"total_ms":5.6}
]"#;
        let events: Vec<Event> = serde_json::from_str(log).unwrap();
        let mut v = SessionView::default();
        for e in &events {
            v.apply(e);
        }
        assert_eq!(v.state, Some(SessionState::Finished));
        assert_eq!(v.iteration_ms, vec![3.6, 2.0]);
        assert_eq!(v.op_history[&0], vec![3.5]);
        assert_eq!(v.verdict(1), Some(true));
        assert!(!v.gap);
        let mut w = SessionView::default();
        w.apply(&events[0]);
        w.apply(&events[2]);
        assert!(w.gap);
    }

    #[test]
    fn a_comparison_counts_passes_per_op_and_finds_the_first_divergence() {
        let log = r#"[
{"seq":0,"time_us":1,"type":"compared","ops":[{"op":0,"pass":1,"agree":true},{"op":2,"pass":1,"agree":true}]},
{"seq":1,"time_us":2,"type":"compared","ops":[{"op":2,"pass":2,"agree":false}]},
{"seq":2,"time_us":3,"type":"parted","parting":{"op":2,"label":"launch k","pass":2,"region":1,"name":"y","dtype":"f32","shape":[],
  "check":{"region":1,"name":"y","passed":false,"tolerance":"exact","count":4,"mismatches":1,"detail":"1 of 4 differ"},"histogram":[["1e-1..1e0",1]]}},
{"seq":3,"time_us":4,"type":"compare","verdict":{"a":"interp","b":"jit","agree":false,"ops":3,"regions":3,"differing":1}}
]"#;
        let events: Vec<Event> = serde_json::from_str(log).unwrap();
        let mut v = SessionView::default();
        events.iter().for_each(|e| v.apply(e));
        let c = v.compare.as_ref().unwrap();
        assert_eq!(c.ops[&2], (2, 1));
        assert_eq!(c.order, vec![0, 2]);
        assert_eq!((c.agrees(0), c.agrees(2), c.agrees(1)), (Some(true), Some(false), None));
        assert_eq!(c.first_divergence(), Some(2));
        assert!(!c.verdict.as_ref().unwrap().agree);
    }
}

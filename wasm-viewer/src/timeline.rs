//! A replay's op timings on a time axis, as plain data and SVG text: every top-level op a span, and
//! the critical path through the plan's DAG (the chain of dependent ops whose durations add up to
//! the longest: no schedule of this archive can finish sooner) marked on them.
//!
//! Two arrangements of the same spans: **as run** (the ops one after another, in the order the
//! replay ran them, which is how the CPU replay and CUDA's timed stream pass run them) and **by
//! dependency** (each op at the earliest time its predecessors in the DAG allow, in as many lanes
//! as overlap needs: what a fully concurrent schedule could do).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use shared::protocol::OpTiming;

use crate::model::esc;
use crate::plot::num;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrangement {
    AsRun,
    ByDependency,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub op: u32,
    pub kind: String,
    /// Kernel or marker name, else the kind.
    pub label: String,
    pub start_ms: f64,
    pub time_ms: f64,
    pub lane: usize,
    pub critical: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub spans: Vec<Span>,
    pub lanes: usize,
    /// Where the last span ends.
    pub end_ms: f64,
    /// The sum of every op's time.
    pub serial_ms: f64,
    /// The critical path's ops in order and its length; `None` without the plan's edges.
    pub critical: Option<(Vec<u32>, f64)>,
}

/// The longest chain of dependent ops, weighted by their times: `(ops in order, total ms)`.
/// `edges` are the DAG's `from -> to` (ops in topological order, `from < to`); an op without a
/// timing counts as taking no time.
pub fn critical_path(times: &BTreeMap<u32, f64>, edges: &[(u32, u32)]) -> (Vec<u32>, f64) {
    let mut preds: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut nodes: Vec<u32> = times.keys().copied().collect();
    for &(f, t) in edges.iter().filter(|(f, t)| f < t) {
        preds.entry(t).or_default().push(f);
        nodes.extend([f, t]);
    }
    nodes.sort_unstable();
    nodes.dedup();
    // Nodes in op order are in topological order: one pass gives every op's earliest finish.
    let mut finish: BTreeMap<u32, (f64, Option<u32>)> = BTreeMap::new();
    for &n in &nodes {
        let via = preds
            .get(&n)
            .into_iter()
            .flatten()
            .filter_map(|p| finish.get(p).map(|&(t, _)| (t, *p)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let own = times.get(&n).copied().filter(|t| t.is_finite()).unwrap_or(0.0).max(0.0);
        finish.insert(n, (via.map_or(0.0, |v| v.0) + own, via.map(|v| v.1)));
    }
    let Some((&last, &(total, _))) = finish.iter().max_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(b.0.cmp(a.0))) else {
        return (Vec::new(), 0.0);
    };
    let mut path = vec![last];
    let mut at = last;
    while let Some(&(_, Some(prev))) = finish.get(&at) {
        path.push(prev);
        at = prev;
    }
    path.reverse();
    (path, total)
}

/// Lays out `timings` (one iteration's, in the order they ran) as spans; `edges` (the plan's
/// top-level DAG) mark the critical path and allow the by-dependency arrangement.
pub fn build(timings: &[OpTiming], edges: Option<&[(u32, u32)]>, arrangement: Arrangement) -> Timeline {
    let times: BTreeMap<u32, f64> =
        timings.iter().map(|t| (t.op, if t.time_ms.is_finite() { t.time_ms.max(0.0) } else { 0.0 })).collect();
    let critical = edges.map(|e| critical_path(&times, e));
    let on_path: std::collections::BTreeSet<u32> =
        critical.as_ref().map(|(p, _)| p.iter().copied().collect()).unwrap_or_default();
    let mut spans = Vec::with_capacity(timings.len());
    let mut lanes = 1;
    match (arrangement, edges) {
        (Arrangement::ByDependency, Some(edges)) => {
            let mut preds: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for &(f, t) in edges.iter().filter(|(f, t)| f < t) {
                preds.entry(t).or_default().push(f);
            }
            let mut order: Vec<&OpTiming> = timings.iter().collect();
            order.sort_by_key(|t| t.op);
            let mut finish: BTreeMap<u32, f64> = BTreeMap::new();
            let mut lane_end: Vec<f64> = Vec::new();
            for t in order {
                let start = preds
                    .get(&t.op)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| finish.get(p))
                    .copied()
                    .fold(0.0f64, f64::max);
                let time = times[&t.op];
                finish.insert(t.op, start + time);
                let eps = 1e-9 * (1.0 + start);
                let lane = match lane_end.iter().position(|&end| end <= start + eps) {
                    Some(l) => l,
                    None => {
                        lane_end.push(0.0);
                        lane_end.len() - 1
                    }
                };
                lane_end[lane] = start + time;
                spans.push(span(t, start, time, lane, on_path.contains(&t.op)));
            }
            lanes = lane_end.len().max(1);
        }
        _ => {
            let mut at = 0.0;
            for t in timings {
                let time = times[&t.op];
                spans.push(span(t, at, time, 0, on_path.contains(&t.op)));
                at += time;
            }
        }
    }
    let end_ms = spans.iter().map(|s| s.start_ms + s.time_ms).fold(0.0, f64::max);
    let serial_ms = times.values().sum();
    Timeline { spans, lanes, end_ms, serial_ms, critical }
}

fn span(t: &OpTiming, start_ms: f64, time_ms: f64, lane: usize, critical: bool) -> Span {
    Span {
        op: t.op,
        kind: t.kind.clone(),
        label: t.name.clone().unwrap_or_else(|| t.kind.clone()),
        start_ms,
        time_ms,
        lane,
        critical,
    }
}

/// A round step for about `n` ticks over `span` (1, 2 or 5 times a power of ten).
pub fn tick_step(span: f64, n: f64) -> f64 {
    if span.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

pub const LANE_H: f64 = 22.0;
pub const AXIS_H: f64 = 22.0;

/// The timeline between `t0` and `t1` ms as an SVG `w` pixels wide (spans outside are left out,
/// labels drawn where they fit); `selected` is outlined.
pub fn to_svg(t: &Timeline, (t0, t1): (f64, f64), w: f64, selected: Option<u32>) -> String {
    let h = AXIS_H + t.lanes as f64 * LANE_H + 4.0;
    let span = (t1 - t0).max(1e-12);
    let x = |ms: f64| (ms - t0) / span * w;
    let mut s = format!(
        r#"<svg class="timeline" id="tl-svg" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" aria-label="op timeline" data-t0="{t0}" data-t1="{t1}">"#
    );
    let step = tick_step(span, (w / 110.0).max(2.0));
    let first = (t0 / step).ceil() as i64;
    let last = (t1 / step).floor() as i64;
    for i in first..=last.min(first + 200) {
        let v = i as f64 * step;
        let px = x(v);
        let _ = write!(
            s,
            r#"<line class="tick" x1="{px:.1}" x2="{px:.1}" y1="{}" y2="{h:.0}"/><text class="axis" x="{:.1}" y="13">{} ms</text>"#,
            AXIS_H - 4.0,
            px + 3.0,
            num((v * 1e9).round() / 1e9)
        );
    }
    for sp in &t.spans {
        let (a, b) = (sp.start_ms, sp.start_ms + sp.time_ms);
        if b < t0 || a > t1 {
            continue;
        }
        let (xa, xb) = (x(a).max(-2.0), x(b).min(w + 2.0));
        let bw = (xb - xa).max(1.0);
        let y = AXIS_H + sp.lane as f64 * LANE_H;
        let class = format!(
            "span k-{}{}{}",
            sp.kind,
            if sp.critical { " crit" } else { "" },
            if selected == Some(sp.op) { " sel" } else { "" }
        );
        let _ = write!(
            s,
            r#"<g class="{class}" data-op="{op}" data-start="{a}" data-ms="{ms}"><rect x="{xa:.1}" y="{y:.1}" width="{bw:.1}" height="{rh:.1}" rx="2"/><title>op {op} {label}: {} from {}{}</title>"#,
            crate::plot::duration(sp.time_ms),
            crate::plot::duration(a),
            if sp.critical { ", on the critical path" } else { "" },
            op = sp.op,
            ms = sp.time_ms,
            label = esc(&sp.label),
            rh = LANE_H - 4.0,
        );
        let room = ((bw - 6.0) / 6.6) as usize;
        if room >= 3 {
            let text = format!("{} {}", sp.op, sp.label);
            let text: String = if text.chars().count() > room {
                text.chars().take(room.saturating_sub(1)).chain(['…']).collect()
            } else {
                text
            };
            let _ = write!(
                s,
                r#"<text class="lbl" x="{:.1}" y="{:.1}">{}</text>"#,
                xa.max(0.0) + 3.0,
                y + 13.0,
                esc(&text)
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(op: u32, ms: f64) -> OpTiming {
        OpTiming { op, kind: "launch".into(), name: Some(format!("k{op}")), time_ms: ms }
    }

    #[test]
    fn the_critical_path_is_the_heaviest_chain_of_dependencies() {
        // 0 -> 1 -> 3 and 0 -> 2 -> 3: the branch through 2 is the slower one.
        let timings = [t(0, 1.0), t(1, 2.0), t(2, 5.0), t(3, 1.0)];
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let times: BTreeMap<u32, f64> = timings.iter().map(|t| (t.op, t.time_ms)).collect();
        assert_eq!(critical_path(&times, &edges), (vec![0, 2, 3], 7.0));
        // Independent ops: the single slowest is the whole path.
        assert_eq!(critical_path(&times, &[]), (vec![2], 5.0));
    }

    #[test]
    fn as_run_spans_follow_each_other_and_by_dependency_ones_overlap() {
        let timings = [t(0, 1.0), t(1, 2.0), t(2, 5.0), t(3, 1.0)];
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let run = build(&timings, Some(&edges), Arrangement::AsRun);
        assert_eq!(run.lanes, 1);
        assert_eq!(run.spans.iter().map(|s| s.start_ms).collect::<Vec<_>>(), vec![0.0, 1.0, 3.0, 8.0]);
        assert_eq!((run.end_ms, run.serial_ms), (9.0, 9.0));
        assert_eq!(run.spans.iter().filter(|s| s.critical).map(|s| s.op).collect::<Vec<_>>(), vec![0, 2, 3]);
        let dep = build(&timings, Some(&edges), Arrangement::ByDependency);
        assert_eq!(dep.lanes, 2, "1 and 2 run side by side");
        let start = |op: u32| dep.spans.iter().find(|s| s.op == op).unwrap().start_ms;
        assert_eq!((start(1), start(2), start(3)), (1.0, 1.0, 6.0));
        assert_eq!(dep.end_ms, 7.0, "the critical path's length");
        // Without the plan there is no critical path and no dependency arrangement.
        let bare = build(&timings, None, Arrangement::ByDependency);
        assert!(bare.critical.is_none() && bare.lanes == 1 && bare.spans.iter().all(|s| !s.critical));
    }

    #[test]
    fn the_svg_draws_the_spans_in_view_with_ticks() {
        let timings = [t(0, 1.0), t(1, 2.0), t(2, 5.0)];
        let tl = build(&timings, Some(&[(0, 1), (1, 2)]), Arrangement::AsRun);
        let svg = to_svg(&tl, (0.0, 8.0), 800.0, Some(1));
        assert_eq!(svg.matches("class=\"span").count(), 3);
        assert_eq!(svg.matches("class=\"span k-launch crit").count(), 3);
        assert!(svg.contains("span k-launch crit sel\" data-op=\"1\""));
        assert!(svg.contains(">4 ms</text>"), "{svg}");
        // Zoomed into the last op only.
        let svg = to_svg(&tl, (4.0, 7.0), 800.0, None);
        assert_eq!(svg.matches("class=\"span").count(), 1);
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(0.7, 7.0), 0.1);
    }
}

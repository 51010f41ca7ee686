//! A layered drawing of the op DAG, computed here rather than in the browser so it is tested
//! natively and costs one pass.
//!
//! Each DAG (the top level, and one per while/if body) is laid out top to bottom by longest-path
//! layering: an op sits one layer below the deepest op it waits for, so ops that do not depend on
//! each other land in the same layer, side by side. Within a layer, ops are ordered by the mean
//! position of their predecessors (one barycentre sweep), which keeps chains mostly straight. A
//! while/if op is drawn as a box holding its body's own layout, recursively: loops nest visibly.
//!
//! In a multi-device archive every device gets a lane, side by side: a layer's ops sit in their
//! device's lane, so work that runs at the same time on different devices lines up across lanes
//! and copies between devices are the edges that cross from one lane to another.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::model::esc;

/// One DAG as the planner gives it: nodes in archive (topological) order, edges `from → to`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DagInput {
    /// The while/if op whose body this is; `None` for the top level.
    pub owner: Option<u32>,
    pub nodes: Vec<u32>,
    pub edges: Vec<(u32, u32)>,
    /// The device of each node, parallel to `nodes`; empty for a one-device archive.
    pub devices: Vec<u32>,
}

/// How a node is labelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLabel {
    pub kind: &'static str,
    pub title: String,
    pub sub: String,
}

pub const NODE_W: f64 = 176.0;
pub const NODE_H: f64 = 34.0;
const GAP_X: f64 = 18.0;
const GAP_Y: f64 = 30.0;
const PAD: f64 = 12.0;
const HEADER: f64 = 22.0;
const LANE_GAP: f64 = 40.0;
/// Room above the first layer for the lanes' titles.
const LANE_HEADER: f64 = 26.0;
/// Beyond this many nodes in one DAG only the first ones are drawn (the page says so).
pub const MAX_NODES: usize = 3000;

#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub op: u32,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    /// Nested body layout for a while/if.
    pub body: Option<Box<Layout>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub w: f64,
    pub h: f64,
    pub nodes: Vec<Placed>,
    /// Edges as indices into `nodes`.
    pub edges: Vec<(usize, usize)>,
    /// Nodes left out beyond [`MAX_NODES`].
    pub omitted: usize,
    pub layers: usize,
    /// With more than one device: each lane's device, left edge and width.
    pub lanes: Vec<(u32, f64, f64)>,
}

/// Lays out the DAG owned by `owner` (None: the top level) and, inside it, every nested body.
pub fn layout(dags: &[DagInput], owner: Option<u32>) -> Layout {
    let by_owner: HashMap<Option<u32>, &DagInput> = dags.iter().map(|d| (d.owner, d)).collect();
    layout_dag(&by_owner, owner, 0)
}

fn layout_dag(by_owner: &HashMap<Option<u32>, &DagInput>, owner: Option<u32>, depth: usize) -> Layout {
    let empty = DagInput::default();
    let dag = by_owner.get(&owner).copied().unwrap_or(&empty);
    let shown = dag.nodes.len().min(MAX_NODES);
    let nodes = &dag.nodes[..shown];
    let index: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let edges: Vec<(usize, usize)> =
        dag.edges.iter().filter_map(|(f, t)| Some((*index.get(f)?, *index.get(t)?))).filter(|(f, t)| f < t).collect();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for &(f, t) in &edges {
        preds[t].push(f);
    }
    // Nodes come in topological order, so one forward pass gives longest-path layers.
    let mut layer = vec![0usize; nodes.len()];
    for i in 0..nodes.len() {
        layer[i] = preds[i].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
    }
    let layers = layer.iter().copied().max().map(|m| m + 1).unwrap_or(0);
    // Sizes: leaves are fixed, bodies are their own layout plus a frame (nesting is bounded so a
    // hostile archive cannot recurse without end).
    let bodies: Vec<Option<Layout>> = nodes
        .iter()
        .map(|&n| {
            if depth < 32 && by_owner.contains_key(&Some(n)) {
                Some(layout_dag(by_owner, Some(n), depth + 1))
            } else {
                None
            }
        })
        .collect();
    let size = |i: usize| match &bodies[i] {
        Some(b) => ((b.w + 2.0 * PAD).max(NODE_W), b.h + HEADER + 2.0 * PAD),
        None => (NODE_W, NODE_H),
    };
    // Lanes: one per device that has ops here, in device order.
    let device_of = |i: usize| dag.devices.get(i).copied().unwrap_or(0);
    let mut lane_devices: Vec<u32> = (0..nodes.len()).map(device_of).collect();
    lane_devices.sort_unstable();
    lane_devices.dedup();
    let lane_of: Vec<usize> =
        (0..nodes.len()).map(|i| lane_devices.binary_search(&device_of(i)).unwrap_or(0)).collect();
    let lane_count = lane_devices.len().max(1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers * lane_count];
    for i in 0..nodes.len() {
        rows[layer[i] * lane_count + lane_of[i]].push(i);
    }
    // Barycentre ordering, layer by layer, against the x of the already placed layer above.
    let mut x_center = vec![0.0f64; nodes.len()];
    let mut y = if lane_count > 1 { LANE_HEADER } else { 0.0 };
    let mut placed: Vec<Option<(f64, f64, f64, f64)>> = vec![None; nodes.len()];
    let mut row_widths = Vec::with_capacity(layers * lane_count);
    let mut row_h: f64 = 0.0;
    for (r, row) in rows.iter_mut().enumerate() {
        let key = |i: usize| -> f64 {
            if preds[i].is_empty() {
                f64::MAX / 4.0 + i as f64
            } else {
                preds[i].iter().map(|&p| x_center[p]).sum::<f64>() / preds[i].len() as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = row.iter().map(|&i| (key(i), i)).collect();
        keyed.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1)));
        *row = keyed.into_iter().map(|(_, i)| i).collect();
        let mut x = 0.0;
        for &i in row.iter() {
            let (w, h) = size(i);
            placed[i] = Some((x, y, w, h));
            x_center[i] = x + w / 2.0;
            x += w + GAP_X;
            row_h = row_h.max(h);
        }
        row_widths.push((x - GAP_X).max(0.0));
        // The layer's last lane done: the next layer starts below the tallest of its lanes.
        if r % lane_count == lane_count - 1 {
            y += row_h + GAP_Y;
            row_h = 0.0;
        }
    }
    // Each lane as wide as its widest layer, lanes side by side; every layer centred in its lane.
    let lane_w: Vec<f64> =
        (0..lane_count).map(|l| row_widths.iter().skip(l).step_by(lane_count).copied().fold(0.0, f64::max)).collect();
    let mut lane_x = Vec::with_capacity(lane_count);
    let mut left = 0.0;
    for w in &lane_w {
        lane_x.push(left);
        left += w + LANE_GAP;
    }
    let width = (left - LANE_GAP).max(0.0);
    for (r, (row, &rw)) in rows.iter().zip(&row_widths).enumerate() {
        let lane = r % lane_count;
        let shift = lane_x[lane] + (lane_w[lane] - rw) / 2.0;
        for &i in row {
            if let Some(p) = placed[i].as_mut() {
                p.0 += shift;
            }
        }
    }
    let lanes = if lane_count > 1 {
        lane_devices.iter().zip(lane_x.iter().zip(&lane_w)).map(|(&d, (&x, &w))| (d, x, w)).collect()
    } else {
        Vec::new()
    };
    let mut bodies = bodies;
    let out_nodes = (0..nodes.len())
        .map(|i| {
            let (x, y, w, h) = placed[i].unwrap_or((0.0, 0.0, NODE_W, NODE_H));
            Placed { op: nodes[i], x, y, w, h, body: bodies[i].take().map(Box::new) }
        })
        .collect();
    Layout {
        w: width,
        h: (y - GAP_Y).max(0.0),
        nodes: out_nodes,
        edges,
        omitted: dag.nodes.len() - shown,
        layers,
        lanes,
    }
}

/// The layout as SVG elements (no outer `<svg>`), labels from `label(op)`.
pub fn to_svg(l: &Layout, label: &dyn Fn(u32) -> NodeLabel, selected: Option<u32>) -> String {
    let mut s = String::new();
    draw(l, 0.0, 0.0, label, selected, &mut s);
    s
}

fn draw(l: &Layout, ox: f64, oy: f64, label: &dyn Fn(u32) -> NodeLabel, selected: Option<u32>, s: &mut String) {
    for &(device, x, w) in &l.lanes {
        let (x, w) = (ox + x - GAP_X / 2.0, w + GAP_X);
        let _ = write!(
            s,
            r#"<g class="lane" data-device="{device}"><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="6"/><text x="{tx:.1}" y="{ty:.1}" class="t">device {device}</text></g>"#,
            y = oy,
            h = l.h + GAP_Y / 2.0,
            tx = x + 8.0,
            ty = oy + 17.0,
        );
    }
    for &(f, t) in &l.edges {
        let (a, b) = (&l.nodes[f], &l.nodes[t]);
        let (x1, y1) = (ox + a.x + a.w / 2.0, oy + a.y + a.h);
        let (x2, y2) = (ox + b.x + b.w / 2.0, oy + b.y);
        let my = (y1 + y2) / 2.0;
        let _ = write!(
            s,
            r#"<path class="edge" d="M{x1:.1},{y1:.1}C{x1:.1},{my:.1} {x2:.1},{my:.1} {x2:.1},{:.1}" marker-end="url(#arrow)"/>"#,
            y2 - 2.0
        );
    }
    for n in &l.nodes {
        let lab = label(n.op);
        let (x, y) = (ox + n.x, oy + n.y);
        let sel = if selected == Some(n.op) { " sel" } else { "" };
        match &n.body {
            Some(body) => {
                let _ = write!(
                    s,
                    r#"<g class="node body k-{kind}{sel}" data-node="{op}"><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="4"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{sx:.1}" y="{ty:.1}" class="s" text-anchor="end">{sub}</text>"#,
                    kind = lab.kind,
                    op = n.op,
                    w = n.w,
                    h = n.h,
                    tx = x + 8.0,
                    ty = y + 15.0,
                    sx = x + n.w - 8.0,
                    title = esc(&lab.title),
                    sub = esc(&truncate(
                        &lab.sub,
                        ((n.w / 6.6) as usize).saturating_sub(lab.title.chars().count() + 4).max(2)
                    )),
                );
                let inner_x = x + (n.w - body.w) / 2.0;
                draw(body, inner_x, y + HEADER + PAD, label, selected, s);
                if body.omitted > 0 {
                    let _ = write!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" class="s">+{} more ops</text>"#,
                        x + 8.0,
                        y + n.h - 4.0,
                        body.omitted
                    );
                }
                // The body is drawn inside its owner's group: the DOM nests as the loop does.
                s.push_str("</g>");
            }
            None => {
                let _ = write!(
                    s,
                    r#"<g class="node k-{kind}{sel}" data-node="{op}"><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="3"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{tx:.1}" y="{sy:.1}" class="s">{sub}</text></g>"#,
                    kind = lab.kind,
                    op = n.op,
                    w = n.w,
                    h = n.h,
                    tx = x + 7.0,
                    ty = y + 14.0,
                    sy = y + 27.0,
                    title = esc(&truncate(&lab.title, 26)),
                    sub = esc(&truncate(&lab.sub, 30)),
                );
            }
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn independent_branches_share_a_layer_and_bodies_nest() {
        // 0 → {1, 2} → 3, and 4 is a loop whose body is 5 → 6.
        let dags = vec![
            DagInput {
                owner: None,
                nodes: vec![0, 1, 2, 3, 4],
                edges: vec![(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)],
                devices: vec![],
            },
            DagInput { owner: Some(4), nodes: vec![5, 6], edges: vec![(5, 6)], devices: vec![] },
        ];
        let l = layout(&dags, None);
        assert_eq!(l.layers, 4);
        let y = |op: u32| l.nodes.iter().find(|n| n.op == op).unwrap().y;
        let x = |op: u32| l.nodes.iter().find(|n| n.op == op).unwrap().x;
        assert_eq!(y(1), y(2));
        assert!(x(1) != x(2));
        assert!(y(0) < y(1) && y(2) < y(3) && y(3) < y(4));
        let lp = l.nodes.iter().find(|n| n.op == 4).unwrap();
        let body = lp.body.as_ref().expect("loop body laid out inside its node");
        assert_eq!(body.layers, 2);
        assert!(lp.h > body.h && lp.w >= body.w);
        let svg =
            to_svg(&l, &|op| NodeLabel { kind: "launch", title: format!("op {op}"), sub: String::new() }, Some(2));
        assert_eq!(svg.matches("data-node=").count(), 7);
        assert_eq!(svg.matches("class=\"edge\"").count(), 6);
        assert!(svg.contains("node k-launch sel\" data-node=\"2\""));
    }

    #[test]
    fn a_chain_is_one_column() {
        let dags = vec![DagInput {
            owner: None,
            nodes: (0..10).collect(),
            edges: (0..9).map(|i| (i, i + 1)).collect(),
            devices: vec![],
        }];
        let l = layout(&dags, None);
        assert_eq!(l.layers, 10);
        assert!(l.nodes.iter().all(|n| n.x == l.nodes[0].x));
        assert!(l.lanes.is_empty());
    }

    #[test]
    fn devices_get_lanes_side_by_side_and_layers_line_up_across_them() {
        // Device 0: 0 → 2; device 1: 1 → 3; a copy 4 on device 1 after 2 and 3.
        let dags = vec![DagInput {
            owner: None,
            nodes: vec![0, 1, 2, 3, 4],
            edges: vec![(0, 2), (1, 3), (2, 4), (3, 4)],
            devices: vec![0, 1, 0, 1, 1],
        }];
        let l = layout(&dags, None);
        let node = |op: u32| l.nodes.iter().find(|n| n.op == op).unwrap();
        assert_eq!(l.lanes.len(), 2);
        let (lane0, lane1) = (l.lanes[0], l.lanes[1]);
        assert_eq!((lane0.0, lane1.0), (0, 1));
        assert!(lane0.1 + lane0.2 < lane1.1, "lanes do not overlap: {:?}", l.lanes);
        for (op, lane) in [(0, lane0), (2, lane0), (1, lane1), (3, lane1), (4, lane1)] {
            let n = node(op);
            assert!(n.x >= lane.1 && n.x + n.w <= lane.1 + lane.2 + 0.01, "op {op} inside its lane");
        }
        assert_eq!(node(0).y, node(1).y, "independent work of two devices shares a layer");
        assert_eq!(node(2).y, node(3).y);
        assert!(node(4).y > node(3).y);
        let svg = to_svg(&l, &|op| NodeLabel { kind: "launch", title: format!("op {op}"), sub: String::new() }, None);
        assert_eq!(svg.matches("class=\"lane\"").count(), 2);
        assert!(svg.contains(">device 1</text>"));
    }
}

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
//!
//! Large graphs fold ([`Folds`]): a while/if body can be collapsed into its owner's node (which
//! then says how many ops it holds), and a chain (ops each waiting only for the one before, which
//! nothing else waits for) of more than [`CHAIN_FOLD`] ops is drawn as one node. By default bodies
//! of more than [`BODY_FOLD`] ops start collapsed and long chains folded; the page opens and closes
//! each one on a click.

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
    /// What a folded chain lists its ops by: the kernel's name, or the op's kind.
    pub name: String,
}

pub const NODE_W: f64 = 176.0;
pub const NODE_H: f64 = 34.0;
/// A folded chain's box: wider and one line taller than an op's, for its count and the names of
/// its first and last kernels.
const CHAIN_W: f64 = 264.0;
const CHAIN_H: f64 = 47.0;
const GAP_X: f64 = 18.0;
const GAP_Y: f64 = 30.0;
const PAD: f64 = 12.0;
const HEADER: f64 = 22.0;
const LANE_GAP: f64 = 40.0;
/// Room above the first layer for the lanes' titles.
const LANE_HEADER: f64 = 26.0;
/// Beyond this many nodes in one DAG only the first ones are drawn (the page says so).
pub const MAX_NODES: usize = 3000;
/// Chains of more than this many ops fold into one node.
pub const CHAIN_FOLD: usize = 8;
/// Bodies holding more than this many ops (nested bodies included) start collapsed.
pub const BODY_FOLD: usize = 24;
/// Deeper bodies than this are not laid out (a hostile archive cannot recurse without end).
const MAX_DEPTH: usize = 32;

/// Where folding starts from, before the user's own choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FoldMode {
    /// Bodies of more than [`BODY_FOLD`] ops collapsed, chains of more than [`CHAIN_FOLD`] folded.
    #[default]
    Auto,
    /// Every op its own node.
    Open,
    /// Every body collapsed, every chain of more than [`CHAIN_FOLD`] ops folded.
    Folded,
}

/// A body or a chain that can fold: a while/if op, or a chain by its first op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FoldKey {
    Body(u32),
    Chain(u32),
}

impl FoldKey {
    /// As the page writes it in `data-fold`: `b12`, `c40`.
    pub fn id(self) -> String {
        match self {
            FoldKey::Body(op) => format!("b{op}"),
            FoldKey::Chain(op) => format!("c{op}"),
        }
    }

    pub fn parse(s: &str) -> Option<FoldKey> {
        let (kind, op) = s.split_at_checked(1)?;
        let op = op.parse().ok()?;
        match kind {
            "b" => Some(FoldKey::Body(op)),
            "c" => Some(FoldKey::Chain(op)),
            _ => None,
        }
    }
}

/// Which bodies and chains are drawn open: the mode's choice, unless the user chose otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folds {
    pub mode: FoldMode,
    /// Open (true) or folded (false), by the user's choice.
    pub chosen: HashMap<FoldKey, bool>,
}

impl Folds {
    /// Everything open: every op its own node.
    pub fn open() -> Folds {
        Folds { mode: FoldMode::Open, chosen: HashMap::new() }
    }

    /// Starts over from `mode`, forgetting the user's choices.
    pub fn reset(&mut self, mode: FoldMode) {
        self.mode = mode;
        self.chosen.clear();
    }

    pub fn set(&mut self, key: FoldKey, open: bool) {
        self.chosen.insert(key, open);
    }

    /// Whether the body of while/if `op`, holding `inside` ops, is drawn.
    pub fn body_open(&self, op: u32, inside: usize) -> bool {
        self.chosen.get(&FoldKey::Body(op)).copied().unwrap_or(match self.mode {
            FoldMode::Open => true,
            FoldMode::Folded => false,
            FoldMode::Auto => inside <= BODY_FOLD,
        })
    }

    /// Whether the chain starting at `first` (longer than [`CHAIN_FOLD`]) is drawn op by op.
    pub fn chain_open(&self, first: u32) -> bool {
        self.chosen.get(&FoldKey::Chain(first)).copied().unwrap_or(self.mode == FoldMode::Open)
    }
}

/// What a node that stands for several ops holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Folded {
    /// A while/if drawn without its body: every op inside, nested bodies included.
    Body(Vec<u32>),
    /// A chain drawn as one node: its ops in order (the first is the node's `op`).
    Chain(Vec<u32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    /// The op drawn here; for a folded chain, its first.
    pub op: u32,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    /// Nested body layout for a while/if.
    pub body: Option<Box<Layout>>,
    /// Set when this node stands for more ops than its own.
    pub fold: Option<Folded>,
    /// The length of the open chain this node heads, when that chain could fold (else 0).
    pub chain: usize,
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

type ByOwner<'a> = HashMap<Option<u32>, &'a DagInput>;

/// Lays out the DAG owned by `owner` (None: the top level) and, inside it, every nested body, with
/// every op its own node.
pub fn layout(dags: &[DagInput], owner: Option<u32>) -> Layout {
    layout_folded(dags, owner, &Folds::open())
}

/// [`layout`] with bodies and chains folded as `folds` says.
pub fn layout_folded(dags: &[DagInput], owner: Option<u32>, folds: &Folds) -> Layout {
    let by_owner: ByOwner = dags.iter().map(|d| (d.owner, d)).collect();
    layout_dag(&by_owner, owner, 0, folds)
}

/// The ops inside the body of `owner`, nested bodies included, in pre-order.
fn body_ops(by_owner: &ByOwner, owner: u32, depth: usize, out: &mut Vec<u32>) {
    let Some(dag) = by_owner.get(&Some(owner)) else { return };
    for &n in &dag.nodes {
        out.push(n);
        if depth < MAX_DEPTH {
            body_ops(by_owner, n, depth + 1, out);
        }
    }
}

/// What one drawn node of a DAG stands for: its ops (one, or a folded chain's), in order.
struct Item {
    first: usize,
    members: Vec<usize>,
    /// The length of the open foldable chain this item heads (else 0).
    chain: usize,
}

fn layout_dag(by_owner: &ByOwner, owner: Option<u32>, depth: usize, folds: &Folds) -> Layout {
    let empty = DagInput::default();
    let dag = by_owner.get(&owner).copied().unwrap_or(&empty);
    let shown = dag.nodes.len().min(MAX_NODES);
    let nodes = &dag.nodes[..shown];
    let n = nodes.len();
    let index: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, &op)| (op, i)).collect();
    let mut op_edges: Vec<(usize, usize)> =
        dag.edges.iter().filter_map(|(f, t)| Some((*index.get(f)?, *index.get(t)?))).filter(|(f, t)| f < t).collect();
    op_edges.sort_unstable();
    op_edges.dedup();
    let device_of = |i: usize| dag.devices.get(i).copied().unwrap_or(0);
    let has_body = |i: usize| depth < MAX_DEPTH && by_owner.contains_key(&Some(nodes[i]));

    // Chains: i links to j when j is all that waits for i and i all that j waits for. While/if ops
    // stay out of chains (they are boxes of their own), and so do links across devices.
    let (mut outs, mut ins) = (vec![0u32; n], vec![0u32; n]);
    let mut succ = vec![usize::MAX; n];
    for &(f, t) in &op_edges {
        outs[f] += 1;
        ins[t] += 1;
        succ[f] = t;
    }
    let mut next = vec![usize::MAX; n];
    let mut linked_in = vec![false; n];
    for i in 0..n {
        let j = succ[i];
        if outs[i] == 1 && ins[j] == 1 && !has_body(i) && !has_body(j) && device_of(i) == device_of(j) {
            next[i] = j;
            linked_in[j] = true;
        }
    }
    // Items in the order of their first op, which keeps them topologically ordered: a folded
    // chain is entered only at its first op and left only from its last.
    let mut item_of = vec![usize::MAX; n];
    let mut items: Vec<Item> = Vec::new();
    for i in 0..n {
        if item_of[i] != usize::MAX {
            continue;
        }
        let mut run = Vec::new();
        if !linked_in[i] {
            let mut k = i;
            while k != usize::MAX {
                run.push(k);
                k = next[k];
            }
        }
        let foldable = run.len() > CHAIN_FOLD;
        if foldable && !folds.chain_open(nodes[i]) {
            for &m in &run {
                item_of[m] = items.len();
            }
            items.push(Item { first: i, members: run, chain: 0 });
        } else {
            item_of[i] = items.len();
            items.push(Item { first: i, members: vec![i], chain: if foldable { run.len() } else { 0 } });
        }
    }
    let mut edges: Vec<(usize, usize)> =
        op_edges.iter().map(|&(f, t)| (item_of[f], item_of[t])).filter(|(f, t)| f != t).collect();
    edges.sort_unstable();
    edges.dedup();
    let count = items.len();

    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); count];
    for &(f, t) in &edges {
        preds[t].push(f);
    }
    // Items come in topological order, so one forward pass gives longest-path layers.
    let mut layer = vec![0usize; count];
    for i in 0..count {
        layer[i] = preds[i].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
    }
    let layers = layer.iter().copied().max().map(|m| m + 1).unwrap_or(0);
    // Sizes: leaves are fixed, open bodies are their own layout plus a frame.
    let mut folded: Vec<Option<Folded>> = vec![None; count];
    let bodies: Vec<Option<Layout>> = items
        .iter()
        .enumerate()
        .map(|(k, item)| {
            if item.members.len() > 1 {
                folded[k] = Some(Folded::Chain(item.members.iter().map(|&m| nodes[m]).collect()));
                return None;
            }
            let i = item.first;
            if !has_body(i) {
                return None;
            }
            let mut inside = Vec::new();
            body_ops(by_owner, nodes[i], depth + 1, &mut inside);
            if folds.body_open(nodes[i], inside.len()) {
                Some(layout_dag(by_owner, Some(nodes[i]), depth + 1, folds))
            } else {
                folded[k] = Some(Folded::Body(inside));
                None
            }
        })
        .collect();
    let size = |i: usize| match (&bodies[i], &folded[i]) {
        (Some(b), _) => ((b.w + 2.0 * PAD).max(NODE_W), b.h + HEADER + 2.0 * PAD),
        (None, Some(Folded::Chain(_))) => (CHAIN_W, CHAIN_H),
        (None, _) => (NODE_W, NODE_H),
    };
    // Lanes: one per device that has ops here, in device order.
    let item_device = |k: usize| device_of(items[k].first);
    let mut lane_devices: Vec<u32> = (0..count).map(item_device).collect();
    lane_devices.sort_unstable();
    lane_devices.dedup();
    let lane_of: Vec<usize> = (0..count).map(|k| lane_devices.binary_search(&item_device(k)).unwrap_or(0)).collect();
    let lane_count = lane_devices.len().max(1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers * lane_count];
    for i in 0..count {
        rows[layer[i] * lane_count + lane_of[i]].push(i);
    }
    // Barycentre ordering, layer by layer, against the x of the already placed layer above.
    let mut x_center = vec![0.0f64; count];
    let mut y = if lane_count > 1 { LANE_HEADER } else { 0.0 };
    let mut placed: Vec<Option<(f64, f64, f64, f64)>> = vec![None; count];
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
    let out_nodes = (0..count)
        .map(|i| {
            let (x, y, w, h) = placed[i].unwrap_or((0.0, 0.0, NODE_W, NODE_H));
            Placed {
                op: nodes[items[i].first],
                x,
                y,
                w,
                h,
                body: bodies[i].take().map(Box::new),
                fold: folded[i].take(),
                chain: items[i].chain,
            }
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
    let mut s = String::with_capacity(l.nodes.len() * 480);
    draw(l, 0.0, 0.0, label, selected, &mut s);
    s
}

/// `name ×count` for each name in order of first appearance, up to [`SUMMARY_NAMES`] of them: a
/// folded chain's tooltip, which names what the box has no room for.
const SUMMARY_NAMES: usize = 16;

fn summarise(names: impl Iterator<Item = String>) -> String {
    let mut counted: Vec<(String, usize)> = Vec::new();
    for name in names {
        match counted.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counted.push((name, 1)),
        }
    }
    let mut parts: Vec<String> =
        counted.iter().take(SUMMARY_NAMES).map(|(n, c)| if *c > 1 { format!("{n} ×{c}") } else { n.clone() }).collect();
    if counted.len() > SUMMARY_NAMES {
        parts.push(format!("+{} more", counted.len() - SUMMARY_NAMES));
    }
    parts.join(", ")
}

/// The small square that folds an open body or chain again.
fn fold_toggle(s: &mut String, key: FoldKey, x: f64, y: f64, what: &str) {
    let _ = write!(
        s,
        r#"<g class="fold-toggle" data-fold="{id}" data-open="1"><title>fold {what}</title><rect x="{x:.1}" y="{y:.1}" width="13" height="13" rx="2"/><path d="M{:.1},{:.1}h7"/></g>"#,
        x + 3.0,
        y + 6.5,
        id = key.id(),
    );
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
        let (x, y) = (ox + n.x, oy + n.y);
        let sel = if selected == Some(n.op) { " sel" } else { "" };
        match (&n.body, &n.fold) {
            (_, Some(Folded::Chain(ops))) => {
                let labels: Vec<NodeLabel> = ops.iter().map(|&op| label(op)).collect();
                let kind = if labels.iter().all(|l| l.kind == labels[0].kind) { labels[0].kind } else { "chain" };
                let (first, last) = (ops[0], ops[ops.len() - 1]);
                // The box names the chain's ends, each on its own line so that neither is cut
                // away by the other; its tooltip names every kernel it holds.
                let names = summarise(labels.iter().map(|l| l.name.clone()));
                let ends = |word: &str, l: &NodeLabel| esc(&fit(&format!("{word} {}", l.name), n.w - 20.0, SUB_CHAR_W));
                let _ = write!(
                    s,
                    r#"<g class="node fold k-{kind}" data-fold="{id}" data-open="0" data-first="{first}" data-last="{last}" data-count="{count}"><title>ops {first}–{last}, a chain of {count} each waiting for the one before: {names}; click to draw them</title><rect class="stack" x="{x2:.1}" y="{y2:.1}" width="{w:.1}" height="{h:.1}" rx="3"/><rect class="stack" x="{x1:.1}" y="{y1:.1}" width="{w:.1}" height="{h:.1}" rx="3"/><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="3"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{tx:.1}" y="{sy:.1}" data-end="first" class="s">{from}</text><text x="{tx:.1}" y="{ly:.1}" data-end="last" class="s">{to}</text></g>"#,
                    title = esc(&fit(&format!("{first}–{last} · {} ops", ops.len()), n.w - 20.0, TITLE_CHAR_W)),
                    id = FoldKey::Chain(first).id(),
                    count = ops.len(),
                    x1 = x + 3.0,
                    y1 = y + 3.0,
                    x2 = x + 6.0,
                    y2 = y + 6.0,
                    w = n.w,
                    h = n.h,
                    tx = x + 7.0,
                    ty = y + 14.0,
                    sy = y + 27.0,
                    ly = y + 40.0,
                    from = ends("from", &labels[0]),
                    to = ends("to", &labels[labels.len() - 1]),
                    names = esc(&names),
                );
            }
            (_, Some(Folded::Body(inside))) => {
                let lab = label(n.op);
                let _ = write!(
                    s,
                    r#"<g class="node body collapsed k-{kind}{sel}" data-node="{op}" data-fold="{id}" data-open="0" data-count="{count}"><title>{full}: click to draw the {count} ops inside</title><rect class="stack" x="{x1:.1}" y="{y1:.1}" width="{w:.1}" height="{h:.1}" rx="4"/><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="4"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{tx:.1}" y="{sy:.1}" class="s">{count} ops inside ▸</text></g>"#,
                    kind = lab.kind,
                    op = n.op,
                    id = FoldKey::Body(n.op).id(),
                    count = inside.len(),
                    x1 = x + 3.0,
                    y1 = y + 3.0,
                    w = n.w,
                    h = n.h,
                    tx = x + 7.0,
                    ty = y + 14.0,
                    sy = y + 27.0,
                    title = esc(&fit(&lab.title, n.w - 20.0, TITLE_CHAR_W)),
                    full = esc(&lab.title),
                );
            }
            (Some(body), None) => {
                let lab = label(n.op);
                let _ = write!(
                    s,
                    r#"<g class="node body k-{kind}{sel}" data-node="{op}"><title>{full}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="4"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{sx:.1}" y="{ty:.1}" class="s" text-anchor="end">{sub}</text>"#,
                    kind = lab.kind,
                    op = n.op,
                    w = n.w,
                    h = n.h,
                    tx = x + 8.0,
                    ty = y + 15.0,
                    sx = x + n.w - 26.0,
                    // The title first, then as much of the second line as fits before the toggle.
                    title = esc(&fit(&lab.title, n.w - 34.0, TITLE_CHAR_W)),
                    sub = esc(&fit(&lab.sub, n.w - 42.0 - lab.title.chars().count() as f64 * TITLE_CHAR_W, SUB_CHAR_W)),
                    full = esc(&full_label(&lab)),
                );
                fold_toggle(s, FoldKey::Body(n.op), x + n.w - 19.0, y + 5.0, "the body");
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
            (None, None) => {
                let lab = label(n.op);
                let _ = write!(
                    s,
                    r#"<g class="node k-{kind}{sel}" data-node="{op}"><title>{full}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" rx="3"/><text x="{tx:.1}" y="{ty:.1}" class="t">{title}</text><text x="{tx:.1}" y="{sy:.1}" class="s">{sub}</text></g>"#,
                    kind = lab.kind,
                    op = n.op,
                    w = n.w,
                    h = n.h,
                    tx = x + 7.0,
                    ty = y + 14.0,
                    sy = y + 27.0,
                    title = esc(&fit(&lab.title, n.w - 14.0, TITLE_CHAR_W)),
                    sub = esc(&fit(&lab.sub, n.w - 14.0, SUB_CHAR_W)),
                    full = esc(&full_label(&lab)),
                );
                if n.chain > 0 {
                    let what = format!("the chain of {} ops from here", n.chain);
                    fold_toggle(s, FoldKey::Chain(n.op), x + n.w + 2.5, y + 2.0, &what);
                }
            }
        }
    }
}

/// One rectangle of the whole drawing, in its coordinates: what the minimap draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MiniBox {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub op: u32,
    /// The frame of an open body (drawn as an outline).
    pub frame: bool,
}

/// Every node's rectangle, bodies' frames before what they hold.
pub fn boxes(l: &Layout) -> Vec<MiniBox> {
    fn walk(l: &Layout, ox: f64, oy: f64, out: &mut Vec<MiniBox>) {
        for n in &l.nodes {
            let (x, y) = (ox + n.x, oy + n.y);
            out.push(MiniBox { x, y, w: n.w, h: n.h, op: n.op, frame: n.body.is_some() });
            if let Some(body) = &n.body {
                walk(body, x + (n.w - body.w) / 2.0, y + HEADER + PAD, out);
            }
        }
    }
    let mut out = Vec::with_capacity(l.nodes.len());
    walk(l, 0.0, 0.0, &mut out);
    out
}

/// Every op the drawing does not show on its own, with the folded node that holds it.
pub fn hidden(l: &Layout) -> HashMap<u32, FoldKey> {
    fn walk(l: &Layout, out: &mut HashMap<u32, FoldKey>) {
        for n in &l.nodes {
            match &n.fold {
                Some(Folded::Chain(ops)) => out.extend(ops.iter().map(|&op| (op, FoldKey::Chain(n.op)))),
                Some(Folded::Body(ops)) => out.extend(ops.iter().map(|&op| (op, FoldKey::Body(n.op)))),
                None => {}
            }
            if let Some(body) = &n.body {
                walk(body, out);
            }
        }
    }
    let mut out = HashMap::new();
    walk(l, &mut out);
    out
}

/// Opens whatever hides `op` (its bodies, its chain) until it is drawn as its own node; says
/// whether anything had to open.
pub fn reveal(dags: &[DagInput], folds: &mut Folds, op: u32) -> bool {
    let mut opened = false;
    // Each round opens one fold around `op`; nesting is bounded, and so are the rounds.
    for _ in 0..2 * MAX_DEPTH + 2 {
        let l = layout_folded(dags, None, folds);
        match hidden(&l).get(&op) {
            Some(&key) => {
                folds.set(key, true);
                opened = true;
            }
            None => break,
        }
    }
    opened
}

/// Widths of a monospace character of a node's title (11 px, bold) and of its second line (10 px),
/// with a margin: what decides how much of a label fits in a node.
const TITLE_CHAR_W: f64 = 7.0;
const SUB_CHAR_W: f64 = 6.2;

/// A node's whole label, for its tooltip: the box shows what fits of it.
fn full_label(l: &NodeLabel) -> String {
    if l.sub.is_empty() {
        l.title.clone()
    } else {
        format!("{} · {}", l.title, l.sub)
    }
}

/// `s` cut to what fits in `width` pixels of text at `char_w` each, with an ellipsis when cut.
fn fit(s: &str, width: f64, char_w: f64) -> String {
    truncate(s, ((width / char_w) as usize).max(2))
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
        let svg = to_svg(
            &l,
            &|op| NodeLabel { kind: "launch", title: format!("op {op}"), sub: String::new(), name: "k".into() },
            Some(2),
        );
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
        let svg = to_svg(
            &l,
            &|op| NodeLabel { kind: "launch", title: format!("op {op}"), sub: String::new(), name: "k".into() },
            None,
        );
        assert_eq!(svg.matches("class=\"lane\"").count(), 2);
        assert!(svg.contains(">device 1</text>"));
    }

    fn label(op: u32) -> NodeLabel {
        NodeLabel { kind: "launch", title: format!("op {op}"), sub: String::new(), name: "inc".into() }
    }

    #[test]
    fn a_long_chain_folds_into_one_node_and_opens_on_request() {
        // 0 → 1 → … → 11, then 12 and 13 both wait for 11.
        let mut edges: Vec<(u32, u32)> = (0..11).map(|i| (i, i + 1)).collect();
        edges.extend([(11, 12), (11, 13)]);
        let dags = vec![DagInput { owner: None, nodes: (0..14).collect(), edges, devices: vec![] }];
        let mut folds = Folds::default();
        let l = layout_folded(&dags, None, &folds);
        assert_eq!(l.nodes.len(), 3, "the chain, then 12 and 13");
        assert_eq!(l.nodes[0].fold, Some(Folded::Chain((0..12).collect())));
        assert_eq!((l.layers, l.edges.len()), (2, 2));
        let hidden = hidden(&l);
        assert_eq!(hidden.len(), 12);
        assert_eq!(hidden[&7], FoldKey::Chain(0));
        let svg = to_svg(&l, &label, None);
        assert!(svg.contains(r#"data-fold="c0" data-open="0" data-first="0" data-last="11" data-count="12""#), "{svg}");
        assert!(svg.contains("inc ×12"));
        assert_eq!(svg.matches("data-node=").count(), 2);

        folds.set(FoldKey::Chain(0), true);
        let l = layout_folded(&dags, None, &folds);
        assert_eq!(l.nodes.len(), 14);
        assert_eq!(l.nodes[0].chain, 12, "the chain's first op can fold it again");
        assert!(to_svg(&l, &label, None).contains(r#"class="fold-toggle" data-fold="c0" data-open="1""#));
        // Chains of CHAIN_FOLD ops or fewer never fold.
        let short = vec![DagInput {
            owner: None,
            nodes: (0..CHAIN_FOLD as u32).collect(),
            edges: (0..CHAIN_FOLD as u32 - 1).map(|i| (i, i + 1)).collect(),
            devices: vec![],
        }];
        let l = layout_folded(&short, None, &Folds { mode: FoldMode::Folded, ..Folds::default() });
        assert_eq!(l.nodes.len(), CHAIN_FOLD);
    }

    #[test]
    fn a_folded_chain_names_its_count_and_its_first_and_last_kernels_in_a_box_sized_for_them() {
        let dags = vec![DagInput {
            owner: None,
            nodes: (0..100).collect(),
            edges: (0..99).map(|i| (i, i + 1)).collect(),
            devices: vec![],
        }];
        let l = layout_folded(&dags, None, &Folds::default());
        assert_eq!(l.nodes.len(), 1);
        assert_eq!((l.nodes[0].w, l.nodes[0].h), (CHAIN_W, CHAIN_H));
        let name = |op: u32| match op {
            0 => "heat_step_boundary_conditions".to_string(),
            99 => "swap_buffers".to_string(),
            _ => "heat_step".to_string(),
        };
        let svg = to_svg(
            &l,
            &|op| NodeLabel { kind: "launch", title: format!("{op} {}", name(op)), sub: String::new(), name: name(op) },
            None,
        );
        assert!(svg.contains(">0–99 · 100 ops</text>"), "{svg}");
        assert!(svg.contains(r#"data-end="first" class="s">from heat_step_boundary_conditions</text>"#), "{svg}");
        assert!(svg.contains(r#"data-end="last" class="s">to swap_buffers</text>"#), "{svg}");
        assert!(svg.contains("heat_step_boundary_conditions, heat_step ×98, swap_buffers;"), "the tooltip: {svg}");
    }

    #[test]
    fn a_big_body_starts_collapsed_and_reveal_opens_what_hides_an_op() {
        // 0 → while 1 (its body: a chain 2 → … → 31) → 32; a small if 33 holding 34.
        let dags = vec![
            DagInput {
                owner: None,
                nodes: vec![0, 1, 32, 33],
                edges: vec![(0, 1), (1, 32), (32, 33)],
                devices: vec![],
            },
            DagInput {
                owner: Some(1),
                nodes: (2..32).collect(),
                edges: (2..31).map(|i| (i, i + 1)).collect(),
                devices: vec![],
            },
            DagInput { owner: Some(33), nodes: vec![34], edges: vec![], devices: vec![] },
        ];
        let mut folds = Folds::default();
        let l = layout_folded(&dags, None, &folds);
        let node = |l: &Layout, op: u32| l.nodes.iter().find(|n| n.op == op).cloned().unwrap();
        assert_eq!(node(&l, 1).fold, Some(Folded::Body((2..32).collect())), "30 ops inside: collapsed");
        assert!(node(&l, 1).body.is_none() && node(&l, 1).h == NODE_H);
        assert!(node(&l, 33).body.is_some(), "a small body stays open");
        let svg = to_svg(&l, &label, None);
        assert!(svg.contains(r#"class="node body collapsed k-launch" data-node="1" data-fold="b1""#), "{svg}");
        assert!(svg.contains("30 ops inside"));
        assert!(svg.contains(r#"data-fold="b33" data-open="1""#), "an open body can collapse");
        assert_eq!(hidden(&l).get(&20), Some(&FoldKey::Body(1)));

        // Revealing op 20 opens the body, then the chain inside it.
        assert!(reveal(&dags, &mut folds, 20));
        assert_eq!(folds.chosen.get(&FoldKey::Body(1)), Some(&true));
        assert_eq!(folds.chosen.get(&FoldKey::Chain(2)), Some(&true));
        let l = layout_folded(&dags, None, &folds);
        assert!(hidden(&l).is_empty());
        assert_eq!(node(&l, 1).body.as_ref().unwrap().nodes.len(), 30);
        assert!(!reveal(&dags, &mut folds, 20), "nothing left to open");
        // The minimap's boxes: every drawn node, in drawing coordinates, frames for open bodies.
        let b = boxes(&l);
        assert_eq!(b.len(), 4 + 30 + 1);
        assert!(b.iter().find(|b| b.op == 1).unwrap().frame);
        assert!(b.iter().all(|b| b.x >= 0.0 && b.y >= 0.0 && b.x + b.w <= l.w + 0.01 && b.y + b.h <= l.h + 0.01));
        // Everything folded: both bodies collapsed.
        folds.reset(FoldMode::Folded);
        let l = layout_folded(&dags, None, &folds);
        assert_eq!(hidden(&l).len(), 31);
        assert_eq!(FoldKey::parse(&FoldKey::Chain(12).id()), Some(FoldKey::Chain(12)));
        assert_eq!(FoldKey::parse("b7"), Some(FoldKey::Body(7)));
        assert_eq!(FoldKey::parse("x7"), None);
    }

    #[test]
    fn a_thousand_op_layout_is_fast() {
        // 8 chains of 125 launches, each chain opened: the biggest case the viewer bench draws.
        let mut edges = Vec::new();
        for c in 0..8u32 {
            edges.extend((0..124).map(|i| (c * 125 + i, c * 125 + i + 1)));
        }
        let dags = vec![DagInput { owner: None, nodes: (0..1000).collect(), edges, devices: vec![] }];
        let t = std::time::Instant::now();
        let l = layout(&dags, None);
        let svg = to_svg(&l, &label, None);
        let took = t.elapsed();
        assert_eq!(l.nodes.len(), 1000);
        assert_eq!(svg.matches("data-node=").count(), 1000);
        assert!(took.as_millis() < 500, "{took:?}");
        let folded = layout_folded(&dags, None, &Folds::default());
        assert_eq!(folded.nodes.len(), 8, "each chain one node");
    }

    #[test]
    fn every_label_fits_its_node() {
        // Long kernel names (Triton's, C++ templates) in a folded chain and in single nodes.
        let long = |op: u32| NodeLabel {
            kind: "launch",
            title: format!("op {op} triton_per_fused_native_layer_norm_{op}"),
            sub: "4096 × 256 · 48 KiB shared · &activations+0".into(),
            name: format!("void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal{op}>"),
        };
        let mut edges: Vec<(u32, u32)> = (0..299).map(|i| (i, i + 1)).collect();
        edges.push((299, 300));
        let dags = vec![DagInput { owner: None, nodes: (0..302).collect(), edges, devices: vec![] }];
        let l = layout_folded(&dags, None, &Folds::default());
        let svg = to_svg(&l, &long, None);
        let mut texts = 0;
        for node in svg.split("<g class=\"node").skip(1) {
            let width: f64 = node.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            for (class, char_w) in [("t", TITLE_CHAR_W), ("s", SUB_CHAR_W)] {
                for text in node.split(&format!("class=\"{class}\">")).skip(1) {
                    let text = text.split('<').next().unwrap();
                    let text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
                    let drawn = text.chars().count() as f64 * char_w;
                    assert!(drawn <= width - 7.0, "{text:?} ({drawn} px) in a {width} px node");
                    texts += 1;
                }
            }
        }
        assert!(texts >= 4, "{svg}");
    }
}

//! The op DAG: what every op reads and writes, the hazards between ops, and what may run at once.
//!
//! Both replay engines and the viewer use the same [`Plan`]. The key design decision: ops are
//! ordered only by data hazards (read-after-write, write-after-read, write-after-write on
//! overlapping byte ranges of the same region), never by their position in the archive, so
//! independent work becomes parallel branches of a CUDA graph. Because a kernel may touch any byte
//! of any buffer it can reach, a launch conservatively reads *and* writes the whole of every region
//! it can reach: the targets of its parameter relocations, and transitively the targets of
//! relocations stored inside those regions (a struct of arrays, a mesh of pointers), and the
//! module variables of the kernel's module on the launch's device, which a kernel names without
//! any relocation.
//!
//! A while/if body is a DAG of its own (one per body, nested bodies included): the body runs as a
//! unit, once per iteration, so hazards never cross a body's boundary. Seen from its enclosing
//! DAG, a while/if op reads its condition word and reads and writes the union of everything its
//! body reads and writes.
//!
//! Edges are found with per-region access lists (an access wholly covered by a later write is
//! dropped, since any later conflict with it is implied through that write), then transitively
//! reduced with bitsets when the DAG has at most [`REDUCE_LIMIT`] nodes.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::archive::{Archive, DeviceId, EventId, ModuleId, Op, OpId, RegionId};

/// Largest DAG (in nodes) whose edges are transitively reduced: the bitsets cost `n²/8` bytes.
pub const REDUCE_LIMIT: usize = 8192;

/// A byte range `start..end` of one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Span {
    pub region: RegionId,
    pub start: u64,
    pub end: u64,
}

impl Span {
    pub fn new(region: RegionId, start: u64, end: u64) -> Self {
        Span { region, start, end }
    }

    pub fn overlaps(&self, other: &Span) -> bool {
        self.region == other.region && self.start < other.end && other.start < self.end
    }

    pub fn covers(&self, other: &Span) -> bool {
        self.region == other.region && self.start <= other.start && other.end <= self.end
    }

    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }
}

/// What one op reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    pub reads: Vec<Span>,
    pub writes: Vec<Span>,
}

impl Access {
    fn read(&mut self, s: Span) {
        if !s.is_empty() {
            self.reads.push(s);
        }
    }

    fn write(&mut self, s: Span) {
        if !s.is_empty() {
            self.writes.push(s);
        }
    }

    /// Sorts and merges overlapping or touching spans so that sets stay small.
    fn normalise(&mut self) {
        merge_spans(&mut self.reads);
        merge_spans(&mut self.writes);
    }

    /// Regions this op touches at all.
    pub fn regions(&self) -> BTreeSet<RegionId> {
        self.reads.iter().chain(&self.writes).map(|s| s.region).collect()
    }
}

fn merge_spans(v: &mut Vec<Span>) {
    v.sort_unstable();
    let mut out: Vec<Span> = Vec::with_capacity(v.len());
    for s in v.drain(..) {
        match out.last_mut() {
            Some(last) if last.region == s.region && s.start <= last.end => last.end = last.end.max(s.end),
            _ => out.push(s),
        }
    }
    *v = out;
}

/// The kind of a data hazard between an earlier op and a later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Hazard {
    /// The later op reads what the earlier one writes.
    Raw,
    /// The later op overwrites what the earlier one reads.
    War,
    /// Both write the same bytes: the later write must land last.
    Waw,
    /// An order the archive asks for with signal and wait ops (multi-device archives): a signal
    /// follows its device's earlier ops, a wait follows the signal, and its device's later ops
    /// follow the wait.
    Sync,
}

/// "`to` must wait for `from`", with the hazards that make it so (at least one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub from: OpId,
    pub to: OpId,
    pub hazards: Vec<Hazard>,
}

/// The DAG of the ops directly inside one body (or the top level).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dag {
    /// The while/if op whose body this is; `None` for the top level.
    pub owner: Option<OpId>,
    /// The body's direct children in archive order (a topological order of the DAG).
    pub nodes: Vec<OpId>,
    /// Sorted by `(to, from)`.
    pub edges: Vec<Edge>,
    /// Whether `edges` is the transitive reduction (false only above [`REDUCE_LIMIT`] nodes).
    pub reduced: bool,
}

impl Dag {
    /// Ops that `op` waits for directly.
    pub fn preds(&self, op: OpId) -> impl Iterator<Item = OpId> + '_ {
        let lo = self.edges.partition_point(|e| e.to < op);
        self.edges[lo..].iter().take_while(move |e| e.to == op).map(|e| e.from)
    }

    /// Nodes with no predecessor.
    pub fn roots(&self) -> Vec<OpId> {
        let has_pred: BTreeSet<OpId> = self.edges.iter().map(|e| e.to).collect();
        self.nodes.iter().copied().filter(|n| !has_pred.contains(n)).collect()
    }

    /// Length in nodes of the longest dependency chain (1 for a DAG of independent nodes).
    pub fn depth(&self) -> usize {
        let mut level: HashMap<OpId, usize> = HashMap::with_capacity(self.nodes.len());
        let mut best = 0;
        for &n in &self.nodes {
            let l = 1 + self.preds(n).map(|p| level.get(&p).copied().unwrap_or(0)).max().unwrap_or(0);
            level.insert(n, l);
            best = best.max(l);
        }
        best
    }
}

/// The plan of a whole archive: every op's access sets and one DAG per body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Indexed by op id. A while/if's entry includes its condition word and its whole body.
    pub access: Vec<Access>,
    /// Indexed by op id: the logical device each op runs on (all 0 in a one-device archive).
    #[serde(default)]
    pub device: Vec<DeviceId>,
    /// Logical devices of the archive (at least 1).
    #[serde(default = "one")]
    pub device_count: u32,
    /// `dags[0]` is the top level; then one per while/if, in op order.
    pub dags: Vec<Dag>,
}

impl Plan {
    /// Plans every op of `archive`.
    pub fn build(archive: &Archive) -> Plan {
        let reach = Reach::new(archive);
        let n = archive.op_count();
        let mut access = vec![Access::default(); n];
        // Post-order over the flat pre-order list: a body's ops come after its owner, so walk backwards.
        for id in (0..n as u32).rev() {
            access[id as usize] = op_access(archive, &reach, id, &access);
        }
        let order: Vec<Order> = (0..n as u32)
            .map(|id| Order {
                device: archive.op_device(id),
                event: match archive.op(id) {
                    Op::Signal(e) => Some((e, true)),
                    Op::Wait(e) => Some((e, false)),
                    _ => None,
                },
            })
            .collect();
        let mut dags = vec![build_dag(None, archive.top_level().collect(), &access, &order)];
        for id in 0..n as u32 {
            if matches!(archive.op(id), Op::While { .. } | Op::If { .. }) {
                dags.push(build_dag(Some(id), archive.children(archive.body(id)).collect(), &access, &order));
            }
        }
        Plan { access, device: order.iter().map(|o| o.device).collect(), device_count: archive.device_count(), dags }
    }

    /// The logical device op `op` runs on.
    pub fn device_of(&self, op: OpId) -> DeviceId {
        self.device.get(op as usize).copied().unwrap_or(0)
    }

    /// The top-level DAG.
    pub fn top(&self) -> &Dag {
        &self.dags[0]
    }

    /// The DAG of the body of the while/if `op`.
    pub fn body(&self, op: OpId) -> Option<&Dag> {
        self.dags.iter().find(|d| d.owner == Some(op))
    }

    /// Every edge of every DAG.
    pub fn edge_count(&self) -> usize {
        self.dags.iter().map(|d| d.edges.len()).sum()
    }
}

/// For each region, every region reachable through relocations stored in region contents.
struct Reach {
    closure: HashMap<RegionId, Vec<RegionId>>,
    /// The regions that are a module's variables, with their devices, by module.
    module_vars: HashMap<ModuleId, Vec<(RegionId, DeviceId)>>,
}

impl Reach {
    fn new(archive: &Archive) -> Self {
        let mut direct: HashMap<RegionId, BTreeSet<RegionId>> = HashMap::new();
        for (owner, r) in archive.region_relocs() {
            direct.entry(owner).or_default().insert(r.target);
        }
        let mut closure = HashMap::new();
        for &start in direct.keys() {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start];
            while let Some(r) = stack.pop() {
                for &t in direct.get(&r).into_iter().flatten() {
                    if t != start && seen.insert(t) {
                        stack.push(t);
                    }
                }
            }
            closure.insert(start, seen.into_iter().collect());
        }
        let mut module_vars: HashMap<ModuleId, Vec<(RegionId, DeviceId)>> = HashMap::new();
        for v in archive.module_vars() {
            module_vars.entry(v.module).or_default().push((v.region, archive.region(v.region).device));
        }
        Reach { closure, module_vars }
    }

    fn add(&self, region: RegionId, out: &mut BTreeSet<RegionId>) {
        if out.insert(region) {
            for &r in self.closure.get(&region).into_iter().flatten() {
                out.insert(r);
            }
        }
    }
}

fn whole(archive: &Archive, region: RegionId) -> Span {
    Span::new(region, 0, archive.region(region).size)
}

fn op_access(archive: &Archive, reach: &Reach, id: OpId, done: &[Access]) -> Access {
    let mut a = Access::default();
    match archive.op(id) {
        Op::Launch(l) => {
            let mut regions = BTreeSet::new();
            for r in archive.relocs(l.relocs.clone()) {
                reach.add(r.target, &mut regions);
            }
            let (module, device) = (archive.kernel(l.kernel).module, archive.op_device(id));
            for &(r, _) in reach.module_vars.get(&module).into_iter().flatten().filter(|v| v.1 == device) {
                reach.add(r, &mut regions);
            }
            for r in regions {
                a.read(whole(archive, r));
                a.write(whole(archive, r));
            }
        }
        Op::Copy(c) => {
            a.read(Span::new(c.src, c.src_offset, c.src_offset + c.len));
            a.write(Span::new(c.dst, c.dst_offset, c.dst_offset + c.len));
        }
        Op::Memset(m) => a.write(Span::new(m.region, m.offset, m.offset + m.len)),
        // Allocation and release change what the bytes mean: order them like a write.
        Op::Alloc(r) | Op::Free(r) => a.write(whole(archive, r)),
        Op::While { cond, .. } | Op::If { cond, .. } => {
            a.read(Span::new(cond.region, cond.offset, cond.offset + 4));
            for child in archive.children(archive.body(id)) {
                let c = &done[child as usize];
                a.reads.extend_from_slice(&c.reads);
                a.writes.extend_from_slice(&c.writes);
            }
        }
        Op::Library(l) => {
            // Every operand is read (a written one keeps the bytes the routine does not write).
            for o in l.operands().unwrap_or_default() {
                let span = Span::new(o.at.region, o.at.offset, o.at.offset + o.len);
                a.read(span);
                if o.written {
                    a.write(span);
                }
            }
        }
        Op::Marker(_) | Op::Signal(_) | Op::Wait(_) => {}
    }
    a.normalise();
    a
}

fn one() -> u32 {
    1
}

/// What orders an op besides its data: its device, and whether it signals (`true`) or waits
/// for an event.
struct Order {
    device: DeviceId,
    event: Option<(EventId, bool)>,
}

/// Per-device stream order as signal and wait ops ask for it (see [`Hazard::Sync`]). Each node
/// joins at most one `since_signal` list, so this is linear in the DAG's size.
#[derive(Default)]
struct Streams {
    /// Per device: the nodes since (and including) its latest signal.
    since_signal: HashMap<DeviceId, Vec<usize>>,
    /// Per device: its latest wait.
    last_wait: HashMap<DeviceId, usize>,
    /// Per event: its latest signal.
    signalled: HashMap<EventId, usize>,
}

impl Streams {
    fn preds(&mut self, j: usize, order: &Order, out: &mut Vec<(usize, Hazard)>) {
        let d = order.device;
        if let Some(&w) = self.last_wait.get(&d) {
            out.push((w, Hazard::Sync));
        }
        match order.event {
            Some((e, true)) => {
                let before = self.since_signal.insert(d, vec![j]).unwrap_or_default();
                out.extend(before.into_iter().map(|i| (i, Hazard::Sync)));
                self.signalled.insert(e, j);
            }
            Some((e, false)) => {
                if let Some(&s) = self.signalled.get(&e) {
                    out.push((s, Hazard::Sync));
                }
                self.last_wait.insert(d, j);
                self.since_signal.entry(d).or_default().push(j);
            }
            None => self.since_signal.entry(d).or_default().push(j),
        }
    }
}

/// One earlier access still able to conflict with later ops.
#[derive(Clone, Copy)]
struct Live {
    span: Span,
    op: usize,
    write: bool,
}

fn build_dag(owner: Option<OpId>, nodes: Vec<OpId>, access: &[Access], order: &[Order]) -> Dag {
    // node index -> (pred index -> hazards)
    let mut preds: Vec<Vec<(usize, Hazard)>> = vec![Vec::new(); nodes.len()];
    let mut live: HashMap<RegionId, Vec<Live>> = HashMap::new();
    let mut streams = Streams::default();
    let has_events = nodes.iter().any(|&op| order[op as usize].event.is_some());
    for (j, &op) in nodes.iter().enumerate() {
        if has_events {
            streams.preds(j, &order[op as usize], &mut preds[j]);
        }
        let a = &access[op as usize];
        for (spans, write) in [(&a.reads, false), (&a.writes, true)] {
            for s in spans.iter() {
                for l in live.get(&s.region).into_iter().flatten() {
                    if l.op == j || !l.span.overlaps(s) {
                        continue;
                    }
                    let h = match (l.write, write) {
                        (true, false) => Hazard::Raw,
                        (false, true) => Hazard::War,
                        (true, true) => Hazard::Waw,
                        (false, false) => continue,
                    };
                    preds[j].push((l.op, h));
                }
            }
        }
        for s in &a.writes {
            let list = live.entry(s.region).or_default();
            list.retain(|l| !s.covers(&l.span));
        }
        for (spans, write) in [(&a.reads, false), (&a.writes, true)] {
            for s in spans.iter() {
                live.entry(s.region).or_default().push(Live { span: *s, op: j, write });
            }
        }
    }
    let mut grouped: Vec<Vec<(usize, Vec<Hazard>)>> = preds
        .into_iter()
        .map(|mut p| {
            p.sort_unstable();
            let mut g: Vec<(usize, Vec<Hazard>)> = Vec::new();
            for (i, h) in p {
                match g.last_mut() {
                    Some((li, hs)) if *li == i => {
                        if !hs.contains(&h) {
                            hs.push(h);
                        }
                    }
                    _ => g.push((i, vec![h])),
                }
            }
            g
        })
        .collect();
    let reduced = nodes.len() <= REDUCE_LIMIT;
    if reduced {
        transitive_reduce(&mut grouped);
    }
    let mut edges = Vec::new();
    for (j, ps) in grouped.into_iter().enumerate() {
        for (i, hazards) in ps {
            edges.push(Edge { from: nodes[i], to: nodes[j], hazards });
        }
    }
    Dag { owner, nodes, edges, reduced }
}

/// Drops every edge implied by a longer path. `preds[j]` holds only indices below `j`.
fn transitive_reduce(preds: &mut [Vec<(usize, Vec<Hazard>)>]) {
    let n = preds.len();
    let words = n.div_ceil(64);
    // reach[j]: every ancestor of j.
    let mut reach = vec![0u64; n * words];
    for j in 0..n {
        let mut covered = vec![0u64; words];
        let mut ps = std::mem::take(&mut preds[j]);
        ps.sort_unstable_by_key(|p| std::cmp::Reverse(p.0));
        ps.retain(|(i, _)| {
            let i = *i;
            if covered[i / 64] >> (i % 64) & 1 == 1 {
                return false;
            }
            for w in 0..words {
                covered[w] |= reach[i * words + w];
            }
            covered[i / 64] |= 1 << (i % 64);
            true
        });
        ps.sort_unstable_by_key(|p| p.0);
        preds[j] = ps;
        reach[j * words..(j + 1) * words].copy_from_slice(&covered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::*;
    use std::io::Cursor;

    const PTX: &str =
        ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k(.param .u64 a, .param .u64 b)\n{\nret;\n}\n";

    struct Fixture {
        w: ArchiveWriter<Cursor<Vec<u8>>>,
        k: KernelId,
    }

    impl Fixture {
        fn new() -> Self {
            let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
            let m = w.add_module("m", PTX).unwrap();
            let p = |name: &str, offset| ParamDecl {
                name: name.into(),
                offset,
                size: 8,
                align: 8,
                kind: ParamKind::Pointer,
            };
            let k = w.add_kernel(m, "k", vec![p("a", 0), p("b", 8)]).unwrap();
            Fixture { w, k }
        }
        fn region(&mut self, name: &str, size: u64) -> RegionId {
            self.w.add_region(RegionDecl::new(name, size, DType::U8)).unwrap()
        }
        fn launch(&mut self, a: RegionId, b: RegionId) -> OpId {
            let relocs = vec![
                Reloc { offset: 0, target: a, target_offset: 0 },
                Reloc { offset: 8, target: b, target_offset: 0 },
            ];
            self.w
                .launch(LaunchDecl {
                    kernel: self.k,
                    grid: [1; 3],
                    block: [32, 1, 1],
                    shared_bytes: 0,
                    params: vec![0; 16],
                    relocs,
                })
                .unwrap()
        }
        fn memset(&mut self, r: RegionId, offset: u64, len: u64) -> OpId {
            self.w.memset(MemsetOp { region: r, offset, len, width: 1, pattern: 0 }).unwrap()
        }
        fn copy(&mut self, src: RegionId, so: u64, dst: RegionId, d: u64, len: u64) -> OpId {
            self.w.copy(CopyOp { src, src_offset: so, dst, dst_offset: d, len }).unwrap()
        }
        fn plan(self) -> (Plan, Vec<u8>) {
            let bytes = self.w.finish().unwrap().into_inner();
            let a = Archive::open(&bytes).unwrap();
            (Plan::build(&a), bytes.clone())
        }
    }

    fn edges(d: &Dag) -> Vec<(OpId, OpId)> {
        d.edges.iter().map(|e| (e.from, e.to)).collect()
    }

    fn hazard(d: &Dag, from: OpId, to: OpId) -> Vec<Hazard> {
        d.edges.iter().find(|e| e.from == from && e.to == to).map(|e| e.hazards.clone()).unwrap_or_default()
    }

    #[test]
    fn independent_launches_have_no_edges() {
        let mut f = Fixture::new();
        let r: Vec<_> = (0..4).map(|i| f.region(&format!("r{i}"), 64)).collect();
        f.launch(r[0], r[1]);
        f.launch(r[2], r[3]);
        let (p, _) = f.plan();
        assert!(p.top().edges.is_empty());
        assert_eq!(p.top().roots(), vec![0, 1]);
        assert_eq!(p.top().depth(), 1);
    }

    #[test]
    fn launch_access_is_whole_regions_read_and_written() {
        let mut f = Fixture::new();
        let a = f.region("a", 100);
        let b = f.region("b", 40);
        f.launch(a, b);
        let (p, _) = f.plan();
        let want = vec![Span::new(a, 0, 100), Span::new(b, 0, 40)];
        assert_eq!(p.access[0].reads, want);
        assert_eq!(p.access[0].writes, want);
    }

    #[test]
    fn raw_war_waw_on_byte_ranges() {
        let mut f = Fixture::new();
        let a = f.region("a", 64);
        let b = f.region("b", 64);
        let m0 = f.memset(a, 0, 16); // writes a[0..16]
        let c1 = f.copy(a, 0, b, 0, 8); // reads a[0..8] (RAW on m0), writes b[0..8]
        let m2 = f.memset(a, 32, 16); // disjoint from both: no edge
        let m3 = f.memset(a, 4, 4); // WAR with c1 (reads a[0..8]), WAW with m0
        let c4 = f.copy(b, 8, b, 16, 8); // b[8..16] -> b[16..24]: disjoint from c1's write
        let (p, _) = f.plan();
        let d = p.top();
        assert_eq!(hazard(d, m0, c1), vec![Hazard::Raw]);
        assert_eq!(hazard(d, c1, m3), vec![Hazard::War]);
        // m0 -> m3 (WAW) is implied by m0 -> c1 -> m3 and reduced away.
        assert!(hazard(d, m0, m3).is_empty());
        assert!(d.preds(m2).next().is_none());
        assert!(d.preds(c4).next().is_none());
        assert!(d.reduced);
        assert_eq!(edges(d), vec![(m0, c1), (c1, m3)]);
    }

    #[test]
    fn waw_alone_is_an_edge() {
        let mut f = Fixture::new();
        let a = f.region("a", 64);
        let m0 = f.memset(a, 0, 16);
        let m1 = f.memset(a, 8, 16);
        let (p, _) = f.plan();
        assert_eq!(hazard(p.top(), m0, m1), vec![Hazard::Waw]);
    }

    #[test]
    fn chain_is_transitively_reduced() {
        let mut f = Fixture::new();
        let a = f.region("a", 64);
        let b = f.region("b", 64);
        for _ in 0..50 {
            f.launch(a, b);
        }
        let (p, _) = f.plan();
        let d = p.top();
        assert_eq!(d.edges.len(), 49);
        assert!(d.edges.iter().all(|e| e.to == e.from + 1));
        assert_eq!(d.depth(), 50);
        // Every launch both reads and writes: each link carries all three hazards.
        assert_eq!(d.edges[0].hazards, vec![Hazard::Raw, Hazard::War, Hazard::Waw]);
    }

    #[test]
    fn readers_run_together_and_the_next_writer_waits_for_all() {
        let mut f = Fixture::new();
        let src = f.region("src", 64);
        let outs: Vec<_> = (0..3).map(|i| f.region(&format!("o{i}"), 64)).collect();
        let w0 = f.memset(src, 0, 64);
        let readers: Vec<_> = outs.iter().map(|&o| f.copy(src, 0, o, 0, 64)).collect();
        let w1 = f.memset(src, 0, 64);
        let (p, _) = f.plan();
        let d = p.top();
        for &r in &readers {
            assert_eq!(hazard(d, w0, r), vec![Hazard::Raw]);
            assert_eq!(hazard(d, r, w1), vec![Hazard::War]);
        }
        // w0 -> w1 (WAW) goes through every reader.
        assert!(hazard(d, w0, w1).is_empty());
        assert_eq!(d.depth(), 3);
    }

    #[test]
    fn pointers_inside_regions_extend_a_launch_to_their_targets() {
        let mut f = Fixture::new();
        let table = f.region("table", 16);
        let data = f.region("data", 64);
        let other = f.region("other", 64);
        let scratch = f.region("scratch", 64);
        f.w.add_region_reloc(table, Reloc { offset: 0, target: data, target_offset: 0 }).unwrap();
        let m = f.memset(data, 0, 64);
        let l = f.launch(table, scratch); // reaches data through the table
        let c = f.copy(other, 0, scratch, 0, 8);
        let (p, _) = f.plan();
        assert!(p.access[l as usize].writes.iter().any(|s| s.region == data));
        assert_eq!(hazard(p.top(), m, l), vec![Hazard::Raw, Hazard::Waw]);
        assert_eq!(hazard(p.top(), l, c), vec![Hazard::War, Hazard::Waw]);
    }

    #[test]
    fn while_body_is_its_own_dag_and_the_loop_is_one_node_outside() {
        let mut f = Fixture::new();
        let flag = f.region("flag", 8);
        let x = f.region("x", 64);
        let y = f.region("y", 64);
        let z = f.region("z", 64);
        let before = f.memset(x, 0, 64);
        let lp = f.w.begin_while(Condition { region: flag, offset: 4, max_iterations: 10 }).unwrap();
        let b0 = f.launch(x, y);
        let b1 = f.memset(z, 0, 8); // independent of b0 inside the body
        let b2 = f.memset(flag, 4, 4); // clears the condition
        f.w.end_body().unwrap();
        let after_z = f.copy(z, 0, y, 0, 8); // depends on the loop through z and y
        let unrelated = f.memset(flag, 0, 4); // the other half of flag: untouched by the loop
        let (p, _) = f.plan();

        let top = p.top();
        assert_eq!(top.nodes, vec![before, lp, after_z, unrelated]);
        assert_eq!(hazard(top, before, lp), vec![Hazard::Raw, Hazard::Waw]);
        assert_eq!(edges(top), vec![(before, lp), (lp, after_z)]);

        let acc = &p.access[lp as usize];
        assert!(acc.reads.contains(&Span::new(flag, 4, 8)));
        assert!(acc.writes.contains(&Span::new(flag, 4, 8)));
        assert!(acc.writes.iter().any(|s| s.region == z));

        let body = p.body(lp).unwrap();
        assert_eq!(body.owner, Some(lp));
        assert_eq!(body.nodes, vec![b0, b1, b2]);
        assert!(body.edges.is_empty());
        assert_eq!(p.dags.len(), 2);
    }

    #[test]
    fn nested_if_inside_while() {
        let mut f = Fixture::new();
        let flag = f.region("flag", 8);
        let x = f.region("x", 64);
        let y = f.region("y", 64);
        let lp = f.w.begin_while(Condition { region: flag, offset: 0, max_iterations: 0 }).unwrap();
        let w0 = f.memset(x, 0, 8);
        let iff = f.w.begin_if(Condition { region: flag, offset: 4, max_iterations: 0 }).unwrap();
        let i0 = f.copy(x, 0, y, 0, 8);
        let i1 = f.memset(y, 32, 8);
        f.w.end_body().unwrap();
        let w2 = f.memset(flag, 0, 4);
        f.w.end_body().unwrap();
        let (p, _) = f.plan();

        assert_eq!(p.top().nodes, vec![lp]);
        let body = p.body(lp).unwrap();
        assert_eq!(body.nodes, vec![w0, iff, w2]);
        // The if reads x through its body: RAW on w0. It reads flag[4..8], disjoint from w2's flag[0..4].
        assert_eq!(edges(body), vec![(w0, iff)]);
        let inner = p.body(iff).unwrap();
        assert_eq!(inner.nodes, vec![i0, i1]);
        assert!(inner.edges.is_empty());
        // The outer loop's access set is the union of everything nested.
        let acc = &p.access[lp as usize];
        assert!(acc.writes.contains(&Span::new(y, 0, 8)) && acc.writes.contains(&Span::new(y, 32, 40)));
        assert!(acc.reads.contains(&Span::new(flag, 0, 8)));
    }

    #[test]
    fn markers_touch_nothing() {
        let mut f = Fixture::new();
        let a = f.region("a", 64);
        f.memset(a, 0, 8);
        let m = f.w.marker("t0").unwrap();
        f.memset(a, 0, 8);
        let (p, _) = f.plan();
        assert_eq!(p.access[m as usize], Access::default());
        assert_eq!(edges(p.top()), vec![(0, 2)]);
    }

    #[test]
    fn plan_round_trips_through_json() {
        let mut f = Fixture::new();
        let a = f.region("a", 64);
        let b = f.region("b", 64);
        f.launch(a, b);
        f.memset(b, 0, 8);
        let (p, _) = f.plan();
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains("\"WAW\""));
        let back: Plan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn reduction_keeps_reachability() {
        // Diamond plus a shortcut: 0 -> {1, 2} -> 3, and 0 -> 3 directly (implied).
        let h = |i: usize| (i, vec![Hazard::Raw]);
        let mut preds = vec![vec![], vec![h(0)], vec![h(0)], vec![h(0), h(1), h(2)]];
        transitive_reduce(&mut preds);
        let kept: Vec<Vec<usize>> = preds.iter().map(|p| p.iter().map(|x| x.0).collect()).collect();
        assert_eq!(kept, vec![vec![], vec![0], vec![0], vec![1, 2]]);
    }
}

//! CUDA graphs as the program builds them: by stream capture or node by node (`cuGraphCreate`,
//! `cuGraphAdd*Node`, `cuGraphAddNode`, `cuGraphAddDependencies`, the node setters), instantiated
//! into executable graphs (`cuGraphInstantiate*`, `cuGraphExec*SetParams`, `cuGraphExecUpdate`) and
//! launched (`cuGraphLaunch`).
//!
//! # The idea
//! A graph is kept as a model beside the driver's: every node with what it does as [`Work`] (the
//! same work a plain launch, copy or memset is) and the nodes it depends on. Graphs are built long
//! before they run, often before the range, so the model is kept always; building a graph is rare
//! next to launching one. Kernel parameters are packed when the node is added (the driver copies
//! them then, and the program's pointers are only valid during the call); host memory a memcpy
//! node reads is read when the graph is launched, as the GPU reads it when the graph runs.
//!
//! A graph's nodes and dependencies are kept in [`shared::cuda_graph::Graph`], the model the CPU
//! driver runs graphs in too. Instantiating a graph fixes its work with
//! [`shared::cuda_graph::expand_node`]: each node, in run order (every node after its
//! dependencies), expanded into its work, a child graph into its own nodes in their order. A
//! launch inside the range issues that work in that order: one valid serial order of the graph,
//! from which the archive's plan recovers the concurrency by the data each op touches, as
//! for streams. The edges themselves are not stored: the archive orders ops by their data.
//!
//! A conditional IF or WHILE node becomes an if or while op on the region standing for its
//! condition (record.rs, `CONDITION`), its body the body graph's work as it is at instantiation.
//!
//! A node recap cannot replay (a host callback, a SWITCH node, semaphores, an array copy) stays
//! in the model as the reason it is missing; a launch of a graph holding one marks the archive
//! incomplete with that reason, never dropping it silently.

use std::collections::HashMap;

use shared::cuda_graph::{
    self, memory_type, Conditional as Kind, CopyRun, KernelNode, Memcpy3D, MemsetNode, NodeParams, Part, Run,
};

use crate::launch_attrs::LaunchAttrs;
use crate::record::{HostData, State, Work};

/// What one node does.
#[derive(Clone, Debug)]
pub enum Node {
    /// Device work: a kernel launch, the runs of a copy or of a fill.
    Work(Vec<Work>),
    /// Only orders other nodes: empty nodes, event records and waits, graph memory frees.
    Order,
    /// A child graph, as it was when added (the driver copies it then).
    Child(Graph),
    /// A conditional node (IF or WHILE with one body): its condition handle and body graph, which
    /// the driver made with the node and the program fills afterwards.
    Conditional { handle: u64, kind: Kind, bodies: Vec<usize> },
    /// Why this node's work cannot be recorded.
    Missing(String),
}

/// A conditional handle (`cuGraphConditionalHandleCreate`): the graph it belongs to, and the value
/// the condition takes at every launch of that graph when `assign` is set.
#[derive(Clone, Debug)]
pub struct Condition {
    pub graph: usize,
    pub default: u32,
    pub assign: bool,
    /// The allocation that stands for the condition (record.rs: `CONDITION`).
    pub alloc: crate::record::Alloc,
}

/// A node as the graph keeps it: what it does, and what recap knows of it.
#[derive(Clone, Debug)]
struct NodeRec {
    /// The driver's handle, 0 where recap never saw it (nodes of a captured or cloned graph).
    handle: usize,
    node: Node,
    /// What makes this node's place in the graph uncertain.
    doubts: Vec<String>,
}

impl NodeRec {
    fn new(handle: usize, node: Node) -> NodeRec {
        NodeRec { handle, node, doubts: Vec::new() }
    }
}

/// One graph's nodes in the order they were added, with their dependencies.
#[derive(Clone, Debug, Default)]
pub struct Graph(cuda_graph::Graph<NodeRec>);

/// One top-level node of an executable graph, fixed at instantiation.
#[derive(Clone, Debug)]
struct ExecItem {
    node: usize,
    work: Vec<Work>,
    missing: Vec<String>,
    enabled: bool,
}

/// An executable graph: its nodes' work in run order.
#[derive(Clone, Debug, Default)]
pub struct Exec {
    items: Vec<ExecItem>,
    /// Changes made to it that recap could not follow.
    missing: Vec<String>,
}

#[derive(Default)]
pub struct GraphBook {
    graphs: HashMap<usize, Graph>,
    /// A node handle's graph and index in it.
    node_at: HashMap<usize, (usize, usize)>,
    execs: HashMap<usize, Exec>,
    /// Conditional handles by value.
    pub conditions: HashMap<u64, Condition>,
}

impl Graph {
    /// A graph of `work` in a chain, one node per piece (what a stream capture builds).
    pub fn chain(work: Vec<Work>) -> Graph {
        let mut g = Graph::default();
        for (i, w) in work.into_iter().enumerate() {
            let deps = if i == 0 { Vec::new() } else { vec![i - 1] };
            g.0.add(NodeRec::new(0, Node::Work(vec![w])), deps);
        }
        g
    }
}

/// Work fixed for a run as the archive's work: a conditional body becomes a control op.
fn flatten(runs: Vec<Run<Vec<Work>>>, out: &mut Vec<Work>) {
    for r in runs {
        match r {
            Run::Work(w) => out.extend(w),
            Run::Conditional { kind, handle, body } => {
                let mut inner = Vec::new();
                flatten(body, &mut inner);
                out.push(Work::Control { kind: kind.node_type(), handle, body: inner });
            }
        }
    }
}

impl GraphBook {
    /// The work of `node` and what of it is missing (its doubts and those of the nodes inside
    /// it among them); a conditional node's bodies as they are now.
    fn expand(&self, node: &NodeRec) -> (Vec<Work>, Vec<String>) {
        let mut missing = Vec::new();
        let mut runs = Vec::new();
        let expanded = cuda_graph::expand_node(
            node,
            0,
            &mut |n| {
                missing.extend(n.doubts.iter().cloned());
                Ok::<_, std::convert::Infallible>(match &n.node {
                    Node::Work(w) => Part::Work(w.clone()),
                    Node::Order => Part::Nothing,
                    Node::Missing(why) => {
                        missing.push(why.clone());
                        Part::Nothing
                    }
                    Node::Child(g) => Part::Inline(&g.0),
                    Node::Conditional { handle, kind, bodies } => {
                        match bodies.first().and_then(|b| self.graphs.get(b)) {
                            Some(body) => Part::Conditional { kind: *kind, handle: *handle, body: &body.0 },
                            None => {
                                missing.push("a conditional node whose body graph recap did not see".into());
                                Part::Nothing
                            }
                        }
                    }
                })
            },
            &mut runs,
        );
        if let Err(e) = expanded {
            missing.push(e.to_string());
        }
        let mut work = Vec::new();
        flatten(runs, &mut work);
        (work, missing)
    }

    pub fn add_graph(&mut self, graph: usize, g: Graph) {
        if let Some(old) = self.graphs.insert(graph, g) {
            self.forget_nodes(graph, &old);
        }
    }

    fn forget_nodes(&mut self, graph: usize, g: &Graph) {
        for n in g.0.nodes() {
            if n.handle != 0 && self.node_at.get(&n.handle).is_some_and(|&(owner, _)| owner == graph) {
                self.node_at.remove(&n.handle);
            }
        }
    }

    pub fn destroy_graph(&mut self, graph: usize) {
        if let Some(g) = self.graphs.remove(&graph) {
            self.forget_nodes(graph, &g);
        }
    }

    /// A copy of `graph` as it is now, for a child graph node.
    fn snapshot(&self, graph: usize) -> Node {
        match self.graphs.get(&graph) {
            Some(g) => Node::Child(g.clone()),
            None => Node::Missing("a child graph recap did not see built".into()),
        }
    }

    /// Adds `node` to `graph` (a graph recap did not see made starts empty here) after `deps`.
    pub fn add_node(&mut self, graph: usize, handle: usize, node: Node, deps: &[usize]) {
        let mut doubts = Vec::new();
        let mut indices = Vec::new();
        for d in deps {
            match self.node_at.get(d) {
                Some(&(g, i)) if g == graph => indices.push(i),
                _ => doubts.push("a graph node depends on a node recap did not see: its order may differ".to_string()),
            }
        }
        let index = self.graphs.entry(graph).or_default().0.add(NodeRec { handle, node, doubts }, indices);
        if handle != 0 {
            self.node_at.insert(handle, (graph, index));
        }
    }

    fn node_mut(&mut self, handle: usize) -> Option<&mut NodeRec> {
        let &(graph, index) = self.node_at.get(&handle)?;
        self.graphs.get_mut(&graph).and_then(|g| g.0.node_mut(index))
    }

    /// A node's parameters changed (`cuGraph*NodeSetParams`); `false` when recap never saw it.
    pub fn set_node(&mut self, handle: usize, node: Node) -> bool {
        match self.node_mut(handle) {
            Some(n) => {
                n.node = node;
                true
            }
            None => false,
        }
    }

    /// `cuGraphKernelNodeSetAttribute`: an attribute of a kernel node's launch.
    pub fn set_kernel_attribute(&mut self, handle: usize, attr: u32, value: &[u8; 64]) -> bool {
        let Some(n) = self.node_mut(handle) else { return false };
        if let Node::Work(work) = &mut n.node {
            for w in work {
                if let Work::Launch { attrs, .. } = w {
                    attrs.set(attr, value);
                }
            }
        }
        true
    }

    pub fn destroy_node(&mut self, handle: usize) {
        let Some((graph, index)) = self.node_at.remove(&handle) else { return };
        if let Some(g) = self.graphs.get_mut(&graph) {
            g.0.destroy(index);
        }
    }

    /// Adds (or removes) the edges `from[i] -> to[i]`.
    pub fn edges(&mut self, graph: usize, from: &[usize], to: &[usize], add: bool) -> bool {
        let mut all_known = true;
        for (f, t) in from.iter().zip(to) {
            let (Some(&(gf, fi)), Some(&(gt, ti))) = (self.node_at.get(f), self.node_at.get(t)) else {
                all_known = false;
                continue;
            };
            if gf != graph || gt != graph {
                all_known = false;
                continue;
            }
            let Some(g) = self.graphs.get_mut(&graph) else { continue };
            if add {
                g.0.add_edge(fi, ti);
            } else {
                g.0.remove_edge(fi, ti);
            }
        }
        all_known
    }

    /// `cuGraphClone`: the copy's nodes are the driver's new handles, which recap learns only
    /// through `cuGraphNodeFindInClone`.
    pub fn clone_graph(&mut self, clone: usize, original: usize) {
        let mut g = self.graphs.get(&original).cloned().unwrap_or_default();
        for n in g.0.nodes_mut() {
            n.handle = 0;
        }
        self.add_graph(clone, g);
    }

    pub fn found_in_clone(&mut self, clone_node: usize, original_node: usize, clone: usize) {
        let Some(&(_, index)) = self.node_at.get(&original_node) else { return };
        if let Some(n) = self.graphs.get_mut(&clone).and_then(|g| g.0.node_mut(index)) {
            n.handle = clone_node;
            self.node_at.insert(clone_node, (clone, index));
        }
    }

    /// Appends `work` to `graph` as a chain after the nodes `deps` (`cuStreamBeginCaptureToGraph`);
    /// the capture's nodes have no handle recap sees.
    pub fn append_chain(&mut self, graph: usize, work: Vec<Work>, deps: &[usize]) {
        let mut after: Vec<usize> =
            deps.iter().filter_map(|h| self.node_at.get(h).filter(|(g, _)| *g == graph).map(|&(_, i)| i)).collect();
        let g = self.graphs.entry(graph).or_default();
        for w in work {
            after = vec![g.0.add(NodeRec::new(0, Node::Work(vec![w])), after)];
        }
    }

    /// Fixes `graph`'s work into `exec`.
    pub fn instantiate(&mut self, exec: usize, graph: usize) {
        let mut e = match self.graphs.get(&graph) {
            Some(g) => match g.0.order() {
                Ok(order) => Exec {
                    items: order
                        .into_iter()
                        .filter_map(|i| g.0.node(i))
                        .map(|n| {
                            let (work, missing) = self.expand(n);
                            ExecItem { node: n.handle, work, missing, enabled: true }
                        })
                        .collect(),
                    missing: Vec::new(),
                },
                Err(e) => Exec { items: Vec::new(), missing: vec![e.to_string()] },
            },
            None => Exec {
                items: Vec::new(),
                missing: vec!["a CUDA graph recap did not see built (neither captured nor built node by node)".into()],
            },
        };
        // Conditions that take their default value at every launch of this graph, first.
        let mut defaults: Vec<(u64, u32)> = self
            .conditions
            .iter()
            .filter(|(_, c)| c.graph == graph && c.assign)
            .map(|(h, c)| (*h, c.default))
            .collect();
        defaults.sort_unstable();
        if !defaults.is_empty() {
            let work = defaults.into_iter().map(|(handle, value)| Work::SetCondition { handle, value }).collect();
            e.items.insert(0, ExecItem { node: 0, work, missing: Vec::new(), enabled: true });
        }
        self.execs.insert(exec, e);
    }

    /// A conditional node's body graphs, which the driver made with it: recap learns them here,
    /// empty, and the node refers to them.
    pub fn conditional_bodies(&mut self, node: usize, bodies: &[usize]) {
        for &b in bodies {
            self.add_graph(b, Graph::default());
        }
        if let Some(NodeRec { node: Node::Conditional { bodies: known, .. }, .. }) = self.node_mut(node) {
            *known = bodies.to_vec();
        }
    }

    pub fn destroy_exec(&mut self, exec: usize) {
        self.execs.remove(&exec);
    }

    /// A node of `exec` changed (`cuGraphExec*SetParams`).
    pub fn set_exec_node(&mut self, exec: usize, node: usize, new: Node) {
        let (work, missing) = self.expand(&NodeRec::new(0, new));
        let Some(e) = self.execs.get_mut(&exec) else { return };
        match e.items.iter_mut().find(|i| i.node == node && node != 0) {
            Some(item) => {
                item.work = work;
                item.missing = missing;
            }
            None => e.missing.push("an executable graph's node changed that recap cannot place".into()),
        }
    }

    pub fn set_enabled(&mut self, exec: usize, node: usize, enabled: bool) {
        let Some(e) = self.execs.get_mut(&exec) else { return };
        match e.items.iter_mut().find(|i| i.node == node && node != 0) {
            Some(item) => item.enabled = enabled,
            None => e.missing.push("an executable graph's node was enabled or disabled that recap cannot place".into()),
        }
    }

    /// What a launch of `exec` issues, and what of it is missing.
    pub fn launch(&self, exec: usize) -> (Vec<Work>, Vec<String>) {
        let Some(e) = self.execs.get(&exec) else {
            return (Vec::new(), vec!["a CUDA graph launched that recap did not see instantiated".into()]);
        };
        let mut missing = e.missing.clone();
        let mut work = Vec::new();
        for item in e.items.iter().filter(|i| i.enabled) {
            work.extend(item.work.iter().cloned());
            missing.extend(item.missing.iter().cloned());
        }
        (work, missing)
    }
}

// ---- nodes from the driver API's parameter structures ----

impl State {
    /// A kernel node's launch, its parameters packed now.
    ///
    /// # Safety
    /// `p`'s `kernelParams` and `extra` are as the program passed them to the driver.
    pub unsafe fn kernel_node(&mut self, p: &KernelNode) -> Node {
        let func = p.handle() as usize;
        // SAFETY: the caller's contract.
        match unsafe { self.pack_params(func, p.kernel_params as *mut _, p.extra as *mut _) } {
            Some(params) => Node::Work(vec![Work::Launch {
                func,
                grid: p.grid,
                block: p.block,
                shared: p.shared,
                params,
                attrs: LaunchAttrs::default(),
            }]),
            None => Node::Missing("a kernel node whose parameters recap cannot lay out".into()),
        }
    }

    /// A memcpy node's copies. Host memory is read when the graph runs.
    pub fn memcpy_node(&self, p: &Memcpy3D) -> Node {
        let runs = match p.runs() {
            Ok(r) => r,
            Err(why) => return Node::Missing(format!("a memcpy node: {why}")),
        };
        Node::Work(runs.iter().filter_map(|r| self.copy_run(r)).collect())
    }

    fn copy_run(&self, r: &CopyRun) -> Option<Work> {
        let on_device = |memory: u32, addr: u64| match memory {
            memory_type::DEVICE => true,
            memory_type::HOST => false,
            _ => self.resolve(addr).is_some(),
        };
        match (on_device(r.src.memory, r.src.addr), on_device(r.dst.memory, r.dst.addr)) {
            (true, true) => Some(Work::Copy { dst: r.dst.addr, src: r.src.addr, len: r.len }),
            (false, true) => Some(Work::Upload {
                dst: r.dst.addr,
                data: HostData::At { ptr: r.src.addr as usize, len: r.len as usize },
            }),
            (true, false) => Some(Work::Download { src: r.src.addr, len: r.len }),
            (false, false) => None,
        }
    }

    pub fn memset_node(&self, p: &MemsetNode) -> Node {
        match p.runs() {
            Ok(runs) => Node::Work(
                runs.iter()
                    .map(|r| Work::Memset { dst: r.dst, width: r.width, pattern: r.pattern, count: r.count })
                    .collect(),
            ),
            Err(why) => Node::Missing(format!("a memset node: {why}")),
        }
    }

    /// A node from `CUgraphNodeParams` (`cuGraphAddNode`, `cuGraphNodeSetParams`).
    ///
    /// # Safety
    /// As [`State::kernel_node`] for a kernel node.
    pub unsafe fn generic_node(&mut self, p: &NodeParams) -> Node {
        match p {
            // SAFETY: the caller's contract.
            NodeParams::Kernel(k) => unsafe { self.kernel_node(k) },
            NodeParams::Memcpy(m) => self.memcpy_node(m),
            NodeParams::Memset(m) => self.memset_node(m),
            NodeParams::Child { graph } => self.graphs.snapshot(*graph as usize),
            NodeParams::Empty
            | NodeParams::WaitEvent { .. }
            | NodeParams::EventRecord { .. }
            | NodeParams::MemAlloc { .. }
            | NodeParams::MemFree { .. } => Node::Order,
            NodeParams::Conditional { handle, kind, size } => match Kind::of(*kind, *size) {
                Some(kind) => Node::Conditional { handle: *handle, kind, bodies: Vec::new() },
                None => Node::Missing(format!(
                    "a conditional node ({} with {size} bodies): only IF and WHILE with one body become if and while ops",
                    conditional_name(*kind)
                )),
            },
            NodeParams::Other(t) => unreplayed(*t),
        }
    }

    pub fn child_node(&self, graph: usize) -> Node {
        self.graphs.snapshot(graph)
    }

    /// A node was added: counted, and kept in its graph.
    pub fn node_added(&mut self, graph: usize, handle: usize, node: Node, deps: &[usize], kind: u32) {
        self.report.count(&format!("graph node added: {}", cuda_graph::node_type::name(kind)));
        self.graphs.add_node(graph, handle, node, deps);
    }

    /// A node's parameters changed in its graph.
    pub fn node_changed(&mut self, handle: usize, node: Node) {
        if !self.graphs.set_node(handle, node) {
            self.report.note("a graph node recap did not see added changed its parameters");
        }
    }

    /// `cuGraphAddMemAllocNode` (or `cuGraphAddNode` of one): the memory it reserves is an
    /// allocation like any other, at an address fixed for the graph's life.
    pub fn graph_memory(&mut self, dptr: u64, size: u64) {
        self.add_alloc(dptr, size, crate::record::GRAPH_MEMORY);
    }
}

/// What a node of type `t` that recap does not replay becomes.
pub fn unreplayed(t: u32) -> Node {
    Node::Missing(format!("a {} node: not replayed", cuda_graph::node_type::name(t)))
}

fn conditional_name(kind: u32) -> &'static str {
    match kind {
        cuda_graph::conditional_type::IF => "IF",
        cuda_graph::conditional_type::WHILE => "WHILE",
        cuda_graph::conditional_type::SWITCH => "SWITCH",
        _ => "unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memset(dst: u64) -> Node {
        Node::Work(vec![Work::Memset { dst, width: 1, pattern: 0, count: 1 }])
    }

    fn dsts(work: &[Work]) -> Vec<u64> {
        work.iter().map(|w| if let Work::Memset { dst, .. } = w { *dst } else { 0 }).collect()
    }

    #[test]
    fn an_instantiated_graph_runs_its_nodes_after_their_dependencies_and_keeps_what_is_missing() {
        let mut book = GraphBook::default();
        book.add_graph(1, Graph::default());
        book.add_node(1, 10, memset(100), &[]);
        book.add_node(1, 11, memset(200), &[]);
        book.add_node(1, 12, Node::Missing("a host node: not replayed".into()), &[10]);
        // Added before the node it depends on exists: an edge added afterwards orders it.
        book.add_node(1, 13, memset(300), &[]);
        assert!(book.edges(1, &[11], &[13], true));
        book.edges(1, &[13], &[10], true);
        book.instantiate(7, 1);
        let (work, missing) = book.launch(7);
        assert_eq!(dsts(&work), [200, 300, 100]);
        assert_eq!(missing, ["a host node: not replayed"]);

        // The executable graph keeps its own copy: a change to the graph after instantiation is
        // not in it, a change to the executable graph is.
        book.set_node(10, memset(111));
        book.set_exec_node(7, 11, memset(222));
        book.set_enabled(7, 13, false);
        assert_eq!(dsts(&book.launch(7).0), [222, 100]);
        book.destroy_exec(7);
        assert!(book.launch(7).1[0].contains("did not see instantiated"));
    }

    #[test]
    fn a_child_graph_is_copied_when_added_and_a_cycle_is_missing_work() {
        let mut book = GraphBook::default();
        book.add_node(2, 20, memset(1), &[]);
        let child = book.snapshot(2);
        book.add_node(2, 21, memset(2), &[20]);
        book.add_node(3, 30, child, &[]);
        book.instantiate(8, 3);
        assert_eq!(dsts(&book.launch(8).0), [1]);

        book.edges(2, &[21], &[20], true);
        book.instantiate(9, 2);
        let (work, missing) = book.launch(9);
        assert!(work.is_empty() && missing[0].contains("cycle"), "{missing:?}");
    }
}

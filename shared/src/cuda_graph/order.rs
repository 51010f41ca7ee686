//! The order a CUDA graph's nodes run in when work is issued one op at a time, as both recap's
//! interposer (recording what a graph launch issues) and the CPU driver (running it) must see it.
//!
//! A [`Graph`] is its nodes in the order they were added, each with the nodes it depends on; what a
//! node does is each side's own (`N`). Fixing a graph for a run ([`expand`]) puts every node after
//! its dependencies ([`run_order`]), a child graph's nodes in their own order in its node's place,
//! and an IF or WHILE node's body graph as a nested list ([`Run::Conditional`]) that runs under its
//! condition. Both sides take this one model, so a graph recorded by the interposer and the same
//! graph run by the CPU driver issue their work in the same order.

/// How deep child graphs and conditional bodies may nest before a graph is refused (the archive's
/// own limit on nested bodies).
pub const MAX_DEPTH: usize = 64;

/// A graph's nodes in the order they were added, with their dependencies.
#[derive(Clone, Debug)]
pub struct Graph<N> {
    nodes: Vec<Slot<N>>,
}

#[derive(Clone, Debug)]
struct Slot<N> {
    node: N,
    /// Indices of the nodes this one depends on, each once.
    deps: Vec<usize>,
    /// Destroyed: kept so that indices stay valid, it runs nothing and orders nothing.
    gone: bool,
}

impl<N> Default for Graph<N> {
    fn default() -> Self {
        Graph { nodes: Vec::new() }
    }
}

impl<N> Graph<N> {
    /// Adds `node` after the nodes `deps` (indices of this graph's nodes); gives its index.
    pub fn add(&mut self, node: N, deps: Vec<usize>) -> usize {
        let mut slot = Slot { node, deps: Vec::with_capacity(deps.len()), gone: false };
        for d in deps {
            if !slot.deps.contains(&d) {
                slot.deps.push(d);
            }
        }
        self.nodes.push(slot);
        self.nodes.len() - 1
    }

    /// How many nodes were added (destroyed ones included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `index`, destroyed or not.
    pub fn node(&self, index: usize) -> Option<&N> {
        self.nodes.get(index).map(|s| &s.node)
    }

    pub fn node_mut(&mut self, index: usize) -> Option<&mut N> {
        self.nodes.get_mut(index).map(|s| &mut s.node)
    }

    /// Every node, destroyed ones included, in the order they were added.
    pub fn nodes(&self) -> impl Iterator<Item = &N> {
        self.nodes.iter().map(|s| &s.node)
    }

    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut N> {
        self.nodes.iter_mut().map(|s| &mut s.node)
    }

    /// Adds the edge `from -> to` (once); `false` when either is not a node of this graph.
    pub fn add_edge(&mut self, from: usize, to: usize) -> bool {
        if from >= self.nodes.len() {
            return false;
        }
        let Some(slot) = self.nodes.get_mut(to) else { return false };
        if !slot.deps.contains(&from) {
            slot.deps.push(from);
        }
        true
    }

    /// Removes the edge `from -> to`, where there is one.
    pub fn remove_edge(&mut self, from: usize, to: usize) {
        if let Some(slot) = self.nodes.get_mut(to) {
            slot.deps.retain(|&d| d != from);
        }
    }

    /// Destroys node `index`: it runs nothing, and the nodes that depended on it no longer do.
    pub fn destroy(&mut self, index: usize) {
        let Some(slot) = self.nodes.get_mut(index) else { return };
        slot.gone = true;
        for s in &mut self.nodes {
            s.deps.retain(|&d| d != index);
        }
    }

    /// The indices of the nodes that run, in [`run_order`].
    pub fn order(&self) -> Result<Vec<usize>, OrderError> {
        let deps: Vec<Vec<usize>> = self.nodes.iter().map(|s| s.deps.clone()).collect();
        let order = run_order(&deps).ok_or(OrderError::Cycle)?;
        Ok(order.into_iter().filter(|&i| !self.nodes[i].gone).collect())
    }
}

/// The order in which a graph's nodes run when issued one at a time: every node after its
/// dependencies, and among nodes that are ready, the one added first (so a graph built as a chain
/// runs in the order it was built, and two runs of one graph issue the same order). `deps[i]` lists
/// the nodes node `i` depends on. `None` when the dependencies form a cycle (the driver refuses to
/// instantiate such a graph).
pub fn run_order(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = deps.len();
    let mut waiting: Vec<usize> = vec![0; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            if d >= n {
                return None;
            }
            waiting[i] += 1;
            dependents[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert(j);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// An IF or WHILE conditional node with one body: the kinds recap runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conditional {
    /// The body runs once when the condition is set.
    If,
    /// The body runs for as long as the condition is set, tested before each pass.
    While,
}

impl Conditional {
    /// The kind of a conditional node of `CUgraphConditionalNodeType` `kind` with `size` bodies;
    /// `None` for what recap does not run (SWITCH, several bodies).
    pub fn of(kind: u32, size: u32) -> Option<Conditional> {
        match (kind, size) {
            (super::conditional_type::IF, 1) => Some(Conditional::If),
            (super::conditional_type::WHILE, 1) => Some(Conditional::While),
            _ => None,
        }
    }

    /// Its `CUgraphConditionalNodeType`.
    pub fn node_type(self) -> u32 {
        match self {
            Conditional::If => super::conditional_type::IF,
            Conditional::While => super::conditional_type::WHILE,
        }
    }
}

/// What one node is to the run, as the side that knows the node says.
pub enum Part<'g, N, W> {
    /// Work of its own, issued in the node's place.
    Work(W),
    /// Nothing to issue: a node that only orders others (empty, event), or one the side keeps
    /// account of itself.
    Nothing,
    /// A graph whose nodes run in their own order in this node's place (a child graph node).
    Inline(&'g Graph<N>),
    /// A body graph that runs under the `u32` condition at `handle`.
    Conditional { kind: Conditional, handle: u64, body: &'g Graph<N> },
}

/// A graph fixed for a run: work in the order it is issued, conditional bodies nested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run<W> {
    Work(W),
    Conditional { kind: Conditional, handle: u64, body: Vec<Run<W>> },
}

/// Why a graph cannot be fixed for a run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("a graph whose dependencies form a cycle")]
    Cycle,
    #[error("child graphs or conditional bodies nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Why [`expand`] stopped: the graph's order, or the side's own error about a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError<E> {
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error("{0}")]
    Node(E),
}

/// `graph` fixed for a run, `depth` levels below the graph launched: its nodes in [`Graph::order`],
/// each as `part` says (`part` sees every node that runs, in that order, nested ones included).
pub fn expand<'g, N, W, E>(
    graph: &'g Graph<N>,
    depth: usize,
    part: &mut impl FnMut(&'g N) -> Result<Part<'g, N, W>, E>,
) -> Result<Vec<Run<W>>, ExpandError<E>> {
    let mut out = Vec::new();
    for i in graph.order()? {
        expand_node(&graph.nodes[i].node, depth, part, &mut out)?;
    }
    Ok(out)
}

/// One node of a graph `depth` levels below the graph launched, fixed for a run, onto `out`.
pub fn expand_node<'g, N, W, E>(
    node: &'g N,
    depth: usize,
    part: &mut impl FnMut(&'g N) -> Result<Part<'g, N, W>, E>,
    out: &mut Vec<Run<W>>,
) -> Result<(), ExpandError<E>> {
    if depth >= MAX_DEPTH {
        return Err(OrderError::TooDeep.into());
    }
    match part(node).map_err(ExpandError::Node)? {
        Part::Work(w) => out.push(Run::Work(w)),
        Part::Nothing => {}
        Part::Inline(g) => out.extend(expand(g, depth + 1, part)?),
        Part::Conditional { kind, handle, body } => {
            out.push(Run::Conditional { kind, handle, body: expand(body, depth + 1, part)? })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_order_follows_dependencies_then_creation_order() {
        // 0 -> 2, 1 -> 2, 3 depends on nothing but was added last; 2 before 3 would be wrong only
        // if 3 depended on it, so ties go to the node added first.
        assert_eq!(run_order(&[vec![], vec![], vec![0, 1], vec![]]), Some(vec![0, 1, 2, 3]));
        assert_eq!(run_order(&[vec![1], vec![]]), Some(vec![1, 0]));
        assert_eq!(run_order(&[vec![1], vec![0]]), None);
        assert_eq!(run_order(&[vec![5]]), None);
    }

    /// A node of the test graphs: work by number (0 orders only), a child graph, or a WHILE over a
    /// body.
    enum T {
        W(u32),
        Child(Graph<T>),
        Loop(Graph<T>),
    }

    fn parts(t: &T) -> Result<Part<'_, T, u32>, ()> {
        Ok(match t {
            T::W(0) => Part::Nothing,
            T::W(n) => Part::Work(*n),
            T::Child(g) => Part::Inline(g),
            T::Loop(g) => Part::Conditional { kind: Conditional::While, handle: 7, body: g },
        })
    }

    fn run(g: &Graph<T>) -> Vec<Run<u32>> {
        expand(g, 0, &mut parts).unwrap()
    }

    fn works(ns: &[u32]) -> Vec<Run<u32>> {
        ns.iter().map(|&n| Run::Work(n)).collect()
    }

    #[test]
    fn ready_nodes_run_in_the_order_they_were_added_and_every_run_is_the_same() {
        // A diamond added out of order: 3 waits for 1 and 2, 1 and 2 for 4; 5 depends on
        // nothing. Among ready nodes the one added first goes first.
        let mut g = Graph::default();
        let n5 = g.add(T::W(5), vec![]);
        let n4 = g.add(T::W(4), vec![]);
        let n2 = g.add(T::W(2), vec![n4]);
        let n1 = g.add(T::W(1), vec![n4, n4]);
        let n3 = g.add(T::W(3), vec![n1, n2]);
        assert_eq!((n5, n3), (0, 4));
        assert_eq!(g.order().unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(run(&g), works(&[5, 4, 2, 1, 3]));
        // An edge added afterwards holds 5 until 3 has run.
        assert!(g.add_edge(n3, n5));
        assert_eq!(run(&g), works(&[4, 2, 1, 3, 5]));
        // An edge to or from a node the graph does not have changes nothing.
        assert!(!g.add_edge(n3, 99) && !g.add_edge(99, n3));
        assert_eq!(run(&g), works(&[4, 2, 1, 3, 5]));
        g.remove_edge(n3, n5);
        assert_eq!(run(&g), works(&[5, 4, 2, 1, 3]));
    }

    #[test]
    fn a_child_graph_runs_in_its_nodes_place_in_its_own_order() {
        let mut child = Graph::default();
        let c2 = child.add(T::W(3), vec![]);
        let c1 = child.add(T::W(2), vec![]);
        assert!(child.add_edge(c1, c2));
        let mut g = Graph::default();
        let last = g.add(T::W(9), vec![]);
        let first = g.add(T::W(1), vec![]);
        let kid = g.add(T::Child(child), vec![first]);
        g.add(T::W(0), vec![]);
        assert!(g.add_edge(kid, last));
        assert_eq!(run(&g), works(&[1, 2, 3, 9]));
    }

    #[test]
    fn a_conditional_body_is_nested_under_its_condition_in_its_own_order() {
        let mut inner = Graph::default();
        inner.add(T::W(7), vec![]);
        let mut body = Graph::default();
        let b6 = body.add(T::W(6), vec![]);
        let b5 = body.add(T::W(5), vec![]);
        body.add(T::Loop(inner), vec![b6]);
        assert!(body.add_edge(b5, b6));
        let mut g = Graph::default();
        let before = g.add(T::W(1), vec![]);
        g.add(T::Loop(body), vec![before]);
        let nested = Run::Conditional { kind: Conditional::While, handle: 7, body: works(&[7]) };
        let outer =
            Run::Conditional { kind: Conditional::While, handle: 7, body: vec![Run::Work(5), Run::Work(6), nested] };
        assert_eq!(run(&g), [Run::Work(1), outer]);
    }

    #[test]
    fn a_destroyed_node_runs_nothing_and_orders_nothing() {
        // 1 was added first but waits for the middle node, which waits for 3.
        let mut g = Graph::default();
        let n1 = g.add(T::W(1), vec![]);
        let middle = g.add(T::W(2), vec![]);
        let n3 = g.add(T::W(3), vec![]);
        assert!(g.add_edge(middle, n1) && g.add_edge(n3, middle));
        assert_eq!(run(&g), works(&[3, 2, 1]));
        g.destroy(middle);
        assert_eq!(g.order().unwrap(), [0, 2]);
        assert_eq!(run(&g), works(&[1, 3]));
        assert_eq!(g.len(), 3, "indices of the other nodes stay valid");
        g.destroy(99);
        assert_eq!(run(&g), works(&[1, 3]));
    }

    #[test]
    fn a_cycle_is_refused_with_its_reason_and_an_edge_removed_breaks_it() {
        let mut g = Graph::default();
        let a = g.add(T::W(1), vec![]);
        let b = g.add(T::W(2), vec![a]);
        g.add_edge(b, a);
        assert_eq!(g.order(), Err(OrderError::Cycle));
        assert_eq!(expand(&g, 0, &mut parts), Err(ExpandError::Order(OrderError::Cycle)));
        assert_eq!(OrderError::Cycle.to_string(), "a graph whose dependencies form a cycle");
        // A cycle inside a child graph refuses the graph holding it.
        let mut outer = Graph::default();
        outer.add(T::W(3), vec![]);
        outer.add(T::Child(g), vec![]);
        assert_eq!(expand(&outer, 0, &mut parts), Err(ExpandError::Order(OrderError::Cycle)));
        let T::Child(g) = outer.node_mut(1).unwrap() else { unreachable!("node 1 is the child") };
        g.remove_edge(b, a);
        assert_eq!(run(&outer), works(&[3, 1, 2]));
    }

    /// A graph of one node `W(1)` under `levels` child graphs (`wrap` makes each level).
    fn nested(levels: usize, wrap: fn(Graph<T>) -> T) -> Graph<T> {
        let mut deep = Graph::default();
        deep.add(T::W(1), vec![]);
        for _ in 0..levels {
            let mut outer = Graph::default();
            outer.add(wrap(deep), vec![]);
            deep = outer;
        }
        deep
    }

    #[test]
    fn nesting_past_the_limit_is_refused_and_up_to_it_runs() {
        // The innermost node of `MAX_DEPTH - 1` levels sits at depth MAX_DEPTH - 1: the last that runs.
        assert_eq!(run(&nested(MAX_DEPTH - 1, T::Child)), works(&[1]));
        for wrap in [T::Child as fn(Graph<T>) -> T, T::Loop] {
            let refused = expand(&nested(MAX_DEPTH, wrap), 0, &mut parts);
            assert_eq!(refused, Err(ExpandError::Order(OrderError::TooDeep)));
        }
        assert_eq!(
            OrderError::TooDeep.to_string(),
            format!("child graphs or conditional bodies nested deeper than {MAX_DEPTH}")
        );
    }

    #[test]
    fn a_sides_own_error_about_a_node_stops_the_run_and_is_its_message() {
        let mut g = Graph::default();
        g.add(T::W(1), vec![]);
        g.add(T::W(13), vec![]);
        fn refuse_13(t: &T) -> Result<Part<'_, T, u32>, &'static str> {
            match t {
                T::W(13) => Err("node 13 is refused"),
                t => Ok(parts(t).unwrap_or(Part::Nothing)),
            }
        }
        let err = expand(&g, 0, &mut refuse_13).unwrap_err();
        assert_eq!(err, ExpandError::Node("node 13 is refused"));
        assert_eq!(err.to_string(), "node 13 is refused");
    }

    #[test]
    fn only_if_and_while_with_one_body_are_conditionals_recap_runs() {
        use crate::cuda_graph::conditional_type::{IF, SWITCH, WHILE};
        assert_eq!(Conditional::of(IF, 1), Some(Conditional::If));
        assert_eq!(Conditional::of(WHILE, 1), Some(Conditional::While));
        assert_eq!(Conditional::of(WHILE, 2), None);
        assert_eq!(Conditional::of(SWITCH, 1), None);
        assert_eq!(Conditional::of(IF, 0), None);
        for kind in [Conditional::If, Conditional::While] {
            assert_eq!(Conditional::of(kind.node_type(), 1), Some(kind));
        }
    }
}

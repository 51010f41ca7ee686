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

    /// A node of the test graphs: work by number, a child graph, or a WHILE over a body.
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

    #[test]
    fn a_graph_runs_children_in_place_and_bodies_nested_and_destroyed_nodes_not_at_all() {
        let mut body = Graph::default();
        body.add(T::W(5), vec![]);
        let mut child = Graph::default();
        let c2 = child.add(T::W(3), vec![]);
        let c1 = child.add(T::W(2), vec![]);
        assert!(child.add_edge(c1, c2));
        let mut g = Graph::default();
        let last = g.add(T::W(9), vec![]);
        let first = g.add(T::W(1), vec![]);
        let kid = g.add(T::Child(child), vec![first]);
        let gone = g.add(T::W(8), vec![kid]);
        g.add(T::W(0), vec![]);
        g.add(T::Loop(body), vec![gone]);
        assert!(g.add_edge(kid, last));
        assert!(!g.add_edge(kid, 99));
        g.destroy(gone);
        let run = expand(&g, 0, &mut parts).unwrap();
        let w = Run::Work;
        let body = vec![w(5)];
        assert_eq!(run, [w(1), w(2), w(3), w(9), Run::Conditional { kind: Conditional::While, handle: 7, body }]);
    }

    #[test]
    fn a_cycle_and_nesting_past_the_limit_are_refused() {
        let mut g = Graph::default();
        let a = g.add(T::W(1), vec![]);
        let b = g.add(T::W(2), vec![a]);
        g.add_edge(b, a);
        assert_eq!(expand(&g, 0, &mut parts), Err(ExpandError::Order(OrderError::Cycle)));
        g.remove_edge(b, a);
        assert_eq!(expand(&g, 0, &mut parts).unwrap(), [Run::Work(1), Run::Work(2)]);

        let mut deep = Graph::default();
        deep.add(T::W(1), vec![]);
        for _ in 0..MAX_DEPTH {
            let mut outer = Graph::default();
            outer.add(T::Child(deep), vec![]);
            deep = outer;
        }
        assert_eq!(expand(&deep, 0, &mut parts), Err(ExpandError::Order(OrderError::TooDeep)));
    }
}

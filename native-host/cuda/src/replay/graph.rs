//! Graph mode: the archive's plan built into ONE CUDA graph with the explicit node API. Every op
//! becomes a node, edges exist only where the plan finds a data hazard, while/if ops become
//! conditional nodes whose handle recap's condition kernel sets, and kernels may follow kernels
//! through programmatic edges (PDL, and a WHILE body into its condition kernel).

use std::collections::HashMap;

use cudarc::driver::sys::{self, CUgraph, CUgraphNode};
use shared::archive::OpId;
use shared::plan::Dag;

use super::step::{linear_copy, Args, Control, Fill, KernelStep, Mem, Step};
use super::{CudaError, CudaReplay};
use crate::driver::call;

/// The instantiated graph and the node of every launch in it.
pub(super) struct GraphState {
    pub(super) graph: CUgraph,
    pub(super) exec: sys::CUgraphExec,
    pub(super) kernel_nodes: HashMap<OpId, CUgraphNode>,
    pub(super) node_count: usize,
    pub(super) edge_count: usize,
}

impl CudaReplay {
    pub(super) fn build_graph(&mut self) -> Result<(CUgraph, HashMap<OpId, CUgraphNode>, usize, usize), CudaError> {
        let mut graph = std::ptr::null_mut();
        call!(cuGraphCreate(&mut graph, 0))?;
        match self.build_into(graph, &[]) {
            Ok(b) => Ok((graph, b.kernel_nodes, b.nodes, b.edges)),
            Err(e) => {
                call!(cuGraphDestroy(graph)).ok();
                Err(e)
            }
        }
    }

    /// Adds the archive's ops to `graph`, the top level's first ops after the nodes `entry`
    /// (the serving path's copies in, serve.rs).
    pub(super) fn build_into(&mut self, graph: CUgraph, entry: &[CUgraphNode]) -> Result<Built, CudaError> {
        let mut b =
            GraphBuilder { me: self, kernel_nodes: HashMap::new(), kernel_slots: HashMap::new(), nodes: 0, edges: 0 };
        let top = b.me.plan.dags[0].clone();
        let exits = b.add_scope(graph, &top, entry)?;
        // The top level's last nodes: those no other placed op of it follows.
        let followed: std::collections::HashSet<OpId> =
            top.nodes.iter().filter(|o| exits.contains_key(o)).flat_map(|&o| top.preds(o)).collect();
        let sinks = top.nodes.iter().filter(|o| !followed.contains(o)).filter_map(|o| exits.get(o).copied()).collect();
        let GraphBuilder { kernel_nodes, nodes, edges, .. } = b;
        Ok(Built { kernel_nodes, sinks, nodes, edges })
    }
}

/// The archive's ops added to a graph.
pub(super) struct Built {
    /// The node of every launch.
    pub(super) kernel_nodes: HashMap<OpId, CUgraphNode>,
    /// The top level's last nodes, after which everything the archive does is done.
    pub(super) sinks: Vec<CUgraphNode>,
    pub(super) nodes: usize,
    pub(super) edges: usize,
}

/// Adds one DAG (the top level or a body) to a CUDA graph.
struct GraphBuilder<'r> {
    me: &'r mut CudaReplay,
    kernel_nodes: HashMap<OpId, CUgraphNode>,
    /// The slot of every kernel node added: programmatic edges join kernels of one GPU only.
    kernel_slots: HashMap<CUgraphNode, usize>,
    nodes: usize,
    edges: usize,
}

impl GraphBuilder<'_> {
    /// Adds `dag`'s ops to `graph`, those that follow none of them after `entry`; returns each
    /// placed op's exit node.
    fn add_scope(
        &mut self,
        graph: CUgraph,
        dag: &Dag,
        entry: &[CUgraphNode],
    ) -> Result<HashMap<OpId, CUgraphNode>, CudaError> {
        let mut exits: HashMap<OpId, CUgraphNode> = HashMap::new();
        let mut last: Option<CUgraphNode> = None;
        for &op in &dag.nodes {
            let mut deps: Vec<CUgraphNode> = if self.me.options.serial {
                last.into_iter().collect()
            } else {
                dag.preds(op).filter_map(|p| exits.get(&p).copied()).collect()
            };
            if deps.is_empty() {
                deps = entry.to_vec();
            }
            let Some(exit) = self.add_op(graph, op, &deps).map_err(|e| match e {
                CudaError::Driver(error) => self.me.op_error(op, error),
                other => other,
            })?
            else {
                continue;
            };
            exits.insert(op, exit);
            last = Some(exit);
        }
        Ok(exits)
    }

    fn count(&mut self, deps: &[CUgraphNode]) {
        self.nodes += 1;
        self.edges += deps.len();
    }

    fn add_kernel(
        &mut self,
        graph: CUgraph,
        k: &mut KernelStep,
        deps: &[CUgraphNode],
    ) -> Result<CUgraphNode, CudaError> {
        let mut args = k.arg_pointers();
        let p = k.node_params(&mut args, self.me.slots[k.slot].device.context());
        let mut node = std::ptr::null_mut();
        call!(cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &p))?;
        for a in &k.attrs {
            call!(cuGraphKernelNodeSetAttribute(node, a.id, &a.value))?;
        }
        self.count(deps);
        self.kernel_slots.insert(node, k.slot);
        Ok(node)
    }

    /// Joins `to` after `from` through programmatic edges (the kernel `to` waits for their writes
    /// with `griddepcontrol.wait`), falling back to ordinary edges where the driver refuses them.
    /// Gives how many programmatic edges were added.
    fn join_programmatic(
        &mut self,
        graph: CUgraph,
        from: &[CUgraphNode],
        to: CUgraphNode,
        port: u32,
    ) -> Result<usize, CudaError> {
        if from.is_empty() {
            return Ok(0);
        }
        let edge = sys::CUgraphEdgeData {
            from_port: port as u8,
            to_port: 0,
            type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
            reserved: [0; 5],
        };
        let targets = vec![to; from.len()];
        let data = vec![edge; from.len()];
        self.edges += from.len();
        match call!(cuGraphAddDependencies_v2(graph, from.as_ptr(), targets.as_ptr(), data.as_ptr(), from.len())) {
            Ok(()) => Ok(from.len()),
            Err(_) => {
                call!(cuGraphAddDependencies(graph, from.as_ptr(), targets.as_ptr(), from.len()))?;
                Ok(0)
            }
        }
    }

    /// `deps` split into kernel nodes on `slot`'s GPU (which a kernel there may follow through
    /// programmatic edges) and the rest.
    fn kernels_and_rest(&self, deps: &[CUgraphNode], slot: usize) -> (Vec<CUgraphNode>, Vec<CUgraphNode>) {
        deps.iter().partition(|&n| self.kernel_slots.get(n) == Some(&slot))
    }

    /// Adds recap's condition kernel after a WHILE body's `writers`: through programmatic edges
    /// from kernel nodes where the device has them (the kernel waits for their writes with
    /// `griddepcontrol.wait`), through ordinary edges otherwise.
    fn add_tail(&mut self, graph: CUgraph, tail: &mut KernelStep, writers: &[CUgraphNode]) -> Result<(), CudaError> {
        let (kernels, rest) = if self.me.programmatic {
            self.kernels_and_rest(writers, tail.slot)
        } else {
            (Vec::new(), writers.to_vec())
        };
        let node = self.add_kernel(graph, tail, &rest)?;
        let added = self.join_programmatic(graph, &kernels, node, self.me.programmatic_port)?;
        self.me.programmatic_edges += added;
        Ok(())
    }

    fn add_op(&mut self, graph: CUgraph, op: OpId, deps: &[CUgraphNode]) -> Result<Option<CUgraphNode>, CudaError> {
        let slot = self.me.op_slots[op as usize];
        // The context every node of this op runs in: its GPU's.
        let ctx = self.me.slots[slot].device.context();
        let step = self.me.steps[op as usize].clone();
        let node = match step {
            Step::Kernel(mut k) if self.me.pdl && k.waits => {
                let (kernels, rest) = self.kernels_and_rest(deps, k.slot);
                let node = self.add_kernel(graph, &mut k, &rest)?;
                let port = if self.me.options.pdl_from_launch {
                    sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
                } else {
                    sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
                };
                let added = self.join_programmatic(graph, &kernels, node, port)?;
                self.me.dependent_edges += added;
                self.kernel_nodes.insert(op, node);
                node
            }
            Step::Kernel(mut k) => {
                let node = self.add_kernel(graph, &mut k, deps)?;
                self.kernel_nodes.insert(op, node);
                node
            }
            Step::Copy { src, dst, len, .. } => {
                let p = linear_copy(Mem::Device(src), Mem::Device(dst), len);
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddMemcpyNode(&mut node, graph, deps.as_ptr(), deps.len(), &p, ctx))?;
                self.count(deps);
                node
            }
            Step::Memset { dst, fill, .. } => match fill {
                Fill::Memset { elem, value, count } => {
                    let p = sys::CUDA_MEMSET_NODE_PARAMS {
                        dst,
                        pitch: 0,
                        value,
                        elementSize: elem,
                        width: count as usize,
                        height: 1,
                    };
                    let mut node = std::ptr::null_mut();
                    call!(cuGraphAddMemsetNode(&mut node, graph, deps.as_ptr(), deps.len(), &p, ctx))?;
                    self.count(deps);
                    node
                }
                other => {
                    let mut k = self.me.fill_step(slot, dst, other);
                    self.add_kernel(graph, &mut k, deps)?
                }
            },
            Step::Barrier => {
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()))?;
                self.count(deps);
                node
            }
            Step::Skip => return Ok(None),
            Step::Control { kind, cond, cond_span, counter, max_iterations, .. } => {
                let set = (self.me.slots[slot].set_condition.expect("loaded for archives with loops"), slot);
                let mut handle: sys::CUgraphConditionalHandle = 0;
                call!(cuGraphConditionalHandleCreate(&mut handle, graph, ctx, 0, 0))?;
                let mut pre =
                    Args::default().u64(handle).u64(cond).u64(counter).u32(max_iterations).u32(1).launch(set, 1, 1);
                let pre_node = self.add_kernel(graph, &mut pre, deps)?;

                // SAFETY: plain data (a zeroed union is a valid empty parameter block).
                let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
                params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
                params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
                    handle,
                    type_: match kind {
                        Control::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
                        Control::If => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
                    },
                    size: 1,
                    phGraph_out: std::ptr::null_mut(),
                    ctx,
                };
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddNode_v2(&mut node, graph, &pre_node, std::ptr::null(), 1, &mut params))?;
                self.count(&[pre_node]);
                // SAFETY: the driver filled `phGraph_out` with the node's one body graph.
                let body_graph = unsafe { *params.__bindgen_anon_1.conditional.phGraph_out };
                let body_dag = self.me.plan.body(op).cloned().expect("every while/if has a body DAG");
                let body_exits = self.add_scope(body_graph, &body_dag, &[])?;
                if kind == Control::While {
                    // The next iteration's condition: after every body op that writes the word.
                    let writers: Vec<CUgraphNode> = if self.me.options.serial {
                        body_dag.nodes.iter().rev().find_map(|o| body_exits.get(o).copied()).into_iter().collect()
                    } else {
                        body_dag
                            .nodes
                            .iter()
                            .filter(|o| self.me.plan.access[**o as usize].writes.iter().any(|w| w.overlaps(&cond_span)))
                            .filter_map(|o| body_exits.get(o).copied())
                            .collect()
                    };
                    let mut tail =
                        Args::default().u64(handle).u64(cond).u64(counter).u32(max_iterations).u32(0).launch(set, 1, 1);
                    self.add_tail(body_graph, &mut tail, &writers)?;
                }
                node
            }
        };
        Ok(Some(node))
    }
}

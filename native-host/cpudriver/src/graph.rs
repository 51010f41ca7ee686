//! CUDA graphs built node by node: kernel, memcpy, memset, empty, event, child graph and conditional nodes,
//! their dependencies, instantiation, the executable graph's kernel node updates, and launches.
//!
//! A graph is [`shared::cuda_graph::Graph`], the model recap's interposer records graphs in too: a
//! list of nodes with the indices they depend on. Instantiating it fixes the nodes' work with
//! [`shared::cuda_graph::expand`] (every node after its dependencies, ties in the order the nodes
//! were added, conditional bodies nested), the same order the interposer records; a launch runs
//! that list at once, in call order, like every other piece of work here. Kernel parameters are
//! packed when a node is made or changed (the real driver copies the values then); host memory a
//! memcpy node names is read and written when the graph runs, as on a GPU.
//!
//! Conditional nodes (IF and WHILE with one body): a handle is the address of a 4-byte condition,
//! which the kernel's `cudaGraphSetConditional` stores to (module.rs) and the node tests before its
//! body runs. Not here: stream capture, host, memory allocation, SWITCH and other node kinds (they
//! are `CUDA_ERROR_NOT_SUPPORTED`), graph updates other than a kernel or memcpy node's parameters.

use std::ffi::{c_uint, c_void};

use shared::cuda_graph::{
    self, memory_type, Conditional as Kind, CopyRun, ExpandError, FillRun, KernelNode, Memcpy3D, MemsetNode,
    NodeParams, OrderError, Part, Run,
};
use shared::ptx::LaunchDims;

use crate::driver::{driver, ready, Driver};
use crate::ffi::{host, host_mut, Handle, Out};
use crate::launch::{pack_for, run};
use crate::result::{guard, CUresult, Result};

/// What one node does.
#[derive(Clone)]
pub(crate) enum Work {
    Launch {
        f: Handle,
        dims: LaunchDims,
        params: Vec<u8>,
    },
    Copy(Vec<CopyRun>),
    Fill(Vec<FillRun>),
    /// Orders only: empty and event nodes.
    Nothing,
    /// A child graph's nodes, fixed for a run when the node was added.
    Child(Vec<Run<Work>>),
    /// A conditional node as added: its body graph is filled afterwards, and fixed for a run at
    /// instantiation (`Run::Conditional`), which runs it while (or if) the u32 at the handle is
    /// non-zero.
    Conditional {
        kind: Kind,
        handle: u64,
        body: Handle,
    },
}

/// A conditional handle: the graph it belongs to, and the value its condition takes at every
/// launch of that graph when `assign` is set. The handle is the address of a 4-byte allocation
/// holding the condition, which `cudaGraphSetConditional` stores to (module.rs).
pub(crate) struct Condition {
    graph: Handle,
    default: u32,
    assign: bool,
}

/// How many times a WHILE body may run in one launch before the launch stops: a condition that
/// never clears would otherwise hang the program.
const MAX_ITERATIONS: u64 = 1 << 24;

/// A graph: what each node does, in the shared model of nodes and their dependencies.
pub(crate) type Graph = cuda_graph::Graph<Work>;

/// A node handle: its graph and index.
pub(crate) struct NodeRef {
    graph: Handle,
    index: usize,
}

/// An executable graph: its nodes' work in run order, with the node each came from.
pub(crate) struct Exec {
    steps: Vec<(usize, Vec<Run<Work>>)>,
    graph: Handle,
}

/// What node work `w` is to a run: a conditional node's body graph as it is now.
fn part<'g>(d: &'g Driver, w: &'g Work) -> Result<Part<'g, Work, Work>> {
    Ok(match w {
        Work::Conditional { kind, handle, body } => {
            Part::Conditional { kind: *kind, handle: *handle, body: d.graphs.get(*body)? }
        }
        Work::Nothing => Part::Nothing,
        w => Part::Work(w.clone()),
    })
}

/// A graph that cannot be fixed for a run: a cycle is `CUDA_ERROR_INVALID_VALUE`, nesting past
/// the limit `CUDA_ERROR_NOT_SUPPORTED`.
fn expand_error(e: ExpandError<CUresult>) -> CUresult {
    match e {
        ExpandError::Order(OrderError::Cycle) => CUresult::INVALID_VALUE,
        ExpandError::Order(OrderError::TooDeep) => CUresult::NOT_SUPPORTED,
        ExpandError::Node(e) => e,
    }
}

/// `graph`'s nodes' work in run order, each beside its node, conditional bodies as they are now.
fn ordered(d: &Driver, graph: &Graph) -> Result<Vec<(usize, Vec<Run<Work>>)>> {
    let order = graph.order().map_err(|e| expand_error(e.into()))?;
    order
        .into_iter()
        .map(|i| {
            let mut runs = Vec::new();
            let node = graph.node(i).ok_or(CUresult::INVALID_VALUE)?;
            cuda_graph::expand_node(node, 0, &mut |w| part(d, w), &mut runs).map_err(expand_error)?;
            Ok((i, runs))
        })
        .collect()
}

// SAFETY (every `unsafe` below): the pointers are the caller's, valid as the driver API requires.

/// Reads a parameter structure of `n` bytes.
unsafe fn bytes<'a>(p: *const c_void, n: usize) -> Result<&'a [u8]> {
    unsafe { host(p, n) }.and_then(|b| if b.is_empty() { Err(CUresult::INVALID_VALUE) } else { Ok(b) })
}

fn kernel_work(d: &Driver, k: &KernelNode) -> Result<Work> {
    let f = k.handle() as Handle;
    let params = unsafe { pack_for(d, f, k.kernel_params as *const *const c_void, k.extra as *const *const c_void) }?;
    Ok(Work::Launch { f, dims: LaunchDims { grid: k.grid, block: k.block, dynamic_shared: k.shared }, params })
}

fn copy_work(m: &Memcpy3D) -> Result<Work> {
    m.runs().map(Work::Copy).map_err(|e| {
        crate::result::report(format_args!("a memcpy node: {e}"));
        CUresult::NOT_SUPPORTED
    })
}

fn fill_work(m: &MemsetNode) -> Result<Work> {
    m.runs().map(Work::Fill).map_err(|_| CUresult::INVALID_VALUE)
}

fn generic_work(d: &mut Driver, p: &NodeParams) -> Result<Work> {
    match p {
        NodeParams::Conditional { handle, kind, size } => conditional_work(d, *handle, *kind, *size),
        NodeParams::Kernel(k) => kernel_work(d, k),
        NodeParams::Memcpy(m) => copy_work(m),
        NodeParams::Memset(m) => fill_work(m),
        NodeParams::Child { graph } => child_work(d, *graph as Handle),
        NodeParams::Empty | NodeParams::WaitEvent { .. } | NodeParams::EventRecord { .. } => Ok(Work::Nothing),
        _ => Err(CUresult::NOT_SUPPORTED),
    }
}

/// A child graph node runs a copy of the graph as it is now.
fn child_work(d: &Driver, graph: Handle) -> Result<Work> {
    cuda_graph::expand(d.graphs.get(graph)?, 1, &mut |w| part(d, w)).map(Work::Child).map_err(expand_error)
}

/// A conditional node: IF or WHILE with one body graph, which the driver makes here.
fn conditional_work(d: &mut Driver, handle: u64, kind: u32, size: u32) -> Result<Work> {
    let kind = Kind::of(kind, size).ok_or(CUresult::NOT_SUPPORTED)?;
    if !d.conditions.contains_key(&handle) {
        return Err(CUresult::INVALID_VALUE);
    }
    let body = d.graphs.insert(Graph::default());
    Ok(Work::Conditional { kind, handle, body })
}

/// Adds a node made by `make` (under the lock) to `graph` after `deps`.
unsafe fn add(
    out: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    make: impl FnOnce(&mut Driver) -> Result<Work>,
) -> CUresult {
    let out = unsafe { Out::new(out) };
    guard(|| {
        let mut d = ready(None)?;
        out.check()?;
        d.graphs.get(graph)?;
        let mut indices = Vec::with_capacity(n);
        for i in 0..n {
            let h = unsafe { crate::ffi::element(deps, i) }?;
            let node = d.graph_nodes.get(h)?;
            if node.graph != graph {
                return Err(CUresult::INVALID_VALUE);
            }
            indices.push(node.index);
        }
        let work = make(&mut d)?;
        let index = d.graphs.get_mut(graph)?.add(work, indices);
        out.set(d.graph_nodes.insert(NodeRef { graph, index }))
    })
}

/// Replaces the work of node `node` in its graph.
fn set(node: Handle, make: impl FnOnce(&Driver) -> Result<Work>) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        let (graph, index) = d.graph_nodes.get(node).map(|n| (n.graph, n.index))?;
        let work = make(&d)?;
        *d.graphs.get_mut(graph)?.node_mut(index).ok_or(CUresult::INVALID_VALUE)? = work;
        Ok(())
    })
}

/// Replaces the work of node `node` in the executable graph `exec`.
fn set_exec(exec: Handle, node: Handle, make: impl FnOnce(&Driver) -> Result<Work>) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        let (graph, index) = d.graph_nodes.get(node).map(|n| (n.graph, n.index))?;
        let work = make(&d)?;
        let e = d.execs.get_mut(exec)?;
        if e.graph != graph {
            return Err(CUresult::INVALID_VALUE);
        }
        let step = e.steps.iter_mut().find(|(i, _)| *i == index).ok_or(CUresult::INVALID_VALUE)?;
        step.1 = vec![Run::Work(work)];
        Ok(())
    })
}

fn run_all(d: &mut Driver, steps: &[Run<Work>]) -> Result<()> {
    for step in steps {
        match step {
            Run::Work(Work::Launch { f, dims, params }) => run(d, *f, *dims, params)?,
            Run::Work(Work::Copy(runs)) => runs.iter().try_for_each(|r| copy(d, r))?,
            Run::Work(Work::Fill(runs)) => runs.iter().try_for_each(|r| {
                let pattern = r.pattern.to_le_bytes();
                d.memory
                    .fill(r.dst, r.count * u64::from(r.width), &pattern[..r.width as usize])
                    .map_err(|_| CUresult::INVALID_VALUE)
            })?,
            Run::Work(Work::Nothing | Work::Conditional { .. }) => {}
            Run::Work(Work::Child(inner)) => run_all(d, inner)?,
            Run::Conditional { kind, handle, body } => {
                let mut passes = 0u64;
                while d.memory.read_u32(*handle).map_err(|_| CUresult::ILLEGAL_ADDRESS)? != 0 {
                    run_all(d, body)?;
                    passes += 1;
                    if *kind == Kind::If {
                        break;
                    }
                    if passes >= MAX_ITERATIONS {
                        crate::result::report(format_args!(
                            "a conditional WHILE node ran its body {MAX_ITERATIONS} times in one launch: stopped"
                        ));
                        return Err(CUresult::LAUNCH_TIMEOUT);
                    }
                }
            }
        }
    }
    Ok(())
}

/// One run of a memcpy node: each end is device memory when declared so (or, for unified
/// addressing, when it falls in an allocation), host memory otherwise.
fn copy(d: &Driver, r: &CopyRun) -> Result<()> {
    let device = |memory: u32, addr: u64| match memory {
        memory_type::DEVICE => true,
        memory_type::HOST => false,
        _ => d.is_device(addr),
    };
    let bad = |_| CUresult::INVALID_VALUE;
    let n = usize::try_from(r.len).map_err(|_| CUresult::INVALID_VALUE)?;
    match (device(r.src.memory, r.src.addr), device(r.dst.memory, r.dst.addr)) {
        (true, true) => d.memory.copy(r.dst.addr, r.src.addr, r.len).map_err(bad),
        (false, true) => d.memory.write(r.dst.addr, unsafe { host(r.src.addr as *const c_void, n) }?).map_err(bad),
        (true, false) => d.memory.read(r.src.addr, unsafe { host_mut(r.dst.addr as *mut c_void, n) }?).map_err(bad),
        (false, false) => unsafe { crate::ffi::host_copy(r.dst.addr as *mut c_void, r.src.addr as *const c_void, n) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(graph: *mut Handle, _flags: c_uint) -> CUresult {
    let graph = unsafe { Out::new(graph) };
    guard(|| {
        let mut d = ready(None)?;
        graph.check()?;
        graph.set(d.graphs.insert(Graph::default()))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> CUresult {
    guard(|| driver()?.graphs.remove(graph).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *const c_void,
) -> CUresult {
    unsafe {
        add(node, graph, deps, n, |d| kernel_work(d, &KernelNode::from_bytes(bytes(params, KernelNode::V1_SIZE)?)))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *const c_void,
) -> CUresult {
    unsafe {
        add(node, graph, deps, n, |d| kernel_work(d, &KernelNode::from_bytes(bytes(params, KernelNode::V2_SIZE)?)))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *const c_void,
    _ctx: Handle,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |_| copy_work(&Memcpy3D::from_bytes(bytes(params, Memcpy3D::SIZE)?))) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *const c_void,
    _ctx: Handle,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |_| fill_work(&MemsetNode::from_bytes(bytes(params, MemsetNode::SIZE)?))) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |_| Ok(Work::Nothing)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventRecordNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    event: Handle,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |d| d.events.get(event).map(|_| Work::Nothing)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventWaitNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    event: Handle,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |d| d.events.get(event).map(|_| Work::Nothing)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    child: Handle,
) -> CUresult {
    unsafe { add(node, graph, deps, n, |d| child_work(d, child)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddNode(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *mut c_void,
) -> CUresult {
    let mut body = None;
    let status = unsafe {
        add(node, graph, deps, n, |d| {
            let work = generic_work(d, &NodeParams::from_bytes(bytes(params, NodeParams::SIZE)?))?;
            if let Work::Conditional { body: b, .. } = &work {
                // `phGraph_out`: an array of body graphs the driver owns for the node's life.
                let array: Box<[Handle]> = Box::new([*b]);
                body = Some(array.as_ptr());
                d.body_arrays.push(array);
            }
            Ok(work)
        })
    };
    if let (CUresult::SUCCESS, Some(array)) = (status, body) {
        // SAFETY: `params` is the caller's CUgraphNodeParams; phGraph_out is at offset 32.
        return unsafe { Out::new((params as *mut u8).add(32) as *mut *const Handle) }
            .set(array)
            .err()
            .unwrap_or(status);
    }
    status
}

/// A conditional handle: the address of a 4-byte condition, which starts at `default`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphConditionalHandleCreate(
    handle: *mut u64,
    graph: Handle,
    _ctx: Handle,
    default: c_uint,
    flags: c_uint,
) -> CUresult {
    let handle = unsafe { Out::new(handle) };
    guard(|| {
        let mut d = ready(None)?;
        handle.check()?;
        d.graphs.get(graph)?;
        let at = d.alloc(4)?;
        d.memory.write(at, &default.to_le_bytes()).map_err(|_| CUresult::INVALID_VALUE)?;
        let assign = flags & cuda_graph::COND_ASSIGN_DEFAULT != 0;
        d.conditions.insert(at, Condition { graph, default, assign });
        handle.set(at)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddNode_v2(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    _edges: *const c_void,
    n: usize,
    params: *mut c_void,
) -> CUresult {
    unsafe { cuGraphAddNode(node, graph, deps, n, params) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(node: Handle, params: *const c_void) -> CUresult {
    set(node, |d| kernel_work(d, &KernelNode::from_bytes(unsafe { bytes(params, KernelNode::V2_SIZE) }?)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams(node: Handle, params: *const c_void) -> CUresult {
    set(node, |d| kernel_work(d, &KernelNode::from_bytes(unsafe { bytes(params, KernelNode::V1_SIZE) }?)))
}

/// Adds the edges `from[i] -> to[i]`, all in `graph`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddDependencies(
    graph: Handle,
    from: *const Handle,
    to: *const Handle,
    n: usize,
) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        d.graphs.get(graph)?;
        for i in 0..n {
            let (f, t) = unsafe { (crate::ffi::element(from, i)?, crate::ffi::element(to, i)?) };
            let (f, t) = (d.graph_nodes.get(f)?, d.graph_nodes.get(t)?);
            if f.graph != graph || t.graph != graph {
                return Err(CUresult::INVALID_VALUE);
            }
            let (fi, ti) = (f.index, t.index);
            d.graphs.get_mut(graph)?.add_edge(fi, ti);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddDependencies_v2(
    graph: Handle,
    from: *const Handle,
    to: *const Handle,
    _edges: *const c_void,
    n: usize,
) -> CUresult {
    unsafe { cuGraphAddDependencies(graph, from, to, n) }
}

fn instantiate(exec: &Out<Handle>, graph: Handle) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        exec.check()?;
        let steps = ordered(&d, d.graphs.get(graph)?)?;
        exec.set(d.execs.insert(Exec { steps, graph }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, _flags: u64) -> CUresult {
    instantiate(&unsafe { Out::new(exec) }, graph)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut Handle,
    graph: Handle,
    _error_node: *mut Handle,
    _log: *mut c_void,
    _log_size: usize,
) -> CUresult {
    instantiate(&unsafe { Out::new(exec) }, graph)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    exec: Handle,
    node: Handle,
    params: *const c_void,
) -> CUresult {
    set_exec(exec, node, |d| kernel_work(d, &KernelNode::from_bytes(unsafe { bytes(params, KernelNode::V2_SIZE) }?)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams(exec: Handle, node: Handle, params: *const c_void) -> CUresult {
    set_exec(exec, node, |d| kernel_work(d, &KernelNode::from_bytes(unsafe { bytes(params, KernelNode::V1_SIZE) }?)))
}

/// Points a memcpy node of an executable graph at new memory (the copy's shape may change, its
/// kind may not: the real driver refuses that too).
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecMemcpyNodeSetParams(
    exec: Handle,
    node: Handle,
    params: *const c_void,
    _ctx: Handle,
) -> CUresult {
    set_exec(exec, node, |_| copy_work(&Memcpy3D::from_bytes(unsafe { bytes(params, Memcpy3D::SIZE) }?)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> CUresult {
    guard(|| driver()?.execs.remove(exec).map(drop))
}

fn launch(exec: Handle, stream: Handle) -> CUresult {
    guard(|| {
        let mut d = ready(Some(stream))?;
        let e = d.execs.get(exec)?;
        let steps: Vec<Run<Work>> = e.steps.iter().flat_map(|(_, w)| w.iter().cloned()).collect();
        let graph = e.graph;
        let defaults: Vec<(u64, u32)> =
            d.conditions.iter().filter(|(_, c)| c.graph == graph && c.assign).map(|(h, c)| (*h, c.default)).collect();
        for (h, value) in defaults {
            d.memory.write(h, &value.to_le_bytes()).map_err(|_| CUresult::INVALID_VALUE)?;
        }
        run_all(&mut d, &steps)
    })
}

/// Nothing to upload ahead of a launch: a launch runs the executable graph's work where it is.
fn upload(exec: Handle, stream: Handle) -> CUresult {
    guard(|| {
        let d = ready(Some(stream))?;
        d.execs.get(exec).map(drop)
    })
}

exports! {
    cuGraphLaunch(exec: Handle, stream: Handle) | cuGraphLaunch_ptsz => launch(exec, stream);
    cuGraphUpload(exec: Handle, stream: Handle) | cuGraphUpload_ptsz => upload(exec, stream);
}

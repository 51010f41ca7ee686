//! The driver entry points that build, change, instantiate and launch CUDA graphs node by node
//! (the model they feed is `graphs.rs`). build.rs reads this file's `hook!` name lists as it
//! reads `hooks.rs`'s, so none of these gets a trampoline.
//!
//! Each hook reads the structure the program passes before forwarding (its pointers are only
//! valid during the call) and files the node after the driver accepted it, under the handle the
//! driver gave; a call the driver refuses changes nothing here.

use std::ffi::c_void;

use shared::cuda_graph::{mem_alloc, node_type, KernelNode, Memcpy3D, MemsetNode, NodeParams};

use crate::graphs::{unreplayed, Node};
use crate::hooks::{guarded, then, Call};
use crate::real::Slot;
use crate::record::state;
use crate::sys::*;

/// `n` bytes the program passes by pointer, or none for null.
///
/// # Safety
/// `p` is null or points to `n` readable bytes, as the driver API requires of the structure.
unsafe fn bytes<'a>(p: *const c_void, n: usize) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, n) })
}

/// An array of `n` handles (dependencies, edge ends).
///
/// # Safety
/// `p` is null or points to `n` handles.
unsafe fn handles(p: *const Handle, n: usize) -> Vec<usize> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|h| *h as usize).collect()
}

/// Adds a node: `node` made from the parameters before the call, filed after it succeeds under the
/// handle the driver wrote to `out`; `after` runs on success too (to read what the driver wrote).
#[expect(
    clippy::too_many_arguments,
    reason = "the arguments every cuGraphAdd*Node call shares, with the node and what runs after it"
)]
unsafe fn add(
    call: Call,
    out: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    kind: u32,
    node: Node,
    after: impl FnOnce(usize),
) -> CUresult {
    // SAFETY: the dependencies array as the program passes it.
    let deps = unsafe { handles(deps, n) };
    then(call, || {
        // SAFETY: the driver wrote the new node's handle.
        let handle = if out.is_null() { 0 } else { (unsafe { *out }) as usize };
        state().node_added(graph as usize, handle, node, &deps, kind);
        after(handle);
    })
}

unsafe fn kernel(params: *const c_void, size: usize) -> Node {
    // SAFETY: a kernel node's parameters of the version the entry point takes.
    match unsafe { bytes(params, size) } {
        // SAFETY: its kernelParams and extra are as the program passed them.
        Some(b) => unsafe { state().kernel_node(&KernelNode::from_bytes(b)) },
        None => Node::Missing("a kernel node without parameters".into()),
    }
}

unsafe fn memcpy(params: *const c_void) -> Node {
    // SAFETY: a CUDA_MEMCPY3D.
    match unsafe { bytes(params, Memcpy3D::SIZE) } {
        Some(b) => state().memcpy_node(&Memcpy3D::from_bytes(b)),
        None => Node::Missing("a memcpy node without parameters".into()),
    }
}

unsafe fn memset(params: *const c_void) -> Node {
    // SAFETY: a CUDA_MEMSET_NODE_PARAMS.
    match unsafe { bytes(params, MemsetNode::SIZE) } {
        Some(b) => state().memset_node(&MemsetNode::from_bytes(b)),
        None => Node::Missing("a memset node without parameters".into()),
    }
}

/// A `CUgraphNodeParams` node and its type.
unsafe fn generic(params: *const c_void) -> (Node, u32, Option<NodeParams>) {
    // SAFETY: a CUgraphNodeParams.
    let Some(b) = (unsafe { bytes(params, NodeParams::SIZE) }) else {
        return (Node::Missing("a graph node without parameters".into()), u32::MAX, None);
    };
    let p = NodeParams::from_bytes(b);
    let kind = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    // SAFETY: a kernel node's kernelParams and extra are as the program passed them.
    let node = unsafe { state().generic_node(&p) };
    (node, kind, Some(p))
}

/// After `cuGraphAddNode` succeeded: what the driver wrote back into the parameters (a memory
/// allocation's address, a conditional node's body graphs).
unsafe fn generic_added(params: *const c_void, p: Option<NodeParams>, node: usize) {
    match p {
        Some(NodeParams::MemAlloc { bytesize }) => {
            // SAFETY: the driver wrote the address into the caller's structure.
            let dptr = unsafe { *((params as *const u8).add(NodeParams::MEM_ALLOC_DPTR) as *const u64) };
            state().graph_memory(dptr, bytesize);
        }
        Some(NodeParams::Conditional { size, .. }) => {
            // SAFETY: the driver wrote `phGraph_out` (in the union at 16, after the handle, the
            // type and the size) with an array of `size` body graphs it owns.
            let out = unsafe { *((params as *const u8).add(32) as *const *const Handle) };
            // SAFETY: `size` graph handles.
            let bodies = unsafe { handles(out, size as usize) };
            state().graphs.conditional_bodies(node, &bodies);
        }
        _ => {}
    }
}

hook! {
    // Graphs.
    [cuGraphCreate](graph: *mut Handle, flags: u32) =>
        |call: Call, g: *mut Handle, _| then(call, || state().graphs.add_graph(*g as usize, Default::default()));
    [cuGraphDestroy](graph: Handle) => |call: Call, g: Handle| then(call, || state().graphs.destroy_graph(g as usize));
    [cuGraphClone](clone: *mut Handle, original: Handle) =>
        |call: Call, c: *mut Handle, o: Handle| then(call, || state().graphs.clone_graph(*c as usize, o as usize));
    [cuGraphNodeFindInClone](node: *mut Handle, original: Handle, clone: Handle) =>
        |call: Call, n: *mut Handle, o: Handle, c: Handle| then(call, || state().graphs.found_in_clone(*n as usize, o as usize, c as usize));

    // Nodes, by kind.
    [cuGraphAddKernelNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, p| add(call, out, g, deps, n, node_type::KERNEL, kernel(p, KernelNode::V1_SIZE), |_| ());
    [cuGraphAddKernelNode_v2](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, p| add(call, out, g, deps, n, node_type::KERNEL, kernel(p, KernelNode::V2_SIZE), |_| ());
    [cuGraphAddMemcpyNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void, ctx: Handle) =>
        |call: Call, out, g, deps, n, p, _| add(call, out, g, deps, n, node_type::MEMCPY, memcpy(p), |_| ());
    [cuGraphAddMemsetNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void, ctx: Handle) =>
        |call: Call, out, g, deps, n, p, _| add(call, out, g, deps, n, node_type::MEMSET, memset(p), |_| ());
    [cuGraphAddEmptyNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize) =>
        |call: Call, out, g, deps, n| add(call, out, g, deps, n, node_type::EMPTY, Node::Order, |_| ());
    [cuGraphAddEventRecordNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, event: Handle) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::EVENT_RECORD, Node::Order, |_| ());
    [cuGraphAddEventWaitNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, event: Handle) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::WAIT_EVENT, Node::Order, |_| ());
    [cuGraphAddChildGraphNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, child: Handle) =>
        |call: Call, out, g, deps, n, child: Handle| {
            let node = state().child_node(child as usize);
            add(call, out, g, deps, n, node_type::GRAPH, node, |_| ())
        };
    [cuGraphAddHostNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::HOST, unreplayed(node_type::HOST), |_| ());
    [cuGraphAddBatchMemOpNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::BATCH_MEM_OP, unreplayed(node_type::BATCH_MEM_OP), |_| ());
    [cuGraphAddExternalSemaphoresSignalNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::EXT_SEMAS_SIGNAL, unreplayed(node_type::EXT_SEMAS_SIGNAL), |_| ());
    [cuGraphAddExternalSemaphoresWaitNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *const c_void) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::EXT_SEMAS_WAIT, unreplayed(node_type::EXT_SEMAS_WAIT), |_| ());
    [cuGraphAddMemAllocNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *mut c_void) =>
        |call: Call, out, g, deps, n, p: *mut c_void| add(call, out, g, deps, n, node_type::MEM_ALLOC, Node::Order, |_| {
            if let Some(b) = bytes(p, mem_alloc::SIZE) {
                let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
                state().graph_memory(at(mem_alloc::DPTR), at(mem_alloc::BYTESIZE));
            }
        });
    [cuGraphAddMemFreeNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, dptr: CUdeviceptr) =>
        |call: Call, out, g, deps, n, _| add(call, out, g, deps, n, node_type::MEM_FREE, Node::Order, |_| ());
    [cuGraphAddNode](node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, params: *mut c_void) =>
        |call: Call, out, g, deps, n, p: *mut c_void| {
            let (node, kind, parsed) = generic(p);
            add(call, out, g, deps, n, kind, node, |h| generic_added(p, parsed, h))
        };
    [cuGraphAddNode_v2](node: *mut Handle, graph: Handle, deps: *const Handle, edges: *const c_void, n: usize, params: *mut c_void) =>
        |call: Call, out, g, deps, _, n, p: *mut c_void| {
            let (node, kind, parsed) = generic(p);
            add(call, out, g, deps, n, kind, node, |h| generic_added(p, parsed, h))
        };

    // A node's parameters in its graph.
    [cuGraphKernelNodeSetParams](node: Handle, params: *const c_void) =>
        |call: Call, h: Handle, p| { let node = kernel(p, KernelNode::V1_SIZE); then(call, || state().node_changed(h as usize, node)) };
    [cuGraphKernelNodeSetParams_v2](node: Handle, params: *const c_void) =>
        |call: Call, h: Handle, p| { let node = kernel(p, KernelNode::V2_SIZE); then(call, || state().node_changed(h as usize, node)) };
    [cuGraphMemcpyNodeSetParams](node: Handle, params: *const c_void) =>
        |call: Call, h: Handle, p| { let node = memcpy(p); then(call, || state().node_changed(h as usize, node)) };
    [cuGraphMemsetNodeSetParams](node: Handle, params: *const c_void) =>
        |call: Call, h: Handle, p| { let node = memset(p); then(call, || state().node_changed(h as usize, node)) };
    [cuGraphNodeSetParams](node: Handle, params: *mut c_void) =>
        |call: Call, h: Handle, p: *mut c_void| { let (node, _, _) = generic(p); then(call, || state().node_changed(h as usize, node)) };
    [cuGraphKernelNodeSetAttribute](node: Handle, attr: u32, value: *const c_void) =>
        |call: Call, h: Handle, attr: u32, v: *const c_void| then(call, || {
            if let Some(b) = bytes(v, 64) {
                let value: &[u8; 64] = b.try_into().expect("64 bytes");
                let mut st = state();
                if !st.graphs.set_kernel_attribute(h as usize, attr, value) {
                    st.report.note("a kernel node recap did not see added was given a launch attribute");
                }
            }
        });
    [cuGraphDestroyNode](node: Handle) => |call: Call, h: Handle| then(call, || state().graphs.destroy_node(h as usize));

    // Edges.
    [cuGraphAddDependencies](graph: Handle, from: *const Handle, to: *const Handle, n: usize) =>
        |call: Call, g: Handle, from, to, n| edges(call, g, from, to, n, true);
    [cuGraphAddDependencies_v2](graph: Handle, from: *const Handle, to: *const Handle, data: *const c_void, n: usize) =>
        |call: Call, g: Handle, from, to, _, n| edges(call, g, from, to, n, true);
    [cuGraphRemoveDependencies](graph: Handle, from: *const Handle, to: *const Handle, n: usize) =>
        |call: Call, g: Handle, from, to, n| edges(call, g, from, to, n, false);
    [cuGraphRemoveDependencies_v2](graph: Handle, from: *const Handle, to: *const Handle, data: *const c_void, n: usize) =>
        |call: Call, g: Handle, from, to, _, n| edges(call, g, from, to, n, false);

    // Executable graphs.
    [cuGraphExecDestroy](exec: Handle) => |call: Call, e: Handle| then(call, || state().graphs.destroy_exec(e as usize));
    [cuGraphExecUpdate](exec: Handle, graph: Handle, error_node: *mut Handle, result: *mut i32) =>
        |call: Call, e: Handle, g: Handle, _, _| then(call, || state().graph_instantiated(e as usize, g as usize));
    [cuGraphExecUpdate_v2](exec: Handle, graph: Handle, info: *mut c_void) =>
        |call: Call, e: Handle, g: Handle, _| then(call, || state().graph_instantiated(e as usize, g as usize));
    [cuGraphExecKernelNodeSetParams](exec: Handle, node: Handle, params: *const c_void) =>
        |call: Call, e: Handle, h: Handle, p| { let node = kernel(p, KernelNode::V1_SIZE); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphExecKernelNodeSetParams_v2](exec: Handle, node: Handle, params: *const c_void) =>
        |call: Call, e: Handle, h: Handle, p| { let node = kernel(p, KernelNode::V2_SIZE); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphExecMemcpyNodeSetParams](exec: Handle, node: Handle, params: *const c_void, ctx: Handle) =>
        |call: Call, e: Handle, h: Handle, p, _| { let node = memcpy(p); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphExecMemsetNodeSetParams](exec: Handle, node: Handle, params: *const c_void, ctx: Handle) =>
        |call: Call, e: Handle, h: Handle, p, _| { let node = memset(p); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphExecChildGraphNodeSetParams](exec: Handle, node: Handle, child: Handle) =>
        |call: Call, e: Handle, h: Handle, c: Handle| { let node = state().child_node(c as usize); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphExecNodeSetParams](exec: Handle, node: Handle, params: *mut c_void) =>
        |call: Call, e: Handle, h: Handle, p: *mut c_void| { let (node, _, _) = generic(p); then(call, || state().graphs.set_exec_node(e as usize, h as usize, node)) };
    [cuGraphNodeSetEnabled](exec: Handle, node: Handle, enabled: u32) =>
        |call: Call, e: Handle, h: Handle, on: u32| then(call, || state().graphs.set_enabled(e as usize, h as usize, on != 0));

    // Conditional handles: each stands for a 4-byte condition region (record.rs).
    [cuGraphConditionalHandleCreate](handle: *mut u64, graph: Handle, ctx: Handle, default: u32, flags: u32) =>
        |call: Call, h: *mut u64, g: Handle, _, default: u32, flags: u32| then(call, || state().condition_created(*h, g as usize, default, flags));

    // Stream capture into a graph the program made.
    [cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz](stream: Handle, graph: Handle, deps: *const Handle, data: *const c_void, n: usize, mode: i32) =>
        |call: Call, s: Handle, g: Handle, deps, _, n, _| {
            let deps = handles(deps, n);
            then(call, || state().capture_begin_into(s as usize, g as usize, deps))
        };
}

unsafe fn edges(call: Call, graph: Handle, from: *const Handle, to: *const Handle, n: usize, add: bool) -> CUresult {
    // SAFETY: two arrays of `n` node handles.
    let (from, to) = unsafe { (handles(from, n), handles(to, n)) };
    then(call, || {
        let mut st = state();
        if !st.graphs.edges(graph as usize, &from, &to, add) {
            st.report.note("a graph edge between nodes recap did not see added is not kept: their order may differ");
        }
    })
}

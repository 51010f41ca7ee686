//! `--record-effects` across a CUDA graph launch: the graph's work issued one node at a time, so
//! that what each launch without PTX wrote can be read around it.
//!
//! A graph launch runs as one unit on the GPU: the recorder sees it start and end, never a node in
//! between. Frameworks put exactly the kernels that have no PTX (cuBLAS, ATen, XLA's fusions) into
//! graphs (`torch.cuda.graph`, cudagraph trees, XLA command buffers), so without this their
//! effects would be lost and a CPU replay would stop at the first one.
//!
//! When effects are asked for and a launched graph holds such a kernel, the interposer does not
//! forward `cuGraphLaunch`. It issues the graph's work itself, in the order the graph's
//! dependencies give (the order the recording already uses), on the launch's stream: each kernel
//! with `cuLaunchKernel` and its packed parameters, each copy and memset with its driver call.
//! Every piece goes through the same record-forward-settle path as work the program issues
//! directly, so each launch without PTX has its inputs hashed before and its writes read after.
//! The context is synchronised before the first node and after the last, so the program sees the
//! launch ordered as a graph launch would be against its other work.
//!
//! What this cannot issue faithfully is left to the graph launch as before (its launches without
//! PTX then reported as incomplete): conditional nodes (a kernel sets their condition through a
//! handle that only means something inside the graph), device-to-host copies (the graph holds the
//! host destination, which the recording does not keep), child graphs not expanded, launch
//! attributes, memsets wider than 4 bytes, and anything the graph holds that recap could not
//! place. A graph without a launch lacking PTX is forwarded as a graph, unchanged.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use super::{state, HostData, State, Work, PHASE, RECORDING};
use crate::launch_attrs::LaunchAttrs;
use crate::real;
use crate::sys::*;

/// Runs graph launch `exec` on `stream` node by node if it holds a launch without PTX and effects
/// are being recorded; `None` leaves the launch to the caller (forwarded as a graph).
pub fn launch_graph_by_nodes(exec: usize, stream: usize) -> Option<CUresult> {
    if PHASE.load(Ordering::Relaxed) != RECORDING {
        return None;
    }
    let work = state().graph_work_to_unfold(exec, stream)?;
    {
        let mut st = state();
        st.report.count("graph launch (run node by node for recorded effects)");
    }
    // SAFETY: no arguments; the graph's first node must see every op issued before the launch.
    let r = unsafe { real::ctx_synchronize() };
    if r != CUDA_SUCCESS {
        return Some(r);
    }
    for w in work {
        let staged = state().submit(stream, w.clone());
        // SAFETY: `w` is work the program put in its graph, with addresses it keeps valid while
        // it launches the graph.
        let r = unsafe { issue_real(&w, stream) };
        let mut st = state();
        st.settle(staged, r);
        st.effects_after();
        if r != CUDA_SUCCESS {
            return Some(r);
        }
    }
    // SAFETY: no arguments; as a graph launch, the whole graph is done before work issued after it.
    Some(unsafe { real::ctx_synchronize() })
}

impl State {
    /// The work of graph launch `exec` if it should run node by node (see the module's doc).
    fn graph_work_to_unfold(&mut self, exec: usize, stream: usize) -> Option<Vec<Work>> {
        if !self.recording.as_ref().is_some_and(|r| r.request.record_effects) || self.capture_of(stream).is_some() {
            return None;
        }
        let (work, missing) = self.graphs.launch(exec);
        if !missing.is_empty() || !work.iter().all(issuable) {
            return None;
        }
        let mut without_ptx = false;
        for w in &work {
            if let Work::Launch { func, .. } = w {
                let f = self.find_func(*func)?;
                without_ptx |= self.modules[f.module].parsed().is_some_and(|p| p.ptx.is_none());
            }
        }
        without_ptx.then_some(work)
    }
}

/// Whether the interposer can issue `w` itself exactly as the graph would.
fn issuable(w: &Work) -> bool {
    match w {
        Work::Launch { attrs, .. } => *attrs == LaunchAttrs::default(),
        Work::Copy { .. } | Work::Upload { .. } => true,
        Work::Memset { width, .. } => matches!(width, 1 | 2 | 4),
        Work::Download { .. } | Work::Graph { .. } | Work::Control { .. } | Work::SetCondition { .. } => false,
    }
}

/// Issues `w` to the real driver on `stream`.
///
/// # Safety
/// Every address in `w` is one the program gave its graph, valid for the graph's launch.
unsafe fn issue_real(w: &Work, stream: usize) -> CUresult {
    let s = stream as Handle;
    // SAFETY (all arms): the caller's contract; the parameter buffer and host bytes outlive the
    // calls, which are synchronised before they are dropped where the driver may read them late.
    unsafe {
        match w {
            Work::Launch { func, grid, block, shared, params, .. } => {
                let mut size = params.len();
                let mut extra: [*mut c_void; 5] = [
                    CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
                    params.as_ptr() as *mut c_void,
                    CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
                    (&mut size as *mut usize).cast(),
                    CU_LAUNCH_PARAM_END as *mut c_void,
                ];
                real::launch_kernel(
                    *func as Handle,
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    *shared,
                    s,
                    std::ptr::null_mut(),
                    extra.as_mut_ptr(),
                )
            }
            Work::Copy { dst, src, len } => real::memcpy_dtod_async(*dst, *src, *len as usize, s),
            Work::Upload { dst, data } => {
                let (ptr, len) = match data {
                    HostData::Taken(b) => (b.as_ptr() as *const c_void, b.len()),
                    HostData::At { ptr, len } => (*ptr as *const c_void, *len),
                };
                // Synchronous: the driver reads the host bytes before it returns.
                real::memcpy_htod(*dst, ptr, len)
            }
            Work::Memset { dst, width, pattern, count } => match width {
                1 => real::memset_d8_async(*dst, *pattern as u8, *count as usize, s),
                2 => real::memset_d16_async(*dst, *pattern as u16, *count as usize, s),
                _ => real::memset_d32_async(*dst, *pattern as u32, *count as usize, s),
            },
            Work::Download { .. } | Work::Graph { .. } | Work::Control { .. } | Work::SetCondition { .. } => {
                CUDA_ERROR_NOT_SUPPORTED
            }
        }
    }
}

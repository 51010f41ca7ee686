//! The driver entry points recap records. Every other export of the real driver is a generated
//! trampoline (build.rs reads this file's `hook!` name lists to know which names not to generate).
//!
//! A hook tells the recorder what the call does and forwards it to the real driver, always: a
//! panic in the recorder is caught, marks the recording incomplete, and the call still goes
//! through exactly once. Outside the range a launch or copy costs one relaxed atomic load
//! (`record::busy`) before it is forwarded.
//!
//! Per-thread default stream variants (`_ptsz`, `_ptds`) share their hook with the plain name:
//! each name forwards to the same name in the real driver, so the stream semantics are the
//! driver's.

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::images::ModuleImage;
use crate::launch_attrs::LaunchAttrs;
use crate::real::{self, Slot};
use crate::record::{self, busy, state, HostData, Work};
use crate::sys::*;

/// `RECAP_CAPTURE_TRACE=1` prints every hooked call on stderr (what the recorder saw, in order).
static TRACE: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("RECAP_CAPTURE_TRACE").is_some_and(|v| v == "1"));

/// Runs a hook's body with the call to the real driver in hand. If the body panics before
/// forwarding, the call is forwarded here; either way it is forwarded exactly once.
pub(crate) fn guarded(
    name: &str,
    body: impl FnOnce(&mut dyn FnMut() -> CUresult) -> CUresult,
    forward: impl Fn() -> CUresult,
) -> CUresult {
    if *TRACE {
        eprintln!("recap capture: {name}");
    }
    let result = Cell::new(None);
    let mut call = || {
        let r = forward();
        result.set(Some(r));
        r
    };
    match catch_unwind(AssertUnwindSafe(|| body(&mut call))) {
        Ok(r) => r,
        Err(_) => {
            state().report.incomplete(format!("the recorder failed inside {name}; the call went through unrecorded"));
            result.get().unwrap_or_else(forward)
        }
    }
}

/// Defines exported hooks: each name in `[...]` gets the same signature and handler, and
/// forwards to the real entry point of its own name.
macro_rules! hook {
    ($([$($name:ident),+] $args:tt => $handler:expr;)*) => {$($(
        hook_one!($name $args => $handler);
    )+)*};
}

macro_rules! hook_one {
    ($name:ident ($($arg:ident : $ty:ty),* $(,)?) => $handler:expr) => {
        #[no_mangle]
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            static REAL: Slot = Slot::new(stringify!($name));
            let real: unsafe extern "C" fn($($ty),*) -> CUresult = std::mem::transmute(REAL.get());
            guarded(
                stringify!($name),
                |call: &mut dyn FnMut() -> CUresult| $handler(call, $($arg),*),
                || real($($arg),*),
            )
        }
    };
}

pub(crate) type Call<'a> = &'a mut dyn FnMut() -> CUresult;

/// Forwards, then runs `after` on success.
pub(crate) fn then(call: Call, after: impl FnOnce()) -> CUresult {
    let r = call();
    if r == CUDA_SUCCESS {
        after();
    }
    r
}

/// Work on `stream`: recorded (or kept by a capture) before the call, so a snapshot it causes sees
/// the state before the op, and kept only if the driver does it (`record/settle.rs`). The lock is
/// not held across the call: a call that waits on work another thread has yet to issue must not
/// stop that thread.
fn work(call: Call, stream: Handle, make: impl FnOnce() -> Option<Work>) -> CUresult {
    if !busy() {
        return call();
    }
    let Some(w) = make() else { return call() };
    let staged = state().submit(stream as usize, w);
    let r = call();
    state().settle(staged, r);
    r
}

unsafe fn host_bytes(src: *const c_void, len: usize) -> Vec<u8> {
    if src.is_null() || len == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(src as *const u8, len).to_vec()
}

/// Whether `addr` lies in an allocation recap saw (a device address, as far as the recorder can
/// tell); the unified copy calls are classified by this.
fn is_device(addr: u64) -> bool {
    state().resolve(addr).is_some()
}

#[expect(
    clippy::too_many_arguments,
    reason = "the driver's own launch arguments, shared by cuLaunchKernel and its variants"
)]
unsafe fn launch(
    call: Call,
    func: Handle,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    attrs: LaunchAttrs,
) -> CUresult {
    record::count_launch();
    let r = work(call, stream, || {
        let params = state().pack_params(func as usize, params, extra)?;
        Some(Work::Launch { func: func as usize, grid, block, shared, params, attrs })
    });
    record::after_launch();
    r
}

unsafe fn launch_config(
    call: Call,
    config: *const CUlaunchConfig,
    func: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    if config.is_null() {
        return call();
    }
    let c = &*config;
    let attrs = crate::launch_attrs::from_config(c.attrs, c.num_attrs);
    launch(call, func, c.grid, c.block, c.shared_bytes, c.stream, params, extra, attrs)
}

unsafe fn module_loaded(call: Call, out: *mut Handle, image: *const c_void, via: &str) -> CUresult {
    then(call, || state().add_module_from(*out as usize, image, via))
}

unsafe fn module_from_file(call: Call, out: *mut Handle, path: *const c_char, via: &str) -> CUresult {
    then(call, || {
        let path = std::path::PathBuf::from(CStr::from_ptr(path).to_string_lossy().into_owned());
        let mut st = state();
        match ModuleImage::from_file(&path, via) {
            Ok(m) => st.add_module(*out as usize, m),
            Err(e) => st.report.note(format!("{via}: {e}; its kernels cannot be recorded")),
        }
    })
}

unsafe fn proc_address(call: Call, symbol: *const c_char, pfn: *mut *mut c_void) -> CUresult {
    let r = call();
    if r == CUDA_SUCCESS && !pfn.is_null() && !(*pfn).is_null() {
        match real::ours_for(*pfn as usize) {
            Some(ours) => *pfn = ours as *mut c_void,
            None => {
                let name =
                    if symbol.is_null() { "?".into() } else { CStr::from_ptr(symbol).to_string_lossy().into_owned() };
                state().report.note(format!("cuGetProcAddress({name}) gave an entry point that is no export of the driver: calls to it are not seen"));
            }
        }
    }
    r
}

hook! {
    [cuGetProcAddress](symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64) =>
        |call: Call, symbol, pfn, _, _| proc_address(call, symbol, pfn);
    [cuGetProcAddress_v2](symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64, status: *mut i32) =>
        |call: Call, symbol, pfn, _, _, _| proc_address(call, symbol, pfn);

    [cuProfilerStart]() => |call: Call| { record::profiler_start(); call() };
    [cuProfilerStop]() => |call: Call| { record::profiler_stop(); call() };

    [cuCtxDestroy_v2](ctx: Handle) => |call: Call, ctx: Handle| {
        record::context_ending("cuCtxDestroy");
        state().ctx_devices.forget(ctx as usize);
        call()
    };
    [cuDevicePrimaryCtxRelease_v2](device: CUdevice) => |call: Call, _| { record::context_ending("cuDevicePrimaryCtxRelease"); call() };
    [cuDevicePrimaryCtxReset_v2](device: CUdevice) => |call: Call, _| { record::context_ending("cuDevicePrimaryCtxReset"); call() };

    // Code.
    [cuModuleLoadData](module: *mut Handle, image: *const c_void) =>
        |call: Call, m, image| module_loaded(call, m, image, "cuModuleLoadData");
    [cuModuleLoadDataEx](module: *mut Handle, image: *const c_void, n: u32, options: *mut c_void, values: *mut *mut c_void) =>
        |call: Call, m, image, _, _, _| module_loaded(call, m, image, "cuModuleLoadDataEx");
    [cuModuleLoadFatBinary](module: *mut Handle, image: *const c_void) =>
        |call: Call, m, image| module_loaded(call, m, image, "cuModuleLoadFatBinary");
    [cuModuleLoad](module: *mut Handle, path: *const c_char) =>
        |call: Call, m, path| module_from_file(call, m, path, "cuModuleLoad");
    [cuLibraryLoadData](library: *mut Handle, code: *const c_void, jit_options: *mut c_void, jit_values: *mut *mut c_void, n_jit: u32, options: *mut c_void, values: *mut *mut c_void, n: u32) =>
        |call: Call, l, code, _, _, _, _, _, _| module_loaded(call, l, code, "cuLibraryLoadData");
    [cuLibraryLoadFromFile](library: *mut Handle, path: *const c_char, jit_options: *mut c_void, jit_values: *mut *mut c_void, n_jit: u32, options: *mut c_void, values: *mut *mut c_void, n: u32) =>
        |call: Call, l, path, _, _, _, _, _, _| module_from_file(call, l, path, "cuLibraryLoadFromFile");
    [cuModuleGetFunction](func: *mut Handle, module: Handle, name: *const c_char) =>
        |call: Call, f: *mut Handle, m: Handle, name: *const c_char| then(call, || state().add_func(*f as usize, m as usize, &CStr::from_ptr(name).to_string_lossy()));
    [cuLibraryGetKernel](kernel: *mut Handle, library: Handle, name: *const c_char) =>
        |call: Call, k: *mut Handle, l: Handle, name: *const c_char| then(call, || state().add_func(*k as usize, l as usize, &CStr::from_ptr(name).to_string_lossy()));
    [cuLibraryGetModule](module: *mut Handle, library: Handle) =>
        |call: Call, m: *mut Handle, l: Handle| then(call, || state().alias_module(*m as usize, l as usize));
    [cuKernelGetFunction](func: *mut Handle, kernel: Handle) =>
        |call: Call, f: *mut Handle, k: Handle| then(call, || state().alias_func(*f as usize, k as usize));
    [cuLinkCreate, cuLinkCreate_v2](n: u32, options: *mut c_void, values: *mut *mut c_void, link: *mut Handle) =>
        |call: Call, _, _, _, link: *mut Handle| then(call, || state().link_create(*link as usize));
    [cuLinkAddData, cuLinkAddData_v2](link: Handle, kind: u32, data: *mut c_void, size: usize, name: *const c_char, n: u32, options: *mut c_void, values: *mut *mut c_void) =>
        |call: Call, link: Handle, kind, data, size, _, _, _, _| then(call, || state().link_add(link as usize, kind, host_bytes(data, size)));
    [cuLinkAddFile, cuLinkAddFile_v2](link: Handle, kind: u32, path: *const c_char, n: u32, options: *mut c_void, values: *mut *mut c_void) =>
        |call: Call, link: Handle, kind, path: *const c_char, _, _, _| then(call, || {
            if let Ok(bytes) = std::fs::read(CStr::from_ptr(path).to_string_lossy().as_ref()) {
                state().link_add(link as usize, kind, bytes);
            }
        });
    [cuLinkComplete](link: Handle, cubin: *mut *mut c_void, size: *mut usize) =>
        |call: Call, link: Handle, cubin: *mut *mut c_void, size: *mut usize| then(call, || state().link_complete(link as usize, host_bytes(*cubin, *size)));
    [cuLinkDestroy](link: Handle) => |call: Call, link: Handle| { state().link_destroy(link as usize); call() };

    // Memory.
    [cuMemAlloc_v2](ptr: *mut CUdeviceptr, size: usize) =>
        |call: Call, p: *mut CUdeviceptr, size| then(call, || state().add_alloc(*p, size as u64, "cuMemAlloc"));
    [cuMemAllocPitch_v2](ptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element: u32) =>
        |call: Call, p: *mut CUdeviceptr, pitch: *mut usize, _, height: usize, _| then(call, || state().add_alloc(*p, (*pitch * height) as u64, "cuMemAllocPitch"));
    [cuMemAllocAsync, cuMemAllocAsync_ptsz](ptr: *mut CUdeviceptr, size: usize, stream: Handle) =>
        |call: Call, p: *mut CUdeviceptr, size, _| then(call, || state().add_alloc(*p, size as u64, "cuMemAllocAsync"));
    [cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz](ptr: *mut CUdeviceptr, size: usize, pool: Handle, stream: Handle) =>
        |call: Call, p: *mut CUdeviceptr, size, _, _| then(call, || state().add_alloc(*p, size as u64, "cuMemAllocFromPoolAsync"));
    [cuMemAllocManaged](ptr: *mut CUdeviceptr, size: usize, flags: u32) =>
        |call: Call, p: *mut CUdeviceptr, size, _| then(call, || state().add_alloc(*p, size as u64, "cuMemAllocManaged"));
    [cuMemAllocHost_v2](ptr: *mut *mut c_void, size: usize) =>
        |call: Call, p: *mut *mut c_void, size| then(call, || state().add_alloc(*p as u64, size as u64, "cuMemAllocHost"));
    [cuMemHostAlloc](ptr: *mut *mut c_void, size: usize, flags: u32) =>
        |call: Call, p: *mut *mut c_void, size, _| then(call, || state().add_alloc(*p as u64, size as u64, "cuMemHostAlloc"));
    [cuMemMap](ptr: CUdeviceptr, size: usize, offset: usize, handle: u64, flags: u64) =>
        |call: Call, p, size, _, _, _| then(call, || state().add_alloc(p, size as u64, "cuMemMap"));
    [cuMemFree_v2](ptr: CUdeviceptr) => |call: Call, p| { state().free(p); call() };
    [cuMemFreeAsync, cuMemFreeAsync_ptsz](ptr: CUdeviceptr, stream: Handle) => |call: Call, p, _| { state().free(p); call() };
    [cuMemFreeHost](ptr: *mut c_void) => |call: Call, p: *mut c_void| { state().free(p as u64); call() };
    [cuMemUnmap](ptr: CUdeviceptr, size: usize) => |call: Call, p, _| { state().free(p); call() };

    // Copies and memsets.
    [cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds](dst: CUdeviceptr, src: *const c_void, len: usize) =>
        |call: Call, dst, src, len| work(call, std::ptr::null_mut(), || Some(Work::Upload { dst, data: HostData::Taken(host_bytes(src, len)) }));
    [cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz](dst: CUdeviceptr, src: *const c_void, len: usize, stream: Handle) =>
        |call: Call, dst, src, len, stream| upload_async(call, dst, src, len, stream);
    [cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds](dst: *mut c_void, src: CUdeviceptr, len: usize) =>
        |call: Call, _, src, len: usize| work(call, std::ptr::null_mut(), || Some(Work::Download { src, len: len as u64 }));
    [cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz](dst: *mut c_void, src: CUdeviceptr, len: usize, stream: Handle) =>
        |call: Call, _, src, len: usize, stream| work(call, stream, || Some(Work::Download { src, len: len as u64 }));
    [cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds](dst: CUdeviceptr, src: CUdeviceptr, len: usize) =>
        |call: Call, dst, src, len: usize| work(call, std::ptr::null_mut(), || Some(Work::Copy { dst, src, len: len as u64 }));
    [cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz](dst: CUdeviceptr, src: CUdeviceptr, len: usize, stream: Handle) =>
        |call: Call, dst, src, len: usize, stream| work(call, stream, || Some(Work::Copy { dst, src, len: len as u64 }));
    [cuMemcpy, cuMemcpy_ptds](dst: CUdeviceptr, src: CUdeviceptr, len: usize) =>
        |call: Call, dst, src, len| unified_copy(call, dst, src, len, std::ptr::null_mut());
    [cuMemcpyAsync, cuMemcpyAsync_ptsz](dst: CUdeviceptr, src: CUdeviceptr, len: usize, stream: Handle) =>
        |call: Call, dst, src, len, stream| unified_copy(call, dst, src, len, stream);
    [cuMemcpyPeer, cuMemcpyPeer_ptds](dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, len: usize) =>
        |call: Call, dst, _, src, _, len: usize| work(call, std::ptr::null_mut(), || Some(Work::Copy { dst, src, len: len as u64 }));
    [cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz](dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, len: usize, stream: Handle) =>
        |call: Call, dst, _, src, _, len: usize, stream| work(call, stream, || Some(Work::Copy { dst, src, len: len as u64 }));
    [cuMemsetD8_v2, cuMemsetD8_v2_ptds](dst: CUdeviceptr, value: u8, count: usize) =>
        |call: Call, dst, v: u8, n: usize| work(call, std::ptr::null_mut(), || Some(Work::Memset { dst, width: 1, pattern: v as u64, count: n as u64 }));
    [cuMemsetD16_v2, cuMemsetD16_v2_ptds](dst: CUdeviceptr, value: u16, count: usize) =>
        |call: Call, dst, v: u16, n: usize| work(call, std::ptr::null_mut(), || Some(Work::Memset { dst, width: 2, pattern: v as u64, count: n as u64 }));
    [cuMemsetD32_v2, cuMemsetD32_v2_ptds](dst: CUdeviceptr, value: u32, count: usize) =>
        |call: Call, dst, v: u32, n: usize| work(call, std::ptr::null_mut(), || Some(Work::Memset { dst, width: 4, pattern: v as u64, count: n as u64 }));
    [cuMemsetD8Async, cuMemsetD8Async_ptsz](dst: CUdeviceptr, value: u8, count: usize, stream: Handle) =>
        |call: Call, dst, v: u8, n: usize, stream| work(call, stream, || Some(Work::Memset { dst, width: 1, pattern: v as u64, count: n as u64 }));
    [cuMemsetD16Async, cuMemsetD16Async_ptsz](dst: CUdeviceptr, value: u16, count: usize, stream: Handle) =>
        |call: Call, dst, v: u16, n: usize, stream| work(call, stream, || Some(Work::Memset { dst, width: 2, pattern: v as u64, count: n as u64 }));
    [cuMemsetD32Async, cuMemsetD32Async_ptsz](dst: CUdeviceptr, value: u32, count: usize, stream: Handle) =>
        |call: Call, dst, v: u32, n: usize, stream| work(call, stream, || Some(Work::Memset { dst, width: 4, pattern: v as u64, count: n as u64 }));

    // Launches.
    [cuLaunchKernel, cuLaunchKernel_ptsz](f: Handle, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |call: Call, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra| launch(call, f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra, LaunchAttrs::default());
    [cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz](f: Handle, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: Handle, params: *mut *mut c_void) =>
        |call: Call, f, gx, gy, gz, bx, by, bz, shared, stream, params| launch(call, f, [gx, gy, gz], [bx, by, bz], shared, stream, params, std::ptr::null_mut(), LaunchAttrs::cooperative());
    [cuLaunchKernelEx, cuLaunchKernelEx_ptsz](config: *const CUlaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) =>
        |call: Call, config, f, params, extra| launch_config(call, config, f, params, extra);

    // Streams, events and graphs: what stream capture builds, and graph launches.
    [cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz](stream: Handle, mode: i32) =>
        |call: Call, stream: Handle, _| then(call, || state().capture_begin(stream as usize));
    [cuStreamEndCapture, cuStreamEndCapture_ptsz](stream: Handle, graph: *mut Handle) =>
        |call: Call, stream: Handle, graph: *mut Handle| {
            let r = call();
            let made = (r == CUDA_SUCCESS && !graph.is_null()).then(|| *graph as usize);
            state().capture_end(stream as usize, made);
            r
        };
    [cuEventRecord, cuEventRecord_ptsz](event: Handle, stream: Handle) =>
        |call: Call, event: Handle, stream: Handle| then(call, || if busy() { state().event_recorded(event as usize, stream as usize) });
    [cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz](event: Handle, stream: Handle, flags: u32) =>
        |call: Call, event: Handle, stream: Handle, _| then(call, || if busy() { state().event_recorded(event as usize, stream as usize) });
    [cuStreamWaitEvent, cuStreamWaitEvent_ptsz](stream: Handle, event: Handle, flags: u32) =>
        |call: Call, stream: Handle, event: Handle, _| then(call, || if busy() { state().stream_waits(stream as usize, event as usize) });
    [cuGraphInstantiateWithFlags](exec: *mut Handle, graph: Handle, flags: u64) =>
        |call: Call, exec: *mut Handle, graph: Handle, _| then(call, || state().graph_instantiated(*exec as usize, graph as usize));
    [cuGraphInstantiate, cuGraphInstantiate_v2](exec: *mut Handle, graph: Handle, error_node: *mut Handle, log: *mut c_char, log_size: usize) =>
        |call: Call, exec: *mut Handle, graph: Handle, _, _, _| then(call, || state().graph_instantiated(*exec as usize, graph as usize));
    [cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz](exec: *mut Handle, graph: Handle, params: *mut c_void) =>
        |call: Call, exec: *mut Handle, graph: Handle, _| then(call, || state().graph_instantiated(*exec as usize, graph as usize));
    [cuGraphLaunch, cuGraphLaunch_ptsz](exec: Handle, stream: Handle) =>
        |call: Call, exec: Handle, stream: Handle| match record::launch_graph_by_nodes(exec as usize, stream as usize) {
            Some(r) => r,
            None => work(call, stream, || Some(Work::Graph { exec: exec as usize })),
        };
}

unsafe fn upload_async(call: Call, dst: CUdeviceptr, src: *const c_void, len: usize, stream: Handle) -> CUresult {
    work(call, stream, || {
        // Inside a stream capture the graph reads the host memory each time it runs.
        let capturing = record::capturing(stream as usize);
        let data =
            if capturing { HostData::At { ptr: src as usize, len } } else { HostData::Taken(host_bytes(src, len)) };
        Some(Work::Upload { dst, data })
    })
}

unsafe fn unified_copy(call: Call, dst: CUdeviceptr, src: CUdeviceptr, len: usize, stream: Handle) -> CUresult {
    work(call, stream, || match (is_device(dst), is_device(src)) {
        (true, true) => Some(Work::Copy { dst, src, len: len as u64 }),
        (true, false) => {
            let capturing = record::capturing(stream as usize);
            let data = if capturing {
                HostData::At { ptr: src as usize, len }
            } else {
                HostData::Taken(host_bytes(src as *const c_void, len))
            };
            Some(Work::Upload { dst, data })
        }
        (false, true) => Some(Work::Download { src, len: len as u64 }),
        (false, false) => None,
    })
}

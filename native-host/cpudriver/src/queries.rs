//! What frameworks ask before and around their work, answered for the one CPU device: occupancy
//! (from the device's limits: 2048 threads and 32 blocks per multiprocessor, the engine's shared
//! memory), peer access (between any two distinct devices, which share the host's memory), identifiers, cache and limit settings (accepted: the
//! CPU has nothing to configure), host callbacks on streams (run at once, as the stream's earlier
//! work has finished), and the address range of an allocation.

use std::ffi::{c_char, c_int, c_uint, c_void};

use shared::ptx::MAX_SHARED_BYTES;

use crate::driver::{device, driver, initialized, ready};
use crate::ffi::{host_mut, CUdevice, CUdeviceptr, Handle, Out};
use crate::result::{guard, CUresult, Result};

const THREADS_PER_SM: u32 = 2048;
const BLOCKS_PER_SM: u32 = 32;

// SAFETY (every `unsafe` below): the pointers are the caller's, valid as the driver API requires.

/// Blocks of `block_size` threads and `dynamic_shared` bytes of kernel `func` one SM holds at once.
fn active_blocks(func: Handle, block_size: c_int, dynamic_shared: usize) -> Result<u32> {
    let d = driver()?;
    let (f, ptx) = d.function(func)?;
    let block = u32::try_from(block_size).ok().filter(|b| (1..=1024).contains(b)).ok_or(CUresult::INVALID_VALUE)?;
    let shared = ptx.entries()[f.entry].static_shared_bytes() as u64 + dynamic_shared as u64;
    if shared > MAX_SHARED_BYTES {
        return Ok(0);
    }
    let by_shared = MAX_SHARED_BYTES.checked_div(shared).map_or(BLOCKS_PER_SM, |n| n.min(u32::MAX as u64) as u32);
    Ok((THREADS_PER_SM / block.next_multiple_of(32)).min(BLOCKS_PER_SM).min(by_shared))
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    func: Handle,
    block_size: c_int,
    dynamic_shared: usize,
    _flags: c_uint,
) -> CUresult {
    let blocks = unsafe { Out::new(blocks) };
    guard(|| blocks.set(active_blocks(func, block_size, dynamic_shared)? as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    func: Handle,
    block_size: c_int,
    dynamic_shared: usize,
) -> CUresult {
    unsafe { cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, dynamic_shared, 0) }
}

/// `size_t (*)(int blockSize)`: a kernel's dynamic shared memory for a block size.
type SharedForBlock = Option<unsafe extern "C" fn(c_int) -> usize>;

/// The largest block size (a multiple of 32, at most `limit`) that keeps the most threads of
/// `func` resident, and the grid that fills every SM with it.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut c_int,
    block_size: *mut c_int,
    func: Handle,
    shared_for_block: SharedForBlock,
    dynamic_shared: usize,
    limit: c_int,
    _flags: c_uint,
) -> CUresult {
    let (min_grid, block_size) = unsafe { (Out::new(min_grid), Out::new(block_size)) };
    guard(|| {
        let limit = if limit <= 0 { 1024 } else { limit.min(1024) };
        // Whole warps, largest first; a limit under one warp is the only size.
        let sizes: Vec<c_int> = if limit < 32 { vec![limit] } else { (1..=limit / 32).rev().map(|k| k * 32).collect() };
        let mut best = (0u32, 0 as c_int);
        for size in sizes {
            // SAFETY: the caller's callback, called as the driver API says it is.
            let shared = shared_for_block.map_or(dynamic_shared, |f| unsafe { f(size) });
            let blocks = active_blocks(func, size, shared)?;
            if blocks * size as u32 > best.0 * best.1 as u32 {
                best = (blocks, size);
            }
        }
        let sms = crate::config::config().sms as u32;
        min_grid.set((best.0 * sms) as c_int)?;
        block_size.set(best.1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block_size: *mut c_int,
    func: Handle,
    shared_for_block: SharedForBlock,
    dynamic_shared: usize,
    limit: c_int,
) -> CUresult {
    unsafe {
        cuOccupancyMaxPotentialBlockSizeWithFlags(
            min_grid,
            block_size,
            func,
            shared_for_block,
            dynamic_shared,
            limit,
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    bytes: *mut usize,
    func: Handle,
    num_blocks: c_int,
    block_size: c_int,
) -> CUresult {
    let bytes = unsafe { Out::new(bytes) };
    guard(|| {
        let d = driver()?;
        let (f, ptx) = d.function(func)?;
        if num_blocks <= 0 || !(1..=1024).contains(&block_size) {
            return Err(CUresult::INVALID_VALUE);
        }
        let per_block = MAX_SHARED_BYTES / num_blocks as u64;
        bytes.set(per_block.saturating_sub(ptx.entries()[f.entry].static_shared_bytes() as u64) as usize)
    })
}

/// Every device reaches every other one (they are one memory); a device is not its own peer.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult {
    let can = unsafe { Out::new(can) };
    guard(|| {
        initialized()?;
        device(dev)?;
        device(peer)?;
        can.set((dev != peer) as c_int)
    })
}

/// Bookkeeping only (kernels reach every allocation here), with the real driver's answers to
/// misuse: flags are 0, a context of the same device is `CUDA_ERROR_INVALID_DEVICE` (as
/// `cuDeviceCanAccessPeer` says it cannot be reached), a second enable
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer: Handle, flags: c_uint) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        let current = d.current()?;
        if flags != 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        let peer_device = d.context(peer)?.device;
        let ctx = d.context(current)?;
        if ctx.device == peer_device {
            return Err(CUresult::INVALID_DEVICE);
        }
        if !ctx.peers.insert(peer as usize) {
            return Err(CUresult::PEER_ACCESS_ALREADY_ENABLED);
        }
        Ok(())
    })
}

/// `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED` where access to `peer` was never enabled (or was disabled).
#[no_mangle]
pub unsafe extern "C" fn cuCtxDisablePeerAccess(peer: Handle) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        let current = d.current()?;
        d.context(peer)?;
        if !d.context(current)?.peers.remove(&(peer as usize)) {
            return Err(CUresult::PEER_ACCESS_NOT_ENABLED);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) -> CUresult {
    let (major, minor) = unsafe { (Out::new(major), Out::new(minor)) };
    guard(|| {
        initialized()?;
        device(dev)?;
        let arch = crate::config::config().arch as c_int;
        major.set(arch / 10)?;
        minor.set(arch % 10)
    })
}

/// A fixed UUID per device, the same in every process: `recap-cpu-dev` and the ordinal in three digits.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    let uuid = unsafe { Out::new(uuid) };
    guard(|| {
        initialized()?;
        device(dev)?;
        let mut id = *b"recap-cpu-dev000";
        id[13..].copy_from_slice(format!("{dev:03}").as_bytes());
        uuid.set(id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    unsafe { cuDeviceGetUuid_v2(uuid, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard(|| {
        initialized()?;
        device(dev)?;
        // The bus is the ordinal, as the PCI_BUS_ID attribute says.
        let id = format!("0000:{dev:02x}:00.0\0");
        let len = usize::try_from(len).map_err(|_| CUresult::INVALID_VALUE)?;
        if len < id.len() {
            return Err(CUresult::INVALID_VALUE);
        }
        unsafe { host_mut(bus_id as *mut c_void, id.len()) }?.copy_from_slice(id.as_bytes());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: Handle, version: *mut c_uint) -> CUresult {
    let version = unsafe { Out::new(version) };
    guard(|| {
        let mut d = driver()?;
        let ctx = if ctx.is_null() { d.current()? } else { ctx };
        d.context(ctx)?;
        version.set(3020)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    let flags = unsafe { Out::new(flags) };
    guard(|| {
        drop(ready(None)?);
        flags.set(0)
    })
}

/// `CUlimit`: the stack size (0), printf FIFO (1), malloc heap (2) and the rest, as a GPU
/// reports them; setting one is accepted (the CPU engine has no such limits to set).
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> CUresult {
    let value = unsafe { Out::new(value) };
    guard(|| {
        drop(ready(None)?);
        value.set(match limit {
            0 => 1024,
            1 | 2 => 8 << 20,
            3 => 2,
            4 => 2048,
            5 => 64,
            6 => 0,
            _ => return Err(CUresult::INVALID_VALUE),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, _value: usize) -> CUresult {
    guard(|| {
        drop(ready(None)?);
        if !(0..=6).contains(&limit) {
            return Err(CUresult::INVALID_VALUE);
        }
        Ok(())
    })
}

/// The range of stream priorities a GPU gives (0 is the lowest, -5 the highest); every stream
/// runs alike here.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    let (least, greatest) = unsafe { (Out::new(least), Out::new(greatest)) };
    guard(|| {
        drop(ready(None)?);
        least.set_if_asked(0);
        greatest.set_if_asked(-5);
        Ok(())
    })
}

fn accept_config(func: Option<Handle>) -> CUresult {
    guard(|| {
        let d = ready(None)?;
        if let Some(f) = func {
            d.function(f)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCacheConfig(_config: c_int) -> CUresult {
    accept_config(None)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> CUresult {
    let config = unsafe { Out::new(config) };
    guard(|| {
        drop(ready(None)?);
        config.set(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(func: Handle, _config: c_int) -> CUresult {
    accept_config(Some(func))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelSetCacheConfig(kernel: Handle, _config: c_int, _dev: CUdevice) -> CUresult {
    accept_config(Some(kernel))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetAttribute(
    value: *mut c_int,
    attr: c_int,
    kernel: Handle,
    dev: CUdevice,
) -> CUresult {
    if let Err(status) = device(dev) {
        return status;
    }
    unsafe { crate::module::cuFuncGetAttribute(value, attr, kernel) }
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelSetAttribute(attr: c_int, value: c_int, kernel: Handle, dev: CUdevice) -> CUresult {
    if let Err(status) = device(dev) {
        return status;
    }
    unsafe { crate::module::cuFuncSetAttribute(kernel, attr, value) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    ptr: CUdeviceptr,
) -> CUresult {
    let (base, size) = unsafe { (Out::new(base), Out::new(size)) };
    guard(|| {
        let d = ready(None)?;
        let (b, a) = d.allocation(ptr).ok_or(CUresult::NOT_FOUND)?;
        let s = a.size;
        base.set_if_asked(b);
        size.set_if_asked(s as usize);
        Ok(())
    })
}

/// `CUstreamCallback`: called with the stream, the status of its work and the caller's data.
type StreamCallback = Option<unsafe extern "C" fn(Handle, CUresult, *mut c_void)>;
/// `CUhostFn`.
type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// A host function in stream order runs now: everything issued before it has finished. It runs
/// without the driver's lock held, so it may call the driver (which a GPU's callbacks may not).
fn host_call(stream: Handle, call: impl FnOnce()) -> CUresult {
    let checked = guard(|| ready(Some(stream)).map(drop));
    if checked != CUresult::SUCCESS {
        return checked;
    }
    call();
    CUresult::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback(
    stream: Handle,
    callback: StreamCallback,
    data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    let Some(callback) = callback.filter(|_| flags == 0) else { return CUresult::INVALID_VALUE };
    // SAFETY: the caller's callback, called as the driver API says it is.
    host_call(stream, || unsafe { callback(stream, CUresult::SUCCESS, data) })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(stream: Handle, f: HostFn, data: *mut c_void) -> CUresult {
    let Some(f) = f else { return CUresult::INVALID_VALUE };
    // SAFETY: as above.
    host_call(stream, || unsafe { f(data) })
}

/// No stream is ever capturing: stream capture is not supported (`cuStreamBeginCapture` is
/// `CUDA_ERROR_NOT_SUPPORTED`).
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) -> CUresult {
    let status = unsafe { Out::new(status) };
    guard(|| {
        drop(ready(Some(stream))?);
        status.set(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(stream: Handle, priority: *mut c_int) -> CUresult {
    let priority = unsafe { Out::new(priority) };
    guard(|| {
        drop(ready(Some(stream))?);
        priority.set(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(stream: Handle, flags: *mut c_uint) -> CUresult {
    let flags = unsafe { Out::new(flags) };
    guard(|| {
        drop(ready(Some(stream))?);
        flags.set(0)
    })
}

/// A context's id: its handle, unique while it lives, as the real driver's ids are per process.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(ctx: Handle, id: *mut u64) -> CUresult {
    let id = unsafe { Out::new(id) };
    guard(|| {
        let mut d = driver()?;
        let ctx = if ctx.is_null() { d.current()? } else { ctx };
        d.context(ctx)?;
        id.set(ctx as u64)
    })
}

/// The context a stream was made in; the default streams' is the calling thread's current one.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(stream: Handle, ctx: *mut Handle) -> CUresult {
    let ctx = unsafe { Out::new(ctx) };
    guard(|| {
        let d = ready(Some(stream))?;
        ctx.set(d.stream_context(stream)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetId(stream: Handle, id: *mut u64) -> CUresult {
    let id = unsafe { Out::new(id) };
    guard(|| {
        drop(ready(Some(stream))?);
        id.set(stream as u64)
    })
}

// The per-thread default stream variants: every stream is the same here.
exports! {
    cuStreamAddCallback_ptsz(stream: Handle, callback: StreamCallback, data: *mut c_void, flags: c_uint) =>
        cuStreamAddCallback(stream, callback, data, flags);
    cuLaunchHostFunc_ptsz(stream: Handle, f: HostFn, data: *mut c_void) => cuLaunchHostFunc(stream, f, data);
    cuStreamIsCapturing_ptsz(stream: Handle, status: *mut c_int) => cuStreamIsCapturing(stream, status);
    cuStreamGetPriority_ptsz(stream: Handle, priority: *mut c_int) => cuStreamGetPriority(stream, priority);
    cuStreamGetFlags_ptsz(stream: Handle, flags: *mut c_uint) => cuStreamGetFlags(stream, flags);
    cuStreamGetCtx_ptsz(stream: Handle, ctx: *mut Handle) => cuStreamGetCtx(stream, ctx);
    cuStreamGetId_ptsz(stream: Handle, id: *mut u64) => cuStreamGetId(stream, id);
}

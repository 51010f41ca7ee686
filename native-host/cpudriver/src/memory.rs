//! Device memory: allocations (regions of the one `shared::ptx::Memory`, whose base address is the
//! `CUdeviceptr`), copies, fills, and page-locked host memory (plain host memory here; mapped into
//! the device and managed memory are `mapped.rs`). Every
//! device access is checked: an address outside every allocation is `CUDA_ERROR_INVALID_VALUE`.
//! Each allocation belongs to the device whose context made it: a copy between devices
//! (`cuMemcpyPeer*`) checks that each side is on its context's device, and the pointer
//! attributes answer with the allocation's own context and device.
//! Async calls run at once, like everything else here; their stream is only checked.

use std::alloc::Layout;
use std::ffi::{c_int, c_uint, c_void};

use crate::config::config;
use crate::driver::{driver, ready, Driver, Kind};
use crate::ffi::{host, host_copy, host_mut, CUdeviceptr, Handle, Out};
use crate::result::{guard, CUresult, Result};

fn bad_address(_: shared::ptx::MemError) -> CUresult {
    CUresult::INVALID_VALUE
}

/// A host address the caller passed as host memory must not be a device address: reading it as
/// host memory would fault the process instead of failing the call. Managed memory is both.
fn host_address(d: &Driver, p: *const c_void) -> Result<()> {
    match d.allocation(p as CUdeviceptr) {
        Some((_, a)) if a.kind != Kind::Managed => Err(CUresult::INVALID_VALUE),
        _ => Ok(()),
    }
}

// SAFETY (every `unsafe` below): host pointers and lengths are the caller's, valid as the driver
// API requires of them.

unsafe fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Option<Handle>) -> CUresult {
    guard(|| {
        let d = ready(stream)?;
        host_address(&d, src)?;
        d.memory.write(dst, unsafe { host(src, n) }?).map_err(bad_address)
    })
}

unsafe fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Option<Handle>) -> CUresult {
    guard(|| {
        let d = ready(stream)?;
        host_address(&d, dst)?;
        d.memory.read(src, unsafe { host_mut(dst, n) }?).map_err(bad_address)
    })
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Option<Handle>) -> CUresult {
    guard(|| ready(stream)?.memory.copy(dst, src, n as u64).map_err(bad_address))
}

/// `cuMemcpyPeer`: `n` bytes from `src`, device memory of `src_ctx`'s device, to `dst`, of
/// `dst_ctx`'s. An address of another device is `CUDA_ERROR_INVALID_VALUE`.
fn peer(
    dst: CUdeviceptr,
    dst_ctx: Handle,
    src: CUdeviceptr,
    src_ctx: Handle,
    n: usize,
    stream: Option<Handle>,
) -> CUresult {
    guard(|| {
        let mut d = ready(stream)?;
        let on = |d: &mut Driver, addr: CUdeviceptr, ctx: Handle| -> Result<()> {
            let device = d.context(ctx)?.device;
            match d.allocation(addr) {
                Some((_, a)) if a.device == device => Ok(()),
                _ => Err(CUresult::INVALID_VALUE),
            }
        };
        on(&mut d, dst, dst_ctx)?;
        on(&mut d, src, src_ctx)?;
        d.memory.copy(dst, src, n as u64).map_err(bad_address)
    })
}

/// `cuMemcpy`: each side is device memory when it falls in an allocation, host memory otherwise.
unsafe fn unified(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Option<Handle>) -> CUresult {
    let (dst_device, src_device) = match ready(stream) {
        Ok(d) => (d.is_device(dst), d.is_device(src)),
        Err(status) => return status,
    };
    match (dst_device, src_device) {
        (true, false) => unsafe { htod(dst, src as *const c_void, n, stream) },
        (false, true) => unsafe { dtoh(dst as *mut c_void, src, n, stream) },
        (false, false) => guard(|| unsafe { host_copy(dst as *mut c_void, src as *const c_void, n) }),
        (true, true) => dtod(dst, src, n, stream),
    }
}

/// Fills `count` elements of `pattern`'s width; the address must be aligned to that width.
fn memset(dst: CUdeviceptr, pattern: &[u8], count: usize, stream: Option<Handle>) -> CUresult {
    guard(|| {
        let d = ready(stream)?;
        if !dst.is_multiple_of(pattern.len() as u64) {
            return Err(CUresult::INVALID_VALUE);
        }
        let len = (count as u64).checked_mul(pattern.len() as u64).ok_or(CUresult::INVALID_VALUE)?;
        d.memory.fill(dst, len, pattern).map_err(bad_address)
    })
}

fn alloc(dptr: &Out<CUdeviceptr>, size: usize, stream: Option<Handle>) -> CUresult {
    guard(|| {
        dptr.check()?;
        let p = ready(stream)?.alloc(size)?;
        dptr.set(p)
    })
}

fn free(dptr: CUdeviceptr, stream: Option<Handle>) -> CUresult {
    guard(|| ready(stream)?.free(dptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    alloc(&unsafe { Out::new(dptr) }, size, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    free(dptr, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let (free, total) = unsafe { (Out::new(free), Out::new(total)) };
    guard(|| {
        let d = ready(None)?;
        free.set(config().memory.saturating_sub(d.allocated) as usize)?;
        total.set(config().memory as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(p: *mut *mut c_void, size: usize) -> CUresult {
    let p = unsafe { Out::new(p) };
    guard(|| {
        let mut d = ready(None)?;
        p.check()?;
        if size == 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        // Whole words, so that memory mapped into the device (`mapped.rs`) is words of its own.
        let layout = size
            .checked_next_multiple_of(4)
            .and_then(|n| Layout::from_size_align(n, 64).ok())
            .ok_or(CUresult::OUT_OF_MEMORY)?;
        // SAFETY: the layout's size is not zero.
        let mem = unsafe { std::alloc::alloc(layout) };
        if mem.is_null() {
            return Err(CUresult::OUT_OF_MEMORY);
        }
        d.host_allocations.insert(mem as usize, layout);
        p.set(mem as *mut c_void)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        let layout = d.host_allocations.remove(&(p as usize)).ok_or(CUresult::INVALID_VALUE)?;
        crate::mapped::unmap_host(&mut d, p);
        // SAFETY: `p` came from `cuMemAllocHost_v2` with this layout, and is freed once (it has
        // just left the table).
        unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        Ok(())
    })
}

/// `CUpointer_attribute`: context (1) and device ordinal (9) of the allocation's maker, memory
/// type (2: host for mapped host memory, device otherwise), device (3) and host (4) pointers,
/// whether it is managed (8), range start (11) and size (12) of device allocations; the memory
/// type of `cuMemAllocHost` memory.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: c_int, ptr: CUdeviceptr) -> CUresult {
    guard(|| {
        let d = ready(None)?;
        let Some((base, a)) = d.allocation(ptr) else {
            if attr == 2
                && (d.host_allocations.contains_key(&(ptr as usize)) || d.registered.contains_key(&(ptr as usize)))
            {
                return unsafe { Out::new(data as *mut c_uint) }.set(1);
            }
            return Err(CUresult::INVALID_VALUE);
        };
        let host = match a.kind {
            Kind::Device => None,
            Kind::Managed => Some(ptr as usize),
            Kind::Mapped { host } => Some(host + (ptr - base) as usize),
        };
        match attr {
            1 => unsafe { Out::new(data as *mut Handle) }.set(a.ctx),
            2 => {
                unsafe { Out::new(data as *mut c_uint) }.set(if matches!(a.kind, Kind::Mapped { .. }) { 1 } else { 2 })
            }
            3 => unsafe { Out::new(data as *mut CUdeviceptr) }.set(ptr),
            4 => unsafe { Out::new(data as *mut *mut c_void) }.set(host.ok_or(CUresult::INVALID_VALUE)? as *mut c_void),
            // A C `bool`, one byte.
            8 => unsafe { Out::new(data as *mut u8) }.set(u8::from(a.kind == Kind::Managed)),
            9 => unsafe { Out::new(data as *mut c_int) }.set(a.device),
            11 => unsafe { Out::new(data as *mut CUdeviceptr) }.set(base),
            12 => unsafe { Out::new(data as *mut usize) }.set(a.size as usize),
            _ => Err(CUresult::INVALID_VALUE),
        }
    })
}

exports! {
    cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, s: Handle) | cuMemAllocAsync_ptsz =>
        alloc(&Out::new(dptr), size, Some(s));
    cuMemFreeAsync(dptr: CUdeviceptr, s: Handle) | cuMemFreeAsync_ptsz => free(dptr, Some(s));
    cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) | cuMemcpyHtoD_v2_ptds => htod(dst, src, n, None);
    cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) | cuMemcpyDtoH_v2_ptds => dtoh(dst, src, n, None);
    cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) | cuMemcpyDtoD_v2_ptds => dtod(dst, src, n, None);
    cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) | cuMemcpy_ptds => unified(dst, src, n, None);
    cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: Handle) | cuMemcpyHtoDAsync_v2_ptsz => htod(dst, src, n, Some(s));
    cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: Handle) | cuMemcpyDtoHAsync_v2_ptsz => dtoh(dst, src, n, Some(s));
    cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: Handle) | cuMemcpyDtoDAsync_v2_ptsz => dtod(dst, src, n, Some(s));
    cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: Handle) | cuMemcpyAsync_ptsz => unified(dst, src, n, Some(s));
    cuMemcpyPeer(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize) | cuMemcpyPeer_ptds =>
        peer(dst, dst_ctx, src, src_ctx, n, None);
    cuMemcpyPeerAsync(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize, s: Handle) | cuMemcpyPeerAsync_ptsz =>
        peer(dst, dst_ctx, src, src_ctx, n, Some(s));
    cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) | cuMemsetD8_v2_ptds => memset(dst, &[v], n, None);
    cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) | cuMemsetD16_v2_ptds => memset(dst, &v.to_le_bytes(), n, None);
    cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) | cuMemsetD32_v2_ptds => memset(dst, &v.to_le_bytes(), n, None);
    cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: Handle) | cuMemsetD8Async_ptsz => memset(dst, &[v], n, Some(s));
    cuMemsetD16Async(dst: CUdeviceptr, v: u16, n: usize, s: Handle) | cuMemsetD16Async_ptsz => memset(dst, &v.to_le_bytes(), n, Some(s));
    cuMemsetD32Async(dst: CUdeviceptr, v: u32, n: usize, s: Handle) | cuMemsetD32Async_ptsz => memset(dst, &v.to_le_bytes(), n, Some(s));
}

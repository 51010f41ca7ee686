//! Host memory that kernels reach, on a machine with one memory: managed memory
//! (`cuMemAllocManaged`) and page-locked host memory mapped into the device (`cuMemHostAlloc`
//! and `cuMemHostRegister` with `DEVICEMAP`, `cuMemHostGetDevicePointer`). Each is a region of
//! the driver's `shared::ptx::Memory` whose storage is the host bytes themselves
//! (`Memory::add_host_region`): a kernel's stores are in the host's bytes when the launch returns,
//! and what the host writes is what the next kernel or copy reads, with no copy either way.
//!
//! Managed memory has one address for the host and the device: its pages are mapped (`mmap`) at
//! the start of a window of the device address space that holds no region, and that window's
//! region is lent them. Mapped host memory keeps the address the program has, and gets a device
//! address of its own, a fresh window, which `cuMemHostGetDevicePointer` gives; the device says
//! so (`CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM` is 0), as a GPU without unified addressing of
//! host memory does. Prefetches, advice and stream attachments concern where pages live, and a
//! CPU has one place: they check their arguments as the real driver does and do nothing else.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;

use crate::config::config;
use crate::driver::{device, ready, Allocation, Driver, Kind};
use crate::ffi::{CUdevice, CUdeviceptr, Handle, Out};
use crate::result::{guard, CUresult, Result};

/// Host memory mapped into the device: `size` bytes from its host address (the key of
/// `Driver::host_maps`), whose first byte the device reaches at `device`, in the region at `region`.
pub(crate) struct HostMap {
    pub size: usize,
    pub device: CUdeviceptr,
    pub region: CUdeviceptr,
}

/// `CU_MEMHOSTALLOC_PORTABLE`, `_DEVICEMAP`, `_WRITECOMBINED` (the same bits as
/// `CU_MEMHOSTREGISTER_PORTABLE`, `_DEVICEMAP`, `_IOMEMORY`), and `CU_MEMHOSTREGISTER_READ_ONLY`.
pub(crate) const HOST_DEVICEMAP: c_uint = 2;
const HOST_ALLOC_FLAGS: c_uint = 1 | 2 | 4;
const HOST_REGISTER_FLAGS: c_uint = 1 | 2 | 4 | 8;

/// `CU_DEVICE_CPU`: the host, where a device ordinal is asked for.
const DEVICE_CPU: CUdevice = -1;

/// Maps `size` bytes of host memory at `host` into the device, for the current context; `owner`
/// says whether they came from `cuMemHostAlloc`. Ranges that overlap one mapped already are
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
///
/// # Safety
/// `host` is valid for reads and writes of `size` bytes until [`unmap_host`] is called for it.
pub(crate) unsafe fn map_host(d: &mut Driver, host: *mut c_void, size: usize) -> Result<CUdeviceptr> {
    let ctx = d.current()?;
    let dev = d.context(ctx)?.device;
    let start = host as usize;
    let end = start.checked_add(size).ok_or(CUresult::INVALID_VALUE)?;
    let overlaps = d.host_maps.range(..end).next_back().is_some_and(|(&s, m)| s + m.size > start);
    if overlaps {
        return Err(CUresult::HOST_MEMORY_ALREADY_REGISTERED);
    }
    // The region's words start at the 4-byte boundary at or below `host`: the bytes before it
    // in that word share its page, so they are readable too, and no access reaches them.
    let storage = start & !3;
    let offset = start - storage;
    let storage_ptr = NonNull::new(storage as *mut u8).ok_or(CUresult::INVALID_VALUE)?;
    let len = (size + offset) as u64;
    // SAFETY: the bytes are the caller's to lend until they are unmapped (this function's
    // contract); the word rounding stays in the pages that hold them.
    let region = unsafe { d.memory.add_host_region(storage_ptr, len, None) }.map_err(|e| {
        crate::result::report(format_args!("cannot map {size} bytes of host memory into the device: {e}"));
        CUresult::OUT_OF_MEMORY
    })?;
    d.allocations.insert(region, Allocation { size: len, ctx, device: dev, kind: Kind::Mapped { host: storage } });
    let device = region + offset as u64;
    d.host_maps.insert(start, HostMap { size, device, region });
    Ok(device)
}

/// Ends the mapping of host memory mapped at `host`, if it is.
pub(crate) fn unmap_host(d: &mut Driver, host: *mut c_void) {
    if let Some(m) = d.host_maps.remove(&(host as usize)) {
        d.allocations.remove(&m.region);
        let _ = d.memory.remove_region(m.region);
    }
}

/// The device address of host address `p` in mapped host memory.
fn device_pointer(d: &Driver, p: usize) -> Option<CUdeviceptr> {
    let (&start, m) = d.host_maps.range(..=p).next_back()?;
    (p - start < m.size).then(|| m.device + (p - start) as u64)
}

/// `cuMemHostAlloc`: page-locked memory is plain host memory here, mapped into the device with
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> CUresult {
    if flags & !HOST_ALLOC_FLAGS != 0 {
        return CUresult::INVALID_VALUE;
    }
    // SAFETY: the caller's out-parameter.
    let status = unsafe { crate::memory::cuMemAllocHost_v2(p, size) };
    if status != CUresult::SUCCESS || flags & HOST_DEVICEMAP == 0 {
        return status;
    }
    // SAFETY: `cuMemAllocHost_v2` succeeded, so `p` holds the allocation's address.
    let host = unsafe { p.read_unaligned() };
    let mapped = guard(|| {
        let mut d = ready(None)?;
        // SAFETY: the allocation lives until `cuMemFreeHost`, which unmaps it first.
        unsafe { map_host(&mut d, host, size) }.map(drop)
    });
    if mapped != CUresult::SUCCESS {
        // SAFETY: the allocation just made, freed once.
        unsafe { crate::memory::cuMemFreeHost(host) };
    }
    mapped
}

/// Registering host memory changes nothing for copies (they read and write any host memory);
/// with `CU_MEMHOSTREGISTER_DEVICEMAP` the memory is mapped into the device.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        if p.is_null() || size == 0 || flags & !HOST_REGISTER_FLAGS != 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        let (start, end) = (p as usize, (p as usize).checked_add(size).ok_or(CUresult::INVALID_VALUE)?);
        if d.registered.iter().any(|(&s, &n)| s < end && start < s + n) {
            return Err(CUresult::HOST_MEMORY_ALREADY_REGISTERED);
        }
        if flags & HOST_DEVICEMAP != 0 {
            // SAFETY: registered memory stays the program's until `cuMemHostUnregister`, which
            // unmaps it first, as the driver API requires.
            unsafe { map_host(&mut d, p, size) }?;
        }
        d.registered.insert(start, size);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        d.registered.remove(&(p as usize)).ok_or(CUresult::HOST_MEMORY_NOT_REGISTERED)?;
        unmap_host(&mut d, p);
        Ok(())
    })
}

/// The device address of mapped host memory; `flags` must be 0.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    let pdptr = unsafe { Out::new(pdptr) };
    guard(|| {
        let d = ready(None)?;
        if flags != 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        pdptr.set(device_pointer(&d, p as usize).ok_or(CUresult::INVALID_VALUE)?)
    })
}

/// Managed memory's pages go at window starts from 16 TiB up to 128 TiB, the end of a process's
/// address space on x86-64 and arm64 with 4-level page tables: addresses programs rarely map, and
/// windows fresh device allocations reach only after thousands of them (those in use are skipped).
const FIRST_WINDOW: u64 = 256;
const END_WINDOW: u64 = 2048;
const PAGE: u64 = 4096;

/// Maps `size` bytes of zeroed pages at the start of a free window and lends them to its region:
/// the one address of managed memory.
fn map_managed(d: &mut Driver, size: u64) -> Result<CUdeviceptr> {
    let len = usize::try_from(size.div_ceil(PAGE) * PAGE).map_err(|_| CUresult::OUT_OF_MEMORY)?;
    for window in FIRST_WINDOW..END_WINDOW {
        let at = window << 36;
        // SAFETY: a fresh anonymous mapping that replaces nothing (`MAP_FIXED_NOREPLACE`).
        let p = unsafe {
            libc::mmap(
                at as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        let lent = NonNull::new(p as *mut u8).filter(|_| p as u64 == at);
        // SAFETY: the pages were just mapped and stay until `unmap_managed`, after the region goes.
        let added = lent.map(|host| unsafe { d.memory.add_host_region(host, size, Some(at)) });
        match added {
            Some(Ok(base)) => return Ok(base),
            // A kernel that takes the address as a hint put it elsewhere, or a device region holds
            // the window: try the next one.
            // SAFETY: the mapping just made, which nothing else uses.
            _ => unsafe { libc::munmap(p, len) },
        };
    }
    crate::result::report(format_args!("cannot place {size} bytes of managed memory: no free window"));
    Err(CUresult::OUT_OF_MEMORY)
}

/// Gives back the pages of managed memory whose region has gone.
pub(crate) fn unmap_managed(base: CUdeviceptr, size: u64) {
    let len = (size.div_ceil(PAGE) * PAGE) as usize;
    // SAFETY: the pages `map_managed` mapped at `base`, whose region was removed.
    unsafe { libc::munmap(base as *mut c_void, len) };
}

/// `CU_MEM_ATTACH_GLOBAL`, `_HOST`, `_SINGLE`.
const ATTACH_GLOBAL: c_uint = 1;
const ATTACH_HOST: c_uint = 2;
const ATTACH_SINGLE: c_uint = 4;

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: c_uint) -> CUresult {
    let dptr = unsafe { Out::new(dptr) };
    guard(|| {
        let mut d = ready(None)?;
        dptr.check()?;
        if size == 0 || !matches!(flags, ATTACH_GLOBAL | ATTACH_HOST) {
            return Err(CUresult::INVALID_VALUE);
        }
        if d.allocated.saturating_add(size as u64) > config().memory {
            return Err(CUresult::OUT_OF_MEMORY);
        }
        let ctx = d.current()?;
        let dev = d.context(ctx)?.device;
        let base = map_managed(&mut d, size as u64)?;
        d.allocations.insert(base, Allocation { size: size as u64, ctx, device: dev, kind: Kind::Managed });
        d.allocated += size as u64;
        dptr.set(base)
    })
}

/// Whether `count` bytes from `ptr` are managed memory, as prefetches and advice require.
fn managed_range(d: &Driver, ptr: CUdeviceptr, count: usize) -> Result<()> {
    match d.allocation(ptr) {
        Some((base, a)) if a.kind == Kind::Managed && count > 0 && ptr - base + count as u64 <= a.size => Ok(()),
        _ => Err(CUresult::INVALID_VALUE),
    }
}

/// A device ordinal where the host (`CU_DEVICE_CPU`) may be named too.
fn device_or_host(dev: CUdevice) -> Result<()> {
    if dev == DEVICE_CPU {
        return Ok(());
    }
    device(dev)
}

/// `CUmemLocation`: a kind (`CU_MEM_LOCATION_TYPE_DEVICE` 1, `_HOST` 2, `_HOST_NUMA` 3,
/// `_HOST_NUMA_CURRENT` 4) and an id (the device ordinal, or the NUMA node).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// A location a program names: a valid device, or the host.
pub(crate) fn check_location(l: MemLocation) -> Result<()> {
    match l.kind {
        1 => device(l.id),
        2 | 4 => Ok(()),
        3 if l.id >= 0 => Ok(()),
        _ => Err(CUresult::INVALID_VALUE),
    }
}

/// `CUmem_advise`: set and unset read-mostly (1, 2), a preferred location (3, 4), an accessor (5, 6).
fn advice(advice: c_int, place: impl FnOnce() -> Result<()>) -> Result<()> {
    match advice {
        1 | 2 | 4 => Ok(()),
        3 | 5 | 6 => place(),
        _ => Err(CUresult::INVALID_VALUE),
    }
}

fn prefetch(ptr: CUdeviceptr, count: usize, to: Result<()>, stream: Handle) -> CUresult {
    guard(|| {
        let d = ready(Some(stream))?;
        to?;
        managed_range(&d, ptr, count)
    })
}

fn advise(ptr: CUdeviceptr, count: usize, what: c_int, place: impl FnOnce() -> Result<()>) -> CUresult {
    guard(|| {
        let d = ready(None)?;
        managed_range(&d, ptr, count)?;
        advice(what, place)
    })
}

/// Attaching managed memory to a stream: the whole allocation (`length` 0 or its size), with one
/// of the attach flags.
fn attach(stream: Handle, ptr: CUdeviceptr, length: usize, flags: c_uint) -> CUresult {
    guard(|| {
        let d = ready(Some(stream))?;
        if !matches!(flags, ATTACH_GLOBAL | ATTACH_HOST | ATTACH_SINGLE) {
            return Err(CUresult::INVALID_VALUE);
        }
        match d.allocation(ptr) {
            Some((base, a)) if a.kind == Kind::Managed && base == ptr && (length == 0 || length as u64 == a.size) => {
                Ok(())
            }
            _ => Err(CUresult::INVALID_VALUE),
        }
    })
}

exports! {
    cuMemPrefetchAsync(ptr: CUdeviceptr, count: usize, dev: CUdevice, s: Handle) | cuMemPrefetchAsync_ptsz =>
        prefetch(ptr, count, device_or_host(dev), s);
    cuMemPrefetchAsync_v2(ptr: CUdeviceptr, count: usize, to: MemLocation, flags: c_uint, s: Handle)
        | cuMemPrefetchAsync_v2_ptsz =>
        prefetch(ptr, count, check_location(to).and(if flags == 0 { Ok(()) } else { Err(CUresult::INVALID_VALUE) }), s);
    cuMemAdvise(ptr: CUdeviceptr, count: usize, what: c_int, dev: CUdevice) =>
        advise(ptr, count, what, || device_or_host(dev));
    cuMemAdvise_v2(ptr: CUdeviceptr, count: usize, what: c_int, at: MemLocation) =>
        advise(ptr, count, what, || check_location(at));
    cuStreamAttachMemAsync(s: Handle, ptr: CUdeviceptr, length: usize, flags: c_uint) | cuStreamAttachMemAsync_ptsz =>
        attach(s, ptr, length, flags);
}

#[cfg(test)]
#[path = "mapped_tests.rs"]
mod tests;

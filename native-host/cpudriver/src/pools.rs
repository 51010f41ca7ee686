//! Stream-ordered memory pools (`cuDeviceGetMemPool`, `cuMemAllocFromPoolAsync`, `cuMemPool*`),
//! which cuda.core's `Device.allocate` goes through: a pool is bookkeeping here, since every
//! allocation is a region of the driver's one memory and work is done when issued. Each device has
//! a default pool, its current one until `cuDeviceSetMemPool`; a pool allocates on its device,
//! keeps the attributes a program sets (release threshold, reuse policies) and counts the bytes of
//! its allocations still live. Pools shared between processes (`handleTypes`, export and import)
//! are `CUDA_ERROR_NOT_SUPPORTED`, as IPC is.

use std::ffi::{c_int, c_void};

use crate::driver::{device, driver, ready, Driver};
use crate::ffi::{element, CUdevice, CUdeviceptr, Handle, Out};
use crate::mapped::MemLocation;
use crate::result::{guard, CUresult, Result};

pub(crate) struct Pool {
    device: CUdevice,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (1 to 3) and `_RELEASE_THRESHOLD` (4), as set.
    settings: [u64; 4],
    /// The high-water marks of reserved and used bytes (`_RESERVED_MEM_HIGH`, `_USED_MEM_HIGH`).
    high: u64,
    /// Bases of the allocations made from it (those since freed are skipped when counting).
    allocations: Vec<CUdeviceptr>,
    /// Whether `cuMemPoolCreate` made it (only those may be destroyed).
    created: bool,
}

impl Pool {
    fn new(device: CUdevice, created: bool) -> Pool {
        // The reuse policies are on by default; the release threshold is 0.
        Pool { device, settings: [1, 1, 1, 0], high: 0, allocations: Vec::new(), created }
    }
}

/// Bytes of `pool`'s allocations still live, dropping the freed ones from its list.
fn in_use(d: &mut Driver, pool: Handle) -> Result<u64> {
    let Driver { pools, allocations, .. } = d;
    let p = pools.get_mut(pool)?;
    p.allocations.retain(|base| allocations.contains_key(base));
    Ok(p.allocations.iter().filter_map(|b| allocations.get(b)).map(|a| a.size).sum())
}

/// Device `dev`'s default pool, made on first use.
fn default_pool(d: &mut Driver, dev: CUdevice) -> Result<Handle> {
    device(dev)?;
    if let Some(&p) = d.default_pools.get(&dev) {
        return Ok(p);
    }
    let p = d.pools.insert(Pool::new(dev, false));
    d.default_pools.insert(dev, p);
    Ok(p)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    let pool = unsafe { Out::new(pool) };
    guard(|| {
        let mut d = driver()?;
        pool.check()?;
        pool.set(default_pool(&mut d, dev)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    let pool = unsafe { Out::new(pool) };
    guard(|| {
        let mut d = driver()?;
        pool.check()?;
        let current = match d.current_pools.get(&dev) {
            Some(&p) => p,
            None => default_pool(&mut d, dev)?,
        };
        pool.set(current)
    })
}

/// A pool of another device is `CUDA_ERROR_INVALID_VALUE`, as on a GPU.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: Handle) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        device(dev)?;
        if d.pools.get(pool)?.device != dev {
            return Err(CUresult::INVALID_VALUE);
        }
        d.current_pools.insert(dev, pool);
        Ok(())
    })
}

/// `CUmemPoolProps`: its allocation type (`CU_MEM_ALLOCATION_TYPE_PINNED`, 1), the handle types
/// it exports (none here), and its location, a device; the rest is not read.
#[repr(C)]
pub struct PoolProps {
    alloc_type: c_int,
    handle_types: c_int,
    location: MemLocation,
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut Handle, props: *const PoolProps) -> CUresult {
    let pool = unsafe { Out::new(pool) };
    guard(|| {
        let mut d = driver()?;
        pool.check()?;
        // SAFETY: the caller's properties, a whole `CUmemPoolProps`.
        let props = unsafe { element(props as *const [c_int; 4], 0) }?;
        let [alloc_type, handle_types, kind, id] = props;
        if alloc_type != 1 || kind != 1 {
            return Err(CUresult::INVALID_VALUE);
        }
        device(id)?;
        if handle_types != 0 {
            return Err(crate::result::not_supported("cuMemPoolCreate with shareable handle types"));
        }
        pool.set(d.pools.insert(Pool::new(id, true)))
    })
}

/// A device's default pool cannot be destroyed; a destroyed current pool gives way to the default.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: Handle) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        if !d.pools.get(pool)?.created {
            return Err(CUresult::INVALID_VALUE);
        }
        d.pools.remove(pool)?;
        d.current_pools.retain(|_, &mut p| p != pool);
        Ok(())
    })
}

fn alloc_from(dptr: &Out<CUdeviceptr>, size: usize, pool: Handle, stream: Handle) -> CUresult {
    guard(|| {
        dptr.check()?;
        let mut d = ready(Some(stream))?;
        d.pools.get(pool)?;
        let base = d.alloc(size)?;
        d.pools.get_mut(pool)?.allocations.push(base);
        let bytes = in_use(&mut d, pool)?;
        let p = d.pools.get_mut(pool)?;
        p.high = p.high.max(bytes);
        dptr.set(base)
    })
}

/// `CUmemPool_attribute`: the reuse policies (1 to 3, `int`) and release threshold (4) as set;
/// reserved and used bytes, now (5, 7) and at their highest (6, 8), are the same here (a pool
/// holds no memory that no allocation uses).
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: Handle, attr: c_int, value: *mut c_void) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        let bytes = in_use(&mut d, pool)?;
        let p = d.pools.get(pool)?;
        match attr {
            // SAFETY (each): the caller's value, of the attribute's type.
            1..=3 => unsafe { Out::new(value as *mut c_int) }.set(p.settings[attr as usize - 1] as c_int),
            4 => unsafe { Out::new(value as *mut u64) }.set(p.settings[3]),
            5 | 7 => unsafe { Out::new(value as *mut u64) }.set(bytes),
            6 | 8 => unsafe { Out::new(value as *mut u64) }.set(p.high),
            _ => Err(CUresult::INVALID_VALUE),
        }
    })
}

/// Sets a reuse policy or the release threshold; the high-water marks may only be reset to 0.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(pool: Handle, attr: c_int, value: *mut c_void) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        let bytes = in_use(&mut d, pool)?;
        let p = d.pools.get_mut(pool)?;
        // SAFETY (each): the caller's value, of the attribute's type.
        match attr {
            1..=3 => p.settings[attr as usize - 1] = unsafe { element(value as *const c_int, 0) }? as u64,
            4 => p.settings[3] = unsafe { element(value as *const u64, 0) }?,
            6 | 8 if unsafe { element(value as *const u64, 0) }? == 0 => p.high = bytes,
            _ => return Err(CUresult::INVALID_VALUE),
        }
        Ok(())
    })
}

/// Nothing to give back: a pool holds no memory beyond its live allocations.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Handle, _min_bytes_to_keep: usize) -> CUresult {
    guard(|| driver()?.pools.get(pool).map(drop))
}

/// `CUmemAccess_flags`: every device reads and writes every pool here (`_PROT_READWRITE`, 3).
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(flags: *mut c_int, pool: Handle, location: *const MemLocation) -> CUresult {
    let flags = unsafe { Out::new(flags) };
    guard(|| {
        let d = driver()?;
        d.pools.get(pool)?;
        // SAFETY: the caller's location.
        let at = unsafe { element(location, 0) }?;
        crate::mapped::check_location(at)?;
        flags.set(3)
    })
}

/// `CUmemAccessDesc`: a location and its access flags (0 none, 1 read, 3 read and write).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AccessDesc {
    location: MemLocation,
    flags: c_int,
}

/// Access is checked and granted as asked; kernels reach every pool's memory whatever it says.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: Handle, map: *const AccessDesc, count: usize) -> CUresult {
    guard(|| {
        let d = driver()?;
        d.pools.get(pool)?;
        for i in 0..count {
            // SAFETY: `count` descriptors, by the driver API's contract.
            let desc = unsafe { element(map, i) }?;
            crate::mapped::check_location(desc.location)?;
            if !matches!(desc.flags, 0 | 1 | 3) {
                return Err(CUresult::INVALID_VALUE);
            }
        }
        Ok(())
    })
}

exports! {
    cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, size: usize, pool: Handle, s: Handle) | cuMemAllocFromPoolAsync_ptsz =>
        alloc_from(&Out::new(dptr), size, pool, s);
}

#[cfg(test)]
#[path = "pools_tests.rs"]
mod tests;

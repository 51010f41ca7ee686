//! Initialisation, the devices (`RECAP_CPU_DEVICES` of them, alike) and their contexts: a primary
//! context per device, created contexts on any device, and the per-thread context stack.

use std::ffi::{c_char, c_int, c_uint, c_void};

use shared::ptx::MAX_SHARED_BYTES;

use crate::config::config;
use crate::driver::{self, device, driver, initialized, lock, Context};
use crate::ffi::{host_mut, CUdevice, Handle, Out};
use crate::result::{guard, CUresult};

/// What `cuDriverGetVersion` reports: CUDA 13.0.
pub(crate) const DRIVER_VERSION: c_int = 13000;

const DEVICE_NAME: &[u8] = b"recap CPU device (shared::ptx)";

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard(|| {
        if flags != 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        lock().initialized = true;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    // SAFETY (here and in every export below): the pointers are the caller's, valid as the driver
    // API requires of them.
    let version = unsafe { Out::new(version) };
    guard(|| version.set(DRIVER_VERSION))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    let count = unsafe { Out::new(count) };
    guard(|| {
        initialized()?;
        count.set(config().devices as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    let dev = unsafe { Out::new(dev) };
    guard(|| {
        initialized()?;
        device(ordinal)?;
        dev.set(ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard(|| {
        initialized()?;
        device(dev)?;
        let len = usize::try_from(len).map_err(|_| CUresult::INVALID_VALUE)?;
        if len == 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        let out = unsafe { host_mut(name as *mut c_void, len) }?;
        let n = DEVICE_NAME.len().min(len - 1);
        out[..n].copy_from_slice(&DEVICE_NAME[..n]);
        out[n] = 0;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    let bytes = unsafe { Out::new(bytes) };
    guard(|| {
        initialized()?;
        device(dev)?;
        bytes.set(config().memory as usize)
    })
}

/// `CUdevice_attribute` values of device `dev`: those of a compute capability 9.0 device whose
/// limits are the CPU engine's, alike on every device but for its PCI bus (its ordinal); 0 for
/// attributes the engine has no notion of, `None` past the enum's end.
fn attribute(attr: c_int, dev: CUdevice) -> Option<c_int> {
    let value = match attr {
        // MAX_THREADS_PER_BLOCK, MAX_BLOCK_DIM_X, _Y, _Z
        1..=3 => 1024,
        4 => 64,
        // MAX_GRID_DIM_X, _Y, _Z
        5 => i32::MAX,
        6 | 7 => 65535,
        // MAX_SHARED_MEMORY_PER_BLOCK, TOTAL_CONSTANT_MEMORY, WARP_SIZE, MAX_PITCH
        8 => 48 * 1024,
        9 => 64 * 1024,
        10 => 32,
        11 => i32::MAX,
        // MAX_REGISTERS_PER_BLOCK and _PER_MULTIPROCESSOR, CLOCK_RATE (kHz), TEXTURE_ALIGNMENT
        12 | 82 => 65536,
        13 => 1_000_000,
        14 => 512,
        // MULTIPROCESSOR_COUNT: blocks run on all cores
        16 => config().sms as c_int,
        // PCI_BUS_ID: one bus per device, as `cuDeviceGetPCIBusId` says
        33 => dev,
        // CAN_MAP_HOST_MEMORY (mapped.rs)
        19 => 1,
        // MAX_THREADS_PER_MULTIPROCESSOR, UNIFIED_ADDRESSING
        39 => 2048,
        41 => 1,
        // COMPUTE_CAPABILITY_MAJOR, _MINOR
        75 => (config().arch / 10) as c_int,
        76 => (config().arch % 10) as c_int,
        // MANAGED_MEMORY, CONCURRENT_MANAGED_ACCESS: one memory, which host and kernels reach at
        // once (mapped.rs)
        83 | 89 => 1,
        // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, _PER_BLOCK_OPTIN: the engine's limit
        81 | 97 => MAX_SHARED_BYTES as c_int,
        // MAX_BLOCKS_PER_MULTIPROCESSOR, MEMORY_POOLS_SUPPORTED
        106 => 32,
        115 => 1,
        _ => 0,
    };
    (1..=200).contains(&attr).then_some(value)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, dev: CUdevice) -> CUresult {
    let value = unsafe { Out::new(value) };
    guard(|| {
        initialized()?;
        device(dev)?;
        value.set(attribute(attr, dev).ok_or(CUresult::INVALID_VALUE)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: CUdevice) -> CUresult {
    let ctx = unsafe { Out::new(ctx) };
    guard(|| {
        let mut d = driver()?;
        device(dev)?;
        ctx.check()?;
        let h = match d.primary.get(&dev) {
            Some(&h) => h,
            None => {
                let h = d.contexts.insert(Context::new(dev, true));
                d.primary.insert(dev, h);
                h
            }
        };
        d.context(h)?.retained += 1;
        ctx.set(h)
    })
}

fn primary(dev: CUdevice, f: impl FnOnce(&mut Context) -> crate::result::Result<()>) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        device(dev)?;
        let h = *d.primary.get(&dev).ok_or(CUresult::INVALID_CONTEXT)?;
        f(d.context(h)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    primary(dev, |c| {
        c.retained = c.retained.checked_sub(1).ok_or(CUresult::INVALID_CONTEXT)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    unsafe { cuDevicePrimaryCtxRelease_v2(dev) }
}

/// Clears the primary context's sticky fault; its memory and modules stay (they are the driver's).
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    primary(dev, |c| {
        c.fault = None;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    unsafe { cuDevicePrimaryCtxReset_v2(dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CUresult {
    let (flags, active) = unsafe { (Out::new(flags), Out::new(active)) };
    guard(|| {
        let d = driver()?;
        device(dev)?;
        let retained = d.primary.get(&dev).and_then(|&h| d.contexts.get(h).ok()).is_some_and(|c| c.retained > 0);
        flags.set(0)?;
        active.set(retained as c_int)
    })
}

fn create(ctx: &Out<Handle>, dev: CUdevice) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        device(dev)?;
        ctx.check()?;
        let h = d.contexts.insert(Context::new(dev, false));
        driver::push_current(h);
        ctx.set(h)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(ctx: *mut Handle, _flags: c_uint, dev: CUdevice) -> CUresult {
    create(&unsafe { Out::new(ctx) }, dev)
}

/// Execution affinity parameters are not supported (there is no partition of the CPU to ask for).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    ctx: *mut Handle,
    _params: *mut c_void,
    num_params: c_int,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    if num_params > 0 {
        return CUresult::NOT_SUPPORTED;
    }
    create(&unsafe { Out::new(ctx) }, dev)
}

/// `CUctxCreateParams`: execution affinity and CIG parameters.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CtxCreateParams {
    exec_affinity: *mut c_void,
    num_exec_affinity: c_int,
    cig: *mut c_void,
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    ctx: *mut Handle,
    params: *const CtxCreateParams,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    if !params.is_null() {
        let p = unsafe { crate::ffi::element(params, 0) };
        if p.is_ok_and(|p| p.num_exec_affinity > 0 || !p.cig.is_null()) {
            return CUresult::NOT_SUPPORTED;
        }
    }
    create(&unsafe { Out::new(ctx) }, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        if d.context(ctx)?.primary {
            return Err(CUresult::INVALID_CONTEXT);
        }
        d.contexts.remove(ctx)?;
        for (_, c) in d.contexts.iter_mut() {
            c.peers.remove(&(ctx as usize));
        }
        if driver::current_handle() == ctx {
            driver::pop_current();
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        if !ctx.is_null() {
            d.context(ctx)?;
        }
        driver::set_current(ctx);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut Handle) -> CUresult {
    let ctx = unsafe { Out::new(ctx) };
    guard(|| {
        initialized()?;
        ctx.set(driver::current_handle())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    guard(|| {
        driver()?.context(ctx)?;
        driver::push_current(ctx);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut Handle) -> CUresult {
    let ctx = unsafe { Out::new(ctx) };
    guard(|| {
        initialized()?;
        if driver::current_handle().is_null() {
            return Err(CUresult::INVALID_CONTEXT);
        }
        ctx.set_if_asked(driver::pop_current());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    let dev = unsafe { Out::new(dev) };
    guard(|| {
        let d = driver()?;
        let ctx = d.contexts.get(driver::current_handle()).map_err(|_| CUresult::INVALID_CONTEXT)?;
        dev.set(ctx.device)
    })
}

/// Work has finished when its call returns; what is left to report is the context's sticky fault.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard(|| driver()?.current().map(|_| ()))
}

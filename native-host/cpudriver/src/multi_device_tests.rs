//! Tests of several devices in one driver: contexts on each, allocations owned by their maker's
//! device, peer access and peer copies, streams that keep their context. The driver reads its
//! configuration once per process, so every test here runs with `RECAP_CPU_DEVICES=2`, set
//! before the first call reads it (`two_devices`, which every test of this crate that calls the
//! driver starts with).

use std::ffi::{c_int, c_void};
use std::sync::Once;

use crate::device::*;
use crate::ffi::{CUdevice, CUdeviceptr, Handle};
use crate::memory::*;
use crate::queries::*;
use crate::result::CUresult;
use crate::stream::*;

pub(crate) fn two_devices() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: set once, before any test of this crate reads the environment.
        unsafe { std::env::set_var(crate::config::DEVICES, "2") };
        assert_eq!(crate::config::config().devices, 2);
    });
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuInit(0) }, CUresult::SUCCESS);
}

/// A created context on `dev`, current on the calling thread.
fn context(dev: CUdevice) -> Handle {
    let mut ctx: Handle = std::ptr::null_mut();
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { cuCtxCreate_v2(&mut ctx, 0, dev) }, CUresult::SUCCESS);
    ctx
}

fn alloc(size: usize) -> CUdeviceptr {
    let mut p = 0;
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, size) }, CUresult::SUCCESS);
    p
}

fn set_current(ctx: Handle) {
    // SAFETY: a context handle (checked by the call).
    assert_eq!(unsafe { cuCtxSetCurrent(ctx) }, CUresult::SUCCESS);
}

fn destroy(ctxs: &[Handle]) {
    for &c in ctxs {
        // SAFETY: contexts made by the test.
        assert_eq!(unsafe { cuCtxDestroy_v2(c) }, CUresult::SUCCESS);
    }
}

#[test]
fn each_device_has_its_contexts_and_each_allocation_its_device() {
    two_devices();
    let (mut count, mut dev) = (0, -1);
    // SAFETY (every call below): valid out-parameters and handles the test made.
    unsafe {
        assert_eq!(cuDeviceGetCount(&mut count), CUresult::SUCCESS);
        assert_eq!(count, 2);
        assert_eq!(cuDeviceGet(&mut dev, 1), CUresult::SUCCESS);
        assert_eq!(dev, 1);
        assert_eq!(cuDeviceGet(&mut dev, 2), CUresult::INVALID_DEVICE);
        let (mut p0, mut p1) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(cuDevicePrimaryCtxRetain(&mut p0, 0), CUresult::SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRetain(&mut p1, 1), CUresult::SUCCESS);
        assert_ne!(p0, p1, "one primary context per device");
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUresult::SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(1), CUresult::SUCCESS);
        let (mut bus0, mut bus1) = (0, 0);
        cuDeviceGetAttribute(&mut bus0, 33, 0);
        cuDeviceGetAttribute(&mut bus1, 33, 1);
        assert_eq!((bus0, bus1), (0, 1));

        let c0 = context(0);
        let a = alloc(64);
        let c1 = context(1);
        assert_eq!(cuCtxGetDevice(&mut dev), CUresult::SUCCESS);
        assert_eq!(dev, 1);
        let b = alloc(64);
        set_current(c0);
        // The allocation's own context and device, whichever context is current.
        let (mut ordinal, mut owner): (c_int, Handle) = (-1, std::ptr::null_mut());
        assert_eq!(cuPointerGetAttribute(&mut ordinal as *mut c_int as *mut c_void, 9, b + 8), CUresult::SUCCESS);
        assert_eq!(cuPointerGetAttribute(&mut owner as *mut Handle as *mut c_void, 1, b), CUresult::SUCCESS);
        assert_eq!((ordinal, owner), (1, c1));
        assert_eq!(cuPointerGetAttribute(&mut ordinal as *mut c_int as *mut c_void, 9, a), CUresult::SUCCESS);
        assert_eq!(ordinal, 0);

        // A peer copy moves the bytes; each side must be on its context's device.
        let bytes: Vec<u8> = (0..64).collect();
        assert_eq!(cuMemcpyHtoD_v2(a, bytes.as_ptr().cast(), 64), CUresult::SUCCESS);
        assert_eq!(cuMemcpyPeer(b, c1, a, c0, 64), CUresult::SUCCESS);
        let mut back = vec![0u8; 64];
        assert_eq!(cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), b, 64), CUresult::SUCCESS);
        assert_eq!(back, bytes);
        assert_eq!(cuMemcpyPeer(b, c0, a, c0, 64), CUresult::INVALID_VALUE);
        assert_eq!(cuMemcpyPeerAsync(b, c1, a, c1, 64, std::ptr::null_mut()), CUresult::INVALID_VALUE);
        assert_eq!(cuMemcpyPeer(b, std::ptr::null_mut(), a, c0, 64), CUresult::INVALID_CONTEXT);
        assert_eq!(cuMemFree_v2(a), CUresult::SUCCESS);
        assert_eq!(cuMemFree_v2(b), CUresult::SUCCESS);
        destroy(&[c0, c1]);
    }
}

#[test]
fn peer_access_is_refused_as_the_real_driver_refuses_it() {
    two_devices();
    let mut can = -1;
    // SAFETY (every call below): valid out-parameters and handles the test made.
    unsafe {
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 0, 1), CUresult::SUCCESS);
        assert_eq!(can, 1);
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 1, 1), CUresult::SUCCESS);
        assert_eq!(can, 0);
        assert_eq!(cuDeviceCanAccessPeer(&mut can, 0, 2), CUresult::INVALID_DEVICE);
        let c1 = context(1);
        let c0 = context(0);
        assert_eq!(cuCtxEnablePeerAccess(c1, 1), CUresult::INVALID_VALUE);
        assert_eq!(cuCtxEnablePeerAccess(c0, 0), CUresult::INVALID_DEVICE);
        assert_eq!(cuCtxDisablePeerAccess(c1), CUresult::PEER_ACCESS_NOT_ENABLED);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUresult::SUCCESS);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUresult::PEER_ACCESS_ALREADY_ENABLED);
        assert_eq!(cuCtxDisablePeerAccess(c1), CUresult::SUCCESS);
        assert_eq!(cuCtxDisablePeerAccess(c1), CUresult::PEER_ACCESS_NOT_ENABLED);
        // Enabled again, then the peer goes away: nothing of it is left behind.
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUresult::SUCCESS);
        destroy(&[c1]);
        assert_eq!(cuCtxEnablePeerAccess(c1, 0), CUresult::INVALID_CONTEXT);
        destroy(&[c0]);
    }
}

#[test]
fn a_stream_keeps_the_context_it_was_made_in() {
    two_devices();
    // SAFETY (every call below): valid out-parameters and handles the test made.
    unsafe {
        let c1 = context(1);
        let mut stream: Handle = std::ptr::null_mut();
        assert_eq!(cuStreamCreate(&mut stream, 0), CUresult::SUCCESS);
        let c0 = context(0);
        let mut owner: Handle = std::ptr::null_mut();
        assert_eq!(cuStreamGetCtx(stream, &mut owner), CUresult::SUCCESS);
        assert_eq!(owner, c1);
        assert_eq!(cuStreamGetCtx(std::ptr::null_mut(), &mut owner), CUresult::SUCCESS);
        assert_eq!(owner, c0);
        assert_eq!(cuStreamDestroy_v2(stream), CUresult::SUCCESS);
        destroy(&[c0, c1]);
    }
}

//! Memory pools: each device's default and current pool, allocations from a pool counted in its
//! attributes, and the real driver's refusals.

use super::*;
use crate::device::cuCtxCreate_v2;
use crate::memory::{cuMemFree_v2, cuMemcpyDtoH_v2, cuMemsetD8_v2};
use crate::multi_device_tests::two_devices;

fn attribute(pool: Handle, attr: c_int) -> u64 {
    let mut v = 0u64;
    // SAFETY: a value as wide as any attribute's.
    assert_eq!(unsafe { cuMemPoolGetAttribute(pool, attr, &mut v as *mut u64 as *mut c_void) }, CUresult::SUCCESS);
    v
}

#[test]
fn pools_allocate_on_their_device_and_count_what_is_live() {
    two_devices();
    let (mut ctx, mut pool, mut other, mut made) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let (mut a, mut b) = (0, 0);
    let s = std::ptr::null_mut();
    // SAFETY (every call below): valid out-parameters and handles the test made.
    unsafe {
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUresult::SUCCESS);
        assert_eq!(cuDeviceGetMemPool(&mut pool, 0), CUresult::SUCCESS);
        let mut default = std::ptr::null_mut();
        assert_eq!(cuDeviceGetDefaultMemPool(&mut default, 0), CUresult::SUCCESS);
        assert_eq!(pool, default, "the default pool is current at first");
        assert_eq!(cuDeviceGetMemPool(&mut other, 1), CUresult::SUCCESS);
        assert_ne!(pool, other, "a pool per device");
        assert_eq!(cuDeviceGetMemPool(&mut other, 2), CUresult::INVALID_DEVICE);

        assert_eq!(cuMemAllocFromPoolAsync(&mut a, 100, pool, s), CUresult::SUCCESS);
        assert_eq!(cuMemAllocFromPoolAsync(&mut b, 28, pool, s), CUresult::SUCCESS);
        assert_eq!(cuMemsetD8_v2(a, 7, 100), CUresult::SUCCESS);
        let mut back = [0u8; 100];
        assert_eq!(cuMemcpyDtoH_v2(back.as_mut_ptr() as *mut c_void, a, 100), CUresult::SUCCESS);
        assert_eq!(back, [7; 100]);
        assert_eq!(attribute(pool, 7), 128, "USED_MEM_CURRENT");
        assert_eq!(cuMemFree_v2(b), CUresult::SUCCESS);
        assert_eq!(attribute(pool, 7), 100);
        assert_eq!(attribute(pool, 8), 128, "USED_MEM_HIGH");
        let mut zero = 0u64;
        assert_eq!(cuMemPoolSetAttribute(pool, 8, &mut zero as *mut u64 as *mut c_void), CUresult::SUCCESS);
        assert_eq!(attribute(pool, 8), 100, "a reset high-water mark starts from what is live");
        let mut threshold = u64::MAX;
        assert_eq!(cuMemPoolSetAttribute(pool, 4, &mut threshold as *mut u64 as *mut c_void), CUresult::SUCCESS);
        assert_eq!(attribute(pool, 4), u64::MAX, "RELEASE_THRESHOLD as set");
        let mut one = 1u64;
        assert_eq!(cuMemPoolSetAttribute(pool, 7, &mut one as *mut u64 as *mut c_void), CUresult::INVALID_VALUE);
        assert_eq!(cuMemAllocFromPoolAsync(&mut b, 8, 0x99 as Handle, s), CUresult::INVALID_HANDLE);

        // A pool of one's own, current on its device until destroyed; not on the other device.
        let props = [1, 0, 1, 0]; // pinned, no handle types, on device 0
        assert_eq!(cuMemPoolCreate(&mut made, props.as_ptr() as *const PoolProps), CUresult::SUCCESS);
        assert_eq!(cuDeviceSetMemPool(1, made), CUresult::INVALID_VALUE);
        assert_eq!(cuDeviceSetMemPool(0, made), CUresult::SUCCESS);
        let mut current = std::ptr::null_mut();
        assert_eq!(cuDeviceGetMemPool(&mut current, 0), CUresult::SUCCESS);
        assert_eq!(current, made);
        let shared = [1, 1, 1, 0];
        assert_eq!(cuMemPoolCreate(&mut current, shared.as_ptr() as *const PoolProps), CUresult::NOT_SUPPORTED);
        let on_host = [1, 0, 2, 0];
        assert_eq!(cuMemPoolCreate(&mut current, on_host.as_ptr() as *const PoolProps), CUresult::INVALID_VALUE);
        assert_eq!(cuMemPoolDestroy(pool), CUresult::INVALID_VALUE, "a default pool stays");
        assert_eq!(cuMemPoolDestroy(made), CUresult::SUCCESS);
        assert_eq!(cuDeviceGetMemPool(&mut current, 0), CUresult::SUCCESS);
        assert_eq!(current, pool, "back to the default");
        assert_eq!(cuMemPoolTrimTo(made, 0), CUresult::INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(a), CUresult::SUCCESS);
    }
}

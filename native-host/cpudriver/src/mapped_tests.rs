//! Managed memory and host memory mapped into the device: the host's bytes and the kernels' are
//! the same bytes, in both directions, while the mapping lives; misuse gets the real driver's
//! status.

use std::ffi::{c_uint, c_void};

use super::*;
use crate::device::cuCtxCreate_v2;
use crate::launch::cuLaunchKernel;
use crate::memory::*;
use crate::module::{cuModuleGetFunction, cuModuleLoadData};
use crate::multi_device_tests::two_devices;
use crate::queries::cuMemGetAddressRange_v2;

/// `x[tid] += 1` over 32-bit words: the kernel `shared::ptx`'s own test of host regions runs
/// (`a_host_region_shares_its_bytes_with_the_host`), here through the driver API; NUL-terminated
/// for `cuModuleLoadData`.
const ADD_ONE: &str = concat!(include_str!("../../../shared/src/ptx/tests/ptx/add_one.ptx"), "\0");

/// A context on device 0, current on this thread, and `add_one` loaded in it.
fn add_one() -> Handle {
    two_devices();
    let (mut ctx, mut module, mut f) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-parameters, NUL-terminated PTX and name.
    unsafe {
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUresult::SUCCESS);
        assert_eq!(cuModuleLoadData(&mut module, ADD_ONE.as_ptr() as *const c_void), CUresult::SUCCESS);
        assert_eq!(cuModuleGetFunction(&mut f, module, c"add_one".as_ptr()), CUresult::SUCCESS);
    }
    f
}

/// `add_one` over `n` words at device address `p`.
fn launch(f: Handle, p: CUdeviceptr, n: c_uint) -> CUresult {
    let params = [&p as *const CUdeviceptr as *const c_void];
    // SAFETY: one parameter, a device address, as the kernel declares.
    unsafe { cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, std::ptr::null_mut(), params.as_ptr(), std::ptr::null()) }
}

#[test]
fn managed_memory_is_one_address_for_the_host_and_kernels() {
    let f = add_one();
    let mut p: CUdeviceptr = 0;
    // SAFETY (every call below): valid out-parameters, and host accesses to managed memory,
    // which is host memory at its device address while it is allocated.
    unsafe {
        assert_eq!(cuMemAllocManaged(&mut p, 0, ATTACH_GLOBAL), CUresult::INVALID_VALUE);
        assert_eq!(cuMemAllocManaged(&mut p, 64, 3), CUresult::INVALID_VALUE, "attach flags");
        assert_eq!(cuMemAllocManaged(&mut p, 64, ATTACH_SINGLE), CUresult::INVALID_VALUE);
        assert_eq!(cuMemAllocManaged(std::ptr::null_mut(), 64, ATTACH_GLOBAL), CUresult::INVALID_VALUE);
        assert_eq!(cuMemAllocManaged(&mut p, 64, ATTACH_HOST), CUresult::SUCCESS);
        let host = p as *mut u32;
        for i in 0..16 {
            host.add(i).write_volatile(i as u32 * 10);
        }
        assert_eq!(launch(f, p, 16), CUresult::SUCCESS);
        let seen: Vec<u32> = (0..16).map(|i| host.add(i).read_volatile()).collect();
        assert_eq!(seen, (0..16).map(|i| i * 10 + 1).collect::<Vec<u32>>(), "the kernel's stores, seen by the host");
        assert_eq!(cuMemsetD32_v2(p + 4, 7, 2), CUresult::SUCCESS);
        assert_eq!((host.add(1).read_volatile(), host.add(2).read_volatile()), (7, 7));
        host.add(3).write_volatile(99);
        let mut back = [0u32; 4];
        assert_eq!(cuMemcpyDtoH_v2(back.as_mut_ptr() as *mut c_void, p, 16), CUresult::SUCCESS);
        assert_eq!(back, [1, 7, 7, 99], "the host's store, read as device memory");
        // A copy from managed memory as host memory to a device allocation.
        let mut d: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut d, 16), CUresult::SUCCESS);
        assert_eq!(cuMemcpyHtoD_v2(d, p as *const c_void, 16), CUresult::SUCCESS);
        assert_eq!(launch(f, d, 4), CUresult::SUCCESS);
        assert_eq!(cuMemcpyDtoH_v2(p as *mut c_void, d, 16), CUresult::SUCCESS);
        assert_eq!(host.add(3).read_volatile(), 100);

        let mut managed = 0u8;
        assert_eq!(cuPointerGetAttribute(&mut managed as *mut u8 as *mut c_void, 8, p + 8), CUresult::SUCCESS);
        assert_eq!(managed, 1);
        assert_eq!(cuPointerGetAttribute(&mut managed as *mut u8 as *mut c_void, 8, d), CUresult::SUCCESS);
        assert_eq!(managed, 0);

        // Prefetches and advice check their arguments and move nothing.
        let s = std::ptr::null_mut();
        assert_eq!(cuMemPrefetchAsync(p, 64, 0, s), CUresult::SUCCESS);
        assert_eq!(cuMemPrefetchAsync(p + 32, 32, DEVICE_CPU, s), CUresult::SUCCESS);
        assert_eq!(cuMemPrefetchAsync(p + 32, 33, 0, s), CUresult::INVALID_VALUE, "past the allocation");
        assert_eq!(cuMemPrefetchAsync(d, 16, 0, s), CUresult::INVALID_VALUE, "not managed");
        assert_eq!(cuMemPrefetchAsync(p, 64, 5, s), CUresult::INVALID_DEVICE);
        assert_eq!(cuMemPrefetchAsync(p, 64, 0, 0x1234 as Handle), CUresult::INVALID_HANDLE);
        let host_loc = MemLocation { kind: 2, id: 0 };
        assert_eq!(cuMemPrefetchAsync_v2(p, 64, host_loc, 0, s), CUresult::SUCCESS);
        assert_eq!(cuMemPrefetchAsync_v2(p, 64, host_loc, 1, s), CUresult::INVALID_VALUE, "flags");
        assert_eq!(cuMemPrefetchAsync_v2(p, 64, MemLocation { kind: 1, id: 9 }, 0, s), CUresult::INVALID_DEVICE);
        assert_eq!(cuMemAdvise(p, 64, 1, 0), CUresult::SUCCESS);
        assert_eq!(cuMemAdvise(p, 64, 3, DEVICE_CPU), CUresult::SUCCESS);
        assert_eq!(cuMemAdvise(p, 64, 5, 4), CUresult::INVALID_DEVICE);
        assert_eq!(cuMemAdvise(p, 64, 7, 0), CUresult::INVALID_VALUE, "no such advice");
        assert_eq!(cuMemAdvise_v2(p, 64, 3, MemLocation { kind: 0, id: 0 }), CUresult::INVALID_VALUE);
        assert_eq!(cuStreamAttachMemAsync(s, p, 0, ATTACH_SINGLE), CUresult::SUCCESS);
        assert_eq!(cuStreamAttachMemAsync(s, p, 32, ATTACH_HOST), CUresult::INVALID_VALUE, "part of it");
        assert_eq!(cuStreamAttachMemAsync(s, p, 0, 8), CUresult::INVALID_VALUE);

        let mut base = 0;
        assert_eq!(cuMemFree_v2(p), CUresult::SUCCESS);
        assert_eq!(cuMemGetAddressRange_v2(&mut base, std::ptr::null_mut(), p), CUresult::NOT_FOUND);
        assert_eq!(launch(f, p, 1), CUresult::ILLEGAL_ADDRESS, "freed");
    }
}

#[test]
fn mapped_host_memory_is_the_hosts_bytes_at_a_device_address() {
    let f = add_one();
    let (mut h, mut dp): (*mut c_void, CUdeviceptr) = (std::ptr::null_mut(), 0);
    // SAFETY (every call below): valid out-parameters, host memory the test owns.
    unsafe {
        assert_eq!(cuMemHostAlloc(&mut h, 64, 8), CUresult::INVALID_VALUE, "flags");
        assert_eq!(cuMemHostAlloc(&mut h, 64, HOST_DEVICEMAP | 1), CUresult::SUCCESS);
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut dp, h, 1), CUresult::INVALID_VALUE, "flags");
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut dp, h, 0), CUresult::SUCCESS);
        let host = h as *mut u32;
        for i in 0..16 {
            host.add(i).write_volatile(i as u32);
        }
        assert_eq!(launch(f, dp, 16), CUresult::SUCCESS);
        assert_eq!(host.add(15).read_volatile(), 16, "the kernel's store, in the host's bytes");
        let mut inner = 0;
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut inner, host.add(2) as *mut c_void, 0), CUresult::SUCCESS);
        assert_eq!(inner, dp + 8);
        host.add(2).write_volatile(41);
        assert_eq!(launch(f, inner, 1), CUresult::SUCCESS);
        assert_eq!(host.add(2).read_volatile(), 42);
        let mut back = 0u32;
        assert_eq!(cuMemcpyDtoH_v2(&mut back as *mut u32 as *mut c_void, dp + 8, 4), CUresult::SUCCESS);
        assert_eq!(back, 42);
        let mut on_host = std::ptr::null_mut::<c_void>();
        assert_eq!(cuPointerGetAttribute(&mut on_host as *mut _ as *mut c_void, 4, dp + 8), CUresult::SUCCESS);
        assert_eq!(on_host, host.add(2) as *mut c_void);
        assert_eq!(cuMemFree_v2(dp), CUresult::INVALID_VALUE, "the host memory's to free");
        assert_eq!(cuMemFreeHost(h), CUresult::SUCCESS);
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut dp, h, 0), CUresult::INVALID_VALUE, "freed");
        assert_eq!(cuMemcpyDtoH_v2(&mut back as *mut u32 as *mut c_void, inner, 4), CUresult::INVALID_VALUE);

        // Pinned but not mapped: no device address.
        assert_eq!(cuMemHostAlloc(&mut h, 64, 0), CUresult::SUCCESS);
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut dp, h, 0), CUresult::INVALID_VALUE);
        assert_eq!(cuMemFreeHost(h), CUresult::SUCCESS);
    }
}

#[test]
fn registered_host_memory_is_mapped_at_any_byte_and_until_unregistered() {
    let f = add_one();
    let mut words = vec![5u32; 8];
    let mut bytes = vec![0u8; 13];
    let (mut dp, mut db) = (0, 0);
    // SAFETY (every call below): valid out-parameters; `words` and `bytes` outlive their
    // registration, and are read back only between calls.
    unsafe {
        let w = words.as_mut_ptr() as *mut c_void;
        assert_eq!(cuMemHostRegister_v2(w, 32, 16), CUresult::INVALID_VALUE, "flags");
        assert_eq!(cuMemHostRegister_v2(w, 32, HOST_DEVICEMAP), CUresult::SUCCESS);
        assert_eq!(cuMemHostRegister_v2(w.byte_add(4), 4, 0), CUresult::HOST_MEMORY_ALREADY_REGISTERED);
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut dp, w, 0), CUresult::SUCCESS);
        assert_eq!(launch(f, dp, 8), CUresult::SUCCESS);
        assert_eq!(words, vec![6; 8]);

        // A registration that starts inside a word reaches exactly its bytes.
        let b = bytes.as_mut_ptr().add(1) as *mut c_void;
        assert_eq!(cuMemHostRegister_v2(b, 11, HOST_DEVICEMAP), CUresult::SUCCESS);
        assert_eq!(cuMemHostGetDevicePointer_v2(&mut db, b, 0), CUresult::SUCCESS);
        let data: Vec<u8> = (1..=11).collect();
        assert_eq!(cuMemcpyHtoD_v2(db, data.as_ptr() as *const c_void, 11), CUresult::SUCCESS);
        assert_eq!(cuMemsetD8_v2(db + 11, 0xEE, 1), CUresult::INVALID_VALUE, "past the registration");
        assert_eq!(bytes, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0]);
        assert_eq!(cuMemHostUnregister(b), CUresult::SUCCESS);

        assert_eq!(cuMemHostUnregister(w), CUresult::SUCCESS);
        assert_eq!(cuMemHostUnregister(w), CUresult::HOST_MEMORY_NOT_REGISTERED);
        assert_eq!(launch(f, dp, 1), CUresult::ILLEGAL_ADDRESS, "unregistered");
    }
    assert_eq!(words, vec![6; 8], "nothing reached the words once unregistered");
}

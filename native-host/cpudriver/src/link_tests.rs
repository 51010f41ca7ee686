//! Links of several inputs: PTX with `.extern` functions and variables, and CPU machine code
//! (what stands in for a cubin) that defines them, linked into the one module that runs.

use std::ffi::{c_uint, c_void};

use super::*;
use crate::device::cuCtxCreate_v2;
use crate::launch::cuLaunchKernel;
use crate::memory::{cuMemAlloc_v2, cuMemcpyDtoH_v2};
use crate::module::{cuModuleGetFunction, cuModuleLoadData};
use crate::multi_device_tests::two_devices;

const CALLER: &str = "
.version 8.0
.target sm_80
.address_size 64
.extern .func (.param .b32 ret) triple(.param .b32 x);
.extern .global .align 4 .u32 offset;
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, 5;
    {
    .param .b32 a;
    .param .b32 r;
    st.param.b32 [a], %r1;
    call (r), triple, (a);
    ld.param.b32 %r2, [r];
    }
    ld.global.u32 %r3, [offset];
    add.s32 %r2, %r2, %r3;
    st.global.u32 [%rd1], %r2;
    ret;
}
";

const CALLEE: &str = "
.version 8.0
.target sm_80
.address_size 64
.visible .global .align 4 .u32 offset = 100;
.visible .func (.param .b32 ret) triple(.param .b32 x)
{
    .reg .b32 %r<2>;
    ld.param.u32 %r1, [x];
    mul.lo.s32 %r1, %r1, 3;
    st.param.b32 [ret], %r1;
    ret;
}
";

fn add(link: Handle, kind: c_int, bytes: &[u8]) -> CUresult {
    let (n, o, v) = (0, std::ptr::null(), std::ptr::null());
    // SAFETY: `bytes` is the input, its length given; no options.
    unsafe { cuLinkAddData_v2(link, kind, bytes.as_ptr() as *const c_void, bytes.len(), c"input".as_ptr(), n, o, v) }
}

#[test]
fn a_link_of_ptx_and_machine_code_binds_externs_across_them() {
    two_devices();
    let (mut ctx, mut link, mut module, mut f) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let (mut image, mut size) = (std::ptr::null_mut::<c_void>(), 0usize);
    let mut out = 0u64;
    // SAFETY (every call below): valid out-parameters and handles the test made.
    unsafe {
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUresult::SUCCESS);
        assert_eq!(cuLinkCreate_v2(0, std::ptr::null(), std::ptr::null(), &mut link), CUresult::SUCCESS);
        assert_eq!(add(link, INPUT_PTX, CALLER.as_bytes()), CUresult::SUCCESS);
        assert_eq!(add(link, INPUT_CUBIN, &machine::wrap(CALLEE)), CUresult::SUCCESS);
        assert_eq!(cuLinkComplete(link, &mut image, &mut size), CUresult::SUCCESS);
        assert!(size > 0);
        assert_eq!(cuModuleLoadData(&mut module, image), CUresult::SUCCESS);
        assert_eq!(cuLinkDestroy(link), CUresult::SUCCESS);
        assert_eq!(cuModuleGetFunction(&mut f, module, c"k".as_ptr()), CUresult::SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut out, 4), CUresult::SUCCESS);
        let params = [&out as *const u64 as *const c_void];
        let one: c_uint = 1;
        let s = std::ptr::null_mut();
        assert_eq!(cuLaunchKernel(f, one, 1, 1, one, 1, 1, 0, s, params.as_ptr(), std::ptr::null()), CUresult::SUCCESS);
        let mut v = 0u32;
        assert_eq!(cuMemcpyDtoH_v2(&mut v as *mut u32 as *mut c_void, out, 4), CUresult::SUCCESS);
        assert_eq!(v, 5 * 3 + 100, "triple and offset, from the second input");

        // The caller alone leaves `triple` undefined: the link fails, as nvlink's would.
        assert_eq!(cuLinkCreate_v2(0, std::ptr::null(), std::ptr::null(), &mut link), CUresult::SUCCESS);
        assert_eq!(add(link, INPUT_PTX, CALLER.as_bytes()), CUresult::SUCCESS);
        assert_eq!(cuLinkComplete(link, &mut image, &mut size), CUresult::INVALID_PTX);
        // Two definitions of one visible name are refused too.
        assert_eq!(add(link, INPUT_PTX, CALLEE.as_bytes()), CUresult::SUCCESS);
        assert_eq!(add(link, INPUT_PTX, CALLEE.as_bytes()), CUresult::SUCCESS);
        assert_eq!(cuLinkComplete(link, &mut image, &mut size), CUresult::INVALID_PTX);
        assert_eq!(cuLinkDestroy(link), CUresult::SUCCESS);
    }
}

//! Function attributes, as the PTX declares them, and launch bounds a launch must keep.

use std::ffi::{c_int, c_uint, c_void};

use super::*;
use crate::device::cuCtxCreate_v2;
use crate::launch::cuLaunchKernel;
use crate::multi_device_tests::two_devices;

const KERNELS: &std::ffi::CStr = c"
.version 8.0
.target sm_80
.address_size 64
.const .align 4 .b8 table[24];
.const .align 8 .u64 one = 1;
.visible .entry bounded() .maxntid 128, 1, 1 .maxnreg 24
{
    .local .align 4 .b8 depot[4000];
    .reg .b32 %r<30>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b8 tile[256];
    ret;
}
.visible .entry plain()
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>, %extra;
    ret;
}
";

fn attribute(attr: c_int, f: Handle) -> c_int {
    let mut v = -1;
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { cuFuncGetAttribute(&mut v, attr, f) }, CUresult::SUCCESS, "attribute {attr}");
    v
}

fn launch(f: Handle, block: c_uint) -> CUresult {
    let s = std::ptr::null_mut();
    // SAFETY: kernels without parameters.
    unsafe { cuLaunchKernel(f, 1, 1, 1, block, 1, 1, 0, s, std::ptr::null(), std::ptr::null()) }
}

#[test]
fn function_attributes_are_what_the_ptx_declares() {
    two_devices();
    let (mut ctx, mut module, mut bounded, mut plain) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-parameters, NUL-terminated PTX and names.
    unsafe {
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUresult::SUCCESS);
        assert_eq!(cuModuleLoadData(&mut module, KERNELS.as_ptr() as *const c_void), CUresult::SUCCESS);
        assert_eq!(cuModuleGetFunction(&mut bounded, module, c"bounded".as_ptr()), CUresult::SUCCESS);
        assert_eq!(cuModuleGetFunction(&mut plain, module, c"plain".as_ptr()), CUresult::SUCCESS);
    }
    assert_eq!(attribute(0, bounded), 128, "MAX_THREADS_PER_BLOCK from .maxntid");
    assert_eq!(attribute(0, plain), 1024);
    assert_eq!(attribute(1, bounded), 256, "SHARED_SIZE_BYTES");
    assert_eq!(attribute(2, bounded), 32, "CONST_SIZE_BYTES: the module's .const variables");
    assert!(attribute(3, bounded) >= 4000, "LOCAL_SIZE_BYTES: {}", attribute(3, bounded));
    assert_eq!(attribute(3, plain), 0);
    assert_eq!(attribute(4, bounded), 24, "NUM_REGS from .maxnreg");
    assert_eq!(attribute(4, plain), 6, "NUM_REGS: the 32-bit registers it declares");
    assert_eq!(attribute(5, plain), 80, "PTX_VERSION");
    let mut v = 0;
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { cuFuncGetAttribute(&mut v, 99, plain) }, CUresult::INVALID_VALUE);

    assert_eq!(launch(bounded, 128), CUresult::SUCCESS);
    assert_eq!(launch(bounded, 129), CUresult::INVALID_VALUE, "past .maxntid");
    assert_eq!(launch(plain, 1024), CUresult::SUCCESS, "the refusal is not sticky");
}

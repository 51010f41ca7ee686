//! The few CUDA driver API types and constants the hooks need, written from the driver API's
//! documentation. Handles are opaque pointers; `CUresult` is a plain integer so an unknown value
//! from a newer driver passes through unchanged.

use std::ffi::c_void;

pub type CUresult = i32;
pub type CUdeviceptr = u64;
pub type CUdevice = i32;
pub type Handle = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `cuLaunchKernel`'s `extra` keys.
pub const CU_LAUNCH_PARAM_END: usize = 0;
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 2;

/// `cuLaunchKernelEx`'s configuration.
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub stream: Handle,
    pub attrs: *const CUlaunchAttribute,
    pub num_attrs: u32,
}

/// One launch attribute: its id, padding, and a 64-byte value union.
#[repr(C)]
pub struct CUlaunchAttribute {
    pub id: u32,
    pub pad: [u8; 4],
    pub value: [u8; 64],
}

/// `cuLinkAddData`'s input types.
pub const CU_JIT_INPUT_CUBIN: u32 = 0;
pub const CU_JIT_INPUT_PTX: u32 = 1;
pub const CU_JIT_INPUT_FATBINARY: u32 = 2;

/// `cuDeviceGetAttribute`: compute capability.
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: i32 = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: i32 = 76;

/// `cuStreamIsCapturing`'s answer for a stream that is capturing.
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: i32 = 1;

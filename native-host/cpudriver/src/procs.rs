//! `cuGetProcAddress`: the one table of entry points by the name a caller asks for, with the
//! CUDA version each variant appeared in; a caller gets the newest variant its version knows, and
//! the per-thread default stream one (`_ptds`/`_ptsz`) where it asks for that and one exists.

use std::ffi::{c_char, c_int, c_void};
use std::sync::LazyLock;

use crate::device::*;
use crate::ffi::{c_str, Out};
use crate::globals::*;
use crate::graph::*;
use crate::launch::*;
use crate::link::*;
use crate::mapped::*;
use crate::memory::*;
use crate::module::*;
use crate::pools::*;
use crate::queries::*;
use crate::result::{cuGetErrorName, cuGetErrorString, cuGetExportTable, guard, CUresult};
use crate::stream::*;

/// One exported variant of an entry point.
struct Proc {
    /// The name a caller asks for (`cuMemAlloc`, not `cuMemAlloc_v2`).
    symbol: &'static str,
    /// The CUDA version (`1000 * major + 10 * minor`) that introduced this variant.
    version: c_int,
    /// A variant for the per-thread default stream.
    per_thread: bool,
    address: usize,
}

/// `name: version => function, ...; per thread version => function;` rows.
macro_rules! procs {
    ($($symbol:literal: $($version:literal => $f:ident),+ $(; per thread $pversion:literal => $pf:ident)?;)*) => {
        vec![$(
            $(Proc { symbol: $symbol, version: $version, per_thread: false, address: $f as *const () as usize },)+
            $(Proc { symbol: $symbol, version: $pversion, per_thread: true, address: $pf as *const () as usize },)?
        )*]
    };
}

static PROCS: LazyLock<Vec<Proc>> = LazyLock::new(|| {
    procs! {
        "cuInit": 2000 => cuInit;
        "cuDriverGetVersion": 2020 => cuDriverGetVersion;
        "cuDeviceGet": 2000 => cuDeviceGet;
        "cuDeviceGetCount": 2000 => cuDeviceGetCount;
        "cuDeviceGetName": 2000 => cuDeviceGetName;
        "cuDeviceGetAttribute": 2000 => cuDeviceGetAttribute;
        "cuDeviceTotalMem": 3020 => cuDeviceTotalMem_v2;
        "cuDevicePrimaryCtxRetain": 7000 => cuDevicePrimaryCtxRetain;
        "cuDevicePrimaryCtxRelease": 7000 => cuDevicePrimaryCtxRelease, 11000 => cuDevicePrimaryCtxRelease_v2;
        "cuDevicePrimaryCtxReset": 7000 => cuDevicePrimaryCtxReset, 11000 => cuDevicePrimaryCtxReset_v2;
        "cuDevicePrimaryCtxGetState": 7000 => cuDevicePrimaryCtxGetState;
        "cuCtxCreate": 3020 => cuCtxCreate_v2, 11040 => cuCtxCreate_v3, 12050 => cuCtxCreate_v4;
        "cuCtxDestroy": 4000 => cuCtxDestroy_v2;
        "cuCtxSetCurrent": 4000 => cuCtxSetCurrent;
        "cuCtxGetCurrent": 4000 => cuCtxGetCurrent;
        "cuCtxPushCurrent": 4000 => cuCtxPushCurrent_v2;
        "cuCtxPopCurrent": 4000 => cuCtxPopCurrent_v2;
        "cuCtxGetDevice": 2000 => cuCtxGetDevice;
        "cuCtxSynchronize": 2000 => cuCtxSynchronize;
        "cuModuleLoadData": 2000 => cuModuleLoadData;
        "cuModuleLoadDataEx": 2010 => cuModuleLoadDataEx;
        "cuModuleUnload": 2000 => cuModuleUnload;
        "cuModuleGetFunction": 2000 => cuModuleGetFunction;
        "cuModuleGetGlobal": 3020 => cuModuleGetGlobal_v2;
        "cuLinkCreate": 5050 => cuLinkCreate, 6050 => cuLinkCreate_v2;
        "cuLinkAddData": 5050 => cuLinkAddData, 6050 => cuLinkAddData_v2;
        "cuLinkAddFile": 5050 => cuLinkAddFile, 6050 => cuLinkAddFile_v2;
        "cuLinkComplete": 5050 => cuLinkComplete;
        "cuLinkDestroy": 5050 => cuLinkDestroy;
        "cuLibraryLoadData": 12000 => cuLibraryLoadData;
        "cuLibraryUnload": 12000 => cuLibraryUnload;
        "cuLibraryGetKernel": 12000 => cuLibraryGetKernel;
        "cuLibraryGetGlobal": 12000 => cuLibraryGetGlobal;
        "cuKernelGetFunction": 12000 => cuKernelGetFunction;
        "cuFuncGetParamInfo": 12040 => cuFuncGetParamInfo;
        "cuFuncGetName": 12030 => cuFuncGetName;
        "cuFuncGetAttribute": 2020 => cuFuncGetAttribute;
        "cuFuncSetAttribute": 9000 => cuFuncSetAttribute;
        "cuMemAlloc": 3020 => cuMemAlloc_v2;
        "cuMemFree": 3020 => cuMemFree_v2;
        "cuMemAllocAsync": 11020 => cuMemAllocAsync; per thread 11020 => cuMemAllocAsync_ptsz;
        "cuMemFreeAsync": 11020 => cuMemFreeAsync; per thread 11020 => cuMemFreeAsync_ptsz;
        "cuMemGetInfo": 3020 => cuMemGetInfo_v2;
        "cuMemAllocHost": 3020 => cuMemAllocHost_v2;
        "cuMemFreeHost": 2000 => cuMemFreeHost;
        "cuPointerGetAttribute": 4000 => cuPointerGetAttribute;
        "cuMemcpyHtoD": 3020 => cuMemcpyHtoD_v2; per thread 7000 => cuMemcpyHtoD_v2_ptds;
        "cuMemcpyDtoH": 3020 => cuMemcpyDtoH_v2; per thread 7000 => cuMemcpyDtoH_v2_ptds;
        "cuMemcpyDtoD": 3020 => cuMemcpyDtoD_v2; per thread 7000 => cuMemcpyDtoD_v2_ptds;
        "cuMemcpy": 4000 => cuMemcpy; per thread 7000 => cuMemcpy_ptds;
        "cuMemcpyHtoDAsync": 3020 => cuMemcpyHtoDAsync_v2; per thread 7000 => cuMemcpyHtoDAsync_v2_ptsz;
        "cuMemcpyDtoHAsync": 3020 => cuMemcpyDtoHAsync_v2; per thread 7000 => cuMemcpyDtoHAsync_v2_ptsz;
        "cuMemcpyDtoDAsync": 3020 => cuMemcpyDtoDAsync_v2; per thread 7000 => cuMemcpyDtoDAsync_v2_ptsz;
        "cuMemcpyAsync": 4000 => cuMemcpyAsync; per thread 7000 => cuMemcpyAsync_ptsz;
        "cuMemsetD8": 3020 => cuMemsetD8_v2; per thread 7000 => cuMemsetD8_v2_ptds;
        "cuMemsetD16": 3020 => cuMemsetD16_v2; per thread 7000 => cuMemsetD16_v2_ptds;
        "cuMemsetD32": 3020 => cuMemsetD32_v2; per thread 7000 => cuMemsetD32_v2_ptds;
        "cuMemsetD8Async": 3020 => cuMemsetD8Async; per thread 7000 => cuMemsetD8Async_ptsz;
        "cuMemsetD16Async": 3020 => cuMemsetD16Async; per thread 7000 => cuMemsetD16Async_ptsz;
        "cuMemsetD32Async": 3020 => cuMemsetD32Async; per thread 7000 => cuMemsetD32Async_ptsz;
        "cuLaunchKernel": 4000 => cuLaunchKernel; per thread 7000 => cuLaunchKernel_ptsz;
        "cuLaunchKernelEx": 11060 => cuLaunchKernelEx; per thread 11060 => cuLaunchKernelEx_ptsz;
        "cuStreamCreate": 2000 => cuStreamCreate;
        "cuStreamCreateWithPriority": 5050 => cuStreamCreateWithPriority;
        "cuStreamDestroy": 4000 => cuStreamDestroy_v2;
        "cuStreamSynchronize": 2000 => cuStreamSynchronize; per thread 7000 => cuStreamSynchronize_ptsz;
        "cuStreamQuery": 2000 => cuStreamQuery; per thread 7000 => cuStreamQuery_ptsz;
        "cuStreamWaitEvent": 3020 => cuStreamWaitEvent; per thread 7000 => cuStreamWaitEvent_ptsz;
        "cuEventCreate": 2000 => cuEventCreate;
        "cuEventRecord": 2000 => cuEventRecord; per thread 7000 => cuEventRecord_ptsz;
        "cuEventQuery": 2000 => cuEventQuery;
        "cuEventSynchronize": 2000 => cuEventSynchronize;
        "cuEventElapsedTime": 2000 => cuEventElapsedTime, 12080 => cuEventElapsedTime_v2;
        "cuEventDestroy": 4000 => cuEventDestroy_v2;
        "cuGraphCreate": 10000 => cuGraphCreate;
        "cuGraphDestroy": 10000 => cuGraphDestroy;
        "cuGraphConditionalHandleCreate": 12030 => cuGraphConditionalHandleCreate;
        "cuGraphAddKernelNode": 10000 => cuGraphAddKernelNode, 12000 => cuGraphAddKernelNode_v2;
        "cuGraphAddMemcpyNode": 10000 => cuGraphAddMemcpyNode;
        "cuGraphAddMemsetNode": 10000 => cuGraphAddMemsetNode;
        "cuGraphAddEmptyNode": 10000 => cuGraphAddEmptyNode;
        "cuGraphAddChildGraphNode": 10000 => cuGraphAddChildGraphNode;
        "cuGraphAddEventRecordNode": 11010 => cuGraphAddEventRecordNode;
        "cuGraphAddEventWaitNode": 11010 => cuGraphAddEventWaitNode;
        "cuGraphAddNode": 12020 => cuGraphAddNode, 12030 => cuGraphAddNode_v2;
        "cuGraphAddDependencies": 10000 => cuGraphAddDependencies, 12030 => cuGraphAddDependencies_v2;
        "cuGraphKernelNodeSetParams": 10000 => cuGraphKernelNodeSetParams, 12000 => cuGraphKernelNodeSetParams_v2;
        "cuGraphInstantiate": 11000 => cuGraphInstantiate_v2;
        "cuGraphInstantiateWithFlags": 11040 => cuGraphInstantiateWithFlags;
        "cuGraphExecKernelNodeSetParams": 10010 => cuGraphExecKernelNodeSetParams, 12000 => cuGraphExecKernelNodeSetParams_v2;
        "cuGraphExecMemcpyNodeSetParams": 10020 => cuGraphExecMemcpyNodeSetParams;
        "cuGraphExecDestroy": 10000 => cuGraphExecDestroy;
        "cuGraphLaunch": 10000 => cuGraphLaunch; per thread 10000 => cuGraphLaunch_ptsz;
        "cuGraphUpload": 11010 => cuGraphUpload; per thread 11010 => cuGraphUpload_ptsz;
        "cuMemHostAlloc": 2020 => cuMemHostAlloc;
        "cuMemHostRegister": 4000 => cuMemHostRegister_v2;
        "cuMemHostUnregister": 4000 => cuMemHostUnregister;
        "cuMemHostGetDevicePointer": 3020 => cuMemHostGetDevicePointer_v2;
        "cuMemAllocManaged": 6000 => cuMemAllocManaged;
        "cuDeviceGetDefaultMemPool": 11020 => cuDeviceGetDefaultMemPool;
        "cuDeviceGetMemPool": 11020 => cuDeviceGetMemPool;
        "cuDeviceSetMemPool": 11020 => cuDeviceSetMemPool;
        "cuMemAllocFromPoolAsync": 11020 => cuMemAllocFromPoolAsync; per thread 11020 => cuMemAllocFromPoolAsync_ptsz;
        "cuMemPoolCreate": 11020 => cuMemPoolCreate;
        "cuMemPoolDestroy": 11020 => cuMemPoolDestroy;
        "cuMemPoolGetAttribute": 11020 => cuMemPoolGetAttribute;
        "cuMemPoolSetAttribute": 11020 => cuMemPoolSetAttribute;
        "cuMemPoolTrimTo": 11020 => cuMemPoolTrimTo;
        "cuMemPoolGetAccess": 11020 => cuMemPoolGetAccess;
        "cuMemPoolSetAccess": 11020 => cuMemPoolSetAccess;
        "cuMemPrefetchAsync": 8000 => cuMemPrefetchAsync, 12020 => cuMemPrefetchAsync_v2;
        "cuMemAdvise": 8000 => cuMemAdvise, 12020 => cuMemAdvise_v2;
        "cuStreamAttachMemAsync": 6000 => cuStreamAttachMemAsync; per thread 7000 => cuStreamAttachMemAsync_ptsz;
        "cuMemGetAddressRange": 3020 => cuMemGetAddressRange_v2;
        "cuOccupancyMaxActiveBlocksPerMultiprocessor": 6050 => cuOccupancyMaxActiveBlocksPerMultiprocessor;
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": 7000 => cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags;
        "cuOccupancyMaxPotentialBlockSize": 6050 => cuOccupancyMaxPotentialBlockSize;
        "cuOccupancyMaxPotentialBlockSizeWithFlags": 7000 => cuOccupancyMaxPotentialBlockSizeWithFlags;
        "cuOccupancyAvailableDynamicSMemPerBlock": 11000 => cuOccupancyAvailableDynamicSMemPerBlock;
        "cuDeviceCanAccessPeer": 4000 => cuDeviceCanAccessPeer;
        "cuCtxEnablePeerAccess": 4000 => cuCtxEnablePeerAccess;
        "cuCtxDisablePeerAccess": 4000 => cuCtxDisablePeerAccess;
        "cuMemcpyPeer": 4000 => cuMemcpyPeer; per thread 7000 => cuMemcpyPeer_ptds;
        "cuMemcpyPeerAsync": 4000 => cuMemcpyPeerAsync; per thread 7000 => cuMemcpyPeerAsync_ptsz;
        "cuDeviceComputeCapability": 2000 => cuDeviceComputeCapability;
        "cuDeviceGetUuid": 9020 => cuDeviceGetUuid, 11040 => cuDeviceGetUuid_v2;
        "cuDeviceGetPCIBusId": 4010 => cuDeviceGetPCIBusId;
        "cuCtxGetApiVersion": 3020 => cuCtxGetApiVersion;
        "cuCtxGetFlags": 7000 => cuCtxGetFlags;
        "cuCtxGetLimit": 3010 => cuCtxGetLimit;
        "cuCtxSetLimit": 3010 => cuCtxSetLimit;
        "cuCtxGetStreamPriorityRange": 5050 => cuCtxGetStreamPriorityRange;
        "cuCtxSetCacheConfig": 3020 => cuCtxSetCacheConfig;
        "cuCtxGetCacheConfig": 3020 => cuCtxGetCacheConfig;
        "cuFuncSetCacheConfig": 3000 => cuFuncSetCacheConfig;
        "cuKernelSetCacheConfig": 12000 => cuKernelSetCacheConfig;
        "cuKernelGetAttribute": 12000 => cuKernelGetAttribute;
        "cuKernelSetAttribute": 12000 => cuKernelSetAttribute;
        "cuStreamAddCallback": 5000 => cuStreamAddCallback; per thread 7000 => cuStreamAddCallback_ptsz;
        "cuLaunchHostFunc": 10000 => cuLaunchHostFunc; per thread 10000 => cuLaunchHostFunc_ptsz;
        "cuStreamIsCapturing": 10000 => cuStreamIsCapturing; per thread 10000 => cuStreamIsCapturing_ptsz;
        "cuStreamGetPriority": 5050 => cuStreamGetPriority; per thread 7000 => cuStreamGetPriority_ptsz;
        "cuStreamGetFlags": 5050 => cuStreamGetFlags; per thread 7000 => cuStreamGetFlags_ptsz;
        "cuCtxGetId": 12000 => cuCtxGetId;
        "cuStreamGetCtx": 9020 => cuStreamGetCtx; per thread 9020 => cuStreamGetCtx_ptsz;
        "cuStreamGetId": 12000 => cuStreamGetId; per thread 12000 => cuStreamGetId_ptsz;
        "cuEventRecordWithFlags": 11010 => cuEventRecordWithFlags; per thread 11010 => cuEventRecordWithFlags_ptsz;
        "cuProfilerStart": 4000 => cuProfilerStart;
        "cuProfilerStop": 4000 => cuProfilerStop;
        "cuGetErrorString": 6000 => cuGetErrorString;
        "cuGetErrorName": 6000 => cuGetErrorName;
        "cuGetExportTable": 3000 => cuGetExportTable;
        "cuGetProcAddress": 11030 => cuGetProcAddress, 12000 => cuGetProcAddress_v2;
    }
});

/// `CUdriverProcAddressQueryResult`.
const SYMBOL_NOT_FOUND: c_int = 1;
const VERSION_NOT_SUFFICIENT: c_int = 2;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`; the other flags (0, 1) ask for the legacy stream.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// The variant of `symbol` a caller built for CUDA `version` gets, or why there is none.
fn resolve(symbol: &str, version: c_int, flags: u64) -> Result<usize, c_int> {
    let known: Vec<&Proc> = PROCS.iter().filter(|p| p.symbol == symbol).collect();
    if known.is_empty() {
        return crate::unsupported::lookup(symbol).ok_or(SYMBOL_NOT_FOUND);
    }
    let usable: Vec<&Proc> = known.into_iter().filter(|p| p.version <= version).collect();
    let per_thread = flags & PER_THREAD_DEFAULT_STREAM != 0 && usable.iter().any(|p| p.per_thread);
    usable
        .into_iter()
        .filter(|p| p.per_thread == per_thread)
        .max_by_key(|p| p.version)
        .map(|p| p.address)
        .ok_or(VERSION_NOT_SUFFICIENT)
}

/// Works before `cuInit`, as the real driver's does: it is how the CUDA runtime finds `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    // SAFETY: the pointers are the caller's, valid as the driver API requires of them.
    let (pfn, status) = unsafe { (Out::new(pfn), Out::new(status)) };
    guard(|| {
        let symbol = unsafe { c_str(symbol) }?;
        if flags > PER_THREAD_DEFAULT_STREAM {
            return Err(CUresult::INVALID_VALUE);
        }
        pfn.check()?;
        match symbol.to_str().map_err(|_| SYMBOL_NOT_FOUND).and_then(|s| resolve(s, version, flags)) {
            Ok(address) => {
                status.set_if_asked(0);
                pfn.set(address as *mut c_void)
            }
            Err(why) => {
                status.set_if_asked(why);
                pfn.set(std::ptr::null_mut())?;
                Err(CUresult::NOT_FOUND)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    unsafe { cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut()) }
}

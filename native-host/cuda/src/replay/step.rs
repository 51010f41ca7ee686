//! One archive op resolved for this replay ([`Step`]): device addresses in place of regions,
//! functions in place of kernels, memsets lowered to what the driver or recap's fill kernels can
//! do. The graph builder and the stream run both consume steps, so the two modes cannot disagree
//! about what an op does.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdeviceptr};
use shared::archive::Reloc;
use shared::plan::Span;

use crate::driver::Func;

/// A device buffer for one region.
pub(super) struct RegionAlloc {
    /// What `cuMemAlloc` returned (freed on drop); 0 for a region placed at its captured address
    /// (its memory is one of the replay's reservations).
    pub(super) base: CUdeviceptr,
    /// `base` rounded up to the region's alignment: the region's device address.
    pub(super) addr: CUdeviceptr,
    pub(super) size: u64,
    /// The GPU holding it.
    pub(super) slot: usize,
}

/// A kernel launch with its parameter buffer, already relocated.
#[derive(Clone)]
pub(super) struct KernelStep {
    pub(super) func: Func,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared: u32,
    pub(super) params: Vec<u8>,
    /// Offset of each parameter in `params`, in declaration order.
    pub(super) offsets: Vec<usize>,
    pub(super) relocs: Vec<Reloc>,
    /// Tensor maps encoded for this replay's regions, by parameter offset (tensor_maps.rs).
    pub(super) maps: Vec<(usize, [u8; shared::tensor_map::SIZE])>,
    /// The kernel waits for its predecessors at entry: it may follow kernels through
    /// programmatic edges.
    pub(super) waits: bool,
    /// The GPU it runs on (`func.function` belongs to that GPU's context).
    pub(super) slot: usize,
    /// The captured launch's attributes that a replay sets (launch_attrs.rs).
    pub(super) attrs: Vec<sys::CUlaunchAttribute>,
}

impl KernelStep {
    /// Pointers to each parameter, as `kernelParams` wants them; valid while `params` is untouched.
    pub(super) fn arg_pointers(&mut self) -> Vec<*mut c_void> {
        let base = self.params.as_mut_ptr();
        // SAFETY: every offset lies inside `params` (checked when the step is made).
        self.offsets.iter().map(|&o| unsafe { base.add(o) } as *mut c_void).collect()
    }

    /// Node parameters naming the library kernel (with the context it runs in) when there is one,
    /// else the context's function.
    pub(super) fn node_params(&self, args: &mut [*mut c_void], ctx: sys::CUcontext) -> sys::CUDA_KERNEL_NODE_PARAMS {
        let library = !self.func.kernel.is_null();
        sys::CUDA_KERNEL_NODE_PARAMS {
            func: if library { std::ptr::null_mut() } else { self.func.function },
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared,
            kernelParams: if args.is_empty() { std::ptr::null_mut() } else { args.as_mut_ptr() },
            extra: std::ptr::null_mut(),
            kern: self.func.kernel,
            ctx: if library { ctx } else { std::ptr::null_mut() },
        }
    }
}

/// A parameter buffer for one of recap's own kernels.
#[derive(Default)]
pub(super) struct Args {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl Args {
    fn push(mut self, value: &[u8]) -> Self {
        let align = value.len();
        while !self.bytes.len().is_multiple_of(align) {
            self.bytes.push(0);
        }
        self.offsets.push(self.bytes.len());
        self.bytes.extend_from_slice(value);
        self
    }
    pub(super) fn u64(self, v: u64) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub(super) fn u32(self, v: u32) -> Self {
        self.push(&v.to_le_bytes())
    }
    pub(super) fn launch(self, (func, slot): (Func, usize), grid: u32, block: u32) -> KernelStep {
        KernelStep {
            slot,
            func,
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared: 0,
            params: self.bytes,
            offsets: self.offsets,
            relocs: Vec::new(),
            maps: Vec::new(),
            waits: false,
            attrs: Vec::new(),
        }
    }
}

/// How a memset is carried out: a memset node where the driver's element sizes allow, else a fill kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fill {
    /// `cuMemsetD8/16/32`: element size in bytes, element value, element count.
    Memset { elem: u32, value: u32, count: u64 },
    /// `recap_fill_u64`: an 8-byte pattern whose halves differ, 8-byte aligned.
    U64 { count: u64, pattern: u64 },
    /// `recap_fill_bytes`: anything else (unaligned destinations).
    Bytes { len: u64, pattern: u64, width: u32 },
}

pub(super) fn lower_memset(dst: CUdeviceptr, len: u64, width: u32, pattern: u64) -> Fill {
    let bytes = pattern.to_le_bytes();
    let w = width as usize;
    if bytes[..w].iter().all(|&b| b == bytes[0]) {
        return Fill::Memset { elem: 1, value: bytes[0] as u32, count: len };
    }
    let lo = pattern as u32;
    match width {
        2 if dst.is_multiple_of(2) => Fill::Memset { elem: 2, value: lo & 0xffff, count: len / 2 },
        4 if dst.is_multiple_of(4) => Fill::Memset { elem: 4, value: lo, count: len / 4 },
        8 if dst.is_multiple_of(4) && (pattern >> 32) as u32 == lo => {
            Fill::Memset { elem: 4, value: lo, count: len / 4 }
        }
        8 if dst.is_multiple_of(8) => Fill::U64 { count: len / 8, pattern },
        _ => Fill::Bytes { len, pattern, width },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Control {
    While,
    If,
}

/// One archive op, resolved to device addresses and functions.
#[derive(Clone)]
pub(super) enum Step {
    Kernel(KernelStep),
    Copy {
        src: CUdeviceptr,
        dst: CUdeviceptr,
        len: u64,
    },
    Memset {
        dst: CUdeviceptr,
        fill: Fill,
        slot: usize,
    },
    Control {
        kind: Control,
        cond: CUdeviceptr,
        cond_span: Span,
        counter: CUdeviceptr,
        max_iterations: u32,
        slot: usize,
    },
    /// Orders other ops but does no device work (alloc, free: scratch lives for the whole
    /// replay; signal, wait: the plan has turned them into edges).
    Barrier,
    /// Does nothing and orders nothing (markers, zero-length copies and memsets).
    Skip,
}

/// One end of a linear copy: device memory, or page-locked host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mem {
    Device(CUdeviceptr),
    Host(*mut c_void),
}

/// A copy of `len` bytes from `src` to `dst`, as memcpy nodes take it.
pub(super) fn linear_copy(src: Mem, dst: Mem, len: u64) -> sys::CUDA_MEMCPY3D {
    let (src_type, src_device, src_host) = match src {
        Mem::Device(p) => (sys::CUmemorytype::CU_MEMORYTYPE_DEVICE, p, std::ptr::null()),
        Mem::Host(p) => (sys::CUmemorytype::CU_MEMORYTYPE_HOST, 0, p as *const c_void),
    };
    let (dst_type, dst_device, dst_host) = match dst {
        Mem::Device(p) => (sys::CUmemorytype::CU_MEMORYTYPE_DEVICE, p, std::ptr::null_mut()),
        Mem::Host(p) => (sys::CUmemorytype::CU_MEMORYTYPE_HOST, 0, p),
    };
    sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_device,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host,
        dstDevice: dst_device,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: len as usize,
        Height: 1,
        Depth: 1,
    }
}

pub(super) fn patch(bytes: &mut [u8], relocs: impl Iterator<Item = Reloc>, regions: &[RegionAlloc]) {
    for r in relocs {
        let addr = regions[r.target as usize].addr + r.target_offset;
        let at = r.offset as usize;
        bytes[at..at + 8].copy_from_slice(&addr.to_le_bytes());
    }
}

/// Writes a launch's tensor maps over their (zeroed) parameter bytes.
pub(super) fn patch_maps(bytes: &mut [u8], maps: &[(usize, [u8; shared::tensor_map::SIZE])]) {
    for (at, map) in maps {
        bytes[*at..*at + map.len()].copy_from_slice(map);
    }
}

//! NVIDIA Warp's graph captures (`wp.capture_save`: a `.wrp` file, format "APIC", in every version a
//! Warp release has written: 3 from Warp 1.13 to 18 from Warp 1.19, see `formats.rs`), read into
//! plain data.
//!
//! The key idea: a `.wrp` is a list of memory regions with their contents and a stream of ops over
//! (region, byte offset) pairs, which is what a recap archive is too; what it does not hold is the
//! PTX (a CPU capture packages host object files) and any element type (every region is bytes; the
//! types live in the kernels). So this module only reads the file, checking every length and offset
//! against the bytes it has, and the importer (`recap import-wrp`) pairs it with PTX and types.
//!
//! The layout, field by field, is in docs/FORMAT.md ("Warp captures"). All integers are
//! little-endian and every record is packed. Nothing here trusts a count or a size from the file:
//! a record is read only when the bytes are there, and nesting of IF/WHILE bodies is bounded.

mod formats;
mod launch;
pub mod library;
mod parse;

pub use formats::{Format, UnknownFormat, FORMATS};
pub use parse::parse;

/// The newest format version this reader knows (Warp 1.19 writes and reads exactly this one);
/// [`FORMATS`] lists every one it reads.
pub const FORMAT_VERSION: u32 = 18;

/// IF/WHILE bodies nest at most this deep: a recap archive's bound (Warp's own is 1024), so a capture
/// no archive can hold is refused while it is read, with one short error.
pub const MAX_NESTING: usize = crate::archive::MAX_NESTING;

/// Why a `.wrp` file cannot be read: where (a byte offset in the file) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} (at byte {offset})")]
pub struct WrpError {
    pub offset: u64,
    pub what: String,
}

/// The device a capture was made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureDevice {
    Cpu,
    /// A CUDA GPU; its modules were compiled for this architecture (`90` for sm_90).
    Cuda {
        arch: u32,
    },
}

/// A whole capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Capture<'a> {
    pub device: CaptureDevice,
    /// The Warp version that wrote it (`1.19.0`); before format 18, which does not say, the
    /// releases that write its format (`1.16.0 or 1.17.0`).
    pub producer: String,
    pub modules: Vec<WrpModule>,
    pub kernels: Vec<Kernel>,
    /// Named inputs and outputs: a name and the region it is (a name may appear twice).
    pub bindings: Vec<(String, u32)>,
    /// Meshes the capture rebuilds at load; recap has no such thing.
    pub meshes: u32,
    /// Handle slots inside region contents that a load remaps (meshes again).
    pub handle_locations: u32,
    pub regions: Vec<Region<'a>>,
    pub ops: Vec<WrpOp<'a>>,
    /// How the kernels of the release that wrote it take their launch bounds.
    pub bounds: BoundsLayout,
}

/// The layout of Warp's `launch_bounds_t`, every kernel's first argument, which changed with the
/// release (and so with the format: a capture's PTX comes from the same release).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundsLayout {
    /// Warp 1.13 (format 3): the shape as four `i32`s, `ndim` as an `i32`, then the thread count
    /// as a `u64` at byte 24: 32 bytes whatever the launch's dimensions.
    Fixed,
    /// Warp 1.14 on: `launch_bounds_t<ndim>`: `ndim` extents as 32-bit words, then the thread
    /// count and the coordinate multiplier as `u64`s at 8-byte alignment.
    PerRank,
}

/// A compiled Warp module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrpModule {
    /// The module variant's SHA-256 in hex: what kernels and launches name it by.
    pub hash: String,
    /// The Python module's name (`__main__`, `my_sim`).
    pub name: String,
    /// Its file in `<name>_modules/`: `.o` for a CPU capture, `.ptx` or `.cubin` for CUDA.
    pub binary_filename: String,
    /// 0 for a CPU module, else the CUDA architecture it was compiled for.
    pub target_arch: u32,
    /// The generated CUDA source beside it, when the capture was saved with `source_fallback`.
    pub source_filename: String,
    /// How Warp compiled that source (format 18; Warp's defaults before).
    pub recipe: CompileRecipe,
}

/// Warp's options for compiling a module's generated CUDA source (`APICCudaCompileRecipe`), which
/// a loader needs to compile it again as Warp did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileRecipe {
    pub debug: bool,
    /// 0 to 3.
    pub optimization_level: u8,
    pub verify_fp: bool,
    pub fast_math: bool,
    /// Products and sums contracted into FMAs (`--fmad=true`).
    pub fuse_fp: bool,
    pub lineinfo: bool,
    /// The architecture's suffix: 0 none, 1 `a`, 2 `f`.
    pub arch_suffix: u8,
}

/// A kernel of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The Python kernel's key (`integrate`).
    pub key: String,
    pub module_hash: String,
    /// The compiled entry points (`integrate_1a2b3c4d_cpu_forward`, `..._cuda_kernel_forward`).
    pub forward_name: String,
    /// Empty when the module was built without adjoints.
    pub backward_name: String,
    pub forward_smem_bytes: u32,
    pub backward_smem_bytes: u32,
    /// The module variant's threads per block (1 for CPU captures).
    pub block_dim: u32,
}

/// A memory region: a Warp array's whole allocation, with its contents when the capture kept them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region<'a> {
    /// Warp's id (from 1).
    pub id: u32,
    pub size: u64,
    pub initial: Option<&'a [u8]>,
}

/// An op of the capture's stream, with where it starts in the file (for messages).
#[derive(Clone, Debug, PartialEq)]
pub struct WrpOp<'a> {
    pub offset: u64,
    pub kind: OpKind<'a>,
}

/// What an op does. Byte offsets and sizes are within regions; a region is Warp's id.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind<'a> {
    Launch(Launch<'a>),
    /// A copy between (or within) regions.
    Copy {
        dst: i32,
        src: i32,
        dst_offset: u64,
        src_offset: u64,
        size: u64,
    },
    /// A copy of bytes the file carries into a region.
    Upload {
        dst: i32,
        dst_offset: u64,
        data: &'a [u8],
    },
    /// Every byte of `[offset, offset + size)` set to `value`.
    Memset {
        region: i32,
        value: u8,
        offset: u64,
        size: u64,
    },
    /// `count` copies of `value` back to back from `offset`.
    Fill {
        region: i32,
        offset: u64,
        count: u64,
        value: &'a [u8],
    },
    /// A reservation Warp's replay ignores.
    Alloc {
        region: i32,
        size: u64,
    },
    /// `then` when the `i32` at (region, offset) is non-zero, else `otherwise`.
    If {
        region: i32,
        offset: u64,
        then: Vec<WrpOp<'a>>,
        otherwise: Vec<WrpOp<'a>>,
    },
    /// `body` while the `i32` at (region, offset) is non-zero (tested before every pass).
    While {
        region: i32,
        offset: u64,
        body: Vec<WrpOp<'a>>,
    },
    /// `wp.utils.array_scan` (`SCAN`): strides in bytes, `width` scalars a row, `dtype` an
    /// `APICType` ([`library::dtype`]).
    Scan {
        src: View,
        dst: View,
        count: u32,
        src_stride: i32,
        dst_stride: i32,
        width: i32,
        dtype: u8,
        inclusive: bool,
    },
    /// `wp.utils.radix_sort_pairs` (`RADIX_SORT`): keys and values hold `2 * count` elements.
    RadixSort {
        keys: View,
        values: View,
        count: u32,
        begin_bit: i32,
        end_bit: i32,
        value_size: i32,
        dtype: u8,
    },
    /// `wp.utils.segmented_sort_pairs` (`SEGMENTED_SORT`).
    SegmentedSort {
        keys: View,
        values: View,
        starts: View,
        ends: View,
        count: u32,
        segments: u32,
        dtype: u8,
    },
    /// `wp.utils.runlength_encode` (`RUNLENGTH_ENCODE`) of `count` `int32`s.
    RunLengthEncode {
        values: View,
        run_values: View,
        run_lengths: View,
        run_count: View,
        count: u32,
    },
    /// `wp.utils.array_sum` or `array_inner` (`REDUCTION`, `kind` a [`library::reduction`] code;
    /// `b` is region -1 for a sum).
    Reduction {
        a: View,
        b: View,
        out: View,
        count: u32,
        a_stride: i32,
        b_stride: i32,
        width: i32,
        kind: u8,
        dtype: u8,
    },
    /// Another of Warp's library routines (sparse matrices, BVHs, hash grids), which runs no
    /// kernel the capture holds and which recap does not replay.
    Library {
        opcode: u32,
    },
}

/// Where a library routine's operand starts: a Warp region and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub region: i32,
    pub offset: u64,
}

/// A kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch<'a> {
    /// Launch-bounds shape; the first `ndim` entries are used.
    pub shape: [u32; 4],
    pub ndim: u32,
    /// Threads in all (the launch bounds' `size`).
    pub size: u64,
    /// Threads the launcher was asked for.
    pub dim: u64,
    /// `0`: no bound on the grid.
    pub max_blocks: u32,
    /// Threads per block; 0 on CPU captures (the GPU launcher then takes 256).
    pub block_dim: u32,
    pub smem_bytes: u32,
    /// The entry loops over its threads with a grid stride.
    pub grid_stride: bool,
    pub forward: bool,
    pub kernel_key: String,
    pub module_hash: String,
    /// One per kernel argument, in order.
    pub params: Vec<Param<'a>>,
    /// The adjoint arguments of a backward launch (empty for forward ones).
    pub adjoints: Vec<Param<'a>>,
}

/// One kernel argument: its bytes as the kernel takes them, with the pointers inside them.
#[derive(Clone, Debug, PartialEq)]
pub struct Param<'a> {
    /// Borrowed from the file, except format 3's arrays, whose `array_t` the reader builds.
    pub value: std::borrow::Cow<'a, [u8]>,
    /// The C alignment of the argument's type.
    pub align: u32,
    pub pointers: Vec<Pointer>,
}

/// 8 bytes of an argument that hold a pointer (whatever the file has there is stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pointer {
    /// Where in the argument's bytes.
    pub at: u32,
    pub target: PointerTarget,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerTarget {
    /// The address of (region, offset).
    Data { region: i32, offset: u64 },
    /// A `wp.handle` (a mesh id) the load remaps.
    Handle,
    /// A null pointer.
    Null,
}

/// The name Warp gives an op type, for messages.
pub fn opcode_name(opcode: u32) -> &'static str {
    match opcode {
        1 => "KERNEL_LAUNCH",
        2 => "MEMCPY_H2D",
        3 => "MEMCPY_D2H",
        4 => "MEMCPY_D2D",
        5 => "MEMSET",
        6 => "ALLOC",
        7 => "IF",
        8 => "WHILE",
        9 => "SCAN",
        10 => "MEMTILE",
        11 => "SEGMENTED_SORT",
        12 => "RADIX_SORT",
        13 => "RUNLENGTH_ENCODE",
        14 => "BSR_FROM_TRIPLETS",
        15 => "BSR_TRANSPOSE",
        16 => "REDUCTION",
        17 => "BVH_REFIT",
        18 => "BVH_REBUILD",
        19 => "HASH_GRID_UPDATE",
        _ => "unknown",
    }
}

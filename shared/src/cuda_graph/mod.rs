//! CUDA graphs as the driver API describes them to a program that builds one node by node: the
//! parameter structures of `cuGraphAdd*Node` and `cuGraphAddNode` read from their C layout (cuda.h,
//! x86-64), and (`order.rs`) the one model of the order in which a graph's nodes run when work is
//! issued one op at a time.
//!
//! Two sides use this: recap's interposer, which records what a program puts into its graphs, and
//! the CPU stand-in for the driver, which runs such graphs; both must agree on what a node does
//! and in which order a graph's nodes run, so the layouts and the order live here once.
//!
//! A structure is read from the bytes the program handed the driver (`from_bytes` takes exactly the
//! structure's size); pointers inside it stay plain numbers, for the caller to follow on the
//! driver API's terms. Nothing here dereferences anything.

use crate::le::{u32_at, u64_at};

mod order;
pub use order::{expand, expand_node, run_order, Conditional, ExpandError, Graph, OrderError, Part, Run, MAX_DEPTH};

/// `CUgraphNodeType`.
pub mod node_type {
    pub const KERNEL: u32 = 0;
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const HOST: u32 = 3;
    pub const GRAPH: u32 = 4;
    pub const EMPTY: u32 = 5;
    pub const WAIT_EVENT: u32 = 6;
    pub const EVENT_RECORD: u32 = 7;
    pub const EXT_SEMAS_SIGNAL: u32 = 8;
    pub const EXT_SEMAS_WAIT: u32 = 9;
    pub const MEM_ALLOC: u32 = 10;
    pub const MEM_FREE: u32 = 11;
    pub const BATCH_MEM_OP: u32 = 12;
    pub const CONDITIONAL: u32 = 13;

    /// The node type's name, for reports.
    pub fn name(t: u32) -> &'static str {
        match t {
            KERNEL => "kernel",
            MEMCPY => "memcpy",
            MEMSET => "memset",
            HOST => "host",
            GRAPH => "child graph",
            EMPTY => "empty",
            WAIT_EVENT => "event wait",
            EVENT_RECORD => "event record",
            EXT_SEMAS_SIGNAL => "external semaphore signal",
            EXT_SEMAS_WAIT => "external semaphore wait",
            MEM_ALLOC => "memory allocation",
            MEM_FREE => "memory free",
            BATCH_MEM_OP => "batch memory op",
            CONDITIONAL => "conditional",
            _ => "unknown",
        }
    }
}

fn dims_at(b: &[u8], at: usize) -> [u32; 3] {
    [u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8)]
}

/// A kernel node: `CUDA_KERNEL_NODE_PARAMS` (v1, 56 bytes, what the unversioned
/// `cuGraphAddKernelNode` takes) or `_v2`/`_v3` (72 bytes, which add a `CUkernel` used when `func`
/// is null, and a context).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelNode {
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    /// `void **kernelParams` and `void **extra`, as `cuLaunchKernel` takes them.
    pub kernel_params: u64,
    pub extra: u64,
    pub kern: u64,
}

impl KernelNode {
    pub const V1_SIZE: usize = 56;
    pub const V2_SIZE: usize = 72;

    /// Reads v1 (56 bytes) or v2/v3 (72 bytes) by the length of `b`.
    pub fn from_bytes(b: &[u8]) -> KernelNode {
        KernelNode {
            func: u64_at(b, 0),
            grid: dims_at(b, 8),
            block: dims_at(b, 20),
            shared: u32_at(b, 32),
            kernel_params: u64_at(b, 40),
            extra: u64_at(b, 48),
            kern: if b.len() >= Self::V2_SIZE { u64_at(b, 56) } else { 0 },
        }
    }

    /// The kernel handle the node launches: the `CUfunction`, else the `CUkernel`.
    pub fn handle(&self) -> u64 {
        if self.func != 0 {
            self.func
        } else {
            self.kern
        }
    }
}

/// `CUmemorytype`.
pub mod memory_type {
    pub const HOST: u32 = 1;
    pub const DEVICE: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const UNIFIED: u32 = 4;
}

/// One end of a copy: an address and the memory it is in as the program declared it
/// ([`memory_type`]; `UNIFIED` means the address itself says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyEnd {
    pub memory: u32,
    pub addr: u64,
}

/// One contiguous piece of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyRun {
    pub src: CopyEnd,
    pub dst: CopyEnd,
    pub len: u64,
}

/// Why a memcpy node's copy cannot be issued as contiguous runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error("a copy to or from a CUDA array")]
    Array,
    #[error("a copy with memory type {0}")]
    MemoryType(u32),
    #[error("a copy whose offsets overflow")]
    OffsetOverflow,
    #[error("a copy of too many rows")]
    RowCountOverflow,
    #[error("a copy of too many bytes")]
    ByteCountOverflow,
    /// More rows than recap issues one at a time (2^20).
    #[error("a copy of {0} rows")]
    TooManyRows(u64),
}

/// Why a memset node's fill cannot be issued as contiguous runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    #[error("a memset of {0}-byte elements")]
    ElementSize(u32),
    #[error("a memset of too many bytes")]
    ByteCountOverflow,
    #[error("a memset of too many elements")]
    ElementCountOverflow,
    /// More rows than recap issues one at a time (2^20).
    #[error("a memset of {0} rows")]
    TooManyRows(u64),
    #[error("a memset whose rows overflow")]
    RowOverflow,
}

/// `CUDA_MEMCPY3D` (200 bytes): what a memcpy node copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memcpy3D {
    src: Side,
    dst: Side,
    width: u64,
    height: u64,
    depth: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Side {
    x: u64,
    y: u64,
    z: u64,
    memory: u32,
    host: u64,
    device: u64,
    array: u64,
    pitch: u64,
    height: u64,
}

impl Side {
    fn at(b: &[u8], base: usize) -> Side {
        Side {
            x: u64_at(b, base),
            y: u64_at(b, base + 8),
            z: u64_at(b, base + 16),
            memory: u32_at(b, base + 32),
            host: u64_at(b, base + 40),
            device: u64_at(b, base + 48),
            array: u64_at(b, base + 56),
            pitch: u64_at(b, base + 72),
            height: u64_at(b, base + 80),
        }
    }

    /// The address of row `y`, slice `z` of this side.
    fn row(&self, y: u64, z: u64) -> Result<CopyEnd, CopyError> {
        let base = match self.memory {
            memory_type::HOST => self.host,
            memory_type::DEVICE | memory_type::UNIFIED => self.device,
            memory_type::ARRAY => return Err(CopyError::Array),
            other => return Err(CopyError::MemoryType(other)),
        };
        let pitch = self.pitch;
        let offset = (self.z + z)
            .checked_mul(self.height)
            .and_then(|s| s.checked_mul(pitch))
            .and_then(|s| (self.y + y).checked_mul(pitch).and_then(|r| s.checked_add(r)))
            .and_then(|o| o.checked_add(self.x))
            .ok_or(CopyError::OffsetOverflow)?;
        Ok(CopyEnd { memory: self.memory, addr: base.wrapping_add(offset) })
    }
}

impl Memcpy3D {
    pub const SIZE: usize = 200;

    pub fn from_bytes(b: &[u8]) -> Memcpy3D {
        Memcpy3D {
            src: Side::at(b, 0),
            dst: Side::at(b, 88),
            width: u64_at(b, 176),
            height: u64_at(b, 184),
            depth: u64_at(b, 192),
        }
    }

    /// The copy as contiguous runs, rows in order; one run when both sides are contiguous.
    pub fn runs(&self) -> Result<Vec<CopyRun>, CopyError> {
        let (height, depth) = (self.height.max(1), self.depth.max(1));
        let rows = height.checked_mul(depth).ok_or(CopyError::RowCountOverflow)?;
        if self.width == 0 {
            return Ok(Vec::new());
        }
        let dense = |s: &Side| {
            s.x == 0
                && s.y == 0
                && s.z == 0
                && (rows == 1 || (s.pitch == self.width && (depth == 1 || s.height == height)))
        };
        if dense(&self.src) && dense(&self.dst) {
            let len = self.width.checked_mul(rows).ok_or(CopyError::ByteCountOverflow)?;
            return Ok(vec![CopyRun { src: self.src.row(0, 0)?, dst: self.dst.row(0, 0)?, len }]);
        }
        if rows > 1 << 20 {
            return Err(CopyError::TooManyRows(rows));
        }
        let mut runs = Vec::with_capacity(rows as usize);
        for z in 0..depth {
            for y in 0..height {
                runs.push(CopyRun { src: self.src.row(y, z)?, dst: self.dst.row(y, z)?, len: self.width });
            }
        }
        Ok(runs)
    }
}

/// One contiguous fill of a memset node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FillRun {
    pub dst: u64,
    /// 1, 2 or 4.
    pub width: u32,
    /// The value, no bits above `width` bytes.
    pub pattern: u64,
    /// Elements (of `width` bytes).
    pub count: u64,
}

/// `CUDA_MEMSET_NODE_PARAMS` (40 bytes; `_v2` adds a context).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemsetNode {
    pub dst: u64,
    pub pitch: u64,
    pub value: u32,
    pub element_size: u32,
    /// Elements per row.
    pub width: u64,
    pub height: u64,
}

impl MemsetNode {
    pub const SIZE: usize = 40;

    pub fn from_bytes(b: &[u8]) -> MemsetNode {
        MemsetNode {
            dst: u64_at(b, 0),
            pitch: u64_at(b, 8),
            value: u32_at(b, 16),
            element_size: u32_at(b, 20),
            width: u64_at(b, 24),
            height: u64_at(b, 32),
        }
    }

    /// The fill as contiguous runs, one per row (one in all when the rows touch).
    pub fn runs(&self) -> Result<Vec<FillRun>, FillError> {
        let width = self.element_size;
        if !matches!(width, 1 | 2 | 4) {
            return Err(FillError::ElementSize(width));
        }
        let pattern = u64::from(self.value) & (u64::MAX >> (64 - 8 * width));
        let height = self.height.max(1);
        let row_bytes = self.width.checked_mul(u64::from(width)).ok_or(FillError::ByteCountOverflow)?;
        if height == 1 || self.pitch == row_bytes {
            let count = self.width.checked_mul(height).ok_or(FillError::ElementCountOverflow)?;
            return Ok(vec![FillRun { dst: self.dst, width, pattern, count }]);
        }
        if height > 1 << 20 {
            return Err(FillError::TooManyRows(height));
        }
        (0..height)
            .map(|y| {
                let dst =
                    y.checked_mul(self.pitch).and_then(|o| self.dst.checked_add(o)).ok_or(FillError::RowOverflow)?;
                Ok(FillRun { dst, width, pattern, count: self.width })
            })
            .collect()
    }
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS`: the pool properties (88 bytes), the access descriptors, then the
/// size and the address the driver writes back.
pub mod mem_alloc {
    pub const SIZE: usize = 120;
    pub const BYTESIZE: usize = 104;
    pub const DPTR: usize = 112;
}

/// `CUgraphConditionalNodeType`.
pub mod conditional_type {
    pub const IF: u32 = 0;
    pub const WHILE: u32 = 1;
    pub const SWITCH: u32 = 2;
}

/// `CU_GRAPH_COND_ASSIGN_DEFAULT`: the condition takes its default value at every launch.
pub const COND_ASSIGN_DEFAULT: u32 = 1;

/// A node as `cuGraphAddNode` describes it: `CUgraphNodeParams` (256 bytes, the type then a union
/// at offset 16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeParams {
    Kernel(KernelNode),
    Memcpy(Memcpy3D),
    Memset(MemsetNode),
    Child {
        graph: u64,
    },
    Empty,
    WaitEvent {
        event: u64,
    },
    EventRecord {
        event: u64,
    },
    /// The size; the driver writes the address at [`NodeParams::MEM_ALLOC_DPTR`].
    MemAlloc {
        bytesize: u64,
    },
    MemFree {
        dptr: u64,
    },
    /// `phGraph_out`, at offset 32 of the structure, is where the driver writes an array of `size`
    /// body graphs.
    Conditional {
        handle: u64,
        kind: u32,
        size: u32,
    },
    /// A node recap does not replay (host callbacks, semaphores, batch memory ops), by its type.
    Other(u32),
}

impl NodeParams {
    pub const SIZE: usize = 256;
    /// Where the driver writes a memory allocation node's address in `CUgraphNodeParams`.
    pub const MEM_ALLOC_DPTR: usize = 16 + mem_alloc::DPTR;

    pub fn from_bytes(b: &[u8]) -> NodeParams {
        let u = &b[16..];
        match u32_at(b, 0) {
            node_type::KERNEL => NodeParams::Kernel(KernelNode::from_bytes(&u[..KernelNode::V2_SIZE])),
            // CUDA_MEMCPY_NODE_PARAMS: flags, reserved, the copy's context, then the copy.
            node_type::MEMCPY => NodeParams::Memcpy(Memcpy3D::from_bytes(&u[16..16 + Memcpy3D::SIZE])),
            node_type::MEMSET => NodeParams::Memset(MemsetNode::from_bytes(&u[..MemsetNode::SIZE])),
            node_type::GRAPH => NodeParams::Child { graph: u64_at(u, 0) },
            node_type::EMPTY => NodeParams::Empty,
            node_type::WAIT_EVENT => NodeParams::WaitEvent { event: u64_at(u, 0) },
            node_type::EVENT_RECORD => NodeParams::EventRecord { event: u64_at(u, 0) },
            node_type::MEM_ALLOC => NodeParams::MemAlloc { bytesize: u64_at(u, mem_alloc::BYTESIZE) },
            node_type::MEM_FREE => NodeParams::MemFree { dptr: u64_at(u, 0) },
            node_type::CONDITIONAL => {
                NodeParams::Conditional { handle: u64_at(u, 0), kind: u32_at(u, 8), size: u32_at(u, 12) }
            }
            other => NodeParams::Other(other),
        }
    }
}

/// The device function a kernel calls to set a conditional node's condition
/// (`cudaGraphSetConditional(handle, value)`): PTX declares it `.extern .func` with a `.b64` handle and
/// a `.b32` value, and the driver supplies it when the module loads.
pub const SET_CONDITIONAL: &str = "cudaGraphSetConditional";

/// The definition [`define_set_conditional`] puts in place of the driver's function: the value
/// stored as a `u32` at the handle, read as a global address.
const SET_CONDITIONAL_BODY: &str = ".func cudaGraphSetConditional(.param .b64 recap_handle, .param .b32 recap_value)
{
	.reg .b64 %recap_h;
	.reg .b32 %recap_v;
	ld.param.b64 %recap_h, [recap_handle];
	ld.param.b32 %recap_v, [recap_value];
	st.global.u32 [%recap_h], %recap_v;
	ret;
}";

/// `ptx` with its `.extern .func cudaGraphSetConditional(...)` declaration replaced by a definition
/// that stores the value at the handle, or `None` when it declares no such function.
///
/// This is how a conditional node's condition becomes memory: a captured graph's condition handle
/// becomes a 4-byte region, every kernel parameter holding the handle a relocation to it, and the
/// kernel's `cudaGraphSetConditional` a store into it, which a while or if op can test. The call
/// sites are untouched (they pass the handle and the value by position).
pub fn define_set_conditional(ptx: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = ptx[from..].find(".extern") {
        let start = from + at;
        let end = start + ptx[start..].find(';')?;
        let decl = &ptx[start..end];
        let names_it = decl
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '$'))
            .any(|word| word == SET_CONDITIONAL);
        if decl.contains(".func") && names_it {
            return Some(format!("{}{SET_CONDITIONAL_BODY}{}", &ptx[..start], &ptx[end + 1..]));
        }
        from = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pitched_copy_is_one_run_per_row_and_a_dense_one_is_one_run() {
        let mut b = vec![0u8; Memcpy3D::SIZE];
        let put = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        b[32..36].copy_from_slice(&memory_type::DEVICE.to_le_bytes());
        put(&mut b, 48, 0x1000); // src device
        put(&mut b, 72, 64); // src pitch
        b[120..124].copy_from_slice(&memory_type::HOST.to_le_bytes());
        put(&mut b, 128, 0x9000); // dst host
        put(&mut b, 160, 16); // dst pitch
        put(&mut b, 176, 16); // width
        put(&mut b, 184, 3); // height
        let runs = Memcpy3D::from_bytes(&b).runs().unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[2].src.addr, 0x1000 + 128);
        assert_eq!(runs[2].dst.addr, 0x9000 + 32);
        put(&mut b, 72, 16);
        let runs = Memcpy3D::from_bytes(&b).runs().unwrap();
        assert_eq!(
            runs,
            vec![CopyRun {
                src: CopyEnd { memory: memory_type::DEVICE, addr: 0x1000 },
                dst: CopyEnd { memory: memory_type::HOST, addr: 0x9000 },
                len: 48
            }]
        );
    }

    #[test]
    fn the_set_conditional_declaration_becomes_a_store_and_other_externs_stay() {
        let ptx = ".extern .func (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0\n)\n;\n\
                   .extern .func cudaGraphSetConditional\n(\n\t.param .b64 cudaGraphSetConditional_param_0,\n\
                   \t.param .b32 cudaGraphSetConditional_param_1\n)\n;\n.visible .entry k() { ret; }\n";
        let out = define_set_conditional(ptx).unwrap();
        assert!(out.contains("vprintf") && out.contains(".extern .func (.param .b32 func_retval0) vprintf"), "{out}");
        assert!(
            out.contains("st.global.u32 [%recap_h], %recap_v;")
                && !out.contains(".extern .func cudaGraphSetConditional"),
            "{out}"
        );
        assert!(out.ends_with(".visible .entry k() { ret; }\n"), "{out}");
        assert_eq!(define_set_conditional(".visible .entry k() { ret; }"), None);
        assert_eq!(define_set_conditional(".extern .func cudaGraphSetConditionalX(.param .b64 a);"), None);
    }

    #[test]
    fn a_memset_masks_its_value_to_the_element_width() {
        let m = MemsetNode { dst: 0x100, pitch: 0, value: 0x1234_5678, element_size: 2, width: 10, height: 1 };
        assert_eq!(m.runs().unwrap(), vec![FillRun { dst: 0x100, width: 2, pattern: 0x5678, count: 10 }]);
        let odd = MemsetNode { element_size: 3, ..m }.runs().unwrap_err();
        assert_eq!((odd.to_string(), odd), ("a memset of 3-byte elements".into(), FillError::ElementSize(3)));
        let rows = MemsetNode { pitch: 64, height: (1 << 20) + 1, ..m }.runs().unwrap_err();
        assert_eq!(rows.to_string(), "a memset of 1048577 rows");
        let wraps = MemsetNode { dst: u64::MAX - 8, pitch: 64, height: 2, ..m }.runs().unwrap_err();
        assert_eq!(wraps.to_string(), "a memset whose rows overflow");
    }

    #[test]
    fn a_copy_it_cannot_issue_is_refused_by_reason() {
        let mut b = vec![0u8; Memcpy3D::SIZE];
        b[32..36].copy_from_slice(&memory_type::ARRAY.to_le_bytes());
        b[120..124].copy_from_slice(&memory_type::DEVICE.to_le_bytes());
        b[176..184].copy_from_slice(&16u64.to_le_bytes());
        let array = Memcpy3D::from_bytes(&b).runs().unwrap_err();
        assert_eq!((array.to_string(), array), ("a copy to or from a CUDA array".into(), CopyError::Array));
        b[32..36].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(Memcpy3D::from_bytes(&b).runs().unwrap_err().to_string(), "a copy with memory type 9");
        b[32..36].copy_from_slice(&memory_type::DEVICE.to_le_bytes());
        b[184..192].copy_from_slice(&u64::MAX.to_le_bytes());
        b[192..200].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(Memcpy3D::from_bytes(&b).runs().unwrap_err(), CopyError::RowCountOverflow);
    }
}

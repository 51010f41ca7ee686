//! The plain values an archive is made of: what the writer takes and the reader hands back.

use serde::{Deserialize, Serialize};

/// Index of an interned string.
pub type StrId = u32;
/// Index of a module in the archive.
pub type ModuleId = u32;
/// Index of a kernel in the archive.
pub type KernelId = u32;
/// Index of a region (buffer) in the archive.
pub type RegionId = u32;
/// Index of an op in the archive's flat op list (pre-order: a control op is followed by its body).
pub type OpId = u32;
/// Index of a logical device (the `devices` section; 0 is the only device of a one-device archive).
pub type DeviceId = u32;
/// An event that signal ops record and wait ops wait for, numbered by the producer.
pub type EventId = u32;

/// Element type of a region: a hint for viewers and for tolerance checks, never for addressing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bytes,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    Bf16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::Bytes,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes (1 for raw bytes).
    pub fn size(self) -> usize {
        match self {
            DType::Bytes | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bytes => "bytes",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub(crate) fn code(self) -> u32 {
        DType::ALL.iter().position(|d| *d == self).unwrap_or(0) as u32
    }

    pub(crate) fn from_code(code: u32) -> Option<DType> {
        DType::ALL.get(code as usize).copied()
    }
}

/// How a replay's final region is judged against the archive's expected bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Tolerance {
    /// Every byte equal.
    Exact,
    /// Element-wise `|got - want| <= atol + rtol * |want|` (floats; NaN matches NaN).
    Close { rtol: f64, atol: f64 },
    /// At most this fraction of elements may differ at all (kernels on a chaotic edge).
    MismatchFraction { max_fraction: f64 },
}

impl Tolerance {
    pub(crate) fn code(&self) -> (u32, f64, f64) {
        match *self {
            Tolerance::Exact => (1, 0.0, 0.0),
            Tolerance::Close { rtol, atol } => (2, rtol, atol),
            Tolerance::MismatchFraction { max_fraction } => (3, max_fraction, 0.0),
        }
    }

    pub(crate) fn from_code(kind: u32, a: f64, b: f64) -> Option<Tolerance> {
        match kind {
            1 => Some(Tolerance::Exact),
            2 => Some(Tolerance::Close { rtol: a, atol: b }),
            3 => Some(Tolerance::MismatchFraction { max_fraction: a }),
            _ => None,
        }
    }
}

/// Whether a kernel parameter is a device pointer or a plain value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    Value,
    Pointer,
}

/// One kernel parameter as the PTX `.entry` declares it: its place in the parameter buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamDecl {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub align: u32,
    pub kind: ParamKind,
}

/// A region (device buffer) as declared to the writer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionDecl {
    pub name: String,
    pub size: u64,
    pub align: u32,
    pub dtype: DType,
    /// Shape hint for viewers, outermost first, at most 4 dimensions; empty means 1-D.
    pub shape: Vec<u64>,
    /// Graph-owned scratch: it exists only between an `Alloc` and a `Free` op.
    pub scratch: bool,
    /// The logical device whose memory holds the region (0 in a one-device archive).
    #[serde(default)]
    pub device: DeviceId,
}

impl RegionDecl {
    pub fn new(name: impl Into<String>, size: u64, dtype: DType) -> Self {
        RegionDecl { name: name.into(), size, align: 256, dtype, shape: Vec::new(), scratch: false, device: 0 }
    }

    /// The same region, on logical device `device`.
    pub fn on(mut self, device: DeviceId) -> Self {
        self.device = device;
        self
    }
}

/// A logical device of a multi-device archive: what the capture ran on, not where a replay must
/// run (a replay maps logical devices onto whatever GPUs, or the CPU, it has).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDecl {
    /// A name for people: `cuda:0`, `producer`, ...
    pub name: String,
    /// The architecture the capture ran on (`90` for sm_90); 0 when unknown.
    pub sm: u32,
}

/// Direction of a named binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    In,
    Out,
    InOut,
}

impl Direction {
    pub(crate) fn code(self) -> u32 {
        match self {
            Direction::In => 1,
            Direction::Out => 2,
            Direction::InOut => 3,
        }
    }
    pub(crate) fn from_code(c: u32) -> Option<Self> {
        match c {
            1 => Some(Direction::In),
            2 => Some(Direction::Out),
            3 => Some(Direction::InOut),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
            Direction::InOut => "inout",
        }
    }
}

/// "The 8 bytes at `offset` of the owner hold the device address of `target` + `target_offset`."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloc {
    pub offset: u64,
    pub target: RegionId,
    pub target_offset: u64,
}

/// Who holds the pointer a relocation patches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelocOwner {
    /// Bytes of a region's contents.
    Region(RegionId),
    /// A launch op's parameter buffer.
    Launch(OpId),
}

/// Launch geometry and parameters of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchDecl {
    pub kernel: KernelId,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// The parameter buffer exactly as the kernel receives it (layout from the kernel's `ParamDecl`s).
    pub params: Vec<u8>,
    /// Device pointers inside `params`.
    pub relocs: Vec<Reloc>,
}

/// A copy between (or within) regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyOp {
    pub src: RegionId,
    pub src_offset: u64,
    pub dst: RegionId,
    pub dst_offset: u64,
    pub len: u64,
}

/// Fill `len` bytes with a repeated 1/2/4/8-byte little-endian pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemsetOp {
    pub region: RegionId,
    pub offset: u64,
    pub len: u64,
    /// 1, 2, 4 or 8.
    pub width: u32,
    pub pattern: u64,
}

impl MemsetOp {
    /// The pattern's bytes; the first `width` of them repeat.
    pub fn pattern_le(&self) -> [u8; 8] {
        self.pattern.to_le_bytes()
    }

    /// Writes the pattern repeated over `out` (whose length is a multiple of `width`).
    pub fn fill(&self, out: &mut [u8]) {
        let bytes = self.pattern_le();
        let w = self.width.clamp(1, 8) as usize;
        for chunk in out.chunks_mut(w) {
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// A device-side condition: a 32-bit word in a region; non-zero means true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub region: RegionId,
    pub offset: u64,
    /// Safety bound on while-loop iterations; 0 means unbounded.
    pub max_iterations: u32,
}

/// The element type of a stretch of a region's bytes, as the last PTX store to it says
/// (`shared::check::infer`): the type a check reads and judges those bytes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemType {
    /// No PTX store wrote these bytes (host data, a copy or memset, a kernel without PTX).
    Untyped,
    I8,
    I16,
    I32,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    /// A 64-bit store of an address inside a region.
    Ptr,
}

impl ElemType {
    pub const ALL: [ElemType; 10] = [
        ElemType::Untyped,
        ElemType::I8,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::F16,
        ElemType::Bf16,
        ElemType::F32,
        ElemType::F64,
        ElemType::Ptr,
    ];

    /// Bytes of one element (1 for untyped bytes).
    pub fn size(self) -> usize {
        match self {
            ElemType::Untyped | ElemType::I8 => 1,
            ElemType::I16 | ElemType::F16 | ElemType::Bf16 => 2,
            ElemType::I32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::F64 | ElemType::Ptr => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, ElemType::F16 | ElemType::Bf16 | ElemType::F32 | ElemType::F64)
    }

    pub fn name(self) -> &'static str {
        match self {
            ElemType::Untyped => "untyped",
            ElemType::I8 => "i8",
            ElemType::I16 => "i16",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
            ElemType::Ptr => "ptr",
        }
    }

    /// The element type a region's declared dtype names (`None` for raw bytes).
    pub fn of_dtype(dtype: DType) -> Option<ElemType> {
        Some(match dtype {
            DType::Bytes => return None,
            DType::U8 | DType::I8 => ElemType::I8,
            DType::U16 | DType::I16 => ElemType::I16,
            DType::U32 | DType::I32 => ElemType::I32,
            DType::U64 | DType::I64 => ElemType::I64,
            DType::F16 => ElemType::F16,
            DType::Bf16 => ElemType::Bf16,
            DType::F32 => ElemType::F32,
            DType::F64 => ElemType::F64,
        })
    }

    pub(crate) fn code(self) -> u32 {
        ElemType::ALL.iter().position(|t| *t == self).unwrap_or(0) as u32
    }

    pub(crate) fn from_code(code: u32) -> Option<ElemType> {
        ElemType::ALL.get(code as usize).copied()
    }
}

/// One run of a region's typed layout: `len` bytes of elements of type `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    pub len: u64,
    pub ty: ElemType,
}

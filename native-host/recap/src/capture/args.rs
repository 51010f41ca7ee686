//! Kernel arguments, and how they become a parameter buffer plus the pointer sites in it.

use shared::archive::{ParamDecl, ParamKind};

use super::device::{Buffer, Element, Kernel, RawBuffer};
use super::{usage, Result};

/// One kernel argument.
#[derive(Clone, Debug)]
pub enum Arg {
    /// The device address of a buffer plus a byte offset.
    Buffer { buffer: RawBuffer, byte_offset: u64 },
    /// A scalar or any plain bytes, passed by value (little-endian).
    Value(Vec<u8>),
    /// A by-value struct whose pointer fields are marked.
    Struct(StructArg),
}

impl Arg {
    /// A pointer `byte_offset` bytes into `buffer`.
    pub fn pointer_at(buffer: &RawBuffer, byte_offset: u64) -> Arg {
        Arg::Buffer { buffer: buffer.clone(), byte_offset }
    }

    /// Plain bytes passed by value.
    pub fn bytes(bytes: &[u8]) -> Arg {
        Arg::Value(bytes.to_vec())
    }
}

/// A by-value struct argument: its bytes, and which 8-byte fields hold device pointers.
///
/// ```
/// # use recap::StructArg;
/// // struct Field { float* data; int nx; int ny; }
/// # fn demo(u: &recap::Buffer<f32>) {
/// let field = StructArg::new(16).pointer(0, u.raw(), 0).value(8, &64i32).value(12, &64i32);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct StructArg {
    pub(crate) bytes: Vec<u8>,
    pub(crate) pointers: Vec<PointerField>,
}

/// "The 8 bytes at `offset` hold the address of `target` + `target_offset`."
#[derive(Clone, Debug)]
pub(crate) struct PointerField {
    pub offset: u64,
    pub target: RawBuffer,
    pub target_offset: u64,
}

impl StructArg {
    /// A zeroed struct of `size` bytes.
    pub fn new(size: usize) -> Self {
        StructArg { bytes: vec![0; size], pointers: Vec::new() }
    }

    /// A struct from its bytes as the kernel expects them.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        StructArg { bytes: bytes.to_vec(), pointers: Vec::new() }
    }

    /// Marks the 8 bytes at `offset` as the address of `target` plus `target_offset` bytes.
    pub fn pointer(mut self, offset: usize, target: &RawBuffer, target_offset: u64) -> Self {
        self.pointers.push(PointerField { offset: offset as u64, target: target.clone(), target_offset });
        self
    }

    /// Writes a plain value at `offset`.
    pub fn value<T: bytemuck::Pod>(mut self, offset: usize, value: &T) -> Self {
        let b = bytemuck::bytes_of(value);
        let end = (offset + b.len()).min(self.bytes.len());
        if offset < end {
            self.bytes[offset..end].copy_from_slice(&b[..end - offset]);
        }
        self
    }
}

impl<T: Element> From<&Buffer<T>> for Arg {
    fn from(b: &Buffer<T>) -> Arg {
        Arg::pointer_at(b.raw(), 0)
    }
}

impl From<&RawBuffer> for Arg {
    fn from(b: &RawBuffer) -> Arg {
        Arg::pointer_at(b, 0)
    }
}

impl From<StructArg> for Arg {
    fn from(s: StructArg) -> Arg {
        Arg::Struct(s)
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl From<$t> for Arg {
            fn from(v: $t) -> Arg {
                Arg::Value(v.to_le_bytes().to_vec())
            }
        }
    )*};
}
scalar_args!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// An array of [`Arg`]s from buffers (`&buf`), scalars and [`StructArg`]s: `&args![&x, &y, 2.0f32, n]`.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$($crate::Arg::from($a)),*] };
}

/// A parameter buffer laid out as the kernel declares it, with the places that hold pointers.
pub(crate) struct PackedParams {
    pub bytes: Vec<u8>,
    pub pointers: Vec<PointerField>,
}

/// Lays `args` out in the kernel's parameter buffer, checking count and sizes against the PTX.
pub(crate) fn pack(kernel: &Kernel, args: &[Arg]) -> Result<PackedParams> {
    let params: &[ParamDecl] = kernel.params();
    if params.len() != args.len() {
        return usage(format!(
            "kernel {} takes {} parameters ({}); {} arguments were given",
            kernel.name(),
            params.len(),
            params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            args.len()
        ));
    }
    let size = params.iter().map(|p| p.offset as usize + p.size as usize).max().unwrap_or(0);
    let mut bytes = vec![0u8; size];
    let mut pointers = Vec::new();
    for (p, a) in params.iter().zip(args) {
        let at = p.offset as usize;
        let mismatch = |what: &str, got: usize| {
            usage(format!(
                "kernel {} parameter {} ({}) is {} bytes; the argument is {what} of {got} bytes",
                kernel.name(),
                p.name,
                if p.kind == ParamKind::Pointer { "pointer" } else { "value" },
                p.size
            ))
        };
        match a {
            Arg::Buffer { buffer, byte_offset } => {
                if p.size != 8 {
                    return mismatch("a pointer", 8);
                }
                if *byte_offset > buffer.byte_len() {
                    return usage(format!(
                        "kernel {} parameter {}: offset {byte_offset} is past the end of buffer {} ({} bytes)",
                        kernel.name(),
                        p.name,
                        buffer.name(),
                        buffer.byte_len()
                    ));
                }
                pointers.push(PointerField { offset: at as u64, target: buffer.clone(), target_offset: *byte_offset });
            }
            Arg::Value(v) => {
                if v.len() != p.size as usize {
                    return mismatch("a value", v.len());
                }
                bytes[at..at + v.len()].copy_from_slice(v);
            }
            Arg::Struct(s) => {
                if s.bytes.len() != p.size as usize {
                    return mismatch("a struct", s.bytes.len());
                }
                bytes[at..at + s.bytes.len()].copy_from_slice(&s.bytes);
                for f in &s.pointers {
                    if f.offset + 8 > s.bytes.len() as u64 {
                        return usage(format!(
                            "kernel {} parameter {}: pointer field at offset {} runs past the struct's {} bytes",
                            kernel.name(),
                            p.name,
                            f.offset,
                            s.bytes.len()
                        ));
                    }
                    pointers.push(PointerField { offset: at as u64 + f.offset, ..f.clone() });
                }
            }
        }
    }
    Ok(PackedParams { bytes, pointers })
}

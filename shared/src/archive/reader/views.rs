//! What the accessors hand out: borrowed views of records ([`ModuleView`], [`KernelView`],
//! [`RegionView`], [`Op`], ...) and [`Blob`], the stored bytes of one blob with its decoders.
//! Every view is built from a record [`Archive::open`](super::Archive::open) has checked.

use std::io::Read;
use std::ops::Range;

use super::error::{err, FormatError};
use super::Archive;
use crate::archive::layout::CODEC_LZ4_FRAME;
use crate::archive::model::*;
use crate::archive::LibraryOp;

/// Compressed or raw bytes in the blobs section.
#[derive(Clone, Copy, Debug)]
pub struct Blob<'a> {
    pub(super) stored: &'a [u8],
    pub(super) raw_len: u64,
    pub(super) codec: u32,
    pub(super) file_offset: u64,
}

impl<'a> Blob<'a> {
    /// Size once decoded.
    pub fn len(&self) -> u64 {
        self.raw_len
    }

    pub fn is_empty(&self) -> bool {
        self.raw_len == 0
    }

    /// Size as stored in the file.
    pub fn stored_len(&self) -> u64 {
        self.stored.len() as u64
    }

    /// A streaming decoder; reading it never holds more than one compressed block.
    pub fn reader(&self) -> Box<dyn Read + 'a> {
        match self.codec {
            CODEC_LZ4_FRAME => Box::new(lz4_flex::frame::FrameDecoder::new(self.stored)),
            _ => Box::new(self.stored),
        }
    }

    /// Decodes into `out`, which must be exactly [`Blob::len`] bytes.
    pub fn decode_into(&self, out: &mut [u8]) -> Result<(), FormatError> {
        if out.len() as u64 != self.raw_len {
            return err(
                "blobs",
                self.file_offset,
                format!("blob decodes to {} bytes but {} were asked for", self.raw_len, out.len()),
            );
        }
        let mut r = self.reader();
        r.read_exact(out).map_err(|e| FormatError {
            section: "blobs",
            offset: self.file_offset,
            reason: format!("blob of {} bytes does not decode: {e}", self.raw_len),
        })?;
        let mut extra = [0u8; 1];
        match r.read(&mut extra) {
            Ok(0) => Ok(()),
            Ok(_) => err("blobs", self.file_offset, format!("blob decodes to more than its {} bytes", self.raw_len)),
            Err(e) => err("blobs", self.file_offset, format!("blob does not decode: {e}")),
        }
    }

    /// Decodes into a new buffer. Allocation failure is an error, not an abort: a blob may claim up
    /// to 256 times its stored size, more than a small machine or a browser tab may have.
    pub fn decode(&self) -> Result<Vec<u8>, FormatError> {
        let too_big = || FormatError {
            section: "blobs",
            offset: self.file_offset,
            reason: format!("blob of {} bytes does not fit in memory", self.raw_len),
        };
        let len = usize::try_from(self.raw_len).map_err(|_| too_big())?;
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| too_big())?;
        v.resize(len, 0);
        self.decode_into(&mut v)?;
        Ok(v)
    }

    /// `(file offset, stored length, decoded length, codec)`: for checking from a reader.
    pub(in crate::archive) fn parts(&self) -> (u64, u64, u64, u32) {
        (self.file_offset, self.stored.len() as u64, self.raw_len, self.codec)
    }

    /// Decodes in chunks without keeping the bytes: the deep check of [`Archive::validate`].
    pub(super) fn check(&self) -> Result<(), FormatError> {
        let mut r = self.reader();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = r.read(&mut buf).map_err(|e| FormatError {
                section: "blobs",
                offset: self.file_offset,
                reason: format!("blob does not decode after {total} bytes: {e}"),
            })?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > self.raw_len {
                return err("blobs", self.file_offset, format!("blob decodes to more than its {} bytes", self.raw_len));
            }
        }
        if total != self.raw_len {
            return err("blobs", self.file_offset, format!("blob decodes to {total} bytes, not {}", self.raw_len));
        }
        Ok(())
    }
}

/// A module: PTX text and optional cubins.
#[derive(Clone, Debug)]
pub struct ModuleView<'a> {
    pub id: ModuleId,
    pub name: &'a str,
    pub ptx: Blob<'a>,
    /// `(sm, cubin)`: `sm` is the architecture number, e.g. 90 for sm_90.
    pub cubins: Vec<(u32, Blob<'a>)>,
}

impl ModuleView<'_> {
    /// The PTX source text.
    pub fn ptx_text(&self) -> Result<String, FormatError> {
        let bytes = self.ptx.decode()?;
        String::from_utf8(bytes).map_err(|e| FormatError {
            section: "modules",
            offset: self.ptx.file_offset,
            reason: format!("PTX of module {} is not UTF-8: {e}", self.name),
        })
    }
}

/// A kernel: an entry point of a module with its parameter layout.
#[derive(Clone, Debug)]
pub struct KernelView<'a> {
    pub id: KernelId,
    pub module: ModuleId,
    pub name: &'a str,
    pub params: Vec<ParamDecl>,
}

impl KernelView<'_> {
    /// Bytes the parameter buffer needs.
    pub fn params_size(&self) -> u64 {
        self.params.iter().map(|p| p.offset as u64 + p.size as u64).max().unwrap_or(0)
    }
}

/// A region (buffer) with its optional initial and expected contents.
#[derive(Clone, Debug)]
pub struct RegionView<'a> {
    pub id: RegionId,
    pub name: &'a str,
    pub size: u64,
    pub align: u32,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub scratch: bool,
    /// The logical device whose memory holds it.
    pub device: DeviceId,
    pub initial: Option<Blob<'a>>,
    pub expected: Option<Blob<'a>>,
    pub tolerance: Option<Tolerance>,
}

/// A launch as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchView<'a> {
    pub kernel: KernelId,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub params: &'a [u8],
    /// Indices of this launch's relocations (see [`Archive::relocs`]).
    pub relocs: Range<u32>,
}

/// One op as stored. While/If bodies are the `body_len` ops that follow them.
#[derive(Clone, Debug, PartialEq)]
pub enum Op<'a> {
    Launch(LaunchView<'a>),
    Copy(CopyOp),
    Memset(MemsetOp),
    Alloc(RegionId),
    Free(RegionId),
    While {
        cond: Condition,
        body_len: u32,
    },
    If {
        cond: Condition,
        body_len: u32,
    },
    Marker(&'a str),
    /// Records an event on the op's device (1.1).
    Signal(EventId),
    /// The op's device waits for the latest earlier signal of the event (1.1).
    Wait(EventId),
    /// A library routine over regions (1.3): what it computes is `shared::library`.
    Library(LibraryOp),
}

impl Op<'_> {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Launch(_) => "launch",
            Op::Copy(_) => "copy",
            Op::Memset(_) => "memset",
            Op::Alloc(_) => "alloc",
            Op::Free(_) => "free",
            Op::While { .. } => "while",
            Op::If { .. } => "if",
            Op::Marker(_) => "marker",
            Op::Signal(_) => "signal",
            Op::Wait(_) => "wait",
            Op::Library(_) => "library",
        }
    }

    /// Number of ops in this op's body (0 for everything but while/if).
    pub fn body_len(&self) -> u32 {
        match self {
            Op::While { body_len, .. } | Op::If { body_len, .. } => *body_len,
            _ => 0,
        }
    }
}

/// What a launch wrote, as recorded (`recap capture --record-effects`): applied by a replay that
/// cannot run the kernel, when the launch's inputs hash to `inputs` (`shared::effects`).
#[derive(Clone, Debug)]
pub struct Effects<'a> {
    pub op: OpId,
    pub inputs: [u8; crate::effects::INPUTS_HASH_LEN],
    /// `(region, offset, bytes)`; none when the launch changed nothing.
    pub writes: Vec<(RegionId, u64, Blob<'a>)>,
}

/// A named binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    pub name: &'a str,
    pub region: RegionId,
    pub direction: Direction,
}

/// Iterator over the direct children of a body; see [`Archive::children`].
pub struct Children<'r, 'a> {
    pub(super) archive: &'r Archive<'a>,
    pub(super) next: u32,
    pub(super) end: u32,
}

impl Iterator for Children<'_, '_> {
    type Item = OpId;
    fn next(&mut self) -> Option<OpId> {
        if self.next >= self.end {
            return None;
        }
        let id = self.next;
        self.next = id + 1 + self.archive.op(id).body_len();
        Some(id)
    }
}

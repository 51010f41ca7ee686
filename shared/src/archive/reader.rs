//! The zero-copy reader and the validator.
//!
//! [`Archive::open`] checks the whole structure once (header, section table, checksums of every
//! table, every index and every range) so that every accessor afterwards is infallible and cheap;
//! nothing is copied out of the byte slice until a caller decodes a blob. [`Archive::validate`]
//! additionally checks the blobs section's checksum and decompresses every blob.

use std::collections::HashSet;
use std::io::Read;
use std::ops::Range;

use super::layout::{self, SectionKind, *};
use super::model::*;
use super::rules;

#[path = "module_vars.rs"]
pub(super) mod module_vars;
pub use module_vars::ModuleVar;

/// Archive metadata a replay cannot follow: one of the keys captures write for replays
/// (`capture.placement`, `capture.addresses`, `capture.launch_attributes`) holds something the
/// replay does not understand, or a key another asks for is absent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("archive metadata {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("{why}, but the archive has no metadata {key}")]
    Missing { key: &'static str, why: &'static str },
}

impl MetadataError {
    pub fn invalid(key: &'static str, reason: impl std::fmt::Display) -> MetadataError {
        MetadataError::Invalid { key, reason: reason.to_string() }
    }
}

/// A name that is neither a binding nor a region of the archive; says which names there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no binding or region named {name:?} (bindings: {bindings}; regions: {regions})")]
pub struct UnknownName {
    pub name: String,
    bindings: String,
    regions: String,
}

/// What is wrong with an archive, and where.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{section} at byte {offset}: {reason}")]
pub struct FormatError {
    /// `header`, `section table`, or a section's name (`ops`, `regions`, ...).
    pub section: &'static str,
    /// Byte offset in the file where the problem is.
    pub offset: u64,
    pub reason: String,
}

pub(super) fn err<T>(section: &'static str, offset: u64, reason: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError { section, offset, reason: reason.into() })
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Fixed-size records of one table section.
#[derive(Clone, Copy, Debug)]
pub(super) struct Table<'a> {
    kind: SectionKind,
    /// The records, starting after the table header.
    data: &'a [u8],
    /// File offset of the first record.
    file_offset: u64,
    pub(super) count: usize,
    stride: usize,
}

impl<'a> Table<'a> {
    fn empty(kind: SectionKind) -> Self {
        Table { kind, data: &[], file_offset: 0, count: 0, stride: kind.record_len().unwrap_or(1) }
    }

    fn parse(kind: SectionKind, bytes: &'a [u8], file_offset: u64) -> Result<Self, FormatError> {
        let known = kind.record_len().expect("table section");
        if bytes.len() < TABLE_HEADER_LEN {
            return err(kind.name(), file_offset, "section is shorter than its 8-byte table header");
        }
        let count = u32_at(bytes, 0) as usize;
        let stride = u32_at(bytes, 4) as usize;
        if stride < known {
            return err(
                kind.name(),
                file_offset + 4,
                format!("record size {stride} is smaller than the {known} bytes of format v1"),
            );
        }
        let need = (count as u128) * (stride as u128);
        let have = (bytes.len() - TABLE_HEADER_LEN) as u128;
        if need > have {
            return err(
                kind.name(),
                file_offset,
                format!("{count} records of {stride} bytes need {need} bytes but the section holds {have}"),
            );
        }
        Ok(Table {
            kind,
            data: &bytes[TABLE_HEADER_LEN..TABLE_HEADER_LEN + need as usize],
            file_offset: file_offset + TABLE_HEADER_LEN as u64,
            count,
            stride,
        })
    }

    pub(super) fn rec(&self, i: usize) -> &'a [u8] {
        &self.data[i * self.stride..i * self.stride + self.stride]
    }

    pub(super) fn at(&self, i: usize, field: usize) -> u64 {
        self.file_offset + (i * self.stride + field) as u64
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }
}

/// Compressed or raw bytes in the blobs section.
#[derive(Clone, Copy, Debug)]
pub struct Blob<'a> {
    stored: &'a [u8],
    raw_len: u64,
    codec: u32,
    file_offset: u64,
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
    pub(super) fn parts(&self) -> (u64, u64, u64, u32) {
        (self.file_offset, self.stored.len() as u64, self.raw_len, self.codec)
    }

    /// Decodes in chunks without keeping the bytes: the deep check of [`Archive::validate`].
    fn check(&self) -> Result<(), FormatError> {
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

/// A validated archive over borrowed bytes.
#[derive(Clone, Debug)]
pub struct Archive<'a> {
    bytes: &'a [u8],
    version: (u16, u16),
    string_offsets: &'a [u8],
    string_data: &'a [u8],
    string_count: usize,
    modules: Table<'a>,
    cubins: Table<'a>,
    kernels: Table<'a>,
    params: Table<'a>,
    regions: Table<'a>,
    relocs: Table<'a>,
    ops: Table<'a>,
    bindings: Table<'a>,
    meta: Table<'a>,
    devices: Table<'a>,
    module_vars: Table<'a>,
    effects: Table<'a>,
    types: Table<'a>,
    pub(super) spread: Table<'a>,
    param_bytes: &'a [u8],
    param_bytes_offset: u64,
    blobs: &'a [u8],
    blobs_offset: u64,
    blobs_checksum: [u8; CHECKSUM_LEN],
}

impl<'a> Archive<'a> {
    /// Checks the structure of `bytes` and returns a reader over it. Never panics.
    pub fn open(bytes: &'a [u8]) -> Result<Self, FormatError> {
        if bytes.len() < HEADER_LEN {
            return err("header", 0, format!("file is {} bytes, shorter than the 64-byte header", bytes.len()));
        }
        if bytes[..8] != MAGIC {
            return err("header", 0, "not a recap archive (wrong magic bytes)");
        }
        let major = u16_at(bytes, header::MAJOR);
        let minor = u16_at(bytes, header::MINOR);
        if major != MAJOR {
            return err(
                "header",
                header::MAJOR as u64,
                format!("format version {major}.{minor} is not readable by this build (reads {MAJOR}.x)"),
            );
        }
        let file_len = u64_at(bytes, header::FILE_LEN);
        if file_len != bytes.len() as u64 {
            return err(
                "header",
                header::FILE_LEN as u64,
                format!("header says the file is {file_len} bytes but it is {} (truncated or padded)", bytes.len()),
            );
        }
        let table_offset = u64_at(bytes, header::TABLE_OFFSET);
        let section_count = u32_at(bytes, header::SECTION_COUNT) as u64;
        let table_len = section_count.checked_mul(SECTION_ENTRY_LEN as u64);
        let table_end = table_len.and_then(|l| l.checked_add(table_offset));
        if table_offset < HEADER_LEN as u64 || table_end.is_none_or(|e| e > file_len) {
            return err(
                "header",
                header::TABLE_OFFSET as u64,
                format!("section table of {section_count} entries at {table_offset} does not fit in the file"),
            );
        }
        let table = &bytes[table_offset as usize..table_end.unwrap() as usize];
        let sum = layout::checksum(&[&bytes[..header::CHECKSUM], table]);
        if sum[..] != bytes[header::CHECKSUM..HEADER_LEN] {
            return err(
                "header",
                header::CHECKSUM as u64,
                "header checksum mismatch (header or section table is corrupt)",
            );
        }

        let mut found: Vec<(SectionKind, u64, u64, [u8; CHECKSUM_LEN])> = Vec::new();
        let mut spans: Vec<(u64, u64)> = vec![(0, HEADER_LEN as u64), (table_offset, table_end.unwrap())];
        for i in 0..section_count as usize {
            let e = &table[i * SECTION_ENTRY_LEN..(i + 1) * SECTION_ENTRY_LEN];
            let at = table_offset + (i * SECTION_ENTRY_LEN) as u64;
            let code = u32_at(e, 0);
            let flags = u32_at(e, 4);
            let offset = u64_at(e, 8);
            let len = u64_at(e, 16);
            let end = offset.checked_add(len);
            if end.is_none_or(|end| end > file_len) {
                return err(
                    "section table",
                    at,
                    format!("section {i} (kind {code}) at {offset}+{len} runs past the end of the file"),
                );
            }
            let Some(kind) = SectionKind::from_code(code) else {
                if flags & SECTION_REQUIRED != 0 {
                    return err(
                        "section table",
                        at,
                        format!("section {i} has kind {code}, unknown to this reader and marked required"),
                    );
                }
                continue; // unknown optional sections are skipped
            };
            if found.iter().any(|f| f.0 == kind) {
                return err("section table", at, format!("section {} appears twice", kind.name()));
            }
            let mut sum = [0u8; CHECKSUM_LEN];
            sum.copy_from_slice(&e[24..24 + CHECKSUM_LEN]);
            found.push((kind, offset, len, sum));
            spans.push((offset, end.unwrap()));
        }
        spans.retain(|s| s.0 != s.1);
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return err(
                    "section table",
                    table_offset,
                    format!("sections overlap: bytes {}..{} and {}..{}", w[0].0, w[0].1, w[1].0, w[1].1),
                );
            }
        }
        for kind in SectionKind::ALL {
            if kind.mandatory() && !found.iter().any(|f| f.0 == kind) {
                return err("section table", table_offset, format!("mandatory section {} is missing", kind.name()));
            }
        }
        let section = |kind: SectionKind| found.iter().find(|f| f.0 == kind).copied();
        let body = |kind: SectionKind| -> Result<Option<(&'a [u8], u64)>, FormatError> {
            let Some((_, off, len, sum)) = section(kind) else { return Ok(None) };
            let b = &bytes[off as usize..(off + len) as usize];
            if kind != SectionKind::Blobs && layout::checksum(&[b]) != sum {
                return err(kind.name(), off, "section checksum mismatch (the section is corrupt)");
            }
            Ok(Some((b, off)))
        };
        let table_of = |kind: SectionKind| -> Result<Table<'a>, FormatError> {
            match body(kind)? {
                Some((b, off)) => Table::parse(kind, b, off),
                None => Ok(Table::empty(kind)),
            }
        };

        let (strings, strings_off) = body(SectionKind::Strings)?.unwrap();
        if strings.len() < TABLE_HEADER_LEN {
            return err("strings", strings_off, "section is shorter than its 8-byte header");
        }
        let string_count = u32_at(strings, 0) as usize;
        let offsets_len = (string_count as u128 + 1) * 4;
        if offsets_len > (strings.len() - TABLE_HEADER_LEN) as u128 {
            return err(
                "strings",
                strings_off,
                format!("{string_count} strings do not fit in a section of {} bytes", strings.len()),
            );
        }
        let string_offsets = &strings[TABLE_HEADER_LEN..TABLE_HEADER_LEN + offsets_len as usize];
        let string_data = &strings[TABLE_HEADER_LEN + offsets_len as usize..];
        let mut prev = 0u32;
        for i in 0..=string_count {
            let o = u32_at(string_offsets, i * 4);
            if (i == 0 && o != 0) || o < prev || o as usize > string_data.len() {
                return err(
                    "strings",
                    strings_off + (TABLE_HEADER_LEN + i * 4) as u64,
                    format!("string offset {o} is out of order or out of range"),
                );
            }
            if i > 0 && std::str::from_utf8(&string_data[prev as usize..o as usize]).is_err() {
                return err(
                    "strings",
                    strings_off + (TABLE_HEADER_LEN + offsets_len as usize) as u64 + prev as u64,
                    format!("string {} is not UTF-8", i - 1),
                );
            }
            prev = o;
        }

        let (param_bytes, param_bytes_offset) = body(SectionKind::ParamBytes)?.unwrap();
        let (blobs, blobs_offset) = body(SectionKind::Blobs)?.unwrap();
        let archive = Archive {
            bytes,
            version: (major, minor),
            string_offsets,
            string_data,
            string_count,
            modules: table_of(SectionKind::Modules)?,
            cubins: table_of(SectionKind::Cubins)?,
            kernels: table_of(SectionKind::Kernels)?,
            params: table_of(SectionKind::Params)?,
            regions: table_of(SectionKind::Regions)?,
            relocs: table_of(SectionKind::Relocs)?,
            ops: table_of(SectionKind::Ops)?,
            bindings: table_of(SectionKind::Bindings)?,
            meta: table_of(SectionKind::Meta)?,
            devices: table_of(SectionKind::Devices)?,
            module_vars: table_of(SectionKind::ModuleVars)?,
            effects: table_of(SectionKind::Effects)?,
            types: table_of(SectionKind::Types)?,
            spread: table_of(SectionKind::Spread)?,
            param_bytes,
            param_bytes_offset,
            blobs,
            blobs_offset,
            blobs_checksum: section(SectionKind::Blobs).unwrap().3,
        };
        archive.check_tables()?;
        archive.check_module_vars()?;
        archive.check_blob_sharing()?;
        Ok(archive)
    }

    fn check_string(&self, t: &Table, i: usize, field: usize, optional: bool) -> Result<u32, FormatError> {
        let id = u32_at(t.rec(i), field);
        if (id as usize) < self.string_count || (optional && id == NO_STRING) {
            Ok(id)
        } else {
            err(t.name(), t.at(i, field), format!("record {i} names string {id} but there are {}", self.string_count))
        }
    }

    fn check_blob(&self, t: &Table, i: usize, field: usize) -> Result<Blob<'a>, FormatError> {
        let r = t.rec(i);
        let offset = u64_at(r, field);
        let stored_len = u64_at(r, field + 8);
        let raw_len = u64_at(r, field + 16);
        let codec = u32_at(r, field + 24);
        let at = t.at(i, field);
        if codec != CODEC_RAW && codec != CODEC_LZ4_FRAME {
            return err(t.name(), at, format!("record {i} uses unknown compression codec {codec}"));
        }
        if offset.checked_add(stored_len).is_none_or(|e| e > self.blobs.len() as u64) {
            return err(
                t.name(),
                at,
                format!(
                    "record {i} refers to blob bytes {offset}+{stored_len} beyond the {}-byte blobs section",
                    self.blobs.len()
                ),
            );
        }
        if codec == CODEC_RAW && stored_len != raw_len {
            return err(t.name(), at, format!("record {i}: raw blob stored as {stored_len} bytes claims {raw_len}"));
        }
        // LZ4 cannot expand data more than 255-fold, so a larger claim is a lie that would make a
        // reader allocate far more than the file could ever hold.
        if codec == CODEC_LZ4_FRAME && raw_len / LZ4_MAX_RATIO > stored_len {
            return err(
                t.name(),
                at,
                format!("record {i}: {stored_len} compressed bytes cannot decode to the {raw_len} claimed"),
            );
        }
        Ok(Blob {
            stored: &self.blobs[offset as usize..(offset + stored_len) as usize],
            raw_len,
            codec,
            file_offset: self.blobs_offset + offset,
        })
    }

    fn check_region_index(&self, t: &Table, i: usize, field: usize, what: &str) -> Result<RegionId, FormatError> {
        let r = u32_at(t.rec(i), field);
        if (r as usize) < self.regions.count {
            Ok(r)
        } else {
            err(
                t.name(),
                t.at(i, field),
                format!("record {i}: {what} region {r} does not exist ({} regions)", self.regions.count),
            )
        }
    }

    fn region_size(&self, r: RegionId) -> u64 {
        u64_at(self.regions.rec(r as usize), 16)
    }

    fn region_device(&self, r: RegionId) -> DeviceId {
        u32_at(self.regions.rec(r as usize), REGION_DEVICE)
    }

    fn check_tables(&self) -> Result<(), FormatError> {
        let m = &self.modules;
        let c = &self.cubins;
        // Each module owns the next run of cubins, and each kernel the next run of parameters, so that
        // checking them all is one linear pass however hostile the counts.
        let mut next_cubin = 0u64;
        let mut sms = HashSet::new();
        for i in 0..m.count {
            self.check_string(m, i, 0, false)?;
            let first = u32_at(m.rec(i), 4) as u64;
            let n = u32_at(m.rec(i), 8) as u64;
            if first != next_cubin || first + n > c.count as u64 {
                return err(
                    "modules",
                    m.at(i, 4),
                    format!(
                        "module {i} lists cubins {first}..{}; expected the next of {} from {next_cubin}",
                        first + n,
                        c.count
                    ),
                );
            }
            next_cubin = first + n;
            sms.clear();
            for j in first as usize..(first + n) as usize {
                if u32_at(c.rec(j), 0) as usize != i {
                    return err(
                        "modules",
                        m.at(i, 4),
                        format!("module {i} lists cubin {j}, which belongs to module {}", u32_at(c.rec(j), 0)),
                    );
                }
                let sm = u32_at(c.rec(j), 4);
                if !sms.insert(sm) {
                    return err("cubins", c.at(j, 4), format!("module {i} has two cubins for sm_{sm}"));
                }
            }
            self.check_blob(m, i, 16)?;
        }
        if next_cubin != c.count as u64 {
            return err("cubins", c.file_offset, format!("{} cubins but the modules list {next_cubin}", c.count));
        }
        for i in 0..c.count {
            let module = u32_at(c.rec(i), 0);
            if module as usize >= m.count {
                return err("cubins", c.at(i, 0), format!("cubin {i} belongs to module {module} of {}", m.count));
            }
            self.check_blob(c, i, 8)?;
        }
        let p = &self.params;
        for i in 0..p.count {
            self.check_string(p, i, 0, false)?;
            let kind = u32_at(p.rec(i), 16);
            if kind > 1 {
                return err("params", p.at(i, 16), format!("parameter {i} has unknown kind {kind}"));
            }
        }
        let k = &self.kernels;
        let mut next_param = 0u64;
        for i in 0..k.count {
            let module = u32_at(k.rec(i), 0);
            if module as usize >= m.count {
                return err("kernels", k.at(i, 0), format!("kernel {i} belongs to module {module} of {}", m.count));
            }
            self.check_string(k, i, 4, false)?;
            let first = u32_at(k.rec(i), 8) as u64;
            let n = u32_at(k.rec(i), 12) as u64;
            if first != next_param || first + n > p.count as u64 {
                return err(
                    "kernels",
                    k.at(i, 8),
                    format!(
                        "kernel {i} lists parameters {first}..{}; expected the next of {} from {next_param}",
                        first + n,
                        p.count
                    ),
                );
            }
            next_param = first + n;
            if let Err((j, (field, reason))) = rules::params(&self.kernel(i as KernelId).params) {
                return err("params", p.at(first as usize + j, field), format!("kernel {i}: {reason}"));
            }
        }
        if next_param != p.count as u64 {
            return err("params", p.file_offset, format!("{} parameters but the kernels list {next_param}", p.count));
        }
        let dv = &self.devices;
        if dv.count == 0 && dv.file_offset != 0 {
            return err("devices", dv.file_offset, "the devices section lists no device");
        }
        for i in 0..dv.count {
            self.check_string(dv, i, 0, false)?;
        }
        let device_count = self.device_count();
        let rg = &self.regions;
        for i in 0..rg.count {
            let r = rg.rec(i);
            self.check_string(rg, i, 0, false)?;
            if let Err((field, reason)) =
                rules::device(REGION_DEVICE, "the region", u32_at(r, REGION_DEVICE), device_count)
            {
                return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
            }
            let dtype = u32_at(r, 4);
            if DType::from_code(dtype).is_none() {
                return err("regions", rg.at(i, 4), format!("region {i} has unknown element type {dtype}"));
            }
            let flags = u32_at(r, 8);
            if flags & !(REGION_HAS_INITIAL | REGION_HAS_EXPECTED | REGION_SCRATCH) != 0 {
                return err("regions", rg.at(i, 8), format!("region {i} has unknown flags {flags:#x}"));
            }
            let rank = u32_at(r, 24);
            if rank > 4 {
                return err("regions", rg.at(i, 24), format!("region {i} has {rank} dimensions; at most 4"));
            }
            if let Err((field, reason)) = rules::region(&[], u32_at(r, 12)) {
                return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
            }
            let size = u64_at(r, 16);
            for (flag, field, what) in [(REGION_HAS_INITIAL, 64, "initial"), (REGION_HAS_EXPECTED, 96, "expected")] {
                if flags & flag != 0 {
                    let b = self.check_blob(rg, i, field)?;
                    if b.raw_len != size {
                        return err(
                            "regions",
                            rg.at(i, field),
                            format!("region {i} is {size} bytes but its {what} data decodes to {}", b.raw_len),
                        );
                    }
                }
            }
            if flags & REGION_HAS_EXPECTED != 0 {
                let kind = u32_at(r, 128);
                let (a, b) = (f64::from_bits(u64_at(r, 136)), f64::from_bits(u64_at(r, 144)));
                let Some(t) = Tolerance::from_code(kind, a, b) else {
                    return err("regions", rg.at(i, 128), format!("region {i} has unknown tolerance kind {kind}"));
                };
                if let Err((field, reason)) = rules::tolerance(&t) {
                    return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
                }
            }
        }
        let rl = &self.relocs;
        let mut seen_region_owner = false;
        for i in 0..rl.count {
            let r = rl.rec(i);
            let (kind, owner) = (u32_at(r, 0), u32_at(r, 4));
            let owner_size = match kind {
                RELOC_OWNER_REGION => {
                    seen_region_owner = true;
                    if owner as usize >= rg.count {
                        return err(
                            "relocs",
                            rl.at(i, 4),
                            format!("relocation {i} patches region {owner} of {}", rg.count),
                        );
                    }
                    self.region_size(owner)
                }
                RELOC_OWNER_LAUNCH => {
                    if seen_region_owner {
                        return err(
                            "relocs",
                            rl.at(i, 0),
                            format!("relocation {i}: launch relocations must precede region relocations"),
                        );
                    }
                    if owner as usize >= self.ops.count || u32_at(self.ops.rec(owner as usize), 0) != layout::op::LAUNCH
                    {
                        return err(
                            "relocs",
                            rl.at(i, 4),
                            format!("relocation {i} patches op {owner}, which is not a launch"),
                        );
                    }
                    u32_at(self.ops.rec(owner as usize), 36) as u64
                }
                _ => return err("relocs", rl.at(i, 0), format!("relocation {i} has unknown owner kind {kind}")),
            };
            let target = self.check_region_index(rl, i, 16, "target")?;
            if let Err((field, reason)) = rules::reloc(&self.reloc(i as u32), owner_size, self.region_size(target)) {
                return err("relocs", rl.at(i, field), format!("relocation {i}: {reason}"));
            }
            let owner_device = match kind {
                RELOC_OWNER_REGION => self.region_device(owner),
                _ => self.op_device(owner),
            };
            if let Err((_, reason)) =
                rules::same_device(0, "its target", target, self.region_device(target), owner_device)
            {
                return err("relocs", rl.at(i, 16), format!("relocation {i}: {reason}"));
            }
        }
        self.check_ops()?;
        let b = &self.bindings;
        let mut names = HashSet::new();
        for i in 0..b.count {
            let name = self.check_string(b, i, 0, false)?;
            if !names.insert(name) {
                return err("bindings", b.at(i, 0), format!("binding {:?} is declared twice", self.string(name)));
            }
            self.check_region_index(b, i, 4, "bound")?;
            let d = u32_at(b.rec(i), 8);
            if Direction::from_code(d).is_none() {
                return err("bindings", b.at(i, 8), format!("binding {i} has unknown direction {d}"));
            }
        }
        let mt = &self.meta;
        for i in 0..mt.count {
            self.check_string(mt, i, 0, false)?;
            self.check_string(mt, i, 4, false)?;
        }
        self.check_effects()?;
        self.check_types()?;
        self.check_spread()
    }

    /// Typed layouts: regions ascending, each region's stretches consecutive, of known types and
    /// covering the region exactly (`types::check_layout`).
    fn check_types(&self) -> Result<(), FormatError> {
        let t = &self.types;
        let mut i = 0;
        let mut last: Option<RegionId> = None;
        while i < t.count {
            let (region, _, _) = super::types::record(t.rec(i));
            if region as usize >= self.regions.count {
                return err(
                    "types",
                    t.at(i, 0),
                    format!("record {i} names region {region} but there are {}", self.regions.count),
                );
            }
            if last.is_some_and(|l| l >= region) {
                return err(
                    "types",
                    t.at(i, 0),
                    format!("record {i}: region {region} comes after region {} or twice", last.unwrap_or(0)),
                );
            }
            last = Some(region);
            let first = i;
            let mut stretches = Vec::new();
            while i < t.count && super::types::record(t.rec(i)).0 == region {
                let (_, code, len) = super::types::record(t.rec(i));
                let Some(ty) = ElemType::from_code(code) else {
                    return err("types", t.at(i, 4), format!("record {i} has unknown element type {code}"));
                };
                stretches.push(Stretch { len, ty });
                i += 1;
            }
            if let Err((k, reason)) = super::types::check_layout(self.region(region).size, &stretches) {
                let at = (first + k).min(t.count - 1);
                return err("types", t.at(at, 8), format!("record {at}: typed layout of region {region}: {reason}"));
            }
        }
        Ok(())
    }

    /// A region's typed layout (`recap infer-types`), when the archive has one.
    pub fn typed_layout(&self, region: RegionId) -> Option<Vec<Stretch>> {
        let t = &self.types;
        // Records are sorted by region (checked at open): the first of `region`'s by bisection.
        let (mut lo, mut hi) = (0, t.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if super::types::record(t.rec(mid)).0 < region {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let first = lo;
        let out: Vec<Stretch> = (first..t.count)
            .map(|i| super::types::record(t.rec(i)))
            .take_while(|r| r.0 == region)
            .map(|(_, code, len)| Stretch { len, ty: ElemType::from_code(code).unwrap_or(ElemType::Untyped) })
            .collect();
        (!out.is_empty()).then_some(out)
    }

    /// Whether any region has a typed layout.
    pub fn has_typed_layouts(&self) -> bool {
        self.types.count > 0
    }

    /// Effects belong to launches, in op order, one inputs hash per launch, each write within a
    /// persistent region; a launch that wrote nothing has one record without a region.
    fn check_effects(&self) -> Result<(), FormatError> {
        let e = &self.effects;
        for i in 0..e.count {
            let r = e.rec(i);
            let op = u32_at(r, 0);
            if op as usize >= self.ops.count || u32_at(self.ops.rec(op as usize), 0) != layout::op::LAUNCH {
                return err("effects", e.at(i, 0), format!("record {i}: op {op} is not a launch"));
            }
            let same_op = i > 0 && u32_at(e.rec(i - 1), 0) == op;
            if i > 0 && u32_at(e.rec(i - 1), 0) > op {
                return err("effects", e.at(i, 0), format!("record {i}: op {op} comes after a later op's effects"));
            }
            if same_op && e.rec(i - 1)[16..32] != r[16..32] {
                return err("effects", e.at(i, 16), format!("record {i}: op {op} has two inputs hashes"));
            }
            let blob = self.check_blob(e, i, 32)?;
            let region = u32_at(r, 4);
            let offset = u64_at(r, 8);
            if region == EFFECT_NO_REGION {
                let alone = !same_op && (i + 1 == e.count || u32_at(e.rec(i + 1), 0) != op);
                if !alone || offset != 0 || blob.raw_len != 0 {
                    return err(
                        "effects",
                        e.at(i, 4),
                        format!("record {i}: a write without a region must be op {op}'s only one, and empty"),
                    );
                }
                continue;
            }
            self.check_region_index(e, i, 4, "written")?;
            let flags = u32_at(self.regions.rec(region as usize), 8);
            if flags & REGION_SCRATCH != 0 {
                return err("effects", e.at(i, 4), format!("record {i}: region {region} is scratch"));
            }
            if offset.checked_add(blob.raw_len).is_none_or(|end| end > self.region_size(region)) {
                return err(
                    "effects",
                    e.at(i, 8),
                    format!(
                        "record {i}: {} bytes at {offset} run past region {region} of {} bytes",
                        blob.raw_len,
                        self.region_size(region)
                    ),
                );
            }
        }
        Ok(())
    }

    fn check_ops(&self) -> Result<(), FormatError> {
        let t = &self.ops;
        let broken = |i: usize, rule: Result<(), rules::Broken>| match rule {
            Ok(()) => Ok(()),
            Err((field, reason)) => err("ops", t.at(i, field), format!("op {i}: {reason}")),
        };
        // Parameter bytes each kernel needs, computed once rather than per launch.
        let params_size: Vec<u64> = (0..self.kernels.count)
            .map(|k| {
                let r = self.kernels.rec(k);
                let first = u32_at(r, 8) as usize;
                (first..first + u32_at(r, 12) as usize)
                    .map(|p| u32_at(self.params.rec(p), 4) as u64 + u32_at(self.params.rec(p), 8) as u64)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let device_count = self.device_count();
        // Ends of the open while/if bodies with their devices, innermost last.
        let mut open: Vec<(usize, DeviceId)> = Vec::new();
        let mut next_reloc = 0u64;
        for i in 0..t.count {
            while open.last().is_some_and(|o| o.0 == i) {
                open.pop();
            }
            let r = t.rec(i);
            let device = u32_at(r, OP_DEVICE);
            broken(i, rules::device(OP_DEVICE, "the op", device, device_count))?;
            if let Some(&(_, body_device)) = open.last() {
                if device != body_device {
                    return err(
                        "ops",
                        t.at(i, OP_DEVICE),
                        format!("op {i} is on device {device} inside a body that runs on device {body_device}"),
                    );
                }
            }
            let placed = |field: usize, role: &str, region: RegionId| {
                broken(i, rules::same_device(field, role, region, self.region_device(region), device))
            };
            match u32_at(r, 0) {
                layout::op::LAUNCH => {
                    let kernel = u32_at(r, 4);
                    if kernel as usize >= self.kernels.count {
                        return err(
                            "ops",
                            t.at(i, 4),
                            format!("op {i} launches kernel {kernel} of {}", self.kernels.count),
                        );
                    }
                    let grid = [u32_at(r, 8), u32_at(r, 12), u32_at(r, 16)];
                    let block = [u32_at(r, 20), u32_at(r, 24), u32_at(r, 28)];
                    broken(i, rules::launch_dims(grid, block))?;
                    let len = u32_at(r, 36) as u64;
                    let off = u64_at(r, 40);
                    if off.checked_add(len).is_none_or(|e| e > self.param_bytes.len() as u64) {
                        return err(
                            "ops",
                            t.at(i, 36),
                            format!("op {i} parameter bytes {off}+{len} fall outside the param-bytes section"),
                        );
                    }
                    let need = params_size[kernel as usize];
                    if len < need || len > rules::MAX_PARAM_BYTES {
                        return err(
                            "ops",
                            t.at(i, 36),
                            format!("op {i} passes {len} parameter bytes; its kernel needs {need}"),
                        );
                    }
                    let first = u32_at(r, 48) as u64;
                    let n = u32_at(r, 52) as u64;
                    if first != next_reloc || first + n > self.relocs.count as u64 {
                        return err(
                            "ops",
                            t.at(i, 48),
                            format!("op {i} relocations {first}..{} are out of order or out of range", first + n),
                        );
                    }
                    for j in first..first + n {
                        let rr = self.relocs.rec(j as usize);
                        if u32_at(rr, 0) != RELOC_OWNER_LAUNCH || u32_at(rr, 4) as usize != i {
                            return err(
                                "ops",
                                t.at(i, 48),
                                format!("op {i} claims relocation {j}, which belongs elsewhere"),
                            );
                        }
                    }
                    next_reloc = first + n;
                }
                layout::op::COPY => {
                    self.check_region_index(t, i, 4, "source")?;
                    self.check_region_index(t, i, 8, "destination")?;
                    let Op::Copy(c) = self.op(i as OpId) else { unreachable!() };
                    broken(i, rules::copy(&c, self.region_size(c.src), self.region_size(c.dst)))?;
                }
                layout::op::MEMSET => {
                    self.check_region_index(t, i, 4, "memset")?;
                    let Op::Memset(m) = self.op(i as OpId) else { unreachable!() };
                    broken(i, rules::memset(&m, self.region_size(m.region)))?;
                    placed(4, "its", m.region)?;
                }
                layout::op::ALLOC | layout::op::FREE => {
                    let region = self.check_region_index(t, i, 4, "scratch")?;
                    if u32_at(self.regions.rec(region as usize), 8) & REGION_SCRATCH == 0 {
                        return err(
                            "ops",
                            t.at(i, 4),
                            format!("op {i} allocates or frees region {region}, which is not scratch"),
                        );
                    }
                    placed(4, "its scratch", region)?;
                }
                layout::op::WHILE | layout::op::IF => {
                    let region = self.check_region_index(t, i, 4, "condition")?;
                    let cond = Condition { region, offset: u64_at(r, 16), max_iterations: u32_at(r, 12) };
                    broken(i, rules::condition(&cond, self.region_size(region)))?;
                    placed(4, "its condition's", region)?;
                    let body_end = i as u64 + 1 + u32_at(r, 8) as u64;
                    let limit = open.last().map_or(t.count as u64, |e| e.0 as u64);
                    if body_end > limit {
                        return err(
                            "ops",
                            t.at(i, 8),
                            format!("op {i}: body of {} ops runs past its enclosing body or the op list", u32_at(r, 8)),
                        );
                    }
                    if body_end > i as u64 + 1 {
                        open.push((body_end as usize, device));
                    }
                    if open.len() > rules::MAX_NESTING {
                        return err(
                            "ops",
                            t.at(i, 0),
                            format!("op {i}: bodies nest more than {} deep", rules::MAX_NESTING),
                        );
                    }
                }
                layout::op::MARKER => {
                    self.check_string(t, i, 4, false)?;
                }
                kind @ (layout::op::SIGNAL | layout::op::WAIT) => {
                    if self.devices.count == 0 {
                        return err(
                            "ops",
                            t.at(i, 0),
                            format!(
                                "op {i} has kind {kind} ({}), which needs a devices section",
                                if kind == layout::op::SIGNAL { "signal" } else { "wait" }
                            ),
                        );
                    }
                }
                other => return err("ops", t.at(i, 0), format!("op {i} has unknown kind {other}")),
            }
        }
        // Region-owned relocations follow the launch ones; the rest were checked above.
        let launch_relocs =
            (0..self.relocs.count).take_while(|&j| u32_at(self.relocs.rec(j), 0) == RELOC_OWNER_LAUNCH).count() as u64;
        if launch_relocs != next_reloc {
            return err(
                "relocs",
                self.relocs.file_offset,
                format!("{launch_relocs} launch relocations but the launches claim {next_reloc}"),
            );
        }
        Ok(())
    }

    /// The blobs section's checksum, which [`Archive::open`] leaves unchecked: every reader that
    /// goes on to use region data or PTX calls this first, so damaged bytes stop the work with the
    /// section, offset and reason instead of becoming numbers (a raw blob has no checksum of its
    /// own). Hashing runs at several GB/s, far below the cost of replaying what it covers.
    pub fn verify_blobs(&self) -> Result<(), FormatError> {
        if layout::checksum(&[self.blobs]) != self.blobs_checksum {
            return err("blobs", self.blobs_offset, "section checksum mismatch (region data or PTX is corrupt)");
        }
        Ok(())
    }

    /// Deep check: the blobs section checksum and every blob decoding to its declared size.
    pub fn validate(&self) -> Result<(), FormatError> {
        self.verify_blobs()?;
        // Refs are identical or disjoint (checked at open), so decoding each distinct one once keeps
        // this linear in the size of the blobs section.
        let mut checked = HashSet::new();
        // Keyed by more than the offset: an empty ref may share its offset with a real blob.
        let mut check = |b: &Blob| if checked.insert(b.parts()) { b.check() } else { Ok(()) };
        for m in self.modules() {
            check(&m.ptx)?;
            m.ptx_text()?;
            for (_, c) in &m.cubins {
                check(c)?;
            }
        }
        for r in self.regions() {
            for b in r.initial.iter().chain(r.expected.iter()) {
                check(b)?;
            }
        }
        for e in self.effects() {
            for (_, _, b) in &e.writes {
                check(b)?;
            }
        }
        Ok(())
    }

    /// `(file offset, length, checksum)` of the blobs section.
    pub(super) fn blobs_section(&self) -> (u64, u64, [u8; CHECKSUM_LEN]) {
        (self.blobs_offset, self.blobs.len() as u64, self.blobs_checksum)
    }

    /// Blob refs either name exactly the same bytes or do not overlap at all.
    fn check_blob_sharing(&self) -> Result<(), FormatError> {
        // (offset in blobs, stored_len, raw_len, codec, table, record, field)
        let mut refs: Vec<(u64, u64, u64, u32, Table<'a>, usize, usize)> = Vec::new();
        let mut add = |t: &Table<'a>, i: usize, field: usize| {
            let r = t.rec(i);
            refs.push((
                u64_at(r, field),
                u64_at(r, field + 8),
                u64_at(r, field + 16),
                u32_at(r, field + 24),
                *t,
                i,
                field,
            ));
        };
        for i in 0..self.modules.count {
            add(&self.modules, i, 16);
        }
        for i in 0..self.cubins.count {
            add(&self.cubins, i, 8);
        }
        for i in 0..self.effects.count {
            add(&self.effects, i, 32);
        }
        for i in 0..self.regions.count {
            let flags = u32_at(self.regions.rec(i), 8);
            if flags & REGION_HAS_INITIAL != 0 {
                add(&self.regions, i, 64);
            }
            if flags & REGION_HAS_EXPECTED != 0 {
                add(&self.regions, i, 96);
            }
        }
        refs.retain(|r| r.1 > 0);
        refs.sort_unstable_by_key(|r| (r.0, r.1));
        for w in refs.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let same = a.0 == b.0 && a.1 == b.1;
            if (same && (a.2, a.3) != (b.2, b.3)) || (!same && b.0 < a.0 + a.1) {
                let (t, i, field) = (&b.4, b.5, b.6);
                return err(t.name(), t.at(i, field), format!(
                    "record {i} refers to blob bytes {}+{} that overlap other blob bytes {}+{} without being the same blob",
                    b.0, b.1, a.0, a.1));
            }
        }
        Ok(())
    }

    /// `(major, minor)` of the file's format.
    /// The whole archive's bytes, as [`Archive::open`] was given them.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Total size of the archive in bytes.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn string(&self, id: StrId) -> &'a str {
        if id as usize >= self.string_count {
            return "";
        }
        let a = u32_at(self.string_offsets, id as usize * 4) as usize;
        let b = u32_at(self.string_offsets, id as usize * 4 + 4) as usize;
        // Checked to be UTF-8 at open.
        std::str::from_utf8(&self.string_data[a..b]).unwrap_or("")
    }

    pub fn module_count(&self) -> usize {
        self.modules.count
    }

    pub fn module(&self, id: ModuleId) -> ModuleView<'a> {
        let t = &self.modules;
        let i = id as usize;
        let r = t.rec(i);
        let first = u32_at(r, 4) as usize;
        let n = u32_at(r, 8) as usize;
        let cubins = (first..first + n)
            .map(|c| (u32_at(self.cubins.rec(c), 4), self.check_blob(&self.cubins, c, 8).expect("checked at open")))
            .collect();
        ModuleView {
            id,
            name: self.string(u32_at(r, 0)),
            ptx: self.check_blob(t, i, 16).expect("checked at open"),
            cubins,
        }
    }

    pub fn modules(&self) -> impl ExactSizeIterator<Item = ModuleView<'a>> + '_ {
        (0..self.modules.count as u32).map(|i| self.module(i))
    }

    pub fn kernel_count(&self) -> usize {
        self.kernels.count
    }

    pub fn kernel(&self, id: KernelId) -> KernelView<'a> {
        let r = self.kernels.rec(id as usize);
        let first = u32_at(r, 8) as usize;
        let n = u32_at(r, 12) as usize;
        let params = (first..first + n)
            .map(|p| {
                let pr = self.params.rec(p);
                ParamDecl {
                    name: self.string(u32_at(pr, 0)).to_owned(),
                    offset: u32_at(pr, 4),
                    size: u32_at(pr, 8),
                    align: u32_at(pr, 12),
                    kind: if u32_at(pr, 16) == 1 { ParamKind::Pointer } else { ParamKind::Value },
                }
            })
            .collect();
        KernelView { id, module: u32_at(r, 0), name: self.string(u32_at(r, 4)), params }
    }

    pub fn kernels(&self) -> impl ExactSizeIterator<Item = KernelView<'a>> + '_ {
        (0..self.kernels.count as u32).map(|i| self.kernel(i))
    }

    pub fn region_count(&self) -> usize {
        self.regions.count
    }

    pub fn region(&self, id: RegionId) -> RegionView<'a> {
        let t = &self.regions;
        let i = id as usize;
        let r = t.rec(i);
        let flags = u32_at(r, 8);
        let rank = u32_at(r, 24) as usize;
        let tolerance = (flags & REGION_HAS_EXPECTED != 0).then(|| {
            let (a, b) = (f64::from_bits(u64_at(r, 136)), f64::from_bits(u64_at(r, 144)));
            match u32_at(r, 128) {
                2 => Tolerance::Close { rtol: a, atol: b },
                3 => Tolerance::MismatchFraction { max_fraction: a },
                _ => Tolerance::Exact,
            }
        });
        RegionView {
            id,
            name: self.string(u32_at(r, 0)),
            size: u64_at(r, 16),
            align: u32_at(r, 12),
            dtype: DType::from_code(u32_at(r, 4)).unwrap_or(DType::Bytes),
            shape: (0..rank).map(|d| u64_at(r, 32 + d * 8)).collect(),
            scratch: flags & REGION_SCRATCH != 0,
            device: u32_at(r, REGION_DEVICE),
            initial: (flags & REGION_HAS_INITIAL != 0).then(|| self.check_blob(t, i, 64).expect("checked at open")),
            expected: (flags & REGION_HAS_EXPECTED != 0).then(|| self.check_blob(t, i, 96).expect("checked at open")),
            tolerance,
        }
    }

    pub fn regions(&self) -> impl ExactSizeIterator<Item = RegionView<'a>> + '_ {
        (0..self.regions.count as u32).map(|i| self.region(i))
    }

    pub fn op_count(&self) -> usize {
        self.ops.count
    }

    /// The logical device op `id` runs on.
    pub fn op_device(&self, id: OpId) -> DeviceId {
        u32_at(self.ops.rec(id as usize), OP_DEVICE)
    }

    /// Logical devices: those of the `devices` section, or the single device 0 of an archive
    /// without one.
    pub fn device_count(&self) -> u32 {
        self.devices.count.max(1) as u32
    }

    /// The declared devices (empty for a one-device archive without a `devices` section).
    pub fn devices(&self) -> impl ExactSizeIterator<Item = DeviceDecl> + '_ {
        (0..self.devices.count).map(|i| {
            let r = self.devices.rec(i);
            DeviceDecl { name: self.string(u32_at(r, 0)).to_string(), sm: u32_at(r, 4) }
        })
    }

    /// A short name for op `id` that a person recognises: `launch saxpy`, `copy a -> b`, ...
    pub fn op_label(&self, id: OpId) -> String {
        let region = |r: RegionId| self.region(r).name;
        match self.op(id) {
            Op::Launch(l) => format!("launch {}", self.kernel(l.kernel).name),
            Op::Copy(c) => format!("copy {} -> {}", region(c.src), region(c.dst)),
            Op::Memset(m) => format!("memset {}", region(m.region)),
            Op::Alloc(r) => format!("alloc {}", region(r)),
            Op::Free(r) => format!("free {}", region(r)),
            Op::While { cond, .. } => format!("while {}[{}]", region(cond.region), cond.offset),
            Op::If { cond, .. } => format!("if {}[{}]", region(cond.region), cond.offset),
            Op::Marker(name) => format!("marker {name}"),
            Op::Signal(e) => format!("signal event {e}"),
            Op::Wait(e) => format!("wait event {e}"),
        }
    }

    pub fn op(&self, id: OpId) -> Op<'a> {
        let r = self.ops.rec(id as usize);
        let cond = || Condition { region: u32_at(r, 4), offset: u64_at(r, 16), max_iterations: u32_at(r, 12) };
        match u32_at(r, 0) {
            layout::op::LAUNCH => {
                let len = u32_at(r, 36) as usize;
                let off = u64_at(r, 40) as usize;
                let first = u32_at(r, 48);
                Op::Launch(LaunchView {
                    kernel: u32_at(r, 4),
                    grid: [u32_at(r, 8), u32_at(r, 12), u32_at(r, 16)],
                    block: [u32_at(r, 20), u32_at(r, 24), u32_at(r, 28)],
                    shared_bytes: u32_at(r, 32),
                    params: &self.param_bytes[off..off + len],
                    relocs: first..first + u32_at(r, 52),
                })
            }
            layout::op::COPY => Op::Copy(CopyOp {
                src: u32_at(r, 4),
                dst: u32_at(r, 8),
                src_offset: u64_at(r, 16),
                dst_offset: u64_at(r, 24),
                len: u64_at(r, 32),
            }),
            layout::op::MEMSET => Op::Memset(MemsetOp {
                region: u32_at(r, 4),
                width: u32_at(r, 8),
                offset: u64_at(r, 16),
                len: u64_at(r, 24),
                pattern: u64_at(r, 32),
            }),
            layout::op::ALLOC => Op::Alloc(u32_at(r, 4)),
            layout::op::FREE => Op::Free(u32_at(r, 4)),
            layout::op::WHILE => Op::While { cond: cond(), body_len: u32_at(r, 8) },
            layout::op::IF => Op::If { cond: cond(), body_len: u32_at(r, 8) },
            layout::op::SIGNAL => Op::Signal(u32_at(r, 4)),
            layout::op::WAIT => Op::Wait(u32_at(r, 4)),
            _ => Op::Marker(self.string(u32_at(r, 4))),
        }
    }

    /// All ops in stored (pre-order) order, bodies included.
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op<'a>> + '_ {
        (0..self.ops.count as u32).map(|i| self.op(i))
    }

    /// The ids of the ops directly inside `range` (a body, or `0..op_count` for the top level),
    /// skipping over nested bodies.
    pub fn children(&self, range: Range<u32>) -> Children<'_, 'a> {
        Children { archive: self, next: range.start, end: range.end }
    }

    /// The top-level ops.
    pub fn top_level(&self) -> Children<'_, 'a> {
        self.children(0..self.ops.count as u32)
    }

    /// The range of op ids forming the body of the while/if at `id` (empty for other ops).
    pub fn body(&self, id: OpId) -> Range<u32> {
        id + 1..id + 1 + self.op(id).body_len()
    }

    pub fn reloc(&self, index: u32) -> Reloc {
        let r = self.relocs.rec(index as usize);
        Reloc { offset: u64_at(r, 8), target: u32_at(r, 16), target_offset: u64_at(r, 24) }
    }

    /// Relocations of one launch (the `relocs` range of its [`LaunchView`]).
    pub fn relocs(&self, range: Range<u32>) -> impl Iterator<Item = Reloc> + '_ {
        range.map(|i| self.reloc(i))
    }

    /// Relocations inside region contents: `(region holding the pointer, reloc)`.
    pub fn region_relocs(&self) -> impl Iterator<Item = (RegionId, Reloc)> + '_ {
        (0..self.relocs.count as u32)
            .filter(|&i| u32_at(self.relocs.rec(i as usize), 0) == RELOC_OWNER_REGION)
            .map(|i| (u32_at(self.relocs.rec(i as usize), 4), self.reloc(i)))
    }

    /// Recorded effects, one item per launch that has them, in op order.
    pub fn effects(&self) -> impl Iterator<Item = Effects<'a>> + '_ {
        let e = &self.effects;
        let mut i = 0usize;
        std::iter::from_fn(move || {
            if i >= e.count {
                return None;
            }
            let op = u32_at(e.rec(i), 0);
            let mut inputs = [0u8; crate::effects::INPUTS_HASH_LEN];
            inputs.copy_from_slice(&e.rec(i)[16..32]);
            let mut writes = Vec::new();
            while i < e.count && u32_at(e.rec(i), 0) == op {
                let region = u32_at(e.rec(i), 4);
                if region != EFFECT_NO_REGION {
                    let blob = self.check_blob(e, i, 32).expect("checked at open");
                    writes.push((region, u64_at(e.rec(i), 8), blob));
                }
                i += 1;
            }
            Some(Effects { op, inputs, writes })
        })
    }

    pub fn binding_count(&self) -> usize {
        self.bindings.count
    }

    pub fn bindings(&self) -> impl ExactSizeIterator<Item = Binding<'a>> + '_ {
        (0..self.bindings.count).map(|i| {
            let r = self.bindings.rec(i);
            Binding {
                name: self.string(u32_at(r, 0)),
                region: u32_at(r, 4),
                direction: Direction::from_code(u32_at(r, 8)).unwrap_or(Direction::InOut),
            }
        })
    }

    pub fn binding(&self, name: &str) -> Option<Binding<'a>> {
        self.bindings().find(|b| b.name == name)
    }

    /// Free-form metadata pairs.
    pub fn meta(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + '_ {
        (0..self.meta.count).map(|i| {
            let r = self.meta.rec(i);
            (self.string(u32_at(r, 0)), self.string(u32_at(r, 4)))
        })
    }

    pub fn meta_value(&self, key: &str) -> Option<&'a str> {
        self.meta().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of metadata key `key` that `why` needs (a sentence naming what asks for it).
    pub fn required_meta(&self, key: &'static str, why: &'static str) -> Result<&'a str, MetadataError> {
        self.meta_value(key).ok_or(MetadataError::Missing { key, why })
    }

    /// Looks a kernel up by entry name.
    pub fn kernel_by_name(&self, name: &str) -> Option<KernelView<'a>> {
        self.kernels().find(|k| k.name == name)
    }

    /// Looks a region up by name.
    pub fn region_by_name(&self, name: &str) -> Option<RegionView<'a>> {
        self.regions().find(|r| r.name == name)
    }

    /// The region a binding or region name names (a binding first: names people chose for the
    /// data).
    pub fn region_named(&self, name: &str) -> Result<RegionId, UnknownName> {
        if let Some(b) = self.binding(name) {
            return Ok(b.region);
        }
        if let Some(r) = self.region_by_name(name) {
            return Ok(r.id);
        }
        let list = |names: Vec<&str>| match names.len() {
            0 => "none".to_string(),
            n if n > 12 => format!("{}, ... ({n} in all)", names[..12].join(", ")),
            _ => names.join(", "),
        };
        Err(UnknownName {
            name: name.to_string(),
            bindings: list(self.bindings().map(|b| b.name).collect()),
            regions: list(self.regions().map(|r| r.name).collect()),
        })
    }

    /// Byte offset of the param-bytes section (for error messages of consumers).
    pub fn param_bytes_offset(&self) -> u64 {
        self.param_bytes_offset
    }
}

/// Iterator over the direct children of a body; see [`Archive::children`].
pub struct Children<'r, 'a> {
    archive: &'r Archive<'a>,
    next: u32,
    end: u32,
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

//! The reader: header, section table, then the metadata, memory and operations sections, in
//! whichever format version the file says (`formats.rs` has what differs).

use super::formats::{Format, LaunchLayout};
use super::launch::launch;
use super::{
    opcode_name, BoundsLayout, Capture, CaptureDevice, CompileRecipe, Kernel, OpKind, Region, WrpError, WrpModule,
    WrpOp, MAX_NESTING,
};

const MAGIC: &[u8; 4] = b"WRP1";
const HEADER_BYTES: usize = 64;
const SECTION_ENTRY_BYTES: usize = 32;
const MAX_SECTIONS: u32 = 64;

/// Bytes of a packed record, header included.
const COND_RECORD: usize = 40;
/// Format 3's launch record before its strings (the later layouts say theirs in [`LaunchLayout`]).
const ARGUMENT_RECORDS_LAUNCH: usize = 72;

/// A cursor over part of the file that knows where that part starts, so every error names a byte
/// offset in the file.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes[0]` in the file.
    base: u64,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8], base: u64) -> Self {
        Reader { bytes, pos: 0, base }
    }

    pub(super) fn at(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(super) fn error<T>(&self, what: impl Into<String>) -> Result<T, WrpError> {
        Err(WrpError { offset: self.at(), what: what.into() })
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WrpError> {
        if n > self.remaining() {
            return self.error(format!("{what} needs {n} bytes but only {} are left", self.remaining()));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WrpError> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8, WrpError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(super) fn u16(&mut self, what: &str) -> Result<u16, WrpError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u32(&mut self, what: &str) -> Result<u32, WrpError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(super) fn i32(&mut self, what: &str) -> Result<i32, WrpError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    pub(super) fn u64(&mut self, what: &str) -> Result<u64, WrpError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(super) fn utf8(&self, bytes: &[u8], what: &str) -> Result<String, WrpError> {
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => self.error(format!("{what} is not UTF-8")),
        }
    }

    /// A metadata string: `u32` length, then the bytes.
    fn string(&mut self, what: &str) -> Result<String, WrpError> {
        let len = self.u32(what)? as usize;
        let bytes = self.take(len, what)?;
        self.utf8(bytes, what)
    }

    pub(super) fn skip(&mut self, n: usize, what: &str) -> Result<(), WrpError> {
        self.take(n, what).map(|_| ())
    }
}

/// Reads a whole `.wrp` file.
pub fn parse(bytes: &[u8]) -> Result<Capture<'_>, WrpError> {
    let mut r = Reader::new(bytes, 0);
    let magic = r.take(4, "the file header")?;
    if magic != MAGIC {
        return Err(WrpError {
            offset: 0,
            what: format!(
                "not a Warp capture: the file starts with {:?}, not \"WRP1\"",
                String::from_utf8_lossy(magic)
            ),
        });
    }
    if bytes.len() < HEADER_BYTES {
        return r.error(format!("the file header needs {HEADER_BYTES} bytes but the file has {}", bytes.len()));
    }
    let version = r.u32("the format version")?;
    let format = Format::of(version).map_err(|e| WrpError { offset: 4, what: e.to_string() })?;
    let _flags = r.u32("the header flags")?;
    let sections = r.u32("the section count")?;
    if sections == 0 || sections > MAX_SECTIONS {
        return Err(WrpError { offset: 12, what: format!("{sections} sections: a capture has 1 to {MAX_SECTIONS}") });
    }
    let table = r.u64("the section table's offset")?;
    let device_type = r.u8("the device type")?;
    r.skip(3, "the header")?;
    let target_arch = r.u32("the target architecture")?;
    let device = match (device_type, target_arch) {
        (1, 0) => CaptureDevice::Cpu,
        (0, arch) if arch > 0 => CaptureDevice::Cuda { arch },
        (1, arch) => {
            return Err(WrpError { offset: 28, what: format!("a CPU capture with target architecture {arch}") })
        }
        (0, _) => return Err(WrpError { offset: 28, what: "a CUDA capture without a target architecture".into() }),
        (other, _) => {
            return Err(WrpError { offset: 24, what: format!("device type {other}: expected 0 (CUDA) or 1 (CPU)") })
        }
    };

    // The section table.
    let mut found: [Option<Reader>; 3] = [None, None, None];
    let table_end = (sections as u64).checked_mul(SECTION_ENTRY_BYTES as u64).and_then(|n| n.checked_add(table));
    if table_end.is_none_or(|end| end > bytes.len() as u64) {
        return Err(WrpError {
            offset: 16,
            what: format!("the section table ({sections} entries at byte {table}) runs past the end of the file"),
        });
    }
    let mut t = Reader::new(&bytes[table as usize..], table);
    for _ in 0..sections {
        let entry = t.at();
        let kind = t.u32("a section's type")?;
        let _flags = t.u32("a section's flags")?;
        let offset = t.u64("a section's offset")?;
        let size = t.u64("a section's size")?;
        let uncompressed = t.u64("a section's uncompressed size")?;
        let name = match kind {
            1 => "metadata",
            2 => "memory",
            3 => "operations",
            // Warp skips section types it does not know; so does this reader.
            _ => continue,
        };
        if uncompressed != size {
            return Err(WrpError {
                offset: entry,
                what: format!("the {name} section is compressed, which format {version} never is"),
            });
        }
        if offset.checked_add(size).is_none_or(|end| end > bytes.len() as u64) {
            return Err(WrpError {
                offset: entry,
                what: format!(
                    "the {name} section ({size} bytes at byte {offset}) runs past the end of the file ({} bytes)",
                    bytes.len()
                ),
            });
        }
        let slot = &mut found[kind as usize - 1];
        if slot.is_some() {
            return Err(WrpError { offset: entry, what: format!("a second {name} section") });
        }
        *slot = Some(Reader::new(&bytes[offset as usize..(offset + size) as usize], offset));
    }
    let [Some(mut meta), Some(mut memory), Some(mut operations)] = found else {
        let missing: Vec<&str> = ["metadata", "memory", "operations"]
            .iter()
            .zip(&found)
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| *n)
            .collect();
        return Err(WrpError { offset: table, what: format!("the file has no {} section", missing.join(" or ")) });
    };

    // Metadata.
    let meta_version = meta.u32("the metadata's version")?;
    if meta_version != version {
        return meta.error(format!("the metadata says version {meta_version}, the header {version}"));
    }
    let producer = if format.rich_metadata() { meta.string("the producer version")? } else { format.producer() };
    let meta_arch = meta.u32("the metadata's target architecture")?;
    if meta_arch != target_arch {
        return meta.error(format!("the metadata says target architecture {meta_arch}, the header {target_arch}"));
    }
    let module_count = meta.u32("the module count")?;
    let kernel_count = meta.u32("the kernel count")?;
    let binding_count = meta.u32("the binding count")?;
    let meshes = meta.u32("the mesh count")?;
    let handle_locations = meta.u32("the handle location count")?;
    let mut modules = Vec::new();
    for _ in 0..module_count {
        let hash = meta.string("a module's hash")?;
        let name = meta.string("a module's name")?;
        let binary_filename = meta.string("a module's file name")?;
        let arch = meta.u32("a module's target architecture")?;
        let mut source_filename = String::new();
        let mut recipe = CompileRecipe::default();
        if format.rich_metadata() {
            let _digest = meta.string("a module's digest")?;
            source_filename = meta.string("a module's source file name")?;
            let _source_digest = meta.string("a module's source digest")?;
            let _kind = meta.u8("a module's binary kind")?;
            let _fallback = meta.u8("a module's fallback reason")?;
            // debug, optimization level, verify_fp, fast_math, fuse_fp, lineinfo, arch suffix, 9 reserved.
            let r = meta.take(16, "a module's compile recipe")?;
            recipe = CompileRecipe {
                debug: r[0] != 0,
                optimization_level: r[1],
                verify_fp: r[2] != 0,
                fast_math: r[3] != 0,
                fuse_fp: r[4] != 0,
                lineinfo: r[5] != 0,
                arch_suffix: r[6],
            };
        }
        modules.push(WrpModule { hash, name, binary_filename, target_arch: arch, source_filename, recipe });
    }
    let mut kernels = Vec::new();
    for _ in 0..kernel_count {
        kernels.push(Kernel {
            key: meta.string("a kernel's key")?,
            module_hash: meta.string("a kernel's module hash")?,
            forward_name: meta.string("a kernel's forward entry")?,
            backward_name: meta.string("a kernel's backward entry")?,
            forward_smem_bytes: meta.u32("a kernel's shared memory")?,
            backward_smem_bytes: meta.u32("a kernel's shared memory")?,
            block_dim: meta.u32("a kernel's block size")?,
        });
    }
    let mut bindings = Vec::new();
    for _ in 0..binding_count {
        let name = meta.string("a binding's name")?;
        let region = meta.u32("a binding's region")?;
        bindings.push((name, region));
    }
    for _ in 0..meshes {
        meta.skip(32, "a mesh record")?;
    }
    for _ in 0..handle_locations {
        meta.skip(if format.rich_metadata() { 28 } else { 20 }, "a handle location record")?;
    }
    if meta.remaining() != 0 {
        return meta.error(format!("{} bytes after the metadata's last record", meta.remaining()));
    }

    // Memory.
    let region_count = memory.u32("the region count")?;
    let mut regions: Vec<Region> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for _ in 0..region_count {
        let record = memory.at();
        let id = memory.u32("a region's id")?;
        let _element_size = memory.u32("a region's element size")?;
        let size = memory.u64("a region's size")?;
        let has_initial = memory.u8("a region's data flag")?;
        memory.skip(7, "a region record")?;
        let initial = match has_initial {
            0 => None,
            1 => {
                let Ok(len) = usize::try_from(size) else {
                    return memory.error(format!("region {id}'s {size} bytes of contents"));
                };
                Some(memory.take(len, &format!("region {id}'s contents"))?)
            }
            other => {
                return Err(WrpError { offset: record + 16, what: format!("region {id}: data flag {other} (0 or 1)") })
            }
        };
        if !ids.insert(id) {
            return Err(WrpError { offset: record, what: format!("region {id} is declared twice") });
        }
        regions.push(Region { id, size, initial });
    }
    if memory.remaining() != 0 {
        return memory.error(format!("{} bytes after the last region", memory.remaining()));
    }

    // Operations.
    let op_count = operations.u32("the op count")?;
    let ops = ops(&mut operations, op_count, 0, format)?;

    let bounds =
        if format.launch() == LaunchLayout::ArgumentRecords { BoundsLayout::Fixed } else { BoundsLayout::PerRank };
    Ok(Capture { device, producer, modules, kernels, bindings, meshes, handle_locations, regions, ops, bounds })
}

/// The error of bodies nested past [`MAX_NESTING`].
fn too_deep() -> String {
    format!("IF/WHILE bodies nest more than {MAX_NESTING} deep, the most a recap archive holds")
}

/// `count` ops from `r`, which must hold exactly them.
fn ops<'a>(r: &mut Reader<'a>, count: u32, depth: usize, format: Format) -> Result<Vec<WrpOp<'a>>, WrpError> {
    if depth > MAX_NESTING {
        return r.error(too_deep());
    }
    let mut out = Vec::new();
    for index in 0..count {
        let start = r.at();
        let opcode = r.u32("an op's type")?;
        let total = r.u32("an op's size")? as usize;
        if total < 8 {
            return Err(WrpError {
                offset: start + 4,
                what: format!("op {index} ({}) says it is {total} bytes long", opcode_name(opcode)),
            });
        }
        let body = r.take(total - 8, &format!("op {index} ({})", opcode_name(opcode)))?;
        let mut rec = Reader::new(body, start + 8);
        let kind = op(&mut rec, opcode, depth, format).map_err(|e| match depth > 0 && e.what == too_deep() {
            // Only the outermost op names itself: one prefix per level would make the message
            // as long as the nesting is deep.
            true => e,
            false => WrpError { offset: e.offset, what: format!("op {index} ({}): {}", opcode_name(opcode), e.what) },
        })?;
        out.push(WrpOp { offset: start, kind });
    }
    if r.remaining() != 0 {
        return r.error(format!("{} bytes after the last of {count} ops", r.remaining()));
    }
    Ok(out)
}

/// The fixed size of an op's record (header included), by type, in `format`.
fn fixed_size(opcode: u32, format: Format) -> Option<usize> {
    if !format.has_op(opcode) {
        return None;
    }
    Some(match opcode {
        1 => match format.launch() {
            LaunchLayout::ArgumentRecords => ARGUMENT_RECORDS_LAUNCH,
            LaunchLayout::Blobs { fixed } => fixed,
        },
        2 => 32,
        4 => 40,
        5 => 32,
        6 => 24,
        7 | 8 => COND_RECORD,
        10 => 32,
        9 | 12 => 52,
        11 => 68,
        13 | 16 => 64,
        14 => 160,
        15 => 116,
        17 | 18 => 24,
        19 => 64,
        _ => return None,
    })
}

/// One op's record after its 8-byte header.
fn op<'a>(r: &mut Reader<'a>, opcode: u32, depth: usize, format: Format) -> Result<OpKind<'a>, WrpError> {
    let Some(fixed) = fixed_size(opcode, format) else {
        if opcode_name(opcode) != "unknown" && opcode != 3 {
            return r.error(format!("op type {opcode}, which format {} does not have", format.version));
        }
        return r.error(format!("unknown op type {opcode}"));
    };
    if r.remaining() + 8 < fixed {
        return r.error(format!("the record is {} bytes; this op type has {fixed}", r.remaining() + 8));
    }
    let exact = |r: &Reader<'a>| -> Result<(), WrpError> {
        if r.remaining() != 0 {
            return r.error(format!("{} bytes after the record", r.remaining()));
        }
        Ok(())
    };
    Ok(match opcode {
        1 => OpKind::Launch(launch(r, format)?),
        2 => {
            let dst = r.i32("the destination")?;
            r.skip(4, "padding")?;
            let dst_offset = r.u64("the destination offset")?;
            let size = r.u64("the size")?;
            let data = r.take(usize::try_from(size).unwrap_or(usize::MAX), "the uploaded bytes")?;
            exact(r)?;
            OpKind::Upload { dst, dst_offset, data }
        }
        4 => {
            let dst = r.i32("the destination")?;
            let src = r.i32("the source")?;
            let dst_offset = r.u64("the destination offset")?;
            let src_offset = r.u64("the source offset")?;
            let size = r.u64("the size")?;
            exact(r)?;
            OpKind::Copy { dst, src, dst_offset, src_offset, size }
        }
        5 => {
            let region = r.i32("the region")?;
            let value = r.i32("the value")? as u8;
            let offset = r.u64("the offset")?;
            let size = r.u64("the size")?;
            exact(r)?;
            OpKind::Memset { region, value, offset, size }
        }
        6 => {
            let region = r.i32("the region")?;
            r.skip(4, "padding")?;
            let size = r.u64("the size")?;
            exact(r)?;
            OpKind::Alloc { region, size }
        }
        7 | 8 => {
            let region = r.i32("the condition's region")?;
            r.skip(4, "padding")?;
            let offset = r.u64("the condition's offset")?;
            let a_size = r.u32("the first branch's size")? as usize;
            let a_count = r.u32("the first branch's op count")?;
            let b_size = r.u32("the second branch's size")? as usize;
            let b_count = r.u32("the second branch's op count")?;
            if (a_size == 0) != (a_count == 0) || (b_size == 0) != (b_count == 0) {
                return r.error("a branch with bytes but no ops, or ops but no bytes");
            }
            let a_at = r.at();
            let mut a = Reader::new(r.take(a_size, "the first branch")?, a_at);
            let a_ops = ops(&mut a, a_count, depth + 1, format)?;
            let b_at = r.at();
            let mut b = Reader::new(r.take(b_size, "the second branch")?, b_at);
            let b_ops = ops(&mut b, b_count, depth + 1, format)?;
            exact(r)?;
            if opcode == 8 {
                if !b_ops.is_empty() {
                    return r.error("a WHILE with a second branch");
                }
                OpKind::While { region, offset, body: a_ops }
            } else {
                OpKind::If { region, offset, then: a_ops, otherwise: b_ops }
            }
        }
        10 => {
            let region = r.i32("the region")?;
            let value_size = r.u32("the value's size")? as usize;
            let offset = r.u64("the offset")?;
            let count = r.u64("the count")?;
            if value_size == 0 {
                return r.error("a fill with a value of 0 bytes");
            }
            let value = r.take(value_size, "the fill value")?;
            exact(r)?;
            OpKind::Fill { region, offset, count, value }
        }
        // Library routines: those recap replays field by field, the others by their opcode (their
        // record sizes are checked above).
        _ => match super::library::library(r, opcode)? {
            Some(kind) => {
                exact(r)?;
                kind
            }
            None => OpKind::Library { opcode },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal capture: one region, one memset, one fill, inside a WHILE.
    fn tiny() -> Vec<u8> {
        let mut meta = Vec::new();
        meta.extend(18u32.to_le_bytes());
        meta.extend(6u32.to_le_bytes());
        meta.extend(b"1.19.0");
        meta.extend(0u32.to_le_bytes()); // arch
        for count in [0u32, 0, 1, 0, 0] {
            meta.extend(count.to_le_bytes());
        }
        meta.extend(1u32.to_le_bytes());
        meta.extend(b"x");
        meta.extend(1u32.to_le_bytes());
        let mut memory = Vec::new();
        memory.extend(1u32.to_le_bytes());
        memory.extend(1u32.to_le_bytes());
        memory.extend(1u32.to_le_bytes());
        memory.extend(8u64.to_le_bytes());
        memory.push(1);
        memory.extend([0u8; 7]);
        memory.extend([7u8; 8]);
        let mut body = Vec::new();
        body.extend(5u32.to_le_bytes());
        body.extend(32u32.to_le_bytes());
        body.extend(1i32.to_le_bytes());
        body.extend(0i32.to_le_bytes());
        body.extend(0u64.to_le_bytes());
        body.extend(4u64.to_le_bytes());
        body.extend(10u32.to_le_bytes());
        body.extend(34u32.to_le_bytes());
        body.extend(1i32.to_le_bytes());
        body.extend(2u32.to_le_bytes());
        body.extend(4u64.to_le_bytes());
        body.extend(2u64.to_le_bytes());
        body.extend([1u8, 2]);
        let mut operations = Vec::new();
        operations.extend(1u32.to_le_bytes());
        operations.extend(8u32.to_le_bytes());
        operations.extend(((COND_RECORD + body.len()) as u32).to_le_bytes());
        operations.extend(1i32.to_le_bytes());
        operations.extend(0u32.to_le_bytes());
        operations.extend(0u64.to_le_bytes());
        operations.extend((body.len() as u32).to_le_bytes());
        operations.extend(2u32.to_le_bytes());
        operations.extend(0u32.to_le_bytes());
        operations.extend(0u32.to_le_bytes());
        operations.extend(&body);
        file(&meta, &memory, &operations)
    }

    /// A CPU capture of the three sections given.
    fn file(meta: &[u8], memory: &[u8], operations: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(MAGIC);
        out.extend(18u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(3u32.to_le_bytes());
        out.extend(64u64.to_le_bytes());
        out.push(1);
        out.extend([0u8; 3]);
        out.extend(0u32.to_le_bytes());
        out.extend([0u8; 32]);
        let mut offset = (HEADER_BYTES + 3 * SECTION_ENTRY_BYTES) as u64;
        for (kind, section) in [(1u32, meta), (2, memory), (3, operations)] {
            out.extend(kind.to_le_bytes());
            out.extend(0u32.to_le_bytes());
            out.extend(offset.to_le_bytes());
            out.extend((section.len() as u64).to_le_bytes());
            out.extend((section.len() as u64).to_le_bytes());
            offset += section.len() as u64;
        }
        out.extend(meta);
        out.extend(memory);
        out.extend(operations);
        out
    }

    /// Metadata of no modules, kernels or bindings.
    fn bare_meta() -> Vec<u8> {
        let mut meta = Vec::new();
        meta.extend(18u32.to_le_bytes());
        meta.extend(6u32.to_le_bytes());
        meta.extend(b"1.19.0");
        meta.extend(0u32.to_le_bytes());
        for count in [0u32; 5] {
            meta.extend(count.to_le_bytes());
        }
        meta
    }

    /// `count` regions of 4 bytes without contents, ids from 1.
    fn regions(count: u32) -> Vec<u8> {
        let mut memory = count.to_le_bytes().to_vec();
        for id in 1..=count {
            memory.extend(id.to_le_bytes());
            memory.extend(1u32.to_le_bytes());
            memory.extend(4u64.to_le_bytes());
            memory.extend([0u8; 8]);
        }
        memory
    }

    /// A WHILE on region 1 whose body is `inner` (one op), or empty.
    fn while_op(inner: Option<&[u8]>) -> Vec<u8> {
        let body = inner.unwrap_or(&[]);
        let mut op = Vec::new();
        op.extend(8u32.to_le_bytes());
        op.extend(((COND_RECORD + body.len()) as u32).to_le_bytes());
        op.extend(1i32.to_le_bytes());
        op.extend(0u32.to_le_bytes());
        op.extend(0u64.to_le_bytes());
        op.extend((body.len() as u32).to_le_bytes());
        op.extend((inner.is_some() as u32).to_le_bytes());
        op.extend([0u8; 8]);
        op.extend(body);
        op
    }

    #[test]
    fn nesting_past_an_archives_bound_is_one_short_error() {
        let mut op = while_op(None);
        for _ in 0..1100 {
            op = while_op(Some(&op));
        }
        let mut operations = 1u32.to_le_bytes().to_vec();
        operations.extend(&op);
        let e = parse(&file(&bare_meta(), &regions(1), &operations)).unwrap_err();
        assert!(e.what.len() < 200, "{} bytes: {}", e.what.len(), &e.what[..200]);
        assert!(e.what.starts_with("op 0 (WHILE): ") && e.what.contains("more than 64 deep"), "{e}");
        // As deep as an archive may go (64 WHILEs, one inside the other) reads.
        let mut op = while_op(None);
        for _ in 1..MAX_NESTING {
            op = while_op(Some(&op));
        }
        let mut operations = 1u32.to_le_bytes().to_vec();
        operations.extend(&op);
        assert!(parse(&file(&bare_meta(), &regions(1), &operations)).is_ok());
    }

    #[test]
    fn many_regions_read_in_linear_time() {
        // Checking each id against every earlier one took minutes here; a set takes milliseconds.
        let bytes = file(&bare_meta(), &regions(300_000), &0u32.to_le_bytes());
        let started = std::time::Instant::now();
        assert_eq!(parse(&bytes).unwrap().regions.len(), 300_000);
        assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
        let mut twice = regions(3);
        twice[4 + 2 * 24..][..4].copy_from_slice(&1u32.to_le_bytes());
        let e = parse(&file(&bare_meta(), &twice, &0u32.to_le_bytes())).unwrap_err();
        assert!(e.what.contains("region 1 is declared twice"), "{e}");
    }

    /// `bytes` (a format 18 capture without modules) as format `version` writes it: the version in
    /// the header and the metadata, and before 18 no producer string.
    fn as_format(bytes: &[u8], version: u32) -> Vec<u8> {
        let meta_at = HEADER_BYTES + 3 * SECTION_ENTRY_BYTES;
        let meta_len = u64::from_le_bytes(bytes[64 + 16..64 + 24].try_into().unwrap()) as usize;
        let mut meta = bytes[meta_at..meta_at + meta_len].to_vec();
        meta[..4].copy_from_slice(&version.to_le_bytes());
        if version < 18 {
            meta.drain(4..4 + 4 + 6);
        }
        let memory_len = u64::from_le_bytes(bytes[96 + 16..96 + 24].try_into().unwrap()) as usize;
        let memory = &bytes[meta_at + meta_len..meta_at + meta_len + memory_len];
        let mut out = file(&meta, memory, &bytes[meta_at + meta_len + memory_len..]);
        out[4..8].copy_from_slice(&version.to_le_bytes());
        out
    }

    #[test]
    fn each_format_reads_its_own_metadata_and_refuses_ops_it_does_not_have() {
        let bytes = tiny();
        for (version, producer) in [(14, "1.15.0"), (15, "1.16.0 or 1.17.0"), (16, "1.18.0")] {
            let file = as_format(&bytes, version);
            let c = parse(&file).unwrap_or_else(|e| panic!("{version}: {e}"));
            assert_eq!((c.producer.as_str(), c.bindings.len(), c.ops.len()), (producer, 1, 1), "{version}");
        }
        // Format 10 has WHILE but no fills; format 3 has neither.
        let e = parse(&as_format(&bytes, 10)).unwrap_err();
        assert_eq!(e.what, "op 0 (WHILE): op 1 (MEMTILE): op type 10, which format 10 does not have");
        let e = parse(&as_format(&bytes, 3)).unwrap_err();
        assert_eq!(e.what, "op 0 (WHILE): op type 8, which format 3 does not have");
        // Format 18's metadata read as format 16's is refused, not misread.
        let mut wrong = bytes.clone();
        wrong[4..8].copy_from_slice(&16u32.to_le_bytes());
        assert!(parse(&wrong).unwrap_err().what.contains("the metadata says version 18, the header 16"));
    }

    #[test]
    fn a_small_capture_reads_back() {
        let bytes = tiny();
        let c = parse(&bytes).unwrap();
        assert_eq!(
            (c.device, c.producer.as_str(), c.bindings.clone()),
            (CaptureDevice::Cpu, "1.19.0", vec![("x".to_string(), 1)])
        );
        assert_eq!(c.regions, vec![Region { id: 1, size: 8, initial: Some(&[7u8; 8][..]) }]);
        let OpKind::While { region: 1, offset: 0, body } = &c.ops[0].kind else { panic!("{:?}", c.ops) };
        assert_eq!(body[0].kind, OpKind::Memset { region: 1, value: 0, offset: 0, size: 4 });
        assert_eq!(body[1].kind, OpKind::Fill { region: 1, offset: 4, count: 2, value: &[1, 2] });
    }

    #[test]
    fn every_truncation_and_bad_header_is_an_error_not_a_panic() {
        let bytes = tiny();
        for len in 0..bytes.len() {
            assert!(parse(&bytes[..len]).is_err(), "truncated to {len}");
        }
        let mut wrong = bytes.clone();
        wrong[0] = b'X';
        assert!(parse(&wrong).unwrap_err().what.contains("not a Warp capture"));
        let mut old = bytes.clone();
        old[4] = 17;
        let e = parse(&old).unwrap_err();
        assert!(e.what.contains("version 17") && e.offset == 4, "{e}");
        // Every single-byte change is read or refused, never a panic.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = parse(&b);
        }
    }
}

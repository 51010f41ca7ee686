//! NVIDIA fat binaries (`.nv_fatbin`, what `nvcc` embeds and the CUDA runtime hands the driver) and
//! the other code images `cuModuleLoadData` accepts, read into plain data.
//!
//! A fat binary is one or more containers back to back. A container is a 16-byte header (magic
//! `0xBA55ED50`, version 1, the header's own size, then the size of everything after it) followed
//! by entries; each entry is a header of its own size (64 bytes up to sm_90, longer for newer
//! architectures) and its payload, padded to 8 bytes:
//!
//! | bytes  | field                                                   |
//! |--------|---------------------------------------------------------|
//! | 0..2   | kind: 1 PTX text, 2 ELF (a cubin)                       |
//! | 4..8   | this entry header's size: the payload starts there      |
//! | 8..16  | the payload's size in the container (8-byte padded)     |
//! | 16..20 | the compressed payload's size (0 when not compressed)   |
//! | 28..32 | the SM architecture (`90` for sm_90)                    |
//! | 40..48 | flags: `0x2000` LZ4 block, `0x8000` zstd frame          |
//! | 56..64 | the uncompressed size (when compressed)                 |
//!
//! The layout is NVIDIA's and undocumented; it was read off containers `nvcc` 13 writes (plain,
//! `-Xfatbin -compress-all`, `--compress-mode=size`) and checked against `cuobjdump`'s listing.
//! Everything here is untrusted input: every size is checked against the bytes there, and a
//! compressed payload may not grow past [`MAX_ENTRY_BYTES`].

use std::io::Read;

use crate::le::{u16_at, u32_at, u64_at};

/// The magic of a fat binary container.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The magic of the wrapper the CUDA runtime registers (`__fatBinC_Wrapper_t`): magic, version,
/// then a pointer to the container.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// The most one entry may decompress to: far above any real kernel image, far below what would
/// hurt the process that reads it.
pub const MAX_ENTRY_BYTES: u64 = 1 << 30;

const CONTAINER_HEADER: usize = 16;
const ENTRY_HEADER_MIN: usize = 64;
const FLAG_LZ4: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;

/// What a fat binary entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Ptx,
    Cubin,
}

/// One entry of a fat binary, its payload decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FatbinEntry {
    pub kind: EntryKind,
    /// The architecture: `90` for sm_90 (cubins) or compute_90 (PTX).
    pub sm: u32,
    pub payload: Vec<u8>,
}

impl FatbinEntry {
    /// The PTX text of a PTX entry (its NUL padding removed).
    pub fn ptx(&self) -> Option<&str> {
        if self.kind != EntryKind::Ptx {
            return None;
        }
        let end = self.payload.iter().position(|&b| b == 0).unwrap_or(self.payload.len());
        std::str::from_utf8(&self.payload[..end]).ok()
    }
}

/// Why bytes are not a fat binary; each names the byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FatbinError {
    #[error("byte {offset}: {reason}")]
    Malformed { offset: usize, reason: String },
    #[error("entry at byte {offset}: {reason}")]
    Decompress { offset: usize, reason: DecompressError },
}

/// Why one entry's compressed payload did not give the bytes its header declares.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("uncompressed size {size} is above the limit of {MAX_ENTRY_BYTES}")]
    TooLarge { size: u64 },
    /// The decoder's own message (its error types are neither `Clone` nor comparable).
    #[error("zstd: {0}")]
    Zstd(String),
    #[error("lz4: {0}")]
    Lz4(String),
    #[error("{codec} payload decompresses to {got} bytes, the header says {declared}")]
    WrongSize { codec: &'static str, got: usize, declared: usize },
}

fn malformed(offset: usize, reason: impl Into<String>) -> FatbinError {
    FatbinError::Malformed { offset, reason: reason.into() }
}

/// The length of the container that starts `header` (at least its first 16 bytes), or `None` when
/// it does not start with a container header. This is how an image handed over as a bare pointer
/// is sized.
pub fn container_len(header: &[u8]) -> Option<u64> {
    if header.len() < CONTAINER_HEADER || u32_at(header, 0) != FATBIN_MAGIC {
        return None;
    }
    let own = u16_at(header, 6) as u64;
    own.checked_add(u64_at(header, 8))
}

/// Which PTX entry of a fat binary stands for the code a GPU of architecture `sm` ran, or why none.
///
/// A GPU runs the fat binary's machine code for its own architecture where there is some, and
/// otherwise has the driver compile the PTX of the highest virtual architecture it can run. Either
/// way the code came from the source compiled for the highest `compute_XX` not above the GPU, so
/// that PTX is the one to keep: a lower one may hold other code where the source asks
/// `__CUDA_ARCH__` (CUB tunes its tiles per architecture, and the host sizes the launch for the
/// GPU's), and one above the GPU never ran at all. `sm` 0 (not known) takes the lowest, the most
/// portable.
pub fn ptx_for_gpu(entries: &[FatbinEntry], sm: u32) -> Result<&FatbinEntry, NoPtxFor> {
    let ptx = || entries.iter().filter(|e| e.kind == EntryKind::Ptx && e.ptx().is_some());
    let chosen = if sm == 0 { ptx().min_by_key(|e| e.sm) } else { ptx().filter(|e| e.sm <= sm).max_by_key(|e| e.sm) };
    chosen.ok_or_else(|| match ptx().map(|e| e.sm).min() {
        Some(lowest) => NoPtxFor::Newer { lowest, sm },
        None => NoPtxFor::MachineCodeOnly,
    })
}

/// Why a fat binary has no PTX for a GPU ([`ptx_for_gpu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoPtxFor {
    #[error("the fat binary holds machine code only")]
    MachineCodeOnly,
    #[error("the fat binary's PTX is for compute_{lowest} and above, newer than sm_{sm}")]
    Newer { lowest: u32, sm: u32 },
}

/// Every entry of every container in `bytes` (containers back to back; trailing zero padding, as
/// sections have, is allowed).
pub fn parse(bytes: &[u8]) -> Result<Vec<FatbinEntry>, FatbinError> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        if bytes[at..].iter().all(|&b| b == 0) {
            break;
        }
        let header = &bytes[at..];
        if header.len() < CONTAINER_HEADER {
            return Err(malformed(at, "a container header needs 16 bytes"));
        }
        if u32_at(header, 0) != FATBIN_MAGIC {
            return Err(malformed(at, format!("magic {:#010x} is not a fat binary's", u32_at(header, 0))));
        }
        let own = u16_at(header, 6) as usize;
        if own < CONTAINER_HEADER {
            return Err(malformed(at + 6, format!("container header size {own} is below 16")));
        }
        let body = u64_at(header, 8);
        let end = (at as u64)
            .checked_add(own as u64)
            .and_then(|v| v.checked_add(body))
            .filter(|&end| end <= bytes.len() as u64)
            .ok_or_else(|| malformed(at + 8, format!("container of {body} bytes runs past the end")))?
            as usize;
        let mut entry = at + own;
        while entry < end {
            let (parsed, next) = parse_entry(bytes, entry, end)?;
            entries.extend(parsed);
            entry = next;
        }
        at = end;
    }
    Ok(entries)
}

/// One entry at `at` of a container ending at `end`: the entry (`None` for kinds other than PTX
/// and cubins) and where the next one starts.
fn parse_entry(bytes: &[u8], at: usize, end: usize) -> Result<(Option<FatbinEntry>, usize), FatbinError> {
    if end - at < ENTRY_HEADER_MIN {
        return Err(malformed(at, format!("an entry header needs {ENTRY_HEADER_MIN} bytes, {} left", end - at)));
    }
    let h = &bytes[at..end];
    let kind = u16_at(h, 0);
    let own = u32_at(h, 4) as usize;
    if own < ENTRY_HEADER_MIN || own > end - at {
        return Err(malformed(at + 4, format!("entry header size {own} is out of range")));
    }
    let stored = u64_at(h, 8);
    let payload_start = at + own;
    let next = (payload_start as u64)
        .checked_add(stored)
        .filter(|&n| n <= end as u64)
        .ok_or_else(|| malformed(at + 8, format!("payload of {stored} bytes runs past the container")))?
        as usize;
    let compressed = u32_at(h, 16) as usize;
    let sm = u32_at(h, 28);
    let flags = u64_at(h, 40);
    let raw_size = u64_at(h, 56);
    let kind = match kind {
        1 => EntryKind::Ptx,
        2 => EntryKind::Cubin,
        _ => return Ok((None, next)),
    };
    let stored_bytes = &bytes[payload_start..next];
    let payload = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 {
        if compressed > stored_bytes.len() {
            return Err(malformed(at + 16, format!("compressed size {compressed} exceeds the stored {stored} bytes")));
        }
        if raw_size > MAX_ENTRY_BYTES {
            return Err(FatbinError::Decompress { offset: at, reason: DecompressError::TooLarge { size: raw_size } });
        }
        decompress(&stored_bytes[..compressed], flags, raw_size as usize)
            .map_err(|reason| FatbinError::Decompress { offset: at, reason })?
    } else {
        stored_bytes.to_vec()
    };
    Ok((Some(FatbinEntry { kind, sm, payload }), next))
}

fn decompress(data: &[u8], flags: u64, raw_size: usize) -> Result<Vec<u8>, DecompressError> {
    if flags & FLAG_ZSTD != 0 {
        let zstd = |e: &dyn std::fmt::Display| DecompressError::Zstd(e.to_string());
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| zstd(&e))?;
        let mut out = Vec::with_capacity(raw_size.min(1 << 24));
        // One byte past the declared size tells a lying header from an honest one.
        (&mut decoder).take(raw_size as u64 + 1).read_to_end(&mut out).map_err(|e| zstd(&e))?;
        if out.len() != raw_size {
            return Err(DecompressError::WrongSize { codec: "zstd", got: out.len(), declared: raw_size });
        }
        Ok(out)
    } else {
        let mut out = vec![0u8; raw_size];
        let n = lz4_flex::block::decompress_into(data, &mut out).map_err(|e| DecompressError::Lz4(e.to_string()))?;
        if n != raw_size {
            return Err(DecompressError::WrongSize { codec: "lz4", got: n, declared: raw_size });
        }
        Ok(out)
    }
}

/// What a code image handed to the driver (`cuModuleLoadData`, `cuLibraryLoadData`) is, by its
/// first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// NUL-terminated PTX text.
    Ptx,
    /// An ELF cubin.
    Cubin,
    /// A fat binary container.
    Fatbin,
    /// The runtime's wrapper around a pointer to a fat binary.
    Wrapper,
}

/// Classifies an image by its first bytes (at least 4).
pub fn image_kind(head: &[u8]) -> Option<ImageKind> {
    if head.len() < 4 {
        return None;
    }
    match u32_at(head, 0) {
        FATBIN_MAGIC => Some(ImageKind::Fatbin),
        WRAPPER_MAGIC => Some(ImageKind::Wrapper),
        0x464c_457f => Some(ImageKind::Cubin),
        _ if head[..4].iter().all(|b| b.is_ascii() && *b != 0) => Some(ImageKind::Ptx),
        _ => None,
    }
}

/// The length of an ELF image from its 64-byte header: the end of its section and program header
/// tables. Cubins keep their section header table last, so for them this is the whole file; use
/// [`elf_len`] to also cover section contents placed after it.
pub fn elf_header_len(header: &[u8]) -> Option<u64> {
    if header.len() < 64 || u32_at(header, 0) != 0x464c_457f || header[4] != 2 {
        return None;
    }
    let phoff = u64_at(header, 0x20);
    let shoff = u64_at(header, 0x28);
    let phentsize = u16_at(header, 0x36) as u64;
    let phnum = u16_at(header, 0x38) as u64;
    let shentsize = u16_at(header, 0x3a) as u64;
    let shnum = u16_at(header, 0x3c) as u64;
    // Each product is below 2^32: two u16 factors.
    let ph_end = phoff.checked_add(phentsize * phnum)?;
    let sh_end = shoff.checked_add(shentsize * shnum)?;
    Some(ph_end.max(sh_end).max(64))
}

/// Why bytes are not an ELF image whose length can be read; each names the byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ELF byte {offset}: {reason}")]
pub struct ElfError {
    pub offset: u64,
    pub reason: String,
}

fn elf_error(offset: u64, reason: impl Into<String>) -> ElfError {
    ElfError { offset, reason: reason.into() }
}

/// The length of the ELF image at the start of `bytes`: the furthest end of its header, its
/// program and section header tables and every section that takes room in the file.
///
/// `bytes` is everything known to be readable from the image's first byte on (a file's contents,
/// or the readable memory after a pointer the driver was handed), and the image must lie inside
/// it: a header or section table that points past it is an error, never a read.
pub fn elf_len(bytes: &[u8]) -> Result<u64, ElfError> {
    let header_len = elf_header_len(bytes).ok_or_else(|| {
        elf_error(0, format!("not a 64-bit ELF header ({} bytes, a header needs 64)", bytes.len().min(64)))
    })?;
    let have = bytes.len() as u64;
    let shoff = u64_at(bytes, 0x28);
    let shentsize = u16_at(bytes, 0x3a) as u64;
    let shnum = u16_at(bytes, 0x3c) as u64;
    // `elf_header_len` checked that both tables' ends fit in a u64.
    if header_len > have {
        let field = if shoff + shentsize * shnum == header_len { 0x28 } else { 0x20 };
        return Err(elf_error(
            field,
            format!("its header tables end at byte {header_len}, past the {have} readable bytes"),
        ));
    }
    let mut len = header_len;
    if shnum == 0 {
        return Ok(len);
    }
    if shentsize < 64 {
        return Err(elf_error(0x3a, format!("section header size {shentsize} is below 64")));
    }
    for i in 0..shnum {
        let at = shoff + i * shentsize;
        let sh = &bytes[at as usize..(at + 64) as usize];
        // SHT_NOBITS (8) takes no room in the file.
        if u32_at(sh, 4) == 8 {
            continue;
        }
        let (offset, size) = (u64_at(sh, 0x18), u64_at(sh, 0x20));
        let end = offset.checked_add(size).filter(|&end| end <= have).ok_or_else(|| {
            elf_error(
                at + 0x18,
                format!("section {i} ({size} bytes at byte {offset}) runs past the {have} readable bytes"),
            )
        })?;
        len = len.max(end);
    }
    Ok(len)
}

/// The names of the functions in the ELF image `bytes` (a cubin): every section named
/// `.text.NAME`, in section order. A cubin keeps each kernel and device function in such a
/// section, so this lists what a PTX module must define to be the one it was built from. Bounds are
/// checked as [`elf_len`] checks them; a name that runs past the section-name table is an error.
pub fn elf_function_names(bytes: &[u8]) -> Result<Vec<String>, ElfError> {
    elf_len(bytes)?;
    let shoff = u64_at(bytes, 0x28);
    let shentsize = u16_at(bytes, 0x3a) as u64;
    let shnum = u16_at(bytes, 0x3c) as u64;
    let shstrndx = u16_at(bytes, 0x3e) as u64;
    if shnum == 0 {
        return Ok(Vec::new());
    }
    if shstrndx >= shnum {
        return Err(elf_error(0x3e, format!("section-name table index {shstrndx} is not below {shnum} sections")));
    }
    // `elf_len` checked every header and every section with file contents against `bytes`.
    let header = |i: u64| &bytes[(shoff + i * shentsize) as usize..(shoff + i * shentsize + 64) as usize];
    let names = header(shstrndx);
    if u32_at(names, 4) == 8 {
        return Err(elf_error(shoff + shstrndx * shentsize + 4, "the section-name table has no contents"));
    }
    let (offset, size) = (u64_at(names, 0x18) as usize, u64_at(names, 0x20) as usize);
    let table = &bytes[offset..offset + size];
    let mut out = Vec::new();
    for i in 0..shnum {
        let at = u32_at(header(i), 0) as usize;
        let name = table.get(at..).and_then(|rest| rest.iter().position(|&b| b == 0).map(|end| &rest[..end]));
        let Some(name) = name else {
            return Err(elf_error(
                shoff + i * shentsize,
                format!("section {i}'s name at byte {at} of the name table runs past its {size} bytes"),
            ));
        };
        if let Some(function) = name.strip_prefix(b".text.") {
            out.push(String::from_utf8_lossy(function).into_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptx_kept_is_the_highest_the_gpu_can_run() {
        let e = |kind, sm| FatbinEntry { kind, sm, payload: format!(".target sm_{sm}").into_bytes() };
        let entries = [e(EntryKind::Ptx, 75), e(EntryKind::Cubin, 90), e(EntryKind::Ptx, 90), e(EntryKind::Ptx, 120)];
        assert_eq!(ptx_for_gpu(&entries, 90).unwrap().sm, 90);
        assert_eq!(ptx_for_gpu(&entries, 89).unwrap().sm, 75);
        assert_eq!(ptx_for_gpu(&entries, 100).unwrap().sm, 90);
        assert_eq!(ptx_for_gpu(&entries, 0).unwrap().sm, 75, "an unknown GPU takes the most portable");
        // CUB as CuPy ships it: machine code for every architecture, PTX for the newest only.
        let cub = [e(EntryKind::Cubin, 90), e(EntryKind::Ptx, 120)];
        let err = ptx_for_gpu(&cub, 90).unwrap_err();
        assert_eq!(err, NoPtxFor::Newer { lowest: 120, sm: 90 });
        assert!(err.to_string().contains("compute_120") && err.to_string().contains("sm_90"), "{err}");
        assert_eq!(ptx_for_gpu(&cub[..1], 90).unwrap_err(), NoPtxFor::MachineCodeOnly);
    }

    fn entry(kind: u16, sm: u32, flags: u64, raw: u64, payload: &[u8], compressed: bool) -> Vec<u8> {
        let padded = payload.len().div_ceil(8) * 8;
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        if compressed {
            h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        }
        h[28..32].copy_from_slice(&sm.to_le_bytes());
        h[40..48].copy_from_slice(&flags.to_le_bytes());
        h[56..64].copy_from_slice(&raw.to_le_bytes());
        h.extend_from_slice(payload);
        h.resize(64 + padded, 0);
        h
    }

    fn container(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut c = Vec::new();
        c.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(body.len() as u64).to_le_bytes());
        c.extend_from_slice(&body);
        c
    }

    #[test]
    fn reads_plain_and_lz4_entries() {
        let ptx = b".version 8.0\n.target sm_90\n";
        let elf = b"\x7fELF\x02 pretend cubin";
        let lz = lz4_flex::block::compress(ptx);
        let bytes =
            container(&[entry(2, 90, 0x11, 0, elf, false), entry(1, 90, 0x11 | FLAG_LZ4, ptx.len() as u64, &lz, true)]);
        assert_eq!(container_len(&bytes), Some(bytes.len() as u64));
        let entries = parse(&bytes).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].kind, entries[0].sm), (EntryKind::Cubin, 90));
        assert_eq!(&entries[0].payload[..elf.len()], elf);
        assert_eq!(entries[1].ptx(), Some(std::str::from_utf8(ptx).unwrap()));
    }

    #[test]
    fn refuses_lies_with_the_offset() {
        let ptx = b".version 8.0\n";
        let lz = lz4_flex::block::compress(ptx);
        // The header claims more than the payload decompresses to.
        let bytes = container(&[entry(1, 80, FLAG_LZ4, 999, &lz, true)]);
        let err = parse(&bytes).unwrap_err();
        let lie = DecompressError::WrongSize { codec: "lz4", got: ptx.len(), declared: 999 };
        assert_eq!(err, FatbinError::Decompress { offset: 16, reason: lie });
        let err = err.to_string();
        assert!(err.contains("entry at byte 16") && err.contains("999"), "{err}");
        // A container that claims more bytes than there are.
        let mut short = container(&[entry(1, 80, 0, 0, ptx, false)]);
        short.truncate(short.len() - 8);
        assert!(parse(&short).unwrap_err().to_string().contains("runs past the end"));
        // A decompression bomb is refused before anything is allocated.
        let bomb = container(&[entry(1, 80, FLAG_ZSTD, MAX_ENTRY_BYTES + 1, &[0; 8], true)]);
        assert_eq!(
            parse(&bomb).unwrap_err(),
            FatbinError::Decompress { offset: 16, reason: DecompressError::TooLarge { size: MAX_ENTRY_BYTES + 1 } }
        );
        assert!(parse(&bomb).unwrap_err().to_string().contains("above the limit"));
        assert!(parse(b"\x50\xed\x55\xba").is_err());
    }

    #[test]
    fn classifies_images() {
        assert_eq!(image_kind(b".version 8.0"), Some(ImageKind::Ptx));
        assert_eq!(image_kind(b"\x7fELF\x02"), Some(ImageKind::Cubin));
        assert_eq!(image_kind(&FATBIN_MAGIC.to_le_bytes()), Some(ImageKind::Fatbin));
        assert_eq!(image_kind(&WRAPPER_MAGIC.to_le_bytes()), Some(ImageKind::Wrapper));
        assert_eq!(image_kind(&[0, 1, 2, 3]), None);
    }

    /// A minimal ELF64 whose sections are named `names` (index 1 is the name table itself).
    fn elf_with_sections(names: &[&str]) -> Vec<u8> {
        let mut table = vec![0u8];
        let mut at = Vec::new();
        for n in std::iter::once(".shstrtab").chain(names.iter().copied()) {
            at.push(table.len() as u32);
            table.extend_from_slice(n.as_bytes());
            table.push(0);
        }
        let shnum = at.len() + 1;
        let table_off = 64usize;
        let shoff = (table_off + table.len()).next_multiple_of(8);
        let mut e = vec![0u8; shoff + shnum * 64];
        e[..5].copy_from_slice(b"\x7fELF\x02");
        e[5] = 1;
        e[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        e[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        e[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        e[0x3c..0x3e].copy_from_slice(&(shnum as u16).to_le_bytes());
        e[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        e[table_off..table_off + table.len()].copy_from_slice(&table);
        for (i, name) in at.iter().enumerate() {
            let h = shoff + (i + 1) * 64;
            e[h..h + 4].copy_from_slice(&name.to_le_bytes());
            // SHT_STRTAB for the name table, SHT_PROGBITS with no bytes for the rest.
            e[h + 4..h + 8].copy_from_slice(&(if i == 0 { 3u32 } else { 1 }).to_le_bytes());
            if i == 0 {
                e[h + 0x18..h + 0x20].copy_from_slice(&(table_off as u64).to_le_bytes());
                e[h + 0x20..h + 0x28].copy_from_slice(&(table.len() as u64).to_le_bytes());
            }
        }
        e
    }

    #[test]
    fn function_names_come_from_text_sections() {
        let e = elf_with_sections(&[".text.gemm_fusion_dot_1", ".nv.info", ".text._Z4loopv", ".nv.constant0.x"]);
        assert_eq!(elf_function_names(&e).unwrap(), ["gemm_fusion_dot_1", "_Z4loopv"]);
        let mut bad = e.clone();
        bad[0x3e..0x40].copy_from_slice(&9u16.to_le_bytes());
        assert!(elf_function_names(&bad).unwrap_err().to_string().contains("index 9 is not below"));
        assert!(elf_function_names(&e[..e.len() - 1]).is_err(), "a section table cut short");
    }

    /// The containers nvcc 13 writes (tests/fatbin/README.md says how they were made).
    #[test]
    fn reads_what_nvcc_writes() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fatbin/");
        for (file, cubins) in [
            ("nvcc13-sm90.fatbin", vec![90]),
            ("nvcc13-sm90-compress-all.fatbin", vec![90]),
            ("nvcc13-sm80-sm90-ptx90-size.fatbin", vec![80, 90]),
        ] {
            let bytes = std::fs::read(format!("{dir}{file}")).unwrap();
            let entries = parse(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
            let mut sms: Vec<u32> = entries.iter().filter(|e| e.kind == EntryKind::Cubin).map(|e| e.sm).collect();
            sms.sort();
            sms.dedup();
            assert_eq!(sms, cubins, "{file}");
            let mut functions = std::collections::BTreeMap::new();
            for cubin in entries.iter().filter(|e| e.kind == EntryKind::Cubin) {
                assert_eq!(&cubin.payload[..4], b"\x7fELF", "{file}");
                let len = elf_header_len(&cubin.payload).unwrap();
                assert!(len <= cubin.payload.len() as u64, "{file}");
                // The whole cubin, sections and tables: the payload less its padding to 8 bytes.
                let whole = elf_len(&cubin.payload).unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(whole >= len && cubin.payload.len() as u64 - whole < 8, "{file}: {whole}");
                let names = elf_function_names(&cubin.payload).unwrap_or_else(|e| panic!("{file}: {e}"));
                // nvcc 13 writes two cubins per architecture: one of notes only, one with the code.
                functions.entry(cubin.sm).or_insert_with(Vec::new).extend(names);
                // A name table cut short is an error naming the section, never a read past it.
                let mut cut = cubin.payload.clone();
                let shoff = u64_at(&cut, 0x28) as usize;
                let strndx = u16_at(&cut, 0x3e) as usize;
                let size_at = shoff + strndx * 64 + 0x20;
                cut[size_at..size_at + 8].copy_from_slice(&1u64.to_le_bytes());
                let e = elf_function_names(&cut).unwrap_err().to_string();
                assert!(e.contains("runs past its 1 bytes"), "{file}: {e}");
            }
            assert!(functions.values().all(|f| f == &["_Z3addPfPKfi"]), "{file}: {functions:?}");
            let ptx: Vec<&str> = entries.iter().filter_map(FatbinEntry::ptx).collect();
            assert_eq!(ptx.len(), 1, "{file}");
            assert!(ptx[0].contains(".target sm_90") && ptx[0].contains(".entry _Z3addPfPKfi"), "{file}");
        }
    }

    /// A 64-byte ELF header with its section header table at `shoff` (`shnum` entries of 64 bytes).
    fn elf_header(shoff: u64, shnum: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        h
    }

    fn section(kind: u32, offset: u64, size: u64) -> Vec<u8> {
        let mut sh = vec![0u8; 64];
        sh[4..8].copy_from_slice(&kind.to_le_bytes());
        sh[0x18..0x20].copy_from_slice(&offset.to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        sh
    }

    #[test]
    fn an_elf_image_is_as_long_as_its_furthest_section_and_never_read_past_its_bytes() {
        // Header, 32 bytes of section data, then a table of two sections: the data and a NOBITS
        // section that claims room the file does not have.
        let mut elf = elf_header(96, 2);
        elf.extend_from_slice(&[7u8; 32]);
        elf.extend(section(1, 64, 32));
        elf.extend(section(8, 1 << 40, 1 << 40));
        assert_eq!(elf_len(&elf), Ok(96 + 128));
        // More readable bytes after the image do not make it longer.
        let mut padded = elf.clone();
        padded.resize(4096, 0xee);
        assert_eq!(elf_len(&padded), Ok(96 + 128));

        // A section table that lies past what is readable (a driver takes only the header).
        let far = elf_header(0x7fff_0000_0000, 4);
        let e = elf_len(&far).unwrap_err();
        assert_eq!(e.offset, 0x28, "{e}");
        assert!(e.to_string().contains("past the 64 readable bytes"), "{e}");
        // A section whose bytes lie past the end, and one whose end overflows.
        for (offset, size) in [(64, 1 << 20), (u64::MAX - 4, 16)] {
            let mut lying = elf_header(64, 1);
            lying.extend(section(1, offset, size));
            let e = elf_len(&lying).unwrap_err();
            assert_eq!(e.offset, 64 + 0x18, "{e}");
            assert!(e.to_string().contains("section 0"), "{e}");
        }
        // Table entries smaller than a section header, and too few bytes for a header.
        let mut small = elf_header(64, 1);
        small[0x3a..0x3c].copy_from_slice(&16u16.to_le_bytes());
        small.resize(128, 0);
        assert_eq!(elf_len(&small).unwrap_err().offset, 0x3a);
        assert_eq!(elf_len(b"\x7fELF\x02").unwrap_err().offset, 0);
    }
}

//! Validating an archive read through `Read + Seek` with memory bounded by its structure, not its
//! blobs: what a server needs for uploads of gigabytes.
//!
//! The key design decision: the structural checks are not written twice. A *skeleton* of the file
//! (a zero-filled buffer of the file's length holding only the header, the section table and the
//! table sections) goes through [`Archive::open`], which never reads blob bytes, so it gives exactly
//! the errors it gives on the whole file. The buffer is allocated zeroed and its blob range is never
//! written or read, so on systems that hand out zeroed pages lazily (Linux, macOS, Windows) that
//! range never becomes resident. The blobs section is then read once, in order, in bounded chunks:
//! each chunk feeds the section checksum and, inside a blob, that blob's streaming decoder.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};

use super::layout::{SectionKind, *};
use super::reader::{Archive, FormatError};

/// Bytes read from the source at a time.
const CHUNK: usize = 1 << 20;

/// What a bounded validation found: the counts a caller lists an archive with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveCounts {
    pub ops: u64,
    pub kernels: u64,
    pub regions: u64,
}

fn io_error(what: &str, offset: u64, e: io::Error) -> FormatError {
    FormatError { section: "file", offset, reason: format!("{what}: {e}") }
}

fn read_at<R: Read + Seek>(src: &mut R, offset: u64, out: &mut [u8]) -> Result<(), FormatError> {
    src.seek(SeekFrom::Start(offset)).map_err(|e| io_error("seeking", offset, e))?;
    src.read_exact(out).map_err(|e| io_error(&format!("reading {} bytes", out.len()), offset, e))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks an archive as [`Archive::open`] followed by [`Archive::validate`] would, reading `src`
/// (the whole archive, from its start to its end) through bounded buffers. Accepts exactly the
/// archives those accept. Memory: the header, the section table and the table sections (ops,
/// regions, strings, ...), plus a few 1 MiB buffers; blob bytes are never held whole.
pub fn validate_reader<R: Read + Seek>(src: &mut R) -> Result<ArchiveCounts, FormatError> {
    let len = src.seek(SeekFrom::End(0)).map_err(|e| io_error("finding the length", 0, e))?;
    let skeleton = skeleton(src, len)?;
    let archive = Archive::open(&skeleton)?;
    check_blobs(&archive, src)?;
    Ok(ArchiveCounts {
        ops: archive.op_count() as u64,
        kernels: archive.kernel_count() as u64,
        regions: archive.region_count() as u64,
    })
}

/// A buffer of the file's length holding its header, section table and known non-blob sections
/// (every byte [`Archive::open`] reads); everything else is zero.
fn skeleton<R: Read + Seek>(src: &mut R, len: u64) -> Result<Vec<u8>, FormatError> {
    let too_big = || FormatError {
        section: "file",
        offset: 0,
        reason: format!("a file of {len} bytes does not fit in this machine's address space"),
    };
    let size = usize::try_from(len).map_err(|_| too_big())?;
    // Allocated zeroed (calloc): pages that are never written stay unbacked.
    let mut buf = vec![0u8; size];
    if size < HEADER_LEN {
        read_at(src, 0, &mut buf)?;
        return Ok(buf);
    }
    read_at(src, 0, &mut buf[..HEADER_LEN])?;
    let table_offset = u64_at(&buf, header::TABLE_OFFSET);
    let count = u32_at(&buf, header::SECTION_COUNT) as u64;
    let table_end = count.checked_mul(SECTION_ENTRY_LEN as u64).and_then(|l| l.checked_add(table_offset));
    let Some(table_end) = table_end.filter(|&e| table_offset >= HEADER_LEN as u64 && e <= len) else {
        return Ok(buf); // open refuses the header without reading further
    };
    let table = table_offset as usize..table_end as usize;
    read_at(src, table_offset, &mut buf[table.clone()])?;
    let entries: Vec<(u32, u64, u64)> = buf[table]
        .chunks_exact(SECTION_ENTRY_LEN)
        .map(|e| (u32_at(e, 0), u64_at(e, 8), u64_at(e, 16)))
        .collect();
    for (code, offset, section_len) in entries {
        let known_table = SectionKind::from_code(code).is_some_and(|k| k != SectionKind::Blobs);
        let end = offset.checked_add(section_len).filter(|&e| e <= len);
        if let (true, Some(end)) = (known_table, end) {
            read_at(src, offset, &mut buf[offset as usize..end as usize])?;
        }
    }
    Ok(buf)
}

/// One distinct blob: what its stored bytes must decode to.
struct BlobCheck {
    raw_len: u64,
    codec: u32,
    /// The first module whose PTX it is: its decoded bytes must be UTF-8.
    ptx_of: Option<String>,
}

/// Reads the blobs section once: its checksum, and every blob decoding to its declared size.
fn check_blobs<R: Read + Seek>(archive: &Archive<'_>, src: &mut R) -> Result<(), FormatError> {
    let (section_offset, section_len, want_sum) = archive.blobs_section();
    // Refs with stored bytes are identical or disjoint (checked at open), so keyed by where they
    // are and what they claim, each is decoded once, in file order.
    let mut blobs: BTreeMap<(u64, u64, u64, u32), BlobCheck> = BTreeMap::new();
    let mut add = |blob: &super::Blob<'_>, ptx_of: Option<&str>| {
        let (file_offset, stored_len, raw_len, codec) = blob.parts();
        let key = (file_offset - section_offset, stored_len, raw_len, codec);
        let entry = blobs.entry(key).or_insert(BlobCheck { raw_len, codec, ptx_of: None });
        if entry.ptx_of.is_none() {
            entry.ptx_of = ptx_of.map(str::to_string);
        }
    };
    for m in archive.modules() {
        add(&m.ptx, Some(m.name));
        for (_, c) in &m.cubins {
            add(c, None);
        }
    }
    for r in archive.regions() {
        for b in r.initial.iter().chain(r.expected.iter()) {
            add(b, None);
        }
    }
    let mut first_error: Option<FormatError> = None;
    // Empty stored bytes may sit anywhere (even inside another blob): they need no reading.
    for ((offset, _, _, _), blob) in blobs.iter().filter(|(k, _)| k.1 == 0) {
        if let (Err(e), None) = (decode(&mut io::empty(), blob, section_offset + offset), &first_error) {
            first_error = Some(e);
        }
    }
    src.seek(SeekFrom::Start(section_offset)).map_err(|e| io_error("seeking", section_offset, e))?;
    let mut section = Hashing { inner: src.take(section_len), hasher: blake3::Hasher::new(), offset: section_offset };
    let mut at = 0u64;
    for (&(offset, stored_len, _, _), blob) in blobs.iter().filter(|(k, _)| k.1 > 0) {
        section.skip(offset - at)?;
        let mut stored = (&mut section).take(stored_len);
        let outcome = decode(&mut stored, blob, section_offset + offset);
        // Whatever the decoder left unread still counts towards the section checksum.
        let left = stored.limit();
        section.skip(left)?;
        if let (Err(e), None) = (outcome, &first_error) {
            first_error = Some(e);
        }
        at = offset + stored_len;
    }
    section.skip(section_len - at)?;
    let sum = section.hasher.finalize();
    // A checksum mismatch explains any decoding failure, so it is the error reported.
    if sum.as_bytes()[..CHECKSUM_LEN] != want_sum {
        return Err(FormatError {
            section: "blobs",
            offset: section_offset,
            reason: "section checksum mismatch (region data or PTX is corrupt)".into(),
        });
    }
    first_error.map_or(Ok(()), Err)
}

/// The blobs section as it is read: every byte passing through feeds the checksum.
struct Hashing<R> {
    inner: R,
    hasher: blake3::Hasher,
    offset: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        #[cfg(feature = "parallel")]
        self.hasher.update_rayon(&buf[..n]);
        #[cfg(not(feature = "parallel"))]
        self.hasher.update(&buf[..n]);
        self.offset += n as u64;
        Ok(n)
    }
}

impl<R: Read> Hashing<R> {
    /// Reads and hashes `n` bytes that no blob decodes.
    fn skip(&mut self, mut n: u64) -> Result<(), FormatError> {
        let mut buf = vec![0u8; CHUNK.min(n as usize)];
        while n > 0 {
            let want = buf.len().min(n as usize);
            let got = self.read(&mut buf[..want]).map_err(|e| io_error("reading the blobs section", self.offset, e))?;
            if got == 0 {
                let e = io::Error::from(io::ErrorKind::UnexpectedEof);
                return Err(io_error("reading the blobs section", self.offset, e));
            }
            n -= got as u64;
        }
        Ok(())
    }
}

/// Decodes one blob's stored bytes in chunks, checking its length and (for PTX) its UTF-8.
fn decode(stored: &mut dyn Read, blob: &BlobCheck, file_offset: u64) -> Result<(), FormatError> {
    let blob_err = |reason: String| FormatError { section: "blobs", offset: file_offset, reason };
    let mut decoder: Box<dyn Read + '_> = match blob.codec {
        CODEC_LZ4_FRAME => Box::new(lz4_flex::frame::FrameDecoder::new(stored)),
        _ => Box::new(stored),
    };
    let mut buf = vec![0u8; CHUNK];
    let mut utf8 = blob.ptx_of.as_ref().map(|_| Utf8Check::default());
    let mut total = 0u64;
    // Reported only once the blob decodes whole: a corrupt frame is the better explanation.
    let mut bad_utf8 = None;
    loop {
        let n = decoder
            .read(&mut buf)
            .map_err(|e| blob_err(format!("blob does not decode after {total} bytes: {e}")))?;
        if n == 0 {
            break;
        }
        if let (Some(check), None) = (&mut utf8, bad_utf8) {
            bad_utf8 = check.feed(&buf[..n], total).err();
        }
        total += n as u64;
        if total > blob.raw_len {
            return Err(blob_err(format!("blob decodes to more than its {} bytes", blob.raw_len)));
        }
    }
    if total != blob.raw_len {
        return Err(blob_err(format!("blob decodes to {total} bytes, not {}", blob.raw_len)));
    }
    let bad_utf8 = bad_utf8.or_else(|| utf8.and_then(|c| c.finish(total).err()));
    match (bad_utf8, &blob.ptx_of) {
        (Some(at), Some(module)) => Err(FormatError {
            section: "modules",
            offset: file_offset,
            reason: format!("PTX of module {module} is not UTF-8: invalid or incomplete sequence at byte {at}"),
        }),
        _ => Ok(()),
    }
}

/// UTF-8 validation across chunk boundaries: a character split between two chunks is carried over.
#[derive(Default)]
struct Utf8Check {
    carry: Vec<u8>,
}

impl Utf8Check {
    /// Checks `chunk`, which starts at byte `start` of the text; the error is the byte position of
    /// the invalid sequence.
    fn feed(&mut self, chunk: &[u8], start: u64) -> Result<(), u64> {
        let carried = self.carry.len();
        let mut joined;
        let bytes = if carried == 0 {
            chunk
        } else {
            // At most 3 carried bytes plus enough of the chunk to finish their character.
            joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(chunk);
            &joined[..]
        };
        let begin = start - carried as u64;
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                self.carry = bytes[e.valid_up_to()..].to_vec();
                Ok(())
            }
            Err(e) => Err(begin + e.valid_up_to() as u64),
        }
    }

    fn finish(self, total: u64) -> Result<(), u64> {
        if self.carry.is_empty() {
            Ok(())
        } else {
            Err(total - self.carry.len() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_chunks_is_accepted_and_bad_bytes_are_located() {
        let text = "ab\u{00e9}c\u{1f600}d".as_bytes();
        for split in 0..text.len() {
            let mut check = Utf8Check::default();
            check.feed(&text[..split], 0).unwrap();
            check.feed(&text[split..], split as u64).unwrap();
            check.finish(text.len() as u64).unwrap();
        }
        let mut check = Utf8Check::default();
        assert_eq!(check.feed(b"abc\xffdef", 0), Err(3));
        let mut check = Utf8Check::default();
        check.feed(b"ab\xe2\x82", 0).unwrap();
        assert_eq!(check.finish(4), Err(2));
    }
}

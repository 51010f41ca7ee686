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
//!
//! A receiver that sees the bytes go by (an upload) can do the blobs' share of that work before the
//! tables, written last, are known: [`scan`] hashes everything past the header and decodes the
//! lz4 frames it finds back to back there (where the writer puts the blobs), recording where each
//! one stopped. [`validate_scanned`] then runs the same checks, taking from the scan what it
//! vouches for and reading from the file only what it does not (the section's tail past the last
//! checksum snapshot, and any blob the scan did not decode exactly as its record asks).

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, BufRead, Read, Seek, SeekFrom};

use super::layout::{SectionKind, *};
use super::reader::{Archive, FormatError};
use crate::le::{u32_at, u64_at};

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

/// Checks an archive as [`Archive::open`] followed by [`Archive::validate`] would, reading `src`
/// (the whole archive, from its start to its end) through bounded buffers. Accepts exactly the
/// archives those accept. Memory: the header, the section table and the table sections (ops,
/// regions, strings, ...), plus a few 1 MiB buffers; blob bytes are never held whole.
pub fn validate_reader<R: Read + Seek>(src: &mut R) -> Result<ArchiveCounts, FormatError> {
    validate(src, None)
}

/// [`validate_reader`] for a file whose bytes went through [`scan`] as they were written: accepts
/// and refuses exactly what [`validate_reader`] does, with the same errors, but reads only the
/// tables and what the scan could not vouch for. A scan of other bytes than the file's length is
/// ignored (the file is then read whole).
pub fn validate_scanned<R: Read + Seek>(src: &mut R, scanned: &Scanned) -> Result<ArchiveCounts, FormatError> {
    validate(src, Some(scanned))
}

fn validate<R: Read + Seek>(src: &mut R, scanned: Option<&Scanned>) -> Result<ArchiveCounts, FormatError> {
    let len = src.seek(SeekFrom::End(0)).map_err(|e| io_error("finding the length", 0, e))?;
    let skeleton = skeleton(src, len)?;
    let archive = Archive::open(&skeleton)?;
    check_blobs(&archive, src, scanned.filter(|s| s.len == len))?;
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
    let entries: Vec<(u32, u64, u64)> =
        buf[table].chunks_exact(SECTION_ENTRY_LEN).map(|e| (u32_at(e, 0), u64_at(e, 8), u64_at(e, 16))).collect();
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
fn check_blobs<R: Read + Seek>(
    archive: &Archive<'_>,
    src: &mut R,
    scanned: Option<&Scanned>,
) -> Result<(), FormatError> {
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
    for e in archive.effects() {
        for (_, _, b) in &e.writes {
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
    let section_end = section_offset + section_len;
    let sum = if let Some((scanned, (hashed_to, hasher))) =
        scanned.and_then(|s| Some((s, s.section_state(section_offset, section_end)?)))
    {
        for (&(offset, stored_len, _, codec), blob) in blobs.iter().filter(|(k, _)| k.1 > 0) {
            let file_offset = section_offset + offset;
            if scanned.vouches(file_offset, stored_len, codec, blob) {
                continue;
            }
            src.seek(SeekFrom::Start(file_offset)).map_err(|e| io_error("seeking", file_offset, e))?;
            if let (Err(e), None) = (decode(&mut (&mut *src).take(stored_len), blob, file_offset), &first_error) {
                first_error = Some(e);
            }
        }
        // The scan hashed the section up to a snapshot: the rest comes from the file.
        src.seek(SeekFrom::Start(hashed_to)).map_err(|e| io_error("seeking", hashed_to, e))?;
        let mut tail = Hashing { inner: (&mut *src).take(section_end - hashed_to), hasher, offset: hashed_to };
        tail.skip(section_end - hashed_to)?;
        tail.hasher.finalize()
    } else {
        src.seek(SeekFrom::Start(section_offset)).map_err(|e| io_error("seeking", section_offset, e))?;
        let mut section =
            Hashing { inner: src.take(section_len), hasher: blake3::Hasher::new(), offset: section_offset };
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
        section.hasher.finalize()
    };
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
        let n =
            decoder.read(&mut buf).map_err(|e| blob_err(format!("blob does not decode after {total} bytes: {e}")))?;
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

/// Where the writer puts the blobs section (right after the header): where a scan starts hashing
/// and decoding, before the section table says where the section really is.
const SCAN_FROM: u64 = HEADER_LEN as u64;
/// Bytes between two snapshots of the scan's checksum state: at most this much of the section is
/// hashed again from the file once the section's end is known.
const SNAPSHOT_EVERY: u64 = 1 << 20;
/// Snapshots kept (the newest): the tables after the blobs may be this many MiB long before the
/// scan's checksum is of no use (each snapshot is a couple of KiB).
const SNAPSHOTS: usize = 256;
/// Frames a scan records at most (32 bytes each), so a stream of tiny frames cannot grow it.
const MAX_FRAMES: usize = 1 << 16;

/// What [`scan`] learnt from an archive's bytes on their way to the file, for [`validate_scanned`].
/// Memory: a few hundred KiB at most, whatever the archive's size.
pub struct Scanned {
    /// Bytes scanned: the scan holds only for a file of exactly this length.
    len: u64,
    /// `(file offset, state)` of the checksum of the bytes from [`SCAN_FROM`] on, oldest first.
    snapshots: VecDeque<(u64, blake3::Hasher)>,
    /// Back-to-back decodes from [`SCAN_FROM`] on, in file order.
    frames: Vec<Frame>,
}

/// One decode from `start`: where [`decode`]'s lz4 decoder, started at `start`, stopped, and what it
/// produced on the way.
struct Frame {
    start: u64,
    end: u64,
    decoded: u64,
    /// Whether the decoded bytes are UTF-8 (PTX must be).
    utf8: bool,
}

impl Scanned {
    /// Bytes scanned (the archive's length when the scan saw it all).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The checksum state of `start..` at the newest snapshot not past `end`, with its offset.
    fn section_state(&self, start: u64, end: u64) -> Option<(u64, blake3::Hasher)> {
        if start != SCAN_FROM {
            return None;
        }
        self.snapshots.iter().rev().find(|(at, _)| *at <= end).map(|(at, h)| (*at, h.clone()))
    }

    /// Whether [`decode`] of these stored bytes is known to succeed without reading them. Only the
    /// success is taken from the scan: a blob that fails is decoded again from the file, so its error
    /// is exactly the one [`validate_reader`] gives.
    fn vouches(&self, file_offset: u64, stored_len: u64, codec: u32, blob: &BlobCheck) -> bool {
        if codec == CODEC_RAW {
            // Raw bytes decode to themselves and open checked their length (the file's length is
            // the scan's, so they can be read); only text needs reading, for its UTF-8.
            return stored_len == blob.raw_len && blob.ptx_of.is_none();
        }
        if codec != CODEC_LZ4_FRAME {
            return false;
        }
        let Ok(i) = self.frames.binary_search_by_key(&file_offset, |f| f.start) else { return false };
        let f = &self.frames[i];
        // The decoder stopped inside the stored bytes, so over them alone it reads the same bytes
        // and stops at the same place.
        f.end - f.start <= stored_len && f.decoded == blob.raw_len && (blob.ptx_of.is_none() || f.utf8)
    }
}

/// The checksum of the bytes from [`SCAN_FROM`] on, with snapshots of its state.
struct Checksum {
    /// Bytes seen, from the file's start.
    at: u64,
    hasher: blake3::Hasher,
    snapshots: VecDeque<(u64, blake3::Hasher)>,
}

impl Checksum {
    fn absorb(&mut self, mut bytes: &[u8]) {
        if self.at < SCAN_FROM {
            let skip = (SCAN_FROM - self.at).min(bytes.len() as u64) as usize;
            self.at += skip as u64;
            bytes = &bytes[skip..];
        }
        while !bytes.is_empty() {
            let into = (self.at - SCAN_FROM) % SNAPSHOT_EVERY;
            if into == 0 {
                self.snapshot();
            }
            let take = (SNAPSHOT_EVERY - into).min(bytes.len() as u64) as usize;
            self.hasher.update(&bytes[..take]);
            self.at += take as u64;
            bytes = &bytes[take..];
        }
    }

    fn snapshot(&mut self) {
        if self.snapshots.back().is_some_and(|s| s.0 == self.at) {
            return;
        }
        if self.snapshots.len() == SNAPSHOTS {
            self.snapshots.pop_front();
        }
        self.snapshots.push_back((self.at, self.hasher.clone()));
    }
}

/// The stream being scanned: every byte read through it feeds the checksum.
struct Tracked<R> {
    inner: R,
    sum: Checksum,
}

impl<R: BufRead> Tracked<R> {
    fn at_end(&mut self) -> io::Result<bool> {
        Ok(self.inner.fill_buf()?.is_empty())
    }

    /// Reads the rest, for the checksum only.
    fn drain(&mut self) -> io::Result<()> {
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            self.sum.absorb(buf);
            let n = buf.len();
            self.inner.consume(n);
        }
    }
}

impl<R: BufRead> Read for Tracked<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let buf = self.inner.fill_buf()?;
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.sum.absorb(&buf[..n]);
        self.inner.consume(n);
        Ok(n)
    }
}

/// Scans an archive's bytes, from its first to its last, as they go by (see the module's notes).
/// Never fails on what the bytes hold: bytes that do not decode end the decoding, not the scan;
/// the error is the source's.
pub fn scan<R: BufRead>(src: R) -> io::Result<Scanned> {
    let sum = Checksum { at: 0, hasher: blake3::Hasher::new(), snapshots: VecDeque::new() };
    let mut t = Tracked { inner: src, sum };
    let mut header = [0u8; HEADER_LEN];
    let mut frames = Vec::new();
    if read_full(&mut t, &mut header)? == HEADER_LEN {
        while frames.len() < MAX_FRAMES && !t.at_end()? {
            let start = t.sum.at;
            let mut decoder = lz4_flex::frame::FrameDecoder::new(&mut t);
            let mut decoded = 0u64;
            let mut utf8 = Some(Utf8Check::default());
            let stopped = loop {
                match decoder.fill_buf() {
                    Ok([]) => break true,
                    Ok(out) => {
                        if utf8.as_mut().is_some_and(|c| c.feed(out, decoded).is_err()) {
                            utf8 = None;
                        }
                        decoded += out.len() as u64;
                        let n = out.len();
                        decoder.consume(n);
                    }
                    Err(_) => break false,
                }
            };
            drop(decoder);
            // A stop at the end of the stream may be the truncation of a frame that goes on in the
            // file, so it vouches for nothing; the writer's tables always follow the blobs anyway.
            if !stopped || t.sum.at == start || t.at_end()? {
                break;
            }
            let utf8 = utf8.is_some_and(|c| c.finish(decoded).is_ok());
            frames.push(Frame { start, end: t.sum.at, decoded, utf8 });
        }
    }
    t.drain()?;
    // The final state too: a section ending with the file needs nothing read again.
    let mut sum = t.sum;
    if sum.at >= SCAN_FROM {
        sum.snapshot();
    }
    Ok(Scanned { len: sum.at, snapshots: sum.snapshots, frames })
}

/// Reads until `out` is full or the source ends; how many bytes were read.
fn read_full(src: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match src.read(&mut out[n..])? {
            0 => break,
            got => n += got,
        }
    }
    Ok(n)
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
    use crate::archive::{ArchiveWriter, DType, RegionDecl};

    /// Counts the bytes read through it.
    struct Counting<R> {
        inner: R,
        read: u64,
    }

    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            Ok(n)
        }
    }

    impl<R: Seek> Seek for Counting<R> {
        fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
            self.inner.seek(pos)
        }
    }

    fn noise(len: usize) -> Vec<u8> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn after_a_scan_only_the_tables_and_the_sections_tail_are_read() {
        let mut w = ArchiveWriter::new(io::Cursor::new(Vec::new())).unwrap();
        w.add_module("m", "// some PTX text\n").unwrap();
        let data = noise(5 << 20);
        let a = w.add_region(RegionDecl::new("a", data.len() as u64, DType::U8)).unwrap();
        w.set_initial_bytes(a, &data).unwrap();
        let b = w.add_region(RegionDecl::new("b", 1 << 20, DType::U8)).unwrap();
        w.set_initial_bytes(b, &vec![7u8; 1 << 20]).unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let whole = validate_reader(&mut io::Cursor::new(&bytes)).unwrap();

        let scanned = scan(io::BufReader::with_capacity(65_536, &bytes[..])).unwrap();
        assert_eq!(scanned.frames.len(), 3, "every blob decoded on the way");
        let mut file = Counting { inner: io::Cursor::new(&bytes), read: 0 };
        assert_eq!(validate_scanned(&mut file, &scanned).unwrap(), whole);
        let tables = bytes.len() as u64 - scanned.frames[2].end;
        assert!(file.read <= tables + SNAPSHOT_EVERY, "read {} bytes of {}", file.read, bytes.len());

        // The scan of other bytes than the file's is not used: the file is read whole.
        let other = scan(&bytes[..bytes.len() - 1]).unwrap();
        let mut file = Counting { inner: io::Cursor::new(&bytes), read: 0 };
        assert_eq!(validate_scanned(&mut file, &other).unwrap(), whole);
        assert!(file.read >= data.len() as u64, "read {} bytes", file.read);
    }

    #[test]
    fn a_blob_the_scan_did_not_decode_is_read_from_the_file() {
        // The PTX is not UTF-8, so the scan does not vouch for it: its error comes from the file.
        let mut w = ArchiveWriter::new(io::Cursor::new(Vec::new())).unwrap();
        let r = w.add_region(RegionDecl::new("r", 4096, DType::U8)).unwrap();
        w.set_initial_bytes(r, &noise(4096)).unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let scanned = scan(&bytes[..]).unwrap();
        assert_eq!(scanned.frames.len(), 1);
        assert!(!scanned.frames[0].utf8);
        let blob = BlobCheck { raw_len: 4096, codec: CODEC_LZ4_FRAME, ptx_of: Some("m".into()) };
        let (start, end) = (scanned.frames[0].start, scanned.frames[0].end);
        assert!(!scanned.vouches(start, end - start, CODEC_LZ4_FRAME, &blob));
        let blob = BlobCheck { ptx_of: None, ..blob };
        assert!(scanned.vouches(start, end - start, CODEC_LZ4_FRAME, &blob));
        // Stored bytes shorter than where the decoder stopped, or another length: not vouched for.
        assert!(!scanned.vouches(start, end - start - 1, CODEC_LZ4_FRAME, &blob));
        assert!(!scanned.vouches(start, end - start, CODEC_LZ4_FRAME, &BlobCheck { raw_len: 4095, ..blob }));
    }

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

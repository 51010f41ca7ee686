//! Rewriting an archive's checksums after its bytes were changed on purpose.
//!
//! For tools and fuzzing, never for reading: a fuzzer that mutates an archive almost always breaks
//! a checksum, so nearly every input dies in the first lines of [`Archive::open`](super::Archive::open)
//! and the rules behind them (and everything downstream: plan, replay) are never reached. Resealing
//! the mutated bytes first lets the mutation meet those rules instead.

use super::layout::{self, entry, header, CHECKSUM_LEN, HEADER_LEN, SECTION_ENTRY_LEN};
use crate::le::u64_at;

/// Recomputes every section's checksum and then the header checksum, exactly as `docs/FORMAT.md`
/// defines them, and changes no other byte. For tools and fuzzing: it makes damaged or edited bytes
/// look intact to the checksums, so that [`Archive::open`](super::Archive::open) judges them by its
/// other rules (it vouches for nothing else).
///
/// Sections are located through the header's `table_offset` and `section_count` and each entry's
/// `offset` and `len`; the magic, version and `file_len` are not looked at (open still refuses a
/// wrong one). Returns false, leaving `bytes` untouched, where that is impossible: a buffer shorter
/// than the header, a section table that does not lie within the buffer after the header, or a
/// non-empty section that runs past the buffer or overlaps the header or the section table (its
/// checksum would change with the checksums written into it). Never panics.
pub fn reseal(bytes: &mut [u8]) -> bool {
    if bytes.len() < HEADER_LEN {
        return false;
    }
    let len = bytes.len() as u64;
    let table_offset = u64_at(bytes, header::TABLE_OFFSET);
    let section_count = u32::from_le_bytes(bytes[header::SECTION_COUNT..header::SECTION_COUNT + 4].try_into().unwrap());
    let table_end =
        (section_count as u64).checked_mul(SECTION_ENTRY_LEN as u64).and_then(|l| l.checked_add(table_offset));
    let Some(table_end) = table_end.filter(|&e| table_offset >= HEADER_LEN as u64 && e <= len) else {
        return false;
    };
    let (table_offset, table_end) = (table_offset as usize, table_end as usize);

    // Every section is located before anything is written, so that a refusal changes nothing.
    let mut sums = Vec::with_capacity(section_count as usize);
    for e in bytes[table_offset..table_end].chunks_exact(SECTION_ENTRY_LEN) {
        let (offset, section_len) = (u64_at(e, entry::OFFSET), u64_at(e, entry::LEN));
        let Some(end) = offset.checked_add(section_len).filter(|&end| end <= len) else {
            return false;
        };
        let overlaps = |start: usize, stop: usize| offset < stop as u64 && (start as u64) < end;
        if section_len != 0 && (overlaps(0, HEADER_LEN) || overlaps(table_offset, table_end)) {
            return false;
        }
        sums.push(layout::checksum(&[&bytes[offset as usize..end as usize]]));
    }
    for (i, sum) in sums.iter().enumerate() {
        let at = table_offset + i * SECTION_ENTRY_LEN + entry::CHECKSUM;
        bytes[at..at + CHECKSUM_LEN].copy_from_slice(sum);
    }
    let sum = layout::checksum(&[&bytes[..header::CHECKSUM], &bytes[table_offset..table_end]]);
    bytes[header::CHECKSUM..header::CHECKSUM + CHECKSUM_LEN].copy_from_slice(&sum);
    true
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::archive::layout::SectionKind;
    use crate::archive::{Archive, ArchiveWriter, DType, LaunchDecl, MemsetOp, RegionDecl, Tolerance};

    /// One region with initial and expected data (one shared blob) and one memset.
    fn small_archive() -> Vec<u8> {
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
        let x = w.add_region(RegionDecl::new("x", 64, DType::F32)).unwrap();
        let data: Vec<u8> = (0..64u8).collect();
        w.set_initial_bytes(x, &data).unwrap();
        w.set_expected_bytes(x, &data, Tolerance::Exact).unwrap();
        w.memset(MemsetOp { region: x, offset: 0, len: 64, width: 4, pattern: 0 }).unwrap();
        w.finish().unwrap().into_inner()
    }

    /// `(offset, len)` of the section of `kind`, from the section table.
    fn section(bytes: &[u8], kind: SectionKind) -> (usize, usize) {
        let table = u64_at(bytes, header::TABLE_OFFSET) as usize;
        let count = u32::from_le_bytes(bytes[header::SECTION_COUNT..header::SECTION_COUNT + 4].try_into().unwrap());
        (0..count as usize)
            .map(|i| &bytes[table + i * SECTION_ENTRY_LEN..table + (i + 1) * SECTION_ENTRY_LEN])
            .find(|e| u32::from_le_bytes(e[entry::KIND..entry::KIND + 4].try_into().unwrap()) == kind as u32)
            .map(|e| (u64_at(e, entry::OFFSET) as usize, u64_at(e, entry::LEN) as usize))
            .unwrap()
    }

    fn opens_and_validates(bytes: &[u8]) -> bool {
        Archive::open(bytes).and_then(|a| a.validate()).is_ok()
    }

    #[test]
    fn an_intact_archive_is_left_as_it_is() {
        let bytes = small_archive();
        let mut again = bytes.clone();
        assert!(reseal(&mut again));
        assert_eq!(again, bytes);
    }

    #[test]
    fn a_changed_region_record_opens_once_resealed() {
        let bytes = small_archive();
        let (regions, _) = section(&bytes, SectionKind::Regions);
        // Region 0's dtype (4 bytes into its record, after the 8-byte table header): f32 becomes u32.
        let dtype = regions + layout::TABLE_HEADER_LEN + 4;
        let mut changed = bytes.clone();
        assert_eq!(changed[dtype], 11);
        changed[dtype] = 5;
        assert!(!opens_and_validates(&changed), "the section checksum catches the change");
        assert!(reseal(&mut changed));
        assert!(opens_and_validates(&changed));
        assert_eq!(Archive::open(&changed).unwrap().region(0).dtype, DType::U32);
        // Only the checksums differ from the original besides the byte itself.
        let differing: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != changed[i]).collect();
        let table = u64_at(&bytes, header::TABLE_OFFSET) as usize;
        assert!(differing.iter().all(|&i| i == dtype
            || (header::CHECKSUM..HEADER_LEN).contains(&i)
            || (i >= table
                && (i - table) % SECTION_ENTRY_LEN >= entry::CHECKSUM
                && (i - table) % SECTION_ENTRY_LEN < entry::CHECKSUM + CHECKSUM_LEN)));
    }

    #[test]
    fn a_flipped_byte_of_region_data_passes_the_section_checksum_once_resealed() {
        let bytes = small_archive();
        let archive = Archive::open(&bytes).unwrap();
        let (at, stored, _, _) = archive.region(0).initial.unwrap().parts();
        let mut changed = bytes.clone();
        // The last byte of the lz4 frame is its content checksum's: decoding still runs to the end.
        changed[(at + stored - 1) as usize] ^= 0x55;
        assert!(!opens_and_validates(&changed), "the blobs checksum catches the change");
        assert!(reseal(&mut changed));
        let resealed = Archive::open(&changed).unwrap();
        resealed.verify_blobs().unwrap();
        // What is left to catch it is the frame's own content checksum: reseal changed no data byte.
        let error = resealed.validate().unwrap_err();
        assert_eq!(error.section, "blobs", "{error}");
        assert!(error.reason.contains("does not decode"), "{error}");
    }

    #[test]
    fn a_changed_string_opens_once_resealed() {
        let bytes = small_archive();
        let (strings, len) = section(&bytes, SectionKind::Strings);
        let mut changed = bytes.clone();
        let name = strings + len - 1;
        assert_eq!(changed[name], b'x');
        changed[name] = b'y';
        assert!(!opens_and_validates(&changed));
        assert!(reseal(&mut changed));
        assert!(opens_and_validates(&changed));
        assert_eq!(Archive::open(&changed).unwrap().region(0).name, "y");
    }

    #[test]
    fn a_block_whose_thread_count_overflows_is_refused() {
        // Found by the archive_replay fuzz target: open multiplied the block's three u32s in u64.
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
        let m = w
            .add_module("m", ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n")
            .unwrap();
        let k = w.add_kernel(m, "k", vec![]).unwrap();
        let launch =
            LaunchDecl { kernel: k, grid: [1; 3], block: [1; 3], shared_bytes: 0, params: vec![], relocs: vec![] };
        w.launch(launch).unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let (ops, _) = section(&bytes, SectionKind::Ops);
        let block = ops + layout::TABLE_HEADER_LEN + 20;
        // The first overflows u64 (a panic with overflow checks); the second wraps to 0 without them.
        for dims in [[u32::MAX; 3], [1 << 22, 1 << 22, 1 << 20]] {
            let mut changed = bytes.clone();
            for (i, d) in dims.iter().enumerate() {
                changed[block + 4 * i..block + 4 * i + 4].copy_from_slice(&d.to_le_bytes());
            }
            assert!(reseal(&mut changed));
            let error = Archive::open(&changed).unwrap_err();
            assert!(error.reason.contains("more than 1024 threads"), "{error}");
        }
    }

    #[test]
    fn truncated_or_garbage_buffers_are_refused_untouched() {
        let bytes = small_archive();
        for cut in 0..bytes.len() {
            // The section table comes last, so any truncation cuts into it.
            let mut short = bytes[..cut].to_vec();
            assert!(!reseal(&mut short), "cut at {cut}");
            assert_eq!(short, bytes[..cut]);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0, 1, 63, 64, 65, 200, 4096] {
            let mut garbage: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let before = garbage.clone();
            if !reseal(&mut garbage) {
                assert_eq!(garbage, before);
            }
        }
        // Offsets and counts at their extremes overflow nothing.
        let mut huge = bytes.clone();
        huge[header::TABLE_OFFSET..header::TABLE_OFFSET + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        huge[header::SECTION_COUNT..header::SECTION_COUNT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(!reseal(&mut huge));
        let table = u64_at(&bytes, header::TABLE_OFFSET) as usize;
        for (offset, len) in [(u64::MAX, 1), (1, u64::MAX), (bytes.len() as u64, 1), (0, 8), (table as u64 - 4, 8)] {
            let mut bad = bytes.clone();
            bad[table + entry::OFFSET..table + entry::OFFSET + 8].copy_from_slice(&offset.to_le_bytes());
            bad[table + entry::LEN..table + entry::LEN + 8].copy_from_slice(&len.to_le_bytes());
            let before = bad.clone();
            assert!(!reseal(&mut bad), "section at {offset}+{len}");
            assert_eq!(bad, before);
        }
        // An empty section may sit anywhere, the header included.
        let mut empty = bytes.clone();
        empty[table + entry::OFFSET..table + entry::OFFSET + 8].copy_from_slice(&0u64.to_le_bytes());
        empty[table + entry::LEN..table + entry::LEN + 8].copy_from_slice(&0u64.to_le_bytes());
        assert!(reseal(&mut empty));
    }
}

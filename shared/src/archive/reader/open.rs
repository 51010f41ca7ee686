//! Opening: the header, the section table (no overlaps, mandatory sections present, checksums of
//! every table section) and the strings section, then the record checks of `checks.rs`; and the
//! checks of the blobs section that opening leaves to the readers that need them
//! ([`Archive::verify_blobs`], [`Archive::validate`]).

use std::collections::HashSet;

use super::error::{err, FormatError};
use super::table::Table;
use super::views::Blob;
use super::Archive;
use crate::archive::layout::{self, *};
use crate::le::{u16_at, u32_at, u64_at};

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
            library: table_of(SectionKind::Library)?,
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
    pub(in crate::archive) fn blobs_section(&self) -> (u64, u64, [u8; CHECKSUM_LEN]) {
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
}

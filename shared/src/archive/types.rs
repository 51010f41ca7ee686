//! The `types` section: each region's typed layout, a run-length list of `(byte length, element
//! type)` covering the region (docs/FORMAT.md, "Typed layouts"). The rule the writer and the reader
//! share lives here, with the section's encoding and [`with_typed_layouts`], which gives an
//! existing archive a new `types` section without rewriting anything else (`recap infer-types`).

use super::layout::{self, entry, header, SectionKind, CHECKSUM_LEN, HEADER_LEN, SECTION_ENTRY_LEN, TYPES_LEN};
use super::model::{ElemType, RegionId, Stretch};
use super::reader::{Archive, FormatError};
use crate::le::{u32_at, u64_at};

/// A layout's stretches are non-empty, whole elements of their type, and add up to the region's
/// `size`. On failure: the index of the stretch at fault (the count when the total falls short)
/// and why.
pub(crate) fn check_layout(size: u64, stretches: &[Stretch]) -> Result<(), (usize, String)> {
    let mut total = 0u64;
    for (i, s) in stretches.iter().enumerate() {
        if s.len == 0 {
            return Err((i, "an empty stretch".to_string()));
        }
        if !s.len.is_multiple_of(s.ty.size() as u64) {
            return Err((i, format!("{} bytes are not whole {} elements", s.len, s.ty.name())));
        }
        total = match total.checked_add(s.len).filter(|&t| t <= size) {
            Some(t) => t,
            None => return Err((i, format!("stretches run past the region's {size} bytes"))),
        };
    }
    if total != size {
        return Err((stretches.len(), format!("stretches cover {total} of the region's {size} bytes")));
    }
    Ok(())
}

/// The `types` section's bytes: a table header, then one record per stretch, regions ascending.
pub(crate) fn encode(layouts: &[(RegionId, Vec<Stretch>)]) -> Vec<u8> {
    let mut sorted: Vec<&(RegionId, Vec<Stretch>)> = layouts.iter().collect();
    sorted.sort_by_key(|l| l.0);
    let count: usize = sorted.iter().map(|l| l.1.len()).sum();
    let mut out = Vec::with_capacity(8 + count * TYPES_LEN);
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out.extend_from_slice(&(TYPES_LEN as u32).to_le_bytes());
    for (region, stretches) in sorted {
        for s in stretches {
            out.extend_from_slice(&region.to_le_bytes());
            out.extend_from_slice(&s.ty.code().to_le_bytes());
            out.extend_from_slice(&s.len.to_le_bytes());
        }
    }
    out
}

/// One record's fields: `(region, type code, length)`.
pub(crate) fn record(r: &[u8]) -> (RegionId, u32, u64) {
    (u32_at(r, 0), u32_at(r, 4), u64_at(r, 8))
}

/// Why [`with_typed_layouts`] refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TypesError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("typed layout of region {region}: stretch {stretch}: {reason}")]
    Layout { region: RegionId, stretch: usize, reason: String },
    #[error("typed layout of region {region}, but the archive has {count} regions")]
    NoRegion { region: RegionId, count: usize },
    #[error("two typed layouts of region {region}")]
    Twice { region: RegionId },
}

/// `bytes` (a valid archive) with `layouts` as its `types` section, replacing any it had
/// ([`replace_section`]).
pub fn with_typed_layouts(bytes: &[u8], layouts: &[(RegionId, Vec<Stretch>)]) -> Result<Vec<u8>, TypesError> {
    let archive = Archive::open(bytes)?;
    let mut seen = std::collections::HashSet::new();
    for (region, stretches) in layouts {
        if *region as usize >= archive.region_count() {
            return Err(TypesError::NoRegion { region: *region, count: archive.region_count() });
        }
        if !seen.insert(*region) {
            return Err(TypesError::Twice { region: *region });
        }
        check_layout(archive.region(*region).size, stretches).map_err(|(stretch, reason)| TypesError::Layout {
            region: *region,
            stretch,
            reason,
        })?;
    }
    let section = (!layouts.is_empty()).then(|| encode(layouts));
    Ok(replace_section(bytes, SectionKind::Types, section.as_deref()))
}

/// `bytes` (a valid archive) with its section of `kind` replaced by `section` (removed where
/// `None`): the new section and a new section table are appended, the header is pointed at them,
/// and checksums are recomputed; every other byte stays where it was (a replaced section's bytes
/// stay, unreferenced). For optional sections an archive gains after it was written.
pub(crate) fn replace_section(bytes: &[u8], kind: SectionKind, section: Option<&[u8]>) -> Vec<u8> {
    let table_offset = u64_at(bytes, header::TABLE_OFFSET) as usize;
    let count = u32_at(bytes, header::SECTION_COUNT);
    let mut entries: Vec<&[u8]> = bytes[table_offset..table_offset + count as usize * SECTION_ENTRY_LEN]
        .chunks_exact(SECTION_ENTRY_LEN)
        .filter(|e| u32_at(e, entry::KIND) != kind as u32)
        .collect();
    let mut out = bytes.to_vec();
    let mut new_entry = Vec::with_capacity(SECTION_ENTRY_LEN);
    if let Some(section) = section {
        out.resize(out.len().next_multiple_of(8), 0);
        let offset = out.len() as u64;
        out.extend_from_slice(section);
        new_entry.extend_from_slice(&(kind as u32).to_le_bytes());
        new_entry.extend_from_slice(&0u32.to_le_bytes());
        new_entry.extend_from_slice(&offset.to_le_bytes());
        new_entry.extend_from_slice(&(section.len() as u64).to_le_bytes());
        new_entry.extend_from_slice(&layout::checksum(&[section]));
        new_entry.extend_from_slice(&0u64.to_le_bytes());
        entries.push(&new_entry);
    }
    out.resize(out.len().next_multiple_of(8), 0);
    let new_table_offset = out.len() as u64;
    let table: Vec<u8> = entries.concat();
    out.extend_from_slice(&table);
    let file_len = out.len() as u64;
    out[header::TABLE_OFFSET..header::TABLE_OFFSET + 8].copy_from_slice(&new_table_offset.to_le_bytes());
    out[header::SECTION_COUNT..header::SECTION_COUNT + 4].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    out[header::FILE_LEN..header::FILE_LEN + 8].copy_from_slice(&file_len.to_le_bytes());
    let sum = layout::checksum(&[&out[..header::CHECKSUM], &table]);
    out[header::CHECKSUM..header::CHECKSUM + CHECKSUM_LEN].copy_from_slice(&sum);
    const { assert!(header::CHECKSUM + CHECKSUM_LEN == HEADER_LEN) };
    out
}

/// A layout in one line, as `recap inspect` and the viewer show it: `f32 ×16 (64 B), i32 ×4
/// (16 B), untyped 8 B (no PTX wrote it)`.
pub fn layout_line(stretches: &[Stretch]) -> String {
    stretches
        .iter()
        .map(|s| match s.ty {
            ElemType::Untyped => format!("untyped {} B (no PTX wrote it)", s.len),
            t => format!("{} ×{} ({} B)", t.name(), s.len / t.size() as u64, s.len),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A typed layout of `size` bytes from a byte-per-byte list of element types: runs of one type,
/// where a run that is not whole elements of its type is untyped (a narrower store overwrote part
/// of a wider element), and neighbouring untyped runs are merged.
pub fn run_lengths(types: impl IntoIterator<Item = ElemType>) -> Vec<Stretch> {
    let mut out: Vec<Stretch> = Vec::new();
    let mut push = |s: Stretch| match out.last_mut() {
        Some(last) if last.ty == s.ty && (s.ty == ElemType::Untyped) => last.len += s.len,
        _ => out.push(s),
    };
    let mut run: Option<Stretch> = None;
    for ty in types {
        match &mut run {
            Some(r) if r.ty == ty => r.len += 1,
            _ => {
                if let Some(r) = run.take() {
                    push(whole(r));
                }
                run = Some(Stretch { len: 1, ty });
            }
        }
    }
    if let Some(r) = run {
        push(whole(r));
    }
    out
}

fn whole(s: Stretch) -> Stretch {
    if s.len.is_multiple_of(s.ty.size() as u64) {
        s
    } else {
        Stretch { ty: ElemType::Untyped, ..s }
    }
}

//! Element types the program's own arrays declare: bytes typed by the framework that owns them.
//!
//! A typed layout (`types.rs`) comes from the PTX stores that wrote each byte. Bytes only machine
//! code wrote (a library kernel shipped without PTX: most of PyTorch's ATen, cuBLAS, cuDNN) have
//! no such store, and are judged byte for byte. Yet the program knows their type: each lives in a
//! tensor or array with a dtype. `recap capture` asks the program's Python runtime, as the range
//! ends, for every live device array (a PyTorch tensor, anything with `__cuda_array_interface__`,
//! a JAX array) and keeps the element type of the bytes each spans. They are stored as archive
//! metadata ([`META_KEY`], JSON), one record per stretch, and a check judges the untyped bytes
//! they cover in that type (`shared::check`, `TypeSource::Program`). PTX types win where both say
//! something: the store is what happened, the array only what the program meant.
//!
//! Arrays may overlap: a view of another with a different dtype (`x.view(torch.int32)`). Where
//! arrays that overlap agree, their stretches merge; where they disagree, the bytes they share
//! stay untyped rather than take either type ([`resolve`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::model::{ElemType, RegionId};
use super::reader::{Archive, MetadataError};

/// The archive metadata key that holds the declared types (a JSON list of [`DeclaredType`]).
pub const META_KEY: &str = "capture.declared_types";

/// One stretch of a region that a program's array typed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredType {
    pub region: RegionId,
    /// Byte offset in the region and length in bytes: whole elements of `ty`.
    pub offset: u64,
    pub len: u64,
    pub ty: ElemType,
    /// What declared it (`torch.float32`, `<f4`), for the reader.
    pub from: String,
}

/// The element type a declaration names: an [`ElemType`]'s name other than `untyped` and `ptr`
/// (`f32`, `bf16`, `i64`, ...).
pub fn elem_type_named(name: &str) -> Option<ElemType> {
    ElemType::ALL.into_iter().find(|t| t.name() == name && !matches!(t, ElemType::Untyped | ElemType::Ptr))
}

/// Non-overlapping stretches from declarations that may overlap, sorted by region and offset:
/// where declarations of one type overlap or touch (on that type's element grid), they merge;
/// bytes declared as two types are left out.
pub fn resolve(mut declared: Vec<DeclaredType>) -> Vec<DeclaredType> {
    declared.retain(|d| d.len > 0 && d.ty.size() > 0 && d.len.is_multiple_of(d.ty.size() as u64));
    declared.sort_by_key(|d| (d.region, d.offset));
    let mut out: Vec<DeclaredType> = Vec::new();
    let mut by_region: BTreeMap<RegionId, Vec<DeclaredType>> = BTreeMap::new();
    for d in declared {
        by_region.entry(d.region).or_default().push(d);
    }
    for (_, list) in by_region {
        // Merge same-typed overlaps first, then cut out what two types claim.
        let mut merged: Vec<DeclaredType> = Vec::new();
        for d in list {
            let grid = d.ty.size() as u64;
            match merged.iter_mut().rev().find(|m| m.ty == d.ty && m.offset + m.len >= d.offset) {
                Some(m) if (d.offset - m.offset).is_multiple_of(grid) => {
                    m.len = m.len.max(d.offset + d.len - m.offset);
                }
                _ => merged.push(d),
            }
        }
        merged.sort_by_key(|d| d.offset);
        // Bytes claimed by stretches of different types (or off each other's grid).
        let mut contested: Vec<(u64, u64)> = Vec::new();
        for (i, a) in merged.iter().enumerate() {
            for b in &merged[i + 1..] {
                if b.offset >= a.offset + a.len {
                    break;
                }
                contested.push((b.offset, (a.offset + a.len).min(b.offset + b.len)));
            }
        }
        for d in merged {
            out.extend(cut(d, &contested));
        }
    }
    out
}

/// `d` without the contested byte ranges, each piece trimmed to whole elements on its grid.
fn cut(d: DeclaredType, contested: &[(u64, u64)]) -> Vec<DeclaredType> {
    let grid = d.ty.size() as u64;
    let mut pieces = vec![(d.offset, d.offset + d.len)];
    for &(lo, hi) in contested {
        pieces = pieces
            .into_iter()
            .flat_map(|(a, b)| {
                if hi <= a || lo >= b {
                    vec![(a, b)]
                } else {
                    [(a, lo.max(a)), (hi.min(b), b)].into_iter().filter(|(x, y)| x < y).collect()
                }
            })
            .collect();
    }
    pieces
        .into_iter()
        .filter_map(|(a, b)| {
            // On the declaration's element grid.
            let start = d.offset + (a - d.offset).div_ceil(grid) * grid;
            let end = d.offset + (b - d.offset) / grid * grid;
            (start < end).then(|| DeclaredType { offset: start, len: end - start, ..d.clone() })
        })
        .collect()
}

/// The declared types an archive's metadata holds, by region (empty where it has none). An error
/// says what in the JSON is wrong: a region the archive lacks, a stretch outside its region, not
/// whole elements, or stretches that overlap.
pub fn of_archive(archive: &Archive) -> Result<HashMap<RegionId, Vec<DeclaredType>>, MetadataError> {
    let Some(json) = archive.meta_value(META_KEY) else { return Ok(HashMap::new()) };
    let invalid = |reason: String| MetadataError::invalid(META_KEY, reason);
    let list: Vec<DeclaredType> = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let mut out: HashMap<RegionId, Vec<DeclaredType>> = HashMap::new();
    for (i, d) in list.into_iter().enumerate() {
        if d.region as usize >= archive.region_count() {
            return Err(invalid(format!("entry {i}: region {} of {}", d.region, archive.region_count())));
        }
        let size = archive.region(d.region).size;
        if d.offset.checked_add(d.len).is_none_or(|end| end > size) {
            return Err(invalid(format!(
                "entry {i}: bytes {}..+{} run past region {} ({size} bytes)",
                d.offset, d.len, d.region
            )));
        }
        if matches!(d.ty, ElemType::Untyped | ElemType::Ptr) || d.len == 0 || !d.len.is_multiple_of(d.ty.size() as u64)
        {
            return Err(invalid(format!("entry {i}: {} bytes are not whole {} elements", d.len, d.ty.name())));
        }
        out.entry(d.region).or_default().push(d);
    }
    for (region, list) in &mut out {
        list.sort_by_key(|d| d.offset);
        if let Some(w) = list.windows(2).find(|w| w[0].offset + w[0].len > w[1].offset) {
            return Err(invalid(format!(
                "region {region}: bytes {}..{} and {}..{} overlap",
                w[0].offset,
                w[0].offset + w[0].len,
                w[1].offset,
                w[1].offset + w[1].len
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(region: RegionId, offset: u64, len: u64, ty: ElemType) -> DeclaredType {
        DeclaredType { region, offset, len, ty, from: String::new() }
    }

    fn spans(v: &[DeclaredType]) -> Vec<(RegionId, u64, u64, ElemType)> {
        v.iter().map(|d| (d.region, d.offset, d.len, d.ty)).collect()
    }

    #[test]
    fn agreeing_arrays_merge_and_disagreeing_bytes_stay_untyped() {
        let out = resolve(vec![
            d(0, 0, 64, ElemType::F32),
            d(0, 32, 64, ElemType::F32),
            d(1, 0, 16, ElemType::F32),
            // A view of region 1's bytes 8..16 as i32 pairs: contested.
            d(1, 8, 16, ElemType::I32),
        ]);
        assert_eq!(spans(&out), vec![(0, 0, 96, ElemType::F32), (1, 0, 8, ElemType::F32), (1, 16, 8, ElemType::I32)]);
    }

    #[test]
    fn pieces_are_trimmed_to_whole_elements_and_junk_is_dropped() {
        // An f64 array cut by an f16 view at bytes 4..6 keeps only whole f64 elements.
        let out = resolve(vec![d(0, 0, 24, ElemType::F64), d(0, 4, 2, ElemType::F16), d(0, 40, 3, ElemType::F32)]);
        assert_eq!(spans(&out), vec![(0, 8, 16, ElemType::F64)]);
        assert_eq!(elem_type_named("bf16"), Some(ElemType::Bf16));
        assert_eq!(elem_type_named("ptr"), None);
        assert_eq!(elem_type_named("float"), None);
    }
}

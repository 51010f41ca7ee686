//! Whether replays must place regions at their captured addresses, and why.
//!
//! Pointers are found by value where the capture reads memory: parameters, uploaded host data, a
//! region's contents at first touch. A pointer that a kernel computes and writes during the range
//! is never in those places, but it is in the region's final contents, which the capture reads at
//! the end anyway. So the evidence is cheap and honest: an 8-byte aligned word of a final state
//! that points into a captured region, where the capture saw no pointer (neither a relocation of
//! the initial contents nor one of uploaded data copied there). Such a word may also be one a
//! replay would reproduce at its own addresses (a kernel storing its pointer parameter, a copy of
//! a table the capture relocated), so this can only say the capture cannot be certain, which is
//! exactly when placing regions at their captured addresses is the safe choice.

use std::collections::HashSet;

use crate::record::{region_name, OpRec, Recording, RegionRec, CONDITION};

/// Whether a region has a device address a replay may place it at: a condition stands for a
/// conditional handle, which a replay makes anew, and a module variable lives where its module's
/// loader puts it.
pub fn has_address(r: &RegionRec) -> bool {
    r.alloc.kind != CONDITION && r.alloc.kind != crate::record::module_vars::MODULE_VAR
}

/// Why the regions of `rec` must keep their captured addresses on replay, if they must:
/// `forced` (`--place-regions`), or the first region whose final contents hold pointers the
/// capture did not see.
pub fn decide(rec: &Recording, forced: bool) -> Option<String> {
    if forced {
        return Some("asked for (--place-regions)".into());
    }
    let mut spans: Vec<(u64, u64)> =
        rec.regions.iter().filter(|r| has_address(r)).map(|r| (r.alloc.base, r.alloc.base + r.alloc.size)).collect();
    spans.sort_unstable();
    let inside = |word: u64| {
        let i = spans.partition_point(|&(base, _)| base <= word);
        i > 0 && word < spans[i - 1].1
    };
    // Where the capture saw pointers: (region, offset).
    let mut seen: HashSet<(usize, u64)> = HashSet::new();
    for (r, region) in rec.regions.iter().enumerate() {
        seen.extend(region.relocs.iter().map(|&(offset, _, _)| (r, offset)));
    }
    for op in &rec.ops {
        if let OpRec::Upload { upload, dst, dst_offset } = op {
            seen.extend(rec.uploads[*upload].relocs.iter().map(|&(offset, _, _)| (*dst, dst_offset + offset)));
        }
    }
    for (r, region) in rec.regions.iter().enumerate() {
        let Some(expected) = &region.expected else { continue };
        // Words at 8-byte aligned addresses (allocations are aligned far more than that).
        let first = (region.alloc.base.next_multiple_of(8) - region.alloc.base) as usize;
        let mut found = 0u64;
        let mut example = None;
        for at in (first..expected.len().saturating_sub(7)).step_by(8) {
            let word = u64::from_le_bytes(expected[at..at + 8].try_into().expect("8 bytes"));
            if inside(word) && !seen.contains(&(r, at as u64)) {
                found += 1;
                example.get_or_insert((at, word));
            }
        }
        if let Some((at, word)) = example {
            return Some(format!(
                "{} ends the range holding {found} device pointer(s) the capture did not see as relocations \
                 (the first at offset {at}: {word:#x}), which a kernel or copy wrote",
                region_name(&region.alloc)
            ));
        }
    }
    None
}

/// Regions whose captured address ranges overlap (an allocation freed and another made at its
/// address inside the range): a replay cannot place both. Returns their names, pairwise.
pub fn overlaps(rec: &Recording) -> Vec<(String, String)> {
    let mut by_base: Vec<usize> = (0..rec.regions.len()).filter(|&r| has_address(&rec.regions[r])).collect();
    by_base.sort_unstable_by_key(|&r| rec.regions[r].alloc.base);
    by_base
        .windows(2)
        .filter_map(|pair| {
            let (a, b) = (&rec.regions[pair[0]].alloc, &rec.regions[pair[1]].alloc);
            (a.base + a.size > b.base).then(|| (region_name(a), region_name(b)))
        })
        .collect()
}

//! Recorded effects: what a launch the CPU cannot run wrote, so that a CPU replay can go on past it.
//!
//! Kernels that ship machine code only (cuBLAS, PyTorch's own) have no PTX for the CPU engines.
//! `recap capture --record-effects` reads, around each such launch, every region the launch could
//! write, and keeps the bytes it changed (the archive's `effects` section, docs/FORMAT.md). Those
//! bytes are what the kernel computed from what it read, so they are right for a replay only when
//! it reads the same: each launch's record carries a hash of its inputs, and the replay recomputes
//! it at that op. Where the two differ because the caller wrote inputs of its own, the replay
//! stops; where the caller wrote none, the difference can only come from ops the replay ran
//! itself (rounding, atomics' order), and the bytes are applied and the launch counted as such
//! (`shared::replay::IterationStats::stale_effects`).
//!
//! Both sides must hash the same thing, and a replay's memory differs from the capture's in one
//! way: the pointers regions hold are the replay's addresses. So the inputs are defined in terms
//! both know: the regions the launch can reach (the targets of its parameter relocations and,
//! transitively, of the relocations stored in those regions: the plan's read set of a launch), in
//! ascending region order, each as its index, its size and its contents with the 8 bytes of every
//! region relocation it owns zeroed. The parameter bytes are the archive's own and need no hash.

use std::collections::BTreeSet;

use crate::archive::RegionId;

/// Bytes of blake3 kept as the hash of a launch's inputs.
pub const INPUTS_HASH_LEN: usize = 16;

/// The regions a launch can reach: `targets` (its parameter relocations' targets) and, through
/// `region_relocs` (`(owner, target)` pairs), everything reachable from them; ascending.
pub fn reachable(targets: impl IntoIterator<Item = RegionId>, region_relocs: &[(RegionId, RegionId)]) -> Vec<RegionId> {
    let mut seen: BTreeSet<RegionId> = BTreeSet::new();
    let mut todo: Vec<RegionId> = targets.into_iter().collect();
    while let Some(r) = todo.pop() {
        if seen.insert(r) {
            todo.extend(region_relocs.iter().filter(|(owner, _)| *owner == r).map(|(_, target)| *target));
        }
    }
    seen.into_iter().collect()
}

/// The hash of a launch's inputs, fed one reachable region at a time, in ascending order.
pub struct InputsHasher(blake3::Hasher);

impl Default for InputsHasher {
    fn default() -> Self {
        InputsHasher(blake3::Hasher::new())
    }
}

impl InputsHasher {
    /// Adds region `region` with its current `contents`; `pointer_words` are the offsets of the
    /// relocations it owns, whose bytes are left out (each is a replay's own address).
    pub fn region(&mut self, region: RegionId, contents: &[u8], pointer_words: &[u64]) {
        self.0.update(&region.to_le_bytes());
        self.0.update(&(contents.len() as u64).to_le_bytes());
        let mut words: Vec<u64> =
            pointer_words.iter().copied().filter(|&w| w.saturating_add(8) <= contents.len() as u64).collect();
        words.sort_unstable();
        words.dedup();
        let mut at = 0usize;
        for w in words {
            let w = w as usize;
            if w >= at {
                self.0.update(&contents[at..w]);
                self.0.update(&[0u8; 8]);
                at = w + 8;
            } else if w + 8 > at {
                // Overlapping words: zero the part not yet zeroed.
                self.0.update(&vec![0u8; w + 8 - at]);
                at = w + 8;
            }
        }
        self.0.update(&contents[at.min(contents.len())..]);
    }

    pub fn finish(&self) -> [u8; INPUTS_HASH_LEN] {
        let mut out = [0u8; INPUTS_HASH_LEN];
        out.copy_from_slice(&self.0.finalize().as_bytes()[..INPUTS_HASH_LEN]);
        out
    }
}

/// The bytes a launch changed in one region: the span from the first to the last byte that
/// differs between `before` and `after` (same length), as `(offset, after[span])`; `None` when
/// nothing changed.
pub fn changed_span<'b>(before: &[u8], after: &'b [u8]) -> Option<(u64, &'b [u8])> {
    let n = before.len().min(after.len());
    let first = (0..n).find(|&i| before[i] != after[i])?;
    let last = (first..n).rev().find(|&i| before[i] != after[i])?;
    Some((first as u64, &after[first..=last]))
}

/// Lowercase hex of a hash, for messages.
pub fn hex(hash: &[u8]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(region: RegionId, contents: &[u8], words: &[u64]) -> [u8; INPUTS_HASH_LEN] {
        let mut h = InputsHasher::default();
        h.region(region, contents, words);
        h.finish()
    }

    #[test]
    fn pointer_words_do_not_count_and_everything_else_does() {
        let mut a = vec![7u8; 32];
        let mut b = a.clone();
        a[8..16].copy_from_slice(&0x7f00_1234_0000u64.to_le_bytes());
        b[8..16].copy_from_slice(&0x1000_0000_0040u64.to_le_bytes());
        assert_eq!(hash(3, &a, &[8]), hash(3, &b, &[8]));
        assert_ne!(hash(3, &a, &[]), hash(3, &b, &[]));
        assert_ne!(hash(3, &a, &[8]), hash(4, &a, &[8]), "the region index counts");
        b[20] = 0;
        assert_ne!(hash(3, &a, &[8]), hash(3, &b, &[8]));
        // Words past the end are ignored rather than trusted.
        assert_eq!(hash(3, &a, &[8, 30, u64::MAX]), hash(3, &a, &[8]));
    }

    #[test]
    fn reach_follows_region_relocations_transitively_once() {
        let relocs = [(1, 2), (2, 1), (2, 5), (7, 0)];
        assert_eq!(reachable([1], &relocs), vec![1, 2, 5]);
        assert_eq!(reachable([3, 0], &relocs), vec![0, 3]);
    }

    #[test]
    fn the_changed_span_is_first_to_last_difference() {
        assert_eq!(changed_span(&[1, 2, 3, 4], &[1, 9, 3, 8]), Some((1, &[9u8, 3, 8][..])));
        assert_eq!(changed_span(&[1, 2], &[1, 2]), None);
    }
}

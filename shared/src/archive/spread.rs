//! The `spread` section: how far repeated runs of the captured range disagreed, per stretch of a
//! region (docs/FORMAT.md, "Recorded spread"). `recap capture --repeat-range N` runs the recorded
//! range N more times on the device the program ran on and keeps, for each stretch where those
//! runs and the program's own differ, the largest distance seen (in ulps and in value) and how many
//! elements differed. A check on any device then calls that stretch nondeterministic and judges
//! it with a tolerance no tighter than the program's own spread (`shared::check`).
//!
//! Records are self-contained (48 bytes, no strings), any order; each lies inside its region. The
//! section is optional and not required: a reader that ignores it judges the stretches exactly as
//! before, only more strictly.

use super::layout::{SectionKind, SPREAD_LEN};
use super::model::RegionId;
use super::reader::{err, Archive, FormatError};
use crate::le::u64_at;

/// One stretch's recorded spread.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordedSpread {
    pub region: RegionId,
    /// Byte offset in the region and length in bytes of the stretch.
    pub offset: u64,
    pub len: u64,
    /// The largest distance between two runs' elements, in ulps (floats) or values (integers).
    pub ulps: u64,
    /// The same in value (finite, 0 or more).
    pub abs: f64,
    /// Elements where some run differed.
    pub elements: u64,
}

fn record(r: &[u8]) -> RecordedSpread {
    RecordedSpread {
        region: u32::from_le_bytes(r[0..4].try_into().unwrap()),
        offset: u64_at(r, 8),
        len: u64_at(r, 16),
        ulps: u64_at(r, 24),
        abs: f64::from_bits(u64_at(r, 32)),
        elements: u64_at(r, 40),
    }
}

/// The section's bytes: a table header, then one record per spread.
pub(crate) fn encode(spreads: &[RecordedSpread]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + spreads.len() * SPREAD_LEN);
    out.extend_from_slice(&(spreads.len() as u32).to_le_bytes());
    out.extend_from_slice(&(SPREAD_LEN as u32).to_le_bytes());
    for s in spreads {
        out.extend_from_slice(&s.region.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [s.offset, s.len, s.ulps, s.abs.to_bits(), s.elements] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Why [`with_recorded_spread`] refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpreadError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("spread {index}: {reason}")]
    Bad { index: usize, reason: String },
}

/// Why a record cannot stand in `archive`, if it cannot.
fn fault(archive: &Archive<'_>, s: &RecordedSpread) -> Option<String> {
    if s.region as usize >= archive.region_count() {
        return Some(format!("names region {} but there are {}", s.region, archive.region_count()));
    }
    let size = archive.region(s.region).size;
    if s.len == 0 || s.offset.checked_add(s.len).is_none_or(|end| end > size) {
        return Some(format!("bytes {}..+{} do not lie inside region {} ({size} bytes)", s.offset, s.len, s.region));
    }
    if !(s.abs.is_finite() && s.abs >= 0.0) {
        return Some(format!("distance {} is not a finite value of 0 or more", s.abs));
    }
    None
}

/// `bytes` (a valid archive) with `spreads` as its `spread` section, replacing any it had (see
/// `types::replace_section`).
pub fn with_recorded_spread(bytes: &[u8], spreads: &[RecordedSpread]) -> Result<Vec<u8>, SpreadError> {
    let archive = Archive::open(bytes)?;
    for (index, s) in spreads.iter().enumerate() {
        if let Some(reason) = fault(&archive, s) {
            return Err(SpreadError::Bad { index, reason });
        }
    }
    let section = (!spreads.is_empty()).then(|| encode(spreads));
    Ok(super::types::replace_section(bytes, SectionKind::Spread, section.as_deref()))
}

impl<'a> Archive<'a> {
    /// Every record lies inside its region with a finite distance (checked at open).
    pub(super) fn check_spread(&self) -> Result<(), FormatError> {
        let t = &self.spread;
        for i in 0..t.count {
            if let Some(reason) = fault(self, &record(t.rec(i))) {
                return err("spread", t.at(i, 0), format!("record {i} {reason}"));
            }
        }
        Ok(())
    }

    /// The spreads recorded for `region` (`recap capture --repeat-range`), in record order.
    pub fn recorded_spread(&self, region: RegionId) -> Vec<RecordedSpread> {
        let t = &self.spread;
        (0..t.count).map(|i| record(t.rec(i))).filter(|s| s.region == region).collect()
    }

    /// Whether the archive carries the spread of repeated runs of its range.
    pub fn has_recorded_spread(&self) -> bool {
        self.spread.count > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{ArchiveWriter, DType, RegionDecl};

    fn archive() -> Vec<u8> {
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let r = w.add_region(RegionDecl::new("bins", 32, DType::F32)).unwrap();
        w.set_initial_bytes(r, &[0; 32]).unwrap();
        w.finish().unwrap().into_inner()
    }

    fn spread(offset: u64, len: u64, abs: f64) -> RecordedSpread {
        RecordedSpread { region: 0, offset, len, ulps: 7, abs, elements: 3 }
    }

    #[test]
    fn spreads_are_appended_read_back_replaced_and_removed() {
        let plain = archive();
        let with = with_recorded_spread(&plain, &[spread(0, 16, 0.5), spread(16, 16, 0.25)]).unwrap();
        let a = Archive::open(&with).unwrap();
        assert!(a.has_recorded_spread());
        assert_eq!(a.recorded_spread(0), vec![spread(0, 16, 0.5), spread(16, 16, 0.25)]);
        let replaced = with_recorded_spread(&with, &[spread(8, 8, 1.0)]).unwrap();
        assert_eq!(Archive::open(&replaced).unwrap().recorded_spread(0), vec![spread(8, 8, 1.0)]);
        let removed = with_recorded_spread(&replaced, &[]).unwrap();
        assert!(!Archive::open(&removed).unwrap().has_recorded_spread());
    }

    #[test]
    fn a_spread_outside_its_region_or_not_finite_is_refused_when_written_and_when_read() {
        let plain = archive();
        for (bad, why) in [
            (spread(24, 16, 0.5), "do not lie inside region 0"),
            (spread(0, 0, 0.5), "do not lie inside region 0"),
            (spread(0, 4, f64::NAN), "not a finite value"),
            (RecordedSpread { region: 3, ..spread(0, 4, 0.5) }, "names region 3 but there are 1"),
        ] {
            let e = with_recorded_spread(&plain, &[bad]).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            // The same record written past the check is refused at open, naming the section.
            let forged = super::super::types::replace_section(&plain, SectionKind::Spread, Some(&encode(&[bad])));
            let e = Archive::open(&forged).unwrap_err().to_string();
            assert!(e.contains("spread") && e.contains(why), "{e}");
        }
    }
}

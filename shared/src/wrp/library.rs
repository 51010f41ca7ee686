//! The records of Warp's library routines that recap replays (`SCAN`, `RADIX_SORT`,
//! `SEGMENTED_SORT`, `RUNLENGTH_ENCODE`, `REDUCTION`), field by field as Warp 1.15 to 1.19 write
//! them (`warp/native/apic_types.h`: the same packed layouts in every format that has them). The
//! others (sparse matrices, BVHs, hash grids) stay [`OpKind::Library`]: their opcode only.

use super::parse::Reader;
use super::{OpKind, View, WrpError};

/// Warp's `APICType` codes, as the records store them.
pub mod dtype {
    pub const INT32: u8 = 1;
    pub const UINT32: u8 = 2;
    pub const INT64: u8 = 3;
    pub const UINT64: u8 = 4;
    pub const FLOAT32: u8 = 5;
    pub const FLOAT64: u8 = 6;
}

/// Warp's `APICReductionKind` codes.
pub mod reduction {
    pub const SUM: u8 = 1;
    pub const INNER: u8 = 2;
}

fn view(r: &mut Reader<'_>, region: i32, what: &str) -> Result<View, WrpError> {
    Ok(View { region, offset: r.u64(what)? })
}

/// The record of library op `opcode` after its 8-byte header (its size was checked against the
/// op type's); `None` for a routine recap does not replay.
pub(super) fn library<'a>(r: &mut Reader<'a>, opcode: u32) -> Result<Option<OpKind<'a>>, WrpError> {
    Ok(Some(match opcode {
        // SCAN
        9 => {
            let (dst, src) = (r.i32("the destination region")?, r.i32("the source region")?);
            let dst = view(r, dst, "the destination offset")?;
            let src = view(r, src, "the source offset")?;
            let count = r.u32("the length")?;
            let src_stride = r.i32("the input stride")?;
            let dst_stride = r.i32("the output stride")?;
            let width = r.i32("the type length")?;
            let dtype = r.u8("the dtype")?;
            let inclusive = match r.u8("the inclusive flag")? {
                0 => false,
                1 => true,
                other => return r.error(format!("inclusive flag {other} (0 or 1)")),
            };
            r.skip(2, "padding")?;
            OpKind::Scan { src, dst, count, src_stride, dst_stride, width, dtype, inclusive }
        }
        // SEGMENTED_SORT
        11 => {
            let regions = [r.i32("the keys region")?, r.i32("the values region")?, r.i32("the starts region")?];
            let ends = r.i32("the ends region")?;
            let keys = view(r, regions[0], "the keys offset")?;
            let values = view(r, regions[1], "the values offset")?;
            let starts = view(r, regions[2], "the starts offset")?;
            let ends = view(r, ends, "the ends offset")?;
            let count = r.u32("the count")?;
            let segments = r.u32("the segment count")?;
            let dtype = r.u8("the key dtype")?;
            r.skip(3, "padding")?;
            OpKind::SegmentedSort { keys, values, starts, ends, count, segments, dtype }
        }
        // RADIX_SORT
        12 => {
            let (keys, values) = (r.i32("the keys region")?, r.i32("the values region")?);
            let keys = view(r, keys, "the keys offset")?;
            let values = view(r, values, "the values offset")?;
            let count = r.u32("the count")?;
            let begin_bit = r.i32("the first bit")?;
            let end_bit = r.i32("the end bit")?;
            let value_size = r.i32("the value size")?;
            let dtype = r.u8("the key dtype")?;
            r.skip(3, "padding")?;
            OpKind::RadixSort { keys, values, count, begin_bit, end_bit, value_size, dtype }
        }
        // RUNLENGTH_ENCODE
        13 => {
            let mut regions = [0i32; 4];
            for (slot, what) in regions.iter_mut().zip(["values", "run values", "run lengths", "run count"]) {
                *slot = r.i32(&format!("the {what} region"))?;
            }
            let values = view(r, regions[0], "the values offset")?;
            let run_values = view(r, regions[1], "the run values offset")?;
            let run_lengths = view(r, regions[2], "the run lengths offset")?;
            let run_count = view(r, regions[3], "the run count offset")?;
            let count = r.u32("the value count")?;
            r.skip(4, "padding")?;
            OpKind::RunLengthEncode { values, run_values, run_lengths, run_count, count }
        }
        // REDUCTION
        16 => {
            let (a, b, out) =
                (r.i32("the first input region")?, r.i32("the second input region")?, r.i32("the output region")?);
            let count = r.u32("the count")?;
            let a = view(r, a, "the first input offset")?;
            let b = view(r, b, "the second input offset")?;
            let out = view(r, out, "the output offset")?;
            let a_stride = r.i32("the first input stride")?;
            let b_stride = r.i32("the second input stride")?;
            let width = r.i32("the type length")?;
            let kind = r.u8("the reduction kind")?;
            let dtype = r.u8("the dtype")?;
            r.skip(2, "padding")?;
            OpKind::Reduction { a, b, out, count, a_stride, b_stride, width, kind, dtype }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_radix_sort_record_reads_field_by_field() {
        let mut body = Vec::new();
        body.extend(3i32.to_le_bytes());
        body.extend(4i32.to_le_bytes());
        body.extend(16u64.to_le_bytes());
        body.extend(8u64.to_le_bytes());
        body.extend(64u32.to_le_bytes());
        body.extend(0i32.to_le_bytes());
        body.extend(32i32.to_le_bytes());
        body.extend(8i32.to_le_bytes());
        body.extend([dtype::FLOAT32, 0, 0, 0]);
        let mut r = Reader::new(&body, 8);
        let got = library(&mut r, 12).unwrap().unwrap();
        assert_eq!(
            got,
            OpKind::RadixSort {
                keys: View { region: 3, offset: 16 },
                values: View { region: 4, offset: 8 },
                count: 64,
                begin_bit: 0,
                end_bit: 32,
                value_size: 8,
                dtype: dtype::FLOAT32,
            }
        );
        assert_eq!(r.remaining(), 0);
        // A BVH refit is not replayed: its opcode only.
        assert_eq!(library(&mut Reader::new(&body, 8), 17).unwrap(), None);
        // A scan whose inclusive flag is neither 0 nor 1 is refused where the flag is.
        let mut scan = body.clone();
        scan[41] = 7;
        let e = library(&mut Reader::new(&scan, 8), 9).unwrap_err();
        assert_eq!((e.offset, e.what.as_str()), (50, "inclusive flag 7 (0 or 1)"));
    }
}

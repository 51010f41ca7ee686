//! Library ops (format 1.3): sorts, scans, reductions and run-length encoding that a producer ran as
//! library routines rather than as kernels of its own (NVIDIA Warp's `radix_sort_pairs`,
//! `array_scan`, ...), stored as what they compute so that every replay computes it again from the
//! data it has. What each one computes is `shared::library`; here is the op as data: the
//! [`LibraryOp`] model, its 96-byte record in the `library` section, and the rule the writer and
//! the reader share (operands inside their regions, parameters a routine accepts, no output that
//! overlaps another operand).
//!
//! The `library` section is marked `REQUIRED`: a reader without it would meet op kind 11 and
//! could only refuse, and the section says so up front, by kind, as a minor version does.
//! Record `i` belongs to the `i`-th library op in op order, as launches own their relocations.

use super::model::{DType, RegionId};
use crate::le::{u32_at, u64_at};

/// Bytes of one `library` record.
pub const LIBRARY_LEN: usize = 96;
/// Where a record's operands start: four of `region: u32, reserved: u32, offset: u64`.
const OPERANDS_AT: usize = 32;
const OPERAND_LEN: usize = 16;

/// Where an operand starts: a byte offset in a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct At {
    pub region: RegionId,
    pub offset: u64,
}

/// A library routine over regions. Element types are the archive's dtypes; what each computes,
/// bit for bit, is `shared::library` (docs/FORMAT.md, "library").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibraryOp {
    /// Warp's `radix_sort_pairs`: the first `count` keys sorted stably by bits `begin_bit..end_bit`
    /// of their radix image, 16 bits a pass (least significant first), values moved with their
    /// keys. `keys` and `values` hold `2 * count` elements: the second half is the sort's scratch,
    /// left as the passes leave it.
    RadixSortPairs { keys: At, values: At, count: u32, key: DType, value_size: u32, begin_bit: u32, end_bit: u32 },
    /// Warp's `segmented_sort_pairs`: each segment `starts[s]..ends[s]` of the `count` keys
    /// sorted as a 32-bit radix sort of its own (scratch `count` elements on); `i32` values.
    SegmentedSortPairs { keys: At, values: At, starts: At, ends: At, count: u32, segments: u32, key: DType },
    /// Warp's `array_scan`: per component `k < width`, the running sum of `src[i * src_stride + k]`
    /// into `dst[i * dst_stride + k]` (strides in bytes), inclusive or exclusive, in index order.
    Scan { src: At, dst: At, count: u32, dtype: DType, src_stride: u32, dst_stride: u32, width: u32, inclusive: bool },
    /// Warp's `array_sum`: `dst[k] = sum over i of src[i * stride + k]`, in index order.
    Sum { src: At, dst: At, count: u32, dtype: DType, stride: u32, width: u32 },
    /// Warp's `array_inner`: `dst = sum over i and k of a[i * a_stride + k] * b[i * b_stride + k]`,
    /// in index order, each product rounded before it is added.
    Inner { a: At, b: At, dst: At, count: u32, dtype: DType, a_stride: u32, b_stride: u32, width: u32 },
    /// Warp's `runlength_encode` of `count` `i32`s: each run's value and length, in order, and the
    /// number of runs as one `i32`. Entries past the last run are left as they were.
    RunLengthEncode { values: At, run_values: At, run_lengths: At, run_count: At, count: u32 },
}

/// One operand of a library op: where it is, how many bytes from there the routine touches, and
/// whether it writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub at: At,
    pub len: u64,
    pub written: bool,
    /// Its role, for messages: `keys`, `src`, ...
    pub role: &'static str,
}

/// Routine codes of the record's first field.
mod routine {
    pub const RADIX_SORT_PAIRS: u32 = 1;
    pub const SEGMENTED_SORT_PAIRS: u32 = 2;
    pub const SCAN: u32 = 3;
    pub const SUM: u32 = 4;
    pub const INNER: u32 = 5;
    pub const RUN_LENGTH_ENCODE: u32 = 6;
}

impl LibraryOp {
    /// The routine's name, as docs/FORMAT.md and labels give it.
    pub fn name(&self) -> &'static str {
        match self {
            LibraryOp::RadixSortPairs { .. } => "radix_sort_pairs",
            LibraryOp::SegmentedSortPairs { .. } => "segmented_sort_pairs",
            LibraryOp::Scan { inclusive: true, .. } => "inclusive_scan",
            LibraryOp::Scan { inclusive: false, .. } => "exclusive_scan",
            LibraryOp::Sum { .. } => "array_sum",
            LibraryOp::Inner { .. } => "array_inner",
            LibraryOp::RunLengthEncode { .. } => "runlength_encode",
        }
    }

    /// Elements the routine runs over (pairs, scanned or summed rows, values).
    pub fn count(&self) -> u32 {
        match *self {
            LibraryOp::RadixSortPairs { count, .. }
            | LibraryOp::SegmentedSortPairs { count, .. }
            | LibraryOp::Scan { count, .. }
            | LibraryOp::Sum { count, .. }
            | LibraryOp::Inner { count, .. }
            | LibraryOp::RunLengthEncode { count, .. } => count,
        }
    }

    /// The element type of the keys or the data.
    pub fn dtype(&self) -> DType {
        match *self {
            LibraryOp::RadixSortPairs { key, .. } | LibraryOp::SegmentedSortPairs { key, .. } => key,
            LibraryOp::Scan { dtype, .. } | LibraryOp::Sum { dtype, .. } | LibraryOp::Inner { dtype, .. } => dtype,
            LibraryOp::RunLengthEncode { .. } => DType::I32,
        }
    }

    /// The same op over other regions: each operand's region `r` becomes `f(r)` (an archive cut
    /// down to some of its regions renumbers them).
    pub fn map_regions(self, f: impl Fn(RegionId) -> RegionId) -> LibraryOp {
        let m = |a: At| At { region: f(a.region), offset: a.offset };
        match self {
            LibraryOp::RadixSortPairs { keys, values, count, key, value_size, begin_bit, end_bit } => {
                LibraryOp::RadixSortPairs {
                    keys: m(keys),
                    values: m(values),
                    count,
                    key,
                    value_size,
                    begin_bit,
                    end_bit,
                }
            }
            LibraryOp::SegmentedSortPairs { keys, values, starts, ends, count, segments, key } => {
                LibraryOp::SegmentedSortPairs {
                    keys: m(keys),
                    values: m(values),
                    starts: m(starts),
                    ends: m(ends),
                    count,
                    segments,
                    key,
                }
            }
            LibraryOp::Scan { src, dst, count, dtype, src_stride, dst_stride, width, inclusive } => {
                LibraryOp::Scan { src: m(src), dst: m(dst), count, dtype, src_stride, dst_stride, width, inclusive }
            }
            LibraryOp::Sum { src, dst, count, dtype, stride, width } => {
                LibraryOp::Sum { src: m(src), dst: m(dst), count, dtype, stride, width }
            }
            LibraryOp::Inner { a, b, dst, count, dtype, a_stride, b_stride, width } => {
                LibraryOp::Inner { a: m(a), b: m(b), dst: m(dst), count, dtype, a_stride, b_stride, width }
            }
            LibraryOp::RunLengthEncode { values, run_values, run_lengths, run_count, count } => {
                LibraryOp::RunLengthEncode {
                    values: m(values),
                    run_values: m(run_values),
                    run_lengths: m(run_lengths),
                    run_count: m(run_count),
                    count,
                }
            }
        }
    }

    /// Every operand with the bytes it spans, in the record's order (products of 32-bit fields,
    /// which cannot overflow 64 bits); an error when a parameter is one the routine does not take:
    /// `(field offset in the record, reason)`.
    pub fn operands(&self) -> Result<Vec<Operand>, (usize, String)> {
        let size = self.dtype().size() as u64;
        let n = self.count() as u64;
        let op = |at: At, len: u64, written: bool, role: &'static str| Operand { at, len, written, role };
        // A strided run of `n` rows of `width` elements: `(n - 1) * stride + width * size` bytes.
        let strided = |stride: u32, width: u32, field: usize| -> Result<u64, (usize, String)> {
            if width == 0 {
                return Err((20, "a width of 0 elements".to_string()));
            }
            if !(stride as u64).is_multiple_of(size) {
                return Err((
                    field,
                    format!("a stride of {stride} bytes is not a whole number of {size}-byte elements"),
                ));
            }
            Ok(n.saturating_sub(1) * stride as u64 + width as u64 * size)
        };
        Ok(match *self {
            LibraryOp::RadixSortPairs { keys, values, key, value_size, begin_bit, end_bit, .. } => {
                if !matches!(key, DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F32 | DType::F64) {
                    return Err((4, format!("radix_sort_pairs of {} keys", key.name())));
                }
                if value_size != 4 && value_size != 8 {
                    return Err((12, format!("values of {value_size} bytes (4 or 8)")));
                }
                let bits = 8 * size as u32;
                if begin_bit > end_bit || end_bit > bits {
                    return Err((16, format!("key bits {begin_bit}..{end_bit} of a {bits}-bit key")));
                }
                vec![op(keys, 2 * n * size, true, "keys"), op(values, 2 * n * value_size as u64, true, "values")]
            }
            LibraryOp::SegmentedSortPairs { keys, values, starts, ends, segments, key, .. } => {
                if !matches!(key, DType::I32 | DType::F32) {
                    return Err((4, format!("segmented_sort_pairs of {} keys (i32 or f32)", key.name())));
                }
                let s = segments as u64 * 4;
                vec![
                    op(keys, 2 * n * 4, true, "keys"),
                    op(values, 2 * n * 4, true, "values"),
                    op(starts, s, false, "segment starts"),
                    op(ends, s, false, "segment ends"),
                ]
            }
            LibraryOp::Scan { src, dst, dtype, src_stride, dst_stride, width, .. } => {
                if !matches!(dtype, DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F32 | DType::F64) {
                    return Err((4, format!("a scan of {}", dtype.name())));
                }
                if n == 0 {
                    return Err((8, "a scan of 0 elements".to_string()));
                }
                vec![
                    op(src, strided(src_stride, width, 12)?, false, "src"),
                    op(dst, strided(dst_stride, width, 16)?, true, "dst"),
                ]
            }
            LibraryOp::Sum { src, dst, dtype, stride, width, .. } => {
                if !matches!(dtype, DType::F32 | DType::F64) {
                    return Err((4, format!("array_sum of {} (f32 or f64)", dtype.name())));
                }
                vec![op(src, strided(stride, width, 12)?, false, "src"), op(dst, width as u64 * size, true, "dst")]
            }
            LibraryOp::Inner { a, b, dst, dtype, a_stride, b_stride, width, .. } => {
                if !matches!(dtype, DType::F32 | DType::F64) {
                    return Err((4, format!("array_inner of {} (f32 or f64)", dtype.name())));
                }
                vec![
                    op(a, strided(a_stride, width, 12)?, false, "a"),
                    op(b, strided(b_stride, width, 16)?, false, "b"),
                    op(dst, size, true, "dst"),
                ]
            }
            LibraryOp::RunLengthEncode { values, run_values, run_lengths, run_count, .. } => vec![
                op(values, n * 4, false, "values"),
                op(run_values, n * 4, true, "run values"),
                op(run_lengths, n * 4, true, "run lengths"),
                op(run_count, 4, true, "run count"),
            ],
        })
    }

    /// The record's bytes.
    pub(crate) fn encode(&self) -> [u8; LIBRARY_LEN] {
        let mut r = [0u8; LIBRARY_LEN];
        let mut put = |at: usize, v: u32| r[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let (code, params, ats): (u32, [u32; 4], Vec<At>) = match *self {
            LibraryOp::RadixSortPairs { keys, values, value_size, begin_bit, end_bit, .. } => {
                (routine::RADIX_SORT_PAIRS, [value_size, begin_bit, end_bit, 0], vec![keys, values])
            }
            LibraryOp::SegmentedSortPairs { keys, values, starts, ends, segments, .. } => {
                (routine::SEGMENTED_SORT_PAIRS, [segments, 0, 0, 0], vec![keys, values, starts, ends])
            }
            LibraryOp::Scan { src, dst, src_stride, dst_stride, width, inclusive, .. } => {
                (routine::SCAN, [src_stride, dst_stride, width, inclusive as u32], vec![src, dst])
            }
            LibraryOp::Sum { src, dst, stride, width, .. } => (routine::SUM, [stride, 0, width, 0], vec![src, dst]),
            LibraryOp::Inner { a, b, dst, a_stride, b_stride, width, .. } => {
                (routine::INNER, [a_stride, b_stride, width, 0], vec![a, b, dst])
            }
            LibraryOp::RunLengthEncode { values, run_values, run_lengths, run_count, .. } => {
                (routine::RUN_LENGTH_ENCODE, [0; 4], vec![values, run_values, run_lengths, run_count])
            }
        };
        put(0, code);
        put(4, self.dtype().code());
        put(8, self.count());
        for (i, p) in params.into_iter().enumerate() {
            put(12 + 4 * i, p);
        }
        for (i, at) in ats.into_iter().enumerate() {
            let o = OPERANDS_AT + OPERAND_LEN * i;
            r[o..o + 4].copy_from_slice(&at.region.to_le_bytes());
            r[o + 8..o + 16].copy_from_slice(&at.offset.to_le_bytes());
        }
        r
    }

    /// A record read back: `(field offset, reason)` when its routine or dtype is unknown.
    pub(crate) fn decode(r: &[u8]) -> Result<LibraryOp, (usize, String)> {
        let at = |i: usize| {
            let o = OPERANDS_AT + OPERAND_LEN * i;
            At { region: u32_at(r, o), offset: u64_at(r, o + 8) }
        };
        let dtype = DType::from_code(u32_at(r, 4)).ok_or((4, format!("unknown dtype {}", u32_at(r, 4))))?;
        let count = u32_at(r, 8);
        let p = |i: usize| u32_at(r, 12 + 4 * i);
        Ok(match u32_at(r, 0) {
            routine::RADIX_SORT_PAIRS => LibraryOp::RadixSortPairs {
                keys: at(0),
                values: at(1),
                count,
                key: dtype,
                value_size: p(0),
                begin_bit: p(1),
                end_bit: p(2),
            },
            routine::SEGMENTED_SORT_PAIRS => LibraryOp::SegmentedSortPairs {
                keys: at(0),
                values: at(1),
                starts: at(2),
                ends: at(3),
                count,
                segments: p(0),
                key: dtype,
            },
            routine::SCAN => {
                if p(3) > 1 {
                    return Err((24, format!("inclusive flag {} (0 or 1)", p(3))));
                }
                LibraryOp::Scan {
                    src: at(0),
                    dst: at(1),
                    count,
                    dtype,
                    src_stride: p(0),
                    dst_stride: p(1),
                    width: p(2),
                    inclusive: p(3) == 1,
                }
            }
            routine::SUM => LibraryOp::Sum { src: at(0), dst: at(1), count, dtype, stride: p(0), width: p(2) },
            routine::INNER => LibraryOp::Inner {
                a: at(0),
                b: at(1),
                dst: at(2),
                count,
                dtype,
                a_stride: p(0),
                b_stride: p(1),
                width: p(2),
            },
            routine::RUN_LENGTH_ENCODE => {
                if dtype != DType::I32 {
                    return Err((4, format!("runlength_encode of {} (i32)", dtype.name())));
                }
                LibraryOp::RunLengthEncode {
                    values: at(0),
                    run_values: at(1),
                    run_lengths: at(2),
                    run_count: at(3),
                    count,
                }
            }
            other => return Err((0, format!("unknown library routine {other}"))),
        })
    }
}

/// The record offset of operand `i`'s region field, for messages.
fn operand_field(i: usize) -> usize {
    OPERANDS_AT + OPERAND_LEN * i
}

/// What the writer and the reader both require of a library op, given its regions' sizes:
/// parameters the routine takes, every operand inside its region, and no written operand
/// overlapping another operand (a scan's identical source and destination excepted: the scan
/// reads each element before it writes it). `(field offset in the record, reason)` otherwise.
pub(crate) fn rule(op: &LibraryOp, region_size: impl Fn(RegionId) -> Option<u64>) -> Result<(), (usize, String)> {
    let operands = op.operands()?;
    for (i, o) in operands.iter().enumerate() {
        let Some(size) = region_size(o.at.region) else {
            return Err((operand_field(i), format!("{} region {} does not exist", o.role, o.at.region)));
        };
        if o.at.offset.checked_add(o.len).is_none_or(|end| end > size) {
            return Err((
                operand_field(i) + 8,
                format!(
                    "{} {}: bytes {}..{} fall outside its region {} of {size} bytes",
                    op.name(),
                    o.role,
                    o.at.offset,
                    o.at.offset.saturating_add(o.len),
                    o.at.region
                ),
            ));
        }
    }
    let in_place_scan = |a: &Operand, b: &Operand| {
        matches!(op, LibraryOp::Scan { src_stride, dst_stride, .. } if src_stride == dst_stride) && a.at == b.at
    };
    for (i, a) in operands.iter().enumerate() {
        for b in &operands[i + 1..] {
            let overlap = a.at.region == b.at.region
                && a.at.offset < b.at.offset + b.len
                && b.at.offset < a.at.offset + a.len
                && a.len > 0
                && b.len > 0;
            if overlap && (a.written || b.written) && !in_place_scan(a, b) {
                return Err((operand_field(i), format!("{} {} overlaps its {}", op.name(), a.role, b.role)));
            }
        }
    }
    Ok(())
}

/// The section's bytes: a table header, then the records in op order.
pub(crate) fn encode(ops: &[LibraryOp]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + ops.len() * LIBRARY_LEN);
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    out.extend_from_slice(&(LIBRARY_LEN as u32).to_le_bytes());
    for op in ops {
        out.extend_from_slice(&op.encode());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(region: RegionId, offset: u64) -> At {
        At { region, offset }
    }

    #[test]
    fn every_routine_reads_back_as_written() {
        let ops = [
            LibraryOp::RadixSortPairs {
                keys: at(0, 8),
                values: at(1, 0),
                count: 5,
                key: DType::F64,
                value_size: 8,
                begin_bit: 3,
                end_bit: 60,
            },
            LibraryOp::SegmentedSortPairs {
                keys: at(0, 0),
                values: at(1, 0),
                starts: at(2, 0),
                ends: at(2, 4),
                count: 9,
                segments: 2,
                key: DType::F32,
            },
            LibraryOp::Scan {
                src: at(0, 0),
                dst: at(0, 0),
                count: 3,
                dtype: DType::I64,
                src_stride: 16,
                dst_stride: 16,
                width: 2,
                inclusive: true,
            },
            LibraryOp::Sum { src: at(3, 4), dst: at(4, 0), count: 7, dtype: DType::F32, stride: 12, width: 3 },
            LibraryOp::Inner {
                a: at(0, 0),
                b: at(1, 0),
                dst: at(2, 0),
                count: 2,
                dtype: DType::F64,
                a_stride: 8,
                b_stride: 16,
                width: 1,
            },
            LibraryOp::RunLengthEncode {
                values: at(0, 0),
                run_values: at(1, 0),
                run_lengths: at(2, 0),
                run_count: at(3, 0),
                count: 4,
            },
        ];
        for op in ops {
            assert_eq!(LibraryOp::decode(&op.encode()), Ok(op));
        }
        let mut bad = ops[0].encode();
        bad[0] = 9;
        assert_eq!(LibraryOp::decode(&bad), Err((0, "unknown library routine 9".to_string())));
    }

    /// An archive of one radix sort of four `i32` keys (region 0) with their values (region 1).
    fn sorting_archive() -> Vec<u8> {
        use crate::archive::{ArchiveWriter, RegionDecl};
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let keys = w.add_region(RegionDecl::new("keys", 32, DType::I32)).unwrap();
        let values = w.add_region(RegionDecl::new("values", 32, DType::I32)).unwrap();
        let key_bytes: Vec<u8> = [3i32, -1, 3, 0, 0, 0, 0, 0].iter().flat_map(|k| k.to_le_bytes()).collect();
        w.set_initial_bytes(keys, &key_bytes).unwrap();
        let value_bytes: Vec<u8> = [10i32, 11, 12, 13, 0, 0, 0, 0].iter().flat_map(|k| k.to_le_bytes()).collect();
        w.set_initial_bytes(values, &value_bytes).unwrap();
        let sort = |keys| LibraryOp::RadixSortPairs {
            keys,
            values: at(values, 0),
            count: 4,
            key: DType::I32,
            value_size: 4,
            begin_bit: 0,
            end_bit: 32,
        };
        let e = w.library(sort(at(keys, 4))).unwrap_err().to_string();
        assert!(e.contains("radix_sort_pairs keys: bytes 4..36 fall outside its region 0 of 32 bytes"), "{e}");
        w.library(sort(at(keys, 0))).unwrap();
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn an_archive_with_a_library_op_is_1_3_reads_back_and_replays() {
        use crate::archive::{Archive, Op};
        let bytes = sorting_archive();
        let a = Archive::open(&bytes).unwrap();
        assert_eq!(a.version(), (1, 3));
        let Op::Library(op) = a.op(0) else { panic!("{:?}", a.op(0)) };
        assert_eq!(op.name(), "radix_sort_pairs");
        assert_eq!(a.op_label(0), "radix_sort_pairs keys, values");
        // The plan reads and writes both operands whole (keys and their scratch half).
        let access = crate::plan::Plan::build(&a).access[0].clone();
        assert_eq!(access.writes.len(), 2, "{access:?}");
        let mut replay = crate::replay::CpuReplay::new(&a, Default::default()).unwrap();
        replay.run_iteration(&mut crate::replay::NoObserver).unwrap();
        let words = |b: Vec<u8>| b.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
        assert_eq!(words(replay.read_region(0).unwrap())[..4], [-1, 0, 3, 3]);
        assert_eq!(words(replay.read_region(1).unwrap())[..4], [11, 13, 10, 12]);
    }

    #[test]
    fn the_reader_refuses_a_bad_record_where_it_is() {
        use crate::archive::layout::{SectionKind, SECTION_ENTRY_LEN};
        use crate::archive::{reseal, Archive};
        let bytes = sorting_archive();
        let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
        let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
        let record = (0..count)
            .map(|i| table + i * SECTION_ENTRY_LEN)
            .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == SectionKind::Library as u32)
            .map(|e| u64::from_le_bytes(bytes[e + 8..e + 16].try_into().unwrap()) as usize + 8)
            .expect("a library section");
        for (field, value, reason) in [
            (40, 8u32, "record 0: radix_sort_pairs keys: bytes 8..40 fall outside its region 0 of 32 bytes"),
            (32, 7, "record 0: keys region 7 does not exist"),
            (0, 42, "record 0: unknown library routine 42"),
            (4, 9, "record 0: radix_sort_pairs of f16 keys"),
        ] {
            let mut bad = bytes.clone();
            bad[record + field..record + field + 4].copy_from_slice(&value.to_le_bytes());
            reseal(&mut bad);
            let e = Archive::open(&bad).unwrap_err();
            assert_eq!((e.section, e.offset), ("library", (record + field) as u64), "{e}");
            assert!(e.reason.starts_with(reason), "{e}");
        }
    }

    #[test]
    fn the_rule_bounds_every_operand_and_refuses_overlapping_outputs() {
        let sort = |keys: At, values: At| LibraryOp::RadixSortPairs {
            keys,
            values,
            count: 4,
            key: DType::I32,
            value_size: 4,
            begin_bit: 0,
            end_bit: 32,
        };
        let sizes = |r: RegionId| [32u64, 64][..].get(r as usize).copied();
        assert_eq!(rule(&sort(at(0, 0), at(1, 0)), sizes), Ok(()));
        // Keys span 2 * count elements: the sort's scratch half included.
        let e = rule(&sort(at(0, 4), at(1, 0)), sizes).unwrap_err();
        assert_eq!(e, (40, "radix_sort_pairs keys: bytes 4..36 fall outside its region 0 of 32 bytes".to_string()));
        let e = rule(&sort(at(1, 0), at(1, 16)), sizes).unwrap_err();
        assert_eq!(e.1, "radix_sort_pairs keys overlaps its values");
        assert!(rule(&sort(at(2, 0), at(1, 0)), sizes).unwrap_err().1.contains("region 2 does not exist"));
        let bits = LibraryOp::RadixSortPairs {
            keys: at(0, 0),
            values: at(1, 0),
            count: 1,
            key: DType::I32,
            value_size: 4,
            begin_bit: 0,
            end_bit: 33,
        };
        assert_eq!(rule(&bits, sizes).unwrap_err().1, "key bits 0..33 of a 32-bit key");
        // A scan in place reads each element before it writes it.
        let scan = |dst_stride| LibraryOp::Scan {
            src: at(0, 0),
            dst: at(0, 0),
            count: 8,
            dtype: DType::I32,
            src_stride: 4,
            dst_stride,
            width: 1,
            inclusive: false,
        };
        assert_eq!(rule(&scan(4), sizes), Ok(()));
        assert!(rule(&scan(0), sizes).unwrap_err().1.contains("overlaps"));
    }
}

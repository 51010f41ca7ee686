//! Warp's library routines as recap library ops (format 1.3, `shared::library` computes them):
//! each record's Warp regions become the archive's regions, its `APICType` a dtype, its byte
//! strides the op's. What a record asks that Warp itself would refuse (a negative stride or bit,
//! a dtype the routine has no code for) is refused here, naming it.

use shared::archive::{At, DType, LibraryOp};
use shared::wrp::library::{dtype, reduction};
use shared::wrp::{OpKind, View};

use super::{Importer, WrpImportError};

/// The dtype of an `APICType` code.
fn dtype_of(code: u8) -> Option<DType> {
    Some(match code {
        dtype::INT32 => DType::I32,
        dtype::UINT32 => DType::U32,
        dtype::INT64 => DType::I64,
        dtype::UINT64 => DType::U64,
        dtype::FLOAT32 => DType::F32,
        dtype::FLOAT64 => DType::F64,
        _ => return None,
    })
}

impl Importer<'_, '_> {
    fn at(&self, v: View) -> Result<At, WrpImportError> {
        Ok(At { region: self.region(v.region)?, offset: v.offset })
    }

    /// A field that must not be negative, as a `u32`.
    fn unsigned(&self, value: i32, what: &str) -> Result<u32, WrpImportError> {
        u32::try_from(value).or_else(|_| self.unsupported(format!("{what} {value}, which is negative")))
    }

    fn dtype(&self, code: u8, routine: &str) -> Result<DType, WrpImportError> {
        dtype_of(code)
            .map_or_else(|| self.unsupported(format!("{routine} of APIC type {code}, which Warp does not define")), Ok)
    }

    /// The library op of one of Warp's library records.
    pub(super) fn library(&mut self, kind: &OpKind<'_>) -> Result<(), WrpImportError> {
        let op = match *kind {
            OpKind::RadixSort { keys, values, count, begin_bit, end_bit, value_size, dtype } => {
                LibraryOp::RadixSortPairs {
                    keys: self.at(keys)?,
                    values: self.at(values)?,
                    count,
                    key: self.dtype(dtype, "a radix sort")?,
                    value_size: self.unsigned(value_size, "a value size of")?,
                    begin_bit: self.unsigned(begin_bit, "a first key bit of")?,
                    end_bit: self.unsigned(end_bit, "an end key bit of")?,
                }
            }
            OpKind::SegmentedSort { keys, values, starts, ends, count, segments, dtype } => {
                LibraryOp::SegmentedSortPairs {
                    keys: self.at(keys)?,
                    values: self.at(values)?,
                    starts: self.at(starts)?,
                    ends: self.at(ends)?,
                    count,
                    segments,
                    key: self.dtype(dtype, "a segmented sort")?,
                }
            }
            OpKind::Scan { src, dst, count, src_stride, dst_stride, width, dtype, inclusive } => LibraryOp::Scan {
                src: self.at(src)?,
                dst: self.at(dst)?,
                count,
                dtype: self.dtype(dtype, "a scan")?,
                src_stride: self.unsigned(src_stride, "an input stride of")?,
                dst_stride: self.unsigned(dst_stride, "an output stride of")?,
                width: self.unsigned(width, "a type length of")?,
                inclusive,
            },
            OpKind::Reduction { a, b, out, count, a_stride, b_stride, width, kind, dtype } => {
                let dtype = self.dtype(dtype, "a reduction")?;
                let (a_at, dst) = (self.at(a)?, self.at(out)?);
                let (stride, width) =
                    (self.unsigned(a_stride, "an input stride of")?, self.unsigned(width, "a type length of")?);
                match kind {
                    reduction::SUM => LibraryOp::Sum { src: a_at, dst, count, dtype, stride, width },
                    reduction::INNER => LibraryOp::Inner {
                        a: a_at,
                        b: self.at(b)?,
                        dst,
                        count,
                        dtype,
                        a_stride: stride,
                        b_stride: self.unsigned(b_stride, "a second input stride of")?,
                        width,
                    },
                    other => {
                        return self.unsupported(format!("a reduction of kind {other}, which Warp does not define"))
                    }
                }
            }
            OpKind::RunLengthEncode { values, run_values, run_lengths, run_count, count } => {
                LibraryOp::RunLengthEncode {
                    values: self.at(values)?,
                    run_values: self.at(run_values)?,
                    run_lengths: self.at(run_lengths)?,
                    run_count: self.at(run_count)?,
                    count,
                }
            }
            _ => unreachable!("only library records reach here"),
        };
        let result = self.w.library(op);
        self.emitted(result)?;
        Ok(())
    }
}

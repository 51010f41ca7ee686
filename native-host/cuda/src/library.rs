//! Library ops (`shared::archive::LibraryOp`: Warp's sorts, scans, reductions and run-length
//! encoding) as device work: one launch of one of the kernels of `kernels/library.cu`, whose PTX
//! (`kernels/library.ptx`, NVRTC 12.0 for compute_70, made by `kernels/generate.py`) recap embeds.
//!
//! Every op is ONE block of [`THREADS`] threads, because the replay must leave the bytes
//! `shared::library` leaves (Warp's host code, whose results a Warp capture expects): sorts are
//! stable 1-bit splits (exact whatever the order of work), scans, sums and inner products add in
//! index order in one thread over tiles the block stages in shared memory, as the CPU does. That
//! makes a library op's time linear in its elements with no parallelism across blocks: about
//! 33 splits of the keys for a 32-bit sort, and one add after another for a scan. Right for the
//! thousands of elements Warp programs hand these routines between kernels; a sort of millions
//! of keys takes tens of milliseconds (docs/FORMAT.md, "library").
//!
//! This module is the launch's data (entry point, arguments, scratch); the replay turns it into a
//! kernel step like any other launch, so graph and stream mode, bindings and per-op timing treat
//! it as one.

use shared::archive::{At, DType, LibraryOp};

/// The kernels' PTX.
pub const LIBRARY_MODULE: &str = include_str!("../kernels/library.ptx");

/// Threads of the one block every library kernel runs as (`LIBRARY_THREADS` in library.cu).
pub const THREADS: u32 = 1024;

/// Every entry point of [`LIBRARY_MODULE`], in [`Entry`] order.
pub const ENTRIES: [&str; 6] = [
    "recap_radix_sort_pairs",
    "recap_segmented_sort_pairs",
    "recap_scan",
    "recap_sum",
    "recap_inner",
    "recap_runlength_encode",
];

/// One argument of a library kernel, in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The address of an operand (a relocation of its region, so rebinding it follows).
    Operand(At),
    /// The scratch keys and values the replay allocates for the op ([`Launch::temp`]).
    TempKeys,
    TempValues,
    U32(u32),
}

/// A library op as a launch of one of recap's library kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Index into [`ENTRIES`].
    pub entry: usize,
    pub args: Vec<Arg>,
    /// Bytes of scratch keys and of scratch values the kernel needs (0, 0 for none).
    pub temp: (u64, u64),
}

impl Launch {
    /// The kernel's parameter bytes, with `address` giving each pointer argument's value, and the
    /// offset of each argument in them (each aligned to its own size, as the PTX declares it).
    pub fn params(&self, address: impl Fn(Arg) -> u64) -> (Vec<u8>, Vec<usize>) {
        let (mut bytes, mut offsets) = (Vec::new(), Vec::new());
        for &arg in &self.args {
            let value = match arg {
                Arg::U32(v) => v.to_le_bytes().to_vec(),
                pointer => address(pointer).to_le_bytes().to_vec(),
            };
            bytes.resize(bytes.len().next_multiple_of(value.len()), 0);
            offsets.push(bytes.len());
            bytes.extend_from_slice(&value);
        }
        (bytes, offsets)
    }
}

/// Key kinds of the sort kernels (`KEY_*` in library.cu).
fn key_kind(key: DType) -> u32 {
    match key {
        DType::I32 => 0,
        DType::I64 => 2,
        DType::U64 => 3,
        DType::F32 => 4,
        DType::F64 => 5,
        _ => 1,
    }
}

/// Element kinds of scans and reductions (`ELEM_*` in library.cu); unsigned integers add as
/// their signed twins (same bits), as `shared::library` does.
fn elem_kind(dtype: DType) -> u32 {
    match dtype {
        DType::I64 | DType::U64 => 1,
        DType::F32 => 2,
        DType::F64 => 3,
        _ => 0,
    }
}

/// The launch that computes `op`. `op` is one an opened archive holds, so its parameters are
/// ones its routine takes (`LibraryOp::operands`).
pub fn launch_of(op: &LibraryOp) -> Launch {
    use Arg::{Operand, TempKeys, TempValues, U32};
    match *op {
        LibraryOp::RadixSortPairs { keys, values, count, key, value_size, begin_bit, end_bit } => Launch {
            entry: 0,
            args: vec![
                Operand(keys),
                Operand(values),
                TempKeys,
                TempValues,
                U32(count),
                U32(key_kind(key)),
                U32(key.size() as u32),
                U32(value_size),
                U32(begin_bit),
                U32(end_bit),
            ],
            temp: (count as u64 * key.size() as u64, count as u64 * value_size as u64),
        },
        LibraryOp::SegmentedSortPairs { keys, values, starts, ends, count, segments, key } => Launch {
            entry: 1,
            args: vec![
                Operand(keys),
                Operand(values),
                Operand(starts),
                Operand(ends),
                TempKeys,
                TempValues,
                U32(count),
                U32(segments),
                U32(key_kind(key)),
            ],
            temp: (count as u64 * 4, count as u64 * 4),
        },
        LibraryOp::Scan { src, dst, count, dtype, src_stride, dst_stride, width, inclusive } => Launch {
            entry: 2,
            args: vec![
                Operand(src),
                Operand(dst),
                U32(count),
                U32(elem_kind(dtype)),
                U32(src_stride),
                U32(dst_stride),
                U32(width),
                U32(inclusive as u32),
            ],
            temp: (0, 0),
        },
        LibraryOp::Sum { src, dst, count, dtype, stride, width } => Launch {
            entry: 3,
            args: vec![Operand(src), Operand(dst), U32(count), U32(elem_kind(dtype)), U32(stride), U32(width)],
            temp: (0, 0),
        },
        LibraryOp::Inner { a, b, dst, count, dtype, a_stride, b_stride, width } => Launch {
            entry: 4,
            args: vec![
                Operand(a),
                Operand(b),
                Operand(dst),
                U32(count),
                U32(elem_kind(dtype)),
                U32(a_stride),
                U32(b_stride),
                U32(width),
            ],
            temp: (0, 0),
        },
        LibraryOp::RunLengthEncode { values, run_values, run_lengths, run_count, count } => Launch {
            entry: 5,
            args: vec![Operand(values), Operand(run_values), Operand(run_lengths), Operand(run_count), U32(count)],
            temp: (0, 0),
        },
    }
}

/// The alignment the kernels load an operand's elements with: its element size (values of
/// sorts move as 4-byte words). `None` for an operand that is not one of `op`'s.
pub fn operand_align(op: &LibraryOp, at: At) -> Option<u64> {
    let operands = op.operands().ok()?;
    let o = operands.iter().find(|o| o.at == at)?;
    Some(match (op, o.role) {
        (LibraryOp::RadixSortPairs { .. } | LibraryOp::SegmentedSortPairs { .. }, "keys") => op.dtype().size() as u64,
        (LibraryOp::Scan { .. } | LibraryOp::Sum { .. } | LibraryOp::Inner { .. }, _) => op.dtype().size() as u64,
        _ => 4,
    })
}

#[cfg(test)]
#[path = "library_tests.rs"]
mod tests;

//! What a library op computes (`archive::LibraryOp`, format 1.3), bit for bit, over the bytes of
//! its operands. This is the one implementation every CPU engine runs (the interpreter and both
//! shapes of native code replay ops through `shared::replay`, which calls [`run`]).
//!
//! Each routine is defined as NVIDIA Warp's host code computes it, since a Warp capture's expected
//! state comes from that code (Warp 1.19, `warp/native/{sort,scan,reduce,runlength_encode}.cpp`):
//! - sorts are least-significant-digit radix sorts of 16 bits a pass over the key's radix image
//!   (signed integers with the sign bit flipped; floats with every bit flipped when negative, else
//!   the sign bit: so `-NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN`), ping-ponging
//!   between the first and the second half of the keys and values, so both halves end as Warp's
//!   do (an odd number of passes copies the result back; the second half then holds it too);
//! - scans, sums and inner products run in index order in the element type (integers wrap), each
//!   product rounded before it is added: Warp's CPU order, which is exact here. Warp's GPU
//!   routines (CUB) add floats in another order; FORMAT.md says what a check then allows.

use crate::archive::{DType, LibraryOp};

/// Why a library op could not run on the data it was given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LibraryError {
    #[error("{routine}: segment {index} is [{start}, {end}) but there are {count} keys")]
    Segment { routine: &'static str, index: u32, start: i32, end: i32, count: u32 },
    #[error("{routine}: its segments hold {work} keys in all, more than the {max} this replay may sort")]
    Work { routine: &'static str, work: u64, max: u64 },
    #[error("{routine}: {got} operands of {lens:?} bytes given, where its operands are {want:?} bytes")]
    Operands { routine: &'static str, got: usize, lens: Vec<usize>, want: Vec<u64> },
}

/// Runs `op` over `bufs`, one buffer per operand of [`LibraryOp::operands`] in its order, each
/// holding the operand's bytes (written operands are changed in place; bytes a routine does not
/// write keep what they held). Every routine's work is linear in its operands' bytes but a
/// segmented sort's, whose segments may overlap: `max_work`, when given, bounds the keys its
/// segments hold in all (a replay's instruction budget), checked before anything is sorted.
pub fn run(op: &LibraryOp, bufs: &mut [Vec<u8>], max_work: Option<u64>) -> Result<(), LibraryError> {
    let want: Vec<u64> = op.operands().map(|o| o.iter().map(|o| o.len).collect()).unwrap_or_default();
    if bufs.len() != want.len() || bufs.iter().zip(&want).any(|(b, &w)| b.len() as u64 != w) {
        return Err(LibraryError::Operands {
            routine: op.name(),
            got: bufs.len(),
            lens: bufs.iter().map(Vec::len).collect(),
            want,
        });
    }
    match *op {
        LibraryOp::RadixSortPairs { count, key, value_size, begin_bit, end_bit, .. } => {
            let [keys, values] = bufs else { unreachable!("two operands, checked above") };
            let n = count as usize;
            let sort = Sort { key, key_size: key.size(), value_size: value_size as usize, scratch: n };
            sort.run(keys, values, 0, n, begin_bit, end_bit);
        }
        LibraryOp::SegmentedSortPairs { count, segments, key, .. } => {
            let [keys, values, starts, ends] = bufs else { unreachable!("four operands, checked above") };
            let word = |b: &[u8], i: usize| i32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            let mut ranges = Vec::with_capacity(segments as usize);
            // Warp checks every segment before it sorts any.
            for s in 0..segments as usize {
                let (start, end) = (word(&starts[..], s), word(&ends[..], s));
                if start < 0 || end < start || end as i64 > count as i64 {
                    return Err(LibraryError::Segment { routine: op.name(), index: s as u32, start, end, count });
                }
                ranges.push((start as usize, end as usize));
            }
            let work: u64 = ranges.iter().map(|(s, e)| (e - s) as u64).sum();
            if let Some(max) = max_work.filter(|&max| work > max) {
                return Err(LibraryError::Work { routine: op.name(), work, max });
            }
            let sort = Sort { key, key_size: 4, value_size: 4, scratch: count as usize };
            for (start, end) in ranges {
                sort.run(keys, values, start, end - start, 0, 32);
            }
        }
        LibraryOp::Scan { count, dtype, src_stride, dst_stride, width, inclusive, .. } => {
            let [src, dst] = bufs else { unreachable!("two operands, checked above") };
            let size = dtype.size();
            for k in 0..width as usize {
                let mut sum = Scalar::zero(dtype);
                for i in 0..count as usize {
                    let value = Scalar::read(dtype, &src[i * src_stride as usize + k * size..]);
                    let at = i * dst_stride as usize + k * size;
                    if inclusive {
                        sum = sum.add(value);
                        sum.write(&mut dst[at..]);
                    } else {
                        sum.write(&mut dst[at..]);
                        sum = sum.add(value);
                    }
                }
            }
        }
        LibraryOp::Sum { count, dtype, stride, width, .. } => {
            let [src, dst] = bufs else { unreachable!("two operands, checked above") };
            let size = dtype.size();
            for k in 0..width as usize {
                let mut sum = Scalar::zero(dtype);
                for i in 0..count as usize {
                    sum = sum.add(Scalar::read(dtype, &src[i * stride as usize + k * size..]));
                }
                sum.write(&mut dst[k * size..]);
            }
        }
        LibraryOp::Inner { count, dtype, a_stride, b_stride, width, .. } => {
            let [a, b, dst] = bufs else { unreachable!("three operands, checked above") };
            let size = dtype.size();
            let mut dot = Scalar::zero(dtype);
            for i in 0..count as usize {
                for k in 0..width as usize {
                    let x = Scalar::read(dtype, &a[i * a_stride as usize + k * size..]);
                    let y = Scalar::read(dtype, &b[i * b_stride as usize + k * size..]);
                    dot = dot.add(x.mul(y));
                }
            }
            dot.write(dst);
        }
        LibraryOp::RunLengthEncode { count, .. } => {
            let [values, run_values, run_lengths, run_count] = bufs else {
                unreachable!("four operands, checked above")
            };
            let value = |i: usize| i32::from_le_bytes(values[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            let mut runs = 0usize;
            let mut length = 0i32;
            for i in 0..count as usize {
                if i > 0 && value(i) == value(i - 1) {
                    length += 1;
                } else {
                    if i > 0 {
                        run_lengths[4 * (runs - 1)..4 * runs].copy_from_slice(&length.to_le_bytes());
                    }
                    run_values[4 * runs..4 * runs + 4].copy_from_slice(&value(i).to_le_bytes());
                    runs += 1;
                    length = 1;
                }
            }
            if runs > 0 {
                run_lengths[4 * (runs - 1)..4 * runs].copy_from_slice(&length.to_le_bytes());
            }
            run_count.copy_from_slice(&(runs as i32).to_le_bytes());
        }
    }
    Ok(())
}

/// The key's radix image: an unsigned integer whose order is the keys' order.
pub fn radix_image(key: DType, bytes: &[u8]) -> u64 {
    let u32_of = || u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let u64_of = || u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    match key {
        DType::I32 => (u32_of() ^ 0x8000_0000) as u64,
        DType::I64 => u64_of() ^ (1 << 63),
        DType::F32 => {
            let i = u32_of();
            // Negative: every bit flipped (larger magnitudes sort first); else the sign bit.
            let mask = ((i >> 31) as i32).wrapping_neg() as u32 | 0x8000_0000;
            (i ^ mask) as u64
        }
        DType::F64 => {
            let i = u64_of();
            let mask = ((i >> 63) as i64).wrapping_neg() as u64 | (1 << 63);
            i ^ mask
        }
        DType::U64 => u64_of(),
        _ => u32_of() as u64,
    }
}

/// A radix sort's element layout: keys of `key_size` bytes, values of `value_size`, the scratch
/// copy of element `i` at element `i + scratch`.
struct Sort {
    key: DType,
    key_size: usize,
    value_size: usize,
    scratch: usize,
}

impl Sort {
    /// Sorts elements `first..first + len` by key bits `begin..end`, as Warp's host sort does.
    fn run(&self, keys: &mut [u8], values: &mut [u8], first: usize, len: usize, begin: u32, end: u32) {
        let key_bits = 8 * self.key_size as u32;
        if end <= begin || end > key_bits || len == 0 {
            return;
        }
        let passes = (end - begin).div_ceil(16).min(key_bits.div_ceil(16));
        let (ks, vs) = (self.key_size, self.value_size);
        let mut histogram = Vec::new();
        for p in 0..passes {
            let (from, to) = if p % 2 == 0 { (first, first + self.scratch) } else { (first + self.scratch, first) };
            let read_keys = keys[from * ks..(from + len) * ks].to_vec();
            let read_values = values[from * vs..(from + len) * vs].to_vec();
            let shift = begin + 16 * p;
            let bits = (end - shift).min(16);
            let mask = (1u64 << bits) - 1;
            let digit = |i: usize| ((radix_image(self.key, &read_keys[i * ks..]) >> shift) & mask) as usize;
            histogram.clear();
            histogram.resize(1 << bits, 0usize);
            for i in 0..len {
                histogram[digit(i)] += 1;
            }
            let mut offset = 0;
            for slot in histogram.iter_mut() {
                let count = *slot;
                *slot = offset;
                offset += count;
            }
            for i in 0..len {
                let d = digit(i);
                let at = to + histogram[d];
                histogram[d] += 1;
                keys[at * ks..(at + 1) * ks].copy_from_slice(&read_keys[i * ks..(i + 1) * ks]);
                values[at * vs..(at + 1) * vs].copy_from_slice(&read_values[i * vs..(i + 1) * vs]);
            }
        }
        if passes % 2 == 1 {
            let s = first + self.scratch;
            keys.copy_within(s * ks..(s + len) * ks, first * ks);
            values.copy_within(s * vs..(s + len) * vs, first * vs);
        }
    }
}

/// One element of a scan or reduction, added in its own type.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Scalar {
    fn zero(dtype: DType) -> Scalar {
        match dtype {
            DType::I64 | DType::U64 => Scalar::I64(0),
            DType::F32 => Scalar::F32(0.0),
            DType::F64 => Scalar::F64(0.0),
            _ => Scalar::I32(0),
        }
    }

    /// The element at the start of `b` (unsigned integers add as their signed twins: same bits).
    fn read(dtype: DType, b: &[u8]) -> Scalar {
        match dtype {
            DType::I64 | DType::U64 => Scalar::I64(i64::from_le_bytes(b[..8].try_into().expect("8 bytes"))),
            DType::F32 => Scalar::F32(f32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
            DType::F64 => Scalar::F64(f64::from_le_bytes(b[..8].try_into().expect("8 bytes"))),
            _ => Scalar::I32(i32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
        }
    }

    fn write(self, b: &mut [u8]) {
        match self {
            Scalar::I32(v) => b[..4].copy_from_slice(&v.to_le_bytes()),
            Scalar::I64(v) => b[..8].copy_from_slice(&v.to_le_bytes()),
            Scalar::F32(v) => b[..4].copy_from_slice(&v.to_le_bytes()),
            Scalar::F64(v) => b[..8].copy_from_slice(&v.to_le_bytes()),
        }
    }

    fn add(self, other: Scalar) -> Scalar {
        match (self, other) {
            (Scalar::I32(a), Scalar::I32(b)) => Scalar::I32(a.wrapping_add(b)),
            (Scalar::I64(a), Scalar::I64(b)) => Scalar::I64(a.wrapping_add(b)),
            (Scalar::F32(a), Scalar::F32(b)) => Scalar::F32(a + b),
            (Scalar::F64(a), Scalar::F64(b)) => Scalar::F64(a + b),
            (a, _) => a,
        }
    }

    fn mul(self, other: Scalar) -> Scalar {
        match (self, other) {
            (Scalar::F32(a), Scalar::F32(b)) => Scalar::F32(a * b),
            (Scalar::F64(a), Scalar::F64(b)) => Scalar::F64(a * b),
            (Scalar::I32(a), Scalar::I32(b)) => Scalar::I32(a.wrapping_mul(b)),
            (Scalar::I64(a), Scalar::I64(b)) => Scalar::I64(a.wrapping_mul(b)),
            (a, _) => a,
        }
    }
}

#[cfg(test)]
#[path = "library_tests.rs"]
mod tests;

//! Each library routine against a straightforward reference: a stable sort of (key, value) pairs
//! by the key's order, running sums and products written as plain loops, runs counted by hand.

use super::*;
use crate::archive::At;

fn at(region: u32) -> At {
    At { region, offset: 0 }
}

fn bytes_of<T: Copy, const N: usize>(values: &[T], to: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to(v)).collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Radix-sorts `keys` (with their indices as values) as `key` by all its bits; returns the keys'
/// bytes and values after the op, both halves.
fn sort(key: DType, keys: Vec<u8>, begin_bit: u32, end_bit: u32) -> (Vec<u8>, Vec<i32>) {
    let n = keys.len() / key.size();
    let mut k = keys;
    k.extend(vec![0xa5; n * key.size()]);
    let mut v = bytes_of(&(0..n as i32).collect::<Vec<_>>(), i32::to_le_bytes);
    v.extend(vec![0xa5; n * 4]);
    let op = LibraryOp::RadixSortPairs {
        keys: at(0),
        values: at(1),
        count: n as u32,
        key,
        value_size: 4,
        begin_bit,
        end_bit,
    };
    let mut bufs = vec![k, v];
    run(&op, &mut bufs, None).unwrap();
    let [k, v] = <[Vec<u8>; 2]>::try_from(bufs).unwrap();
    (k, i32s(&v))
}

/// The stable order of `images` (indices of equal images keep their order).
fn stable_order(images: &[u64]) -> Vec<i32> {
    let mut idx: Vec<i32> = (0..images.len() as i32).collect();
    idx.sort_by_key(|&i| images[i as usize]);
    idx
}

#[test]
fn a_pair_sort_is_stable_over_duplicate_keys_and_leaves_warps_scratch() {
    // A small generator: keys with many duplicates, negative and positive.
    let mut x = 12345u32;
    let keys: Vec<i32> = (0..300)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            ((x >> 8) % 41) as i32 - 20 + (((x >> 20) & 1) as i32) * 70_000
        })
        .collect();
    let (k, v) = sort(DType::I32, bytes_of(&keys, i32::to_le_bytes), 0, 32);
    let order = stable_order(&keys.iter().map(|&k| k as i64 as u64 ^ (1 << 63)).collect::<Vec<_>>());
    let n = keys.len();
    assert_eq!(&v[..n], &order[..], "values follow their keys, equal keys in their first order");
    let sorted: Vec<i32> = order.iter().map(|&i| keys[i as usize]).collect();
    assert_eq!(&i32s(&k)[..n], &sorted[..]);
    // Two passes of 16 bits: the scratch half holds the first pass, sorted by the low 16 bits of
    // the radix image only, as Warp's host sort leaves it.
    let low: Vec<u64> = keys.iter().map(|&k| ((k as u32 ^ 0x8000_0000) & 0xffff) as u64).collect();
    let first_pass = stable_order(&low);
    assert_eq!(&v[n..], &first_pass[..]);
    // One pass (bits 0..16 of the image): the result is copied back, both halves hold it.
    let (k1, v1) = sort(DType::I32, bytes_of(&keys, i32::to_le_bytes), 0, 16);
    assert_eq!(&v1[..n], &first_pass[..]);
    assert_eq!(&v1[..n], &v1[n..]);
    assert_eq!(&k1[..4 * n], &k1[4 * n..]);
    // No bits: nothing moves, as in Warp.
    let (k0, v0) = sort(DType::I32, bytes_of(&keys, i32::to_le_bytes), 8, 8);
    assert_eq!(&i32s(&k0)[..n], &keys[..]);
    assert_eq!(&v0[..n], &(0..n as i32).collect::<Vec<_>>()[..]);
}

#[test]
fn float_keys_order_negative_zero_before_zero_and_nans_at_both_ends() {
    let neg_nan = f32::from_bits(0xffc0_0000);
    let keys = [1.5f32, -0.0, f32::NAN, 0.0, f32::NEG_INFINITY, -2.5, neg_nan, f32::INFINITY, -0.0, 1.5];
    let (k, v) = sort(DType::F32, bytes_of(&keys, f32::to_le_bytes), 0, 32);
    let bits: Vec<u32> = f32s(&k[..40]).iter().map(|f| f.to_bits()).collect();
    let want = [neg_nan, f32::NEG_INFINITY, -2.5, -0.0, -0.0, 0.0, 1.5, 1.5, f32::INFINITY, f32::NAN];
    assert_eq!(bits, want.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
    assert_eq!(&v[..10], &[6, 4, 5, 1, 8, 3, 0, 9, 7, 2]);
    // f64 keys, value order the same (the NaNs made with their signs, not by a cast).
    let wide: Vec<f64> = keys
        .iter()
        .map(|&f| match (f.is_nan(), f.is_sign_negative()) {
            (true, true) => f64::from_bits(0xfff8_0000_0000_0000),
            (true, false) => f64::NAN,
            (false, _) => f as f64,
        })
        .collect();
    let (_, v64) = sort(DType::F64, bytes_of(&wide, f64::to_le_bytes), 0, 64);
    assert_eq!(&v64[..10], &[6, 4, 5, 1, 8, 3, 0, 9, 7, 2]);
}

#[test]
fn unsigned_and_64_bit_keys_sort_by_the_bits_asked_for() {
    let keys: Vec<u64> = vec![u64::MAX, 3, 1 << 40, 0, 3, (1 << 40) + 1];
    let (k, v) = sort(DType::U64, bytes_of(&keys, u64::to_le_bytes), 0, 64);
    assert_eq!(&v[..6], &[3, 1, 4, 2, 5, 0]);
    assert_eq!(u64::from_le_bytes(k[40..48].try_into().unwrap()), u64::MAX);
    let signed: Vec<i64> = vec![5, -1, i64::MIN, 0];
    let (_, v) = sort(DType::I64, bytes_of(&signed, i64::to_le_bytes), 0, 64);
    assert_eq!(&v[..4], &[2, 1, 3, 0]);
    // Only bits 16..32 of u32 keys: keys equal there keep their order.
    let keys: Vec<u32> = vec![0x0002_0000, 0x0001_ffff, 0x0001_0000, 0x0002_0001];
    let (_, v) = sort(DType::U32, bytes_of(&keys, u32::to_le_bytes), 16, 32);
    assert_eq!(&v[..4], &[1, 2, 0, 3]);
}

#[test]
fn a_segmented_sort_sorts_each_segment_alone_and_refuses_a_bad_segment() {
    let keys = [5i32, 3, 3, 1, 9, -4, 2, 2, 8];
    let n = keys.len();
    let mut k = bytes_of(&keys, i32::to_le_bytes);
    k.extend(vec![0; 4 * n]);
    let mut v = bytes_of(&(0..n as i32).collect::<Vec<_>>(), i32::to_le_bytes);
    v.extend(vec![0; 4 * n]);
    let starts = bytes_of(&[0i32, 4, 6], i32::to_le_bytes);
    let ends = bytes_of(&[4i32, 4, 9], i32::to_le_bytes);
    let op = LibraryOp::SegmentedSortPairs {
        keys: at(0),
        values: at(1),
        starts: at(2),
        ends: at(3),
        count: n as u32,
        segments: 3,
        key: DType::I32,
    };
    let mut bufs = vec![k, v, starts, ends];
    run(&op, &mut bufs, None).unwrap();
    assert_eq!(&i32s(&bufs[0])[..n], &[1, 3, 3, 5, 9, -4, 2, 2, 8]);
    assert_eq!(&i32s(&bufs[1])[..n], &[3, 1, 2, 0, 4, 5, 6, 7, 8]);
    bufs[3] = bytes_of(&[4i32, 4, 10], i32::to_le_bytes);
    let e = run(&op, &mut bufs, None).unwrap_err();
    assert_eq!(e.to_string(), "segmented_sort_pairs: segment 2 is [6, 10) but there are 9 keys");
    // Overlapping segments can ask for far more work than there are keys: a budget bounds it.
    bufs[3] = bytes_of(&[4i32, 4, 9], i32::to_le_bytes);
    let e = run(&op, &mut bufs, Some(6)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "segmented_sort_pairs: its segments hold 7 keys in all, more than the 6 this replay may sort"
    );
}

#[test]
fn scans_are_running_sums_in_index_order_per_component() {
    // Two components, rows 12 bytes apart in the source and 8 in the destination.
    let rows = [[1i32, i32::MAX], [2, 1], [3, 1], [4, -7]];
    let mut src = Vec::new();
    for r in rows {
        src.extend(r[0].to_le_bytes());
        src.extend(r[1].to_le_bytes());
        src.extend([0xee; 4]);
    }
    src.truncate(src.len() - 4);
    for inclusive in [true, false] {
        let op = LibraryOp::Scan {
            src: at(0),
            dst: at(1),
            count: 4,
            dtype: DType::I32,
            src_stride: 12,
            dst_stride: 8,
            width: 2,
            inclusive,
        };
        let mut bufs = vec![src.clone(), vec![0; 32]];
        run(&op, &mut bufs, None).unwrap();
        let mut want = Vec::new();
        let mut sums = [0i32; 2];
        for r in rows {
            for (sum, value) in sums.iter_mut().zip(r) {
                if inclusive {
                    *sum = sum.wrapping_add(value);
                    want.push(*sum);
                } else {
                    want.push(*sum);
                    *sum = sum.wrapping_add(value);
                }
            }
        }
        assert_eq!(i32s(&bufs[1]), want, "inclusive {inclusive}");
    }
    // Floats add in index order in f32: 1e8 + 1 + ... stays 1e8, as a sequential f32 loop gives.
    let values = [1e8f32, 1.0, 1.0, 1.0, -1e8];
    let op = LibraryOp::Scan {
        src: at(0),
        dst: at(1),
        count: 5,
        dtype: DType::F32,
        src_stride: 4,
        dst_stride: 4,
        width: 1,
        inclusive: true,
    };
    let mut bufs = vec![bytes_of(&values, f32::to_le_bytes), vec![0; 20]];
    run(&op, &mut bufs, None).unwrap();
    assert_eq!(f32s(&bufs[1]), [1e8, 1e8, 1e8, 1e8, 0.0]);
}

#[test]
fn sums_and_inner_products_add_in_index_order() {
    let a = [0.1f32, 0.2, 0.3, 1e8, -1e8, 0.7];
    // Three rows of two components, a stride of 8 bytes.
    let sum = LibraryOp::Sum { src: at(0), dst: at(1), count: 3, dtype: DType::F32, stride: 8, width: 2 };
    let mut bufs = vec![bytes_of(&a, f32::to_le_bytes), vec![0xff; 8]];
    run(&sum, &mut bufs, None).unwrap();
    let mut want = [0.0f32; 2];
    for row in a.chunks(2) {
        want[0] += row[0];
        want[1] += row[1];
    }
    assert_eq!(f32s(&bufs[1]), want);
    let b = [2.0f64, -0.5, 3.25];
    let inner = LibraryOp::Inner {
        a: at(0),
        b: at(1),
        dst: at(2),
        count: 3,
        dtype: DType::F64,
        a_stride: 8,
        b_stride: 8,
        width: 1,
    };
    let x = [1.0f64 / 3.0, 7.0, 1e-17];
    let mut bufs = vec![bytes_of(&x, f64::to_le_bytes), bytes_of(&b, f64::to_le_bytes), vec![0; 8]];
    run(&inner, &mut bufs, None).unwrap();
    let mut dot = 0.0f64;
    for (x, b) in x.iter().zip(b) {
        dot += x * b;
    }
    assert_eq!(f64::from_le_bytes(bufs[2][..8].try_into().unwrap()).to_bits(), dot.to_bits());
}

#[test]
fn run_length_encoding_counts_runs_and_leaves_the_rest() {
    let values = [7i32, 7, 7, -1, 4, 4, 7];
    let op =
        LibraryOp::RunLengthEncode { values: at(0), run_values: at(1), run_lengths: at(2), run_count: at(3), count: 7 };
    let mut bufs = vec![bytes_of(&values, i32::to_le_bytes), vec![0xff; 28], vec![0xff; 28], vec![0; 4]];
    run(&op, &mut bufs, None).unwrap();
    assert_eq!(i32s(&bufs[1]), [7, -1, 4, 7, -1, -1, -1]);
    assert_eq!(i32s(&bufs[2]), [3, 1, 2, 1, -1, -1, -1]);
    assert_eq!(i32s(&bufs[3]), [4]);
    let none =
        LibraryOp::RunLengthEncode { values: at(0), run_values: at(1), run_lengths: at(2), run_count: at(3), count: 0 };
    let mut bufs = vec![vec![], vec![], vec![], vec![9; 4]];
    run(&none, &mut bufs, None).unwrap();
    assert_eq!(i32s(&bufs[3]), [0]);
}

#[test]
fn buffers_that_do_not_match_the_operands_are_an_error() {
    let op = LibraryOp::Sum { src: at(0), dst: at(1), count: 2, dtype: DType::F32, stride: 4, width: 1 };
    let e = run(&op, &mut [vec![0; 8]], None).unwrap_err();
    assert!(e.to_string().starts_with("array_sum: 1 operands of [8] bytes given"), "{e}");
}

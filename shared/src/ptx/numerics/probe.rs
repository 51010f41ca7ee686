//! The tensor-core probe's CPU side (tests only): its seeded inputs regenerated here exactly as
//! `tests/numerics/probe_gen.cuh` makes them on the GPU, the outputs an H200 gave for them, and the
//! models checked against both.
//!
//! `recorded_sample` runs the checked-in sample (`tests/numerics/mma_sample.bin`: inputs and the
//! hardware's D of a few tiles of every form and class) through the Hopper model and demands every
//! bit. `fit_recorded` is the whole record (over a million dot products per form), run by hand
//! with `RECAP_MMA_PROBE` naming the folder `tests/numerics/run_probe.sh` filled; it prints the
//! mismatches per form and class and fails on any. `write_sample` makes the sample from that
//! folder.

use super::tensor_core::{self, dot, MmaModel, Term};
use crate::ptx::ir::MmaTy;

const SEED: u64 = 0x7265636170;
const CLASSES: u32 = 9;

/// An element format of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fmt {
    F16,
    BF16,
    TF32,
    F32,
}

impl Fmt {
    fn ebits(self) -> u32 {
        if self == Fmt::F16 {
            5
        } else {
            8
        }
    }
    fn mbits(self) -> u32 {
        match self {
            Fmt::F16 => 10,
            Fmt::BF16 => 7,
            _ => 23,
        }
    }
    /// Bytes of one element in the sample.
    fn bytes(self) -> usize {
        if matches!(self, Fmt::F16 | Fmt::BF16) {
            2
        } else {
            4
        }
    }
}

/// One probed form: its id (part of the inputs' hash), name, rows, K and formats.
#[derive(Debug, Clone, Copy)]
struct Form {
    id: u32,
    name: &'static str,
    rows: u32,
    k: u32,
    input: Fmt,
    acc: Fmt,
    /// Tiles that are random; the rest are adversarial.
    random: u32,
}

const FORMS: [Form; 8] = [
    Form { id: 0, name: "m16n8k16_f32_f16", rows: 16, k: 16, input: Fmt::F16, acc: Fmt::F32, random: 8192 },
    Form { id: 1, name: "m16n8k16_f32_bf16", rows: 16, k: 16, input: Fmt::BF16, acc: Fmt::F32, random: 8192 },
    Form { id: 2, name: "m16n8k8_f32_tf32", rows: 16, k: 8, input: Fmt::TF32, acc: Fmt::F32, random: 8192 },
    Form { id: 3, name: "m16n8k16_f16_f16", rows: 16, k: 16, input: Fmt::F16, acc: Fmt::F16, random: 8192 },
    Form { id: 4, name: "m16n8k8_f32_f16", rows: 16, k: 8, input: Fmt::F16, acc: Fmt::F32, random: 8192 },
    Form { id: 5, name: "m16n8k8_f32_bf16", rows: 16, k: 8, input: Fmt::BF16, acc: Fmt::F32, random: 8192 },
    Form { id: 6, name: "m64n8k16_f32_f16", rows: 64, k: 16, input: Fmt::F16, acc: Fmt::F32, random: 2048 },
    Form { id: 7, name: "m64n8k16_f32_bf16", rows: 64, k: 16, input: Fmt::BF16, acc: Fmt::F32, random: 2048 },
];

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn elem_hash(form: u32, tile: u32, op: u32, row: u32, col: u32) -> u64 {
    mix(mix(SEED ^ ((form as u64) << 40) ^ tile as u64) ^ ((op as u64) << 32 | ((row << 16) | col) as u64))
}

/// The bits of `sign * 1.mant * 2^e` in `f`, as `encode` in `probe_gen.cuh`.
fn encode(f: Fmt, sign: u32, e: i32, mant: u64) -> u32 {
    let (eb, mb) = (f.ebits(), f.mbits());
    let bias = (1i32 << (eb - 1)) - 1;
    let b = e.saturating_add(bias);
    let s = sign << (eb + mb);
    let mut m = (mant & ((1u64 << mb) - 1)) as u32;
    if f == Fmt::TF32 {
        m &= !0x1FFF;
    }
    let low = if f == Fmt::TF32 { (mant >> 32) as u32 & 0x1FFF } else { 0 };
    if b > (1i32 << eb) - 2 {
        return s | (((1 << eb) - 1) << mb);
    }
    if b >= 1 {
        return s | (b as u32) << mb | m | low;
    }
    let shift = 1 - b;
    if shift > mb as i32 + 1 {
        return s | low;
    }
    s | (((1 << mb) | m) >> shift) | low
}

fn zero(f: Fmt, sign: u32) -> u32 {
    encode(f, sign, -100_000, 0)
}

fn pick(u: u64, lo: i32, hi: i32) -> i32 {
    lo + (u % (hi - lo + 1) as u64) as i32
}

fn class_of(form: &Form, tile: u32) -> i32 {
    if tile < form.random {
        -1
    } else {
        ((tile - form.random) % CLASSES) as i32
    }
}

/// Element (`row`, `col`) of operand `op` (0 A, 1 B, 2 C) of a tile, as `gen` in `probe_gen.cuh`.
fn gen(form: &Form, tile: u32, op: u32, mut row: u32, mut col: u32) -> u32 {
    let f = if op == 2 { form.acc } else { form.input };
    let cls = class_of(form, tile);
    let k = form.k;
    let p = elem_hash(form.id, tile, 3, 0, 0);
    if cls == 0 && op == 0 && col & 1 == 1 && col < k / 2 {
        col -= 1;
    }
    let negate_prev = cls == 0 && op == 1 && row & 1 == 1 && row < k / 2;
    if negate_prev {
        row -= 1;
    }
    let u = elem_hash(form.id, tile, op, row, col);
    let sign = (u & 1) as u32;
    let mant = u >> 1;
    let r1 = (u >> 40) & 0xFFFF;
    let r2 = (u >> 56) as u32;
    let big = f != Fmt::F16;
    let enc = |lo: i32, hi: i32| encode(f, sign, pick(r1, lo, hi), mant);
    let mut bits = match cls {
        -1 => {
            let s = [1, 3, 6, 12][(p & 3) as usize];
            if r2 < 8 {
                zero(f, sign)
            } else if op == 2 {
                if (p >> 2) & 3 == 0 {
                    zero(f, sign)
                } else {
                    enc(-2 * s, if big { 2 * s } else { (2 * s).min(15) })
                }
            } else {
                enc(-s, s)
            }
        }
        0 if op == 2 => {
            if r2 < 128 {
                zero(f, sign)
            } else {
                enc(-12, 12)
            }
        }
        0 => enc(-6, 6),
        1 if op == 2 => match (r2 < 64, big) {
            (true, _) => zero(f, sign),
            (false, true) => enc(-149, -120),
            (false, false) => enc(-24, -12),
        },
        1 => {
            if big {
                enc(-75, -60)
            } else {
                enc(-24, -10)
            }
        }
        2 if op == 2 => {
            if big {
                enc(-140, 127)
            } else {
                enc(-24, 15)
            }
        }
        2 => {
            if big {
                enc(-70, 63)
            } else {
                enc(-24, 15)
            }
        }
        3 if op == 2 => {
            if big {
                enc(20, 40)
            } else {
                enc(8, 15)
            }
        }
        3 => enc(-4, 4),
        4 if op == 2 => {
            if r2 < 32 {
                zero(f, sign)
            } else {
                encode(f, sign, pick(r1, -4, if big { 20 } else { 15 }), 0)
            }
        }
        4 => {
            if r2 < 128 {
                zero(f, sign)
            } else {
                encode(f, sign, pick(r1, -8, 8), 0)
            }
        }
        5 if r2 < 32 => {
            let (eb, mb) = (f.ebits(), f.mbits());
            match r2 & 3 {
                0 => encode(f, sign, 100_000, 0),
                1 => encode(f, 0, 100_000, 0) | 1 << (mb - 1),
                2 => zero(f, sign),
                _ => sign << (eb + mb) | ((1 << eb) - 2) << mb | ((1 << mb) - 1),
            }
        }
        5 => enc(-4, 4),
        6 if op == 2 => encode(f, sign, 0, mant),
        6 => {
            if form.acc == Fmt::F16 {
                enc(-8, -3)
            } else {
                enc(-14, -8)
            }
        }
        7 if op == 2 => {
            if big {
                enc(120, 127)
            } else {
                enc(12, 15)
            }
        }
        7 => {
            if big {
                enc(58, 66)
            } else {
                enc(9, 15)
            }
        }
        _ => {
            if r2 < 192 {
                zero(f, sign)
            } else {
                enc(-2, 2)
            }
        }
    };
    if negate_prev {
        bits ^= 1 << (f.ebits() + f.mbits());
        if (u >> 2) & 1 == 1 {
            bits ^= if f == Fmt::TF32 { 0x2000 } else { 1 };
        }
    }
    bits
}

/// An element as the model takes it.
fn term(f: Fmt, bits: u32) -> Term {
    let t = match f {
        Fmt::F16 => MmaTy::F16,
        Fmt::BF16 => MmaTy::BF16,
        Fmt::TF32 => MmaTy::TF32,
        Fmt::F32 => MmaTy::F32,
    };
    tensor_core::term(t, bits as u64)
}

/// D's element from raw input bits in `model`.
fn model_d(model: MmaModel, form: &Form, a: &[u32], b: &[u32], c: u32) -> u32 {
    if model == MmaModel::Ieee {
        let dty = if form.acc == Fmt::F16 { MmaTy::F16 } else { MmaTy::F32 };
        let pairs = a.iter().zip(b).map(|(&x, &y)| (term(form.input, x).value, term(form.input, y).value));
        return crate::ptx::matrix::element(dty, false, term(form.acc, c).value, pairs) as u32;
    }
    let products: Vec<Term> = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let (x, y) = (term(form.input, x), term(form.input, y));
            Term { value: x.value * y.value, exp: x.exp + y.exp }
        })
        .collect();
    dot(model, false, term(form.acc, c), &products, form.acc == Fmt::F16)
}

/// One tile's inputs and outputs, every element as raw bits, row-major (A rows x k, B k x 8, C and
/// D rows x 8).
pub(crate) struct Tile {
    /// The form's index in the probe's list ([`form_name`]).
    pub form: usize,
    /// The input class: -1 random, else the adversarial class.
    pub class: i32,
    pub a: Vec<u32>,
    pub b: Vec<u32>,
    pub c: Vec<u32>,
    pub d: Vec<u32>,
}

/// The name of the probe's form `index` (`m16n8k16_f32_f16`, ...).
pub(crate) fn form_name(index: usize) -> &'static str {
    FORMS[index].name
}

/// The checked-in sample's tiles: inputs an H200 was given and the D it computed.
pub(crate) fn sample() -> Vec<Tile> {
    read_sample(include_bytes!("../../../../tests/numerics/mma_sample.bin"))
}

impl Tile {
    /// Mismatches of `model` on the tile, with a line about the first.
    fn check(&self, model: MmaModel) -> (usize, Option<String>) {
        let form = &FORMS[self.form];
        let (rows, k) = (form.rows as usize, form.k as usize);
        let mut bad = 0;
        let mut first = None;
        for r in 0..rows {
            for n in 0..8 {
                let a = &self.a[r * k..r * k + k];
                let b: Vec<u32> = (0..k).map(|kk| self.b[kk * 8 + n]).collect();
                let c = self.c[r * 8 + n];
                let got = model_d(model, form, a, &b, c);
                let want = self.d[r * 8 + n];
                if got != want {
                    bad += 1;
                    first.get_or_insert_with(|| {
                        format!(
                            "{} class {} row {r} col {n}: hardware {want:#010x}, model {got:#010x}; c {c:#010x} a {a:x?} b {b:x?}",
                            form.name, self.class
                        )
                    });
                }
            }
        }
        (bad, first)
    }
}

/// Tile `tile` of `form` from the generator, with D from `out`.
fn generated(form_index: usize, tile: u32, d: Vec<u32>) -> Tile {
    let form = &FORMS[form_index];
    let (rows, k) = (form.rows, form.k);
    let a = (0..rows * k).map(|i| gen(form, tile, 0, i / k, i % k)).collect();
    let b = (0..k * 8).map(|i| gen(form, tile, 1, i / 8, i % 8)).collect();
    let c = (0..rows * 8).map(|i| gen(form, tile, 2, i / 8, i % 8)).collect();
    Tile { form: form_index, class: class_of(form, tile), a, b, c, d }
}

/// The recorded D of every tile of one form from `<dir>/<name>.out`.
fn read_out(dir: &std::path::Path, form: &Form) -> Option<(u32, Vec<Vec<u32>>)> {
    let bytes = std::fs::read(dir.join(format!("{}.out", form.name))).ok()?;
    let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("four bytes"));
    assert_eq!(&bytes[..4], b"RCMP", "{}: not a probe output", form.name);
    assert_eq!(word(2), form.id, "{}: form id", form.name);
    let (random, adversarial, esz) = (word(4), word(5), word(6) as usize);
    assert_eq!(random, form.random, "{}: random tiles", form.name);
    let per = form.rows as usize * 8;
    let data = &bytes[28..];
    let tiles = (random + adversarial) as usize;
    assert_eq!(data.len(), tiles * per * esz, "{}: output length", form.name);
    let d = (0..tiles)
        .map(|t| {
            (0..per)
                .map(|i| {
                    let at = (t * per + i) * esz;
                    if esz == 2 {
                        u16::from_le_bytes([data[at], data[at + 1]]) as u32
                    } else {
                        u32::from_le_bytes(data[at..at + 4].try_into().expect("four bytes"))
                    }
                })
                .collect()
        })
        .collect();
    Some((random + adversarial, d))
}

fn probe_dir() -> std::path::PathBuf {
    std::env::var_os("RECAP_MMA_PROBE")
        .expect("RECAP_MMA_PROBE names the folder tests/numerics/run_probe.sh filled (its probe.tgz unpacked)")
        .into()
}

#[test]
#[ignore = "needs RECAP_MMA_PROBE: the outputs recorded on an H100/H200"]
fn fit_recorded() {
    let dir = probe_dir();
    let model = std::env::var("RECAP_MMA_MODEL")
        .ok()
        .map(|m| MmaModel::from_name(&m).expect("RECAP_MMA_MODEL: ieee, sm80 or sm90"))
        .unwrap_or(MmaModel::Sm90);
    let mut total = 0;
    for (fi, form) in FORMS.iter().enumerate() {
        let Some((tiles, outs)) = read_out(&dir, form) else {
            println!("{}: no record", form.name);
            continue;
        };
        let mut per_class = [0usize; 10];
        let mut firsts: Vec<String> = Vec::new();
        for (tile, d) in outs.into_iter().enumerate() {
            let t = generated(fi, tile as u32, d);
            let (bad, first) = t.check(model);
            per_class[(t.class + 1) as usize] += bad;
            if let Some(f) = first {
                if firsts.len() < 6 {
                    firsts.push(f);
                }
            }
        }
        let bad: usize = per_class.iter().sum();
        total += bad;
        println!(
            "{}: {} dot products, {bad} mismatches (random {}, classes {:?})",
            form.name,
            tiles as usize * form.rows as usize * 8,
            per_class[0],
            &per_class[1..]
        );
        for f in firsts {
            println!("  {f}");
        }
    }
    assert_eq!(total, 0, "the {} model disagrees with the hardware", model.name());
}

/// The tiles whose inputs the probe dumped (`dump_slot` in the probes): their numbers in slot
/// order.
fn dumped_tiles(form: &Form) -> Vec<u32> {
    let (random, per_class) = if form.rows == 64 { (16, 4) } else { (64, 16) };
    let mut tiles: Vec<u32> = (0..random).collect();
    for class in 0..CLASSES {
        tiles.extend((0..per_class).map(|i| form.random + i * CLASSES + class));
    }
    tiles
}

#[test]
#[ignore = "needs RECAP_MMA_PROBE: the outputs recorded on an H100/H200"]
fn generator_matches_recorded_inputs() {
    let dir = probe_dir();
    for form in &FORMS {
        let Ok(bytes) = std::fs::read(dir.join(format!("{}.in", form.name))) else {
            continue;
        };
        let words: Vec<u32> =
            bytes.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().expect("four bytes"))).collect();
        let rows = form.rows;
        let per = (rows * 16 + 16 * 8 + rows * 8) as usize;
        let mut bad = 0;
        for (slot, tile) in dumped_tiles(form).into_iter().enumerate() {
            let w = &words[slot * per..slot * per + per];
            for r in 0..rows {
                for c in 0..form.k {
                    bad += (w[(r * 16 + c) as usize] != gen(form, tile, 0, r, c)) as usize;
                }
            }
            for r in 0..form.k {
                for c in 0..8 {
                    bad += (w[(rows * 16 + r * 8 + c) as usize] != gen(form, tile, 1, r, c)) as usize;
                }
            }
            for r in 0..rows {
                for c in 0..8 {
                    bad += (w[(rows * 16 + 128 + r * 8 + c) as usize] != gen(form, tile, 2, r, c)) as usize;
                }
            }
        }
        println!("{}: {bad} inputs differ from the GPU's", form.name);
        assert_eq!(bad, 0, "{}: the generator differs from probe_gen.cuh", form.name);
    }
}

/// The tiles of the checked-in sample: for each `mma` form the first four random tiles and the
/// first two of each adversarial class, for each `wgmma` form the first two and one of each.
fn sample_selection(form: &Form) -> Vec<u32> {
    let (random, per_class) = if form.rows == 64 { (2, 1) } else { (4, 2) };
    let mut tiles: Vec<u32> = (0..random).collect();
    for j in 0..per_class {
        tiles.extend((0..CLASSES).map(|class| form.random + j * CLASSES + class));
    }
    tiles
}

/// Appends `values` as elements of `f` (two or four bytes each, little-endian).
fn put(out: &mut Vec<u8>, f: Fmt, values: &[u32]) {
    for &v in values {
        out.extend_from_slice(&v.to_le_bytes()[..f.bytes()]);
    }
}

/// The sample's bytes: `RCMS`, the record count (u32), then per record the form's index and the
/// tile's number (u32 each), A (rows x k), B (k x 8), C and D (rows x 8), row-major, each element
/// in its format's width.
fn sample_bytes(tiles: &[Tile], numbers: &[u32]) -> Vec<u8> {
    let mut out = b"RCMS".to_vec();
    out.extend_from_slice(&(tiles.len() as u32).to_le_bytes());
    for (t, &number) in tiles.iter().zip(numbers) {
        let form = &FORMS[t.form];
        out.extend_from_slice(&(t.form as u32).to_le_bytes());
        out.extend_from_slice(&number.to_le_bytes());
        put(&mut out, form.input, &t.a);
        put(&mut out, form.input, &t.b);
        put(&mut out, form.acc, &t.c);
        put(&mut out, form.acc, &t.d);
    }
    out
}

/// The tiles of a sample made by [`sample_bytes`].
fn read_sample(bytes: &[u8]) -> Vec<Tile> {
    assert_eq!(&bytes[..4], b"RCMS", "not a tensor-core sample");
    let mut at = 8;
    let mut take = |n: usize, f: Fmt| -> Vec<u32> {
        let w = f.bytes();
        let v = (0..n)
            .map(|i| {
                let mut b = [0u8; 4];
                b[..w].copy_from_slice(&bytes[at + i * w..at + i * w + w]);
                u32::from_le_bytes(b)
            })
            .collect();
        at += n * w;
        v
    };
    let count = u32::from_le_bytes(bytes[4..8].try_into().expect("four bytes"));
    (0..count)
        .map(|_| {
            let head = take(2, Fmt::F32);
            let form_index = head[0] as usize;
            let form = &FORMS[form_index];
            let (rows, k) = (form.rows as usize, form.k as usize);
            let a = take(rows * k, form.input);
            let b = take(k * 8, form.input);
            let c = take(rows * 8, form.acc);
            let d = take(rows * 8, form.acc);
            Tile { form: form_index, class: class_of(form, head[1]), a, b, c, d }
        })
        .collect()
}

#[test]
#[ignore = "needs RECAP_MMA_PROBE: writes tests/numerics/mma_sample.bin from the recorded outputs"]
fn write_sample() {
    let dir = probe_dir();
    let (mut tiles, mut numbers) = (Vec::new(), Vec::new());
    for (fi, form) in FORMS.iter().enumerate() {
        let (_, outs) = read_out(&dir, form).expect("every form recorded");
        for t in sample_selection(form) {
            tiles.push(generated(fi, t, outs[t as usize].clone()));
            numbers.push(t);
        }
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/numerics/mma_sample.bin");
    std::fs::write(&path, sample_bytes(&tiles, &numbers)).expect("writing the sample");
}

/// Every form and class of the checked-in sample, through the Hopper model, bit for bit.
#[test]
fn recorded_sample() {
    let tiles = sample();
    let mut seen = [false; FORMS.len()];
    for t in &tiles {
        seen[t.form] = true;
        let (bad, first) = t.check(MmaModel::Sm90);
        assert_eq!(bad, 0, "{}", first.unwrap_or_default());
    }
    assert!(seen.iter().all(|&s| s), "the sample holds every form");
}

/// The IEEE chain is not the hardware: on the same sample it misses, so the sample can tell the
/// models apart.
#[test]
fn recorded_sample_refutes_ieee() {
    let tiles = sample();
    let bad: usize = tiles.iter().map(|t| t.check(MmaModel::Ieee).0).sum();
    assert!(bad > 0);
}

//! The archive format: round trips of arbitrary archives, golden files, and hostile input.
//!
//! Golden files are rewritten with `RECAP_BLESS=1 cargo test -p recap-tests archive::golden`; any
//! other run asserts the writer still produces them byte for byte and the reader still reads them.

use proptest::prelude::*;
use recap_tests::archive::*;
// The tests' own reseal, which also sums the sections a test made escape the file (the library's
// refuses such a table).
use recap_tests::archive::reseal;
use shared::archive::layout::{self, SectionKind, HEADER_LEN, SECTION_ENTRY_LEN};
use shared::archive::*;

const PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry step(\n\t.param .u64 step_param_0,\n\t.param .align 8 .b8 step_param_1[16],\n\t.param .f32 step_param_2\n)\n{\n\tret;\n}\n";

fn param(name: &str, offset: u32, size: u32, align: u32, kind: ParamKind) -> ParamDecl {
    ParamDecl { name: name.into(), offset, size, align, kind }
}

fn region(name: &str, size: u64, dtype: DType) -> RegionDecl {
    RegionDecl::new(name, size, dtype)
}

/// The smallest archive a producer can write: one region, one memset.
fn golden_minimal() -> ArchiveSpec {
    ArchiveSpec {
        regions: vec![RegionSpec { decl: region("x", 16, DType::F32), initial: None, expected: None }],
        ops: vec![OpSpec::Memset(MemsetOp { region: 0, offset: 0, len: 16, width: 4, pattern: 0x3f80_0000 })],
        ..Default::default()
    }
}

/// Every kind of record v1 has: cubins, pointer and struct parameters, initial and expected data
/// under each tolerance, a pointer inside a region, every op kind, while and if nested two deep,
/// bindings and metadata.
fn golden_all_features() -> ArchiveSpec {
    let counts: Vec<u8> = (0..64u32).flat_map(|i| (i * 3).to_le_bytes()).collect();
    let mut table = vec![0u8; 32];
    table[8..16].copy_from_slice(&64u64.to_le_bytes());
    let mut scratch = region("tmp", 128, DType::U8);
    scratch.scratch = true;
    let mut grid2d = region("field", 4 * 8 * 8, DType::F32);
    grid2d.shape = vec![8, 8];
    let step = |flag_offset: u64| {
        OpSpec::Launch(LaunchDecl {
            kernel: 0,
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared_bytes: 256,
            params: [[0u8; 8], [0u8; 8], 7u64.to_le_bytes(), [0, 0, 0x80, 0x3f, 0, 0, 0, 0]].concat()[..28].to_vec(),
            relocs: vec![
                Reloc { offset: 0, target: 1, target_offset: 0 },
                Reloc { offset: 8, target: 3, target_offset: flag_offset },
            ],
        })
    };
    ArchiveSpec {
        modules: vec![ModuleSpec {
            name: "sim".into(),
            ptx: PTX.into(),
            cubins: vec![(90, b"\x7fELF cubin stand-in".to_vec())],
        }],
        kernels: vec![(
            0,
            "step".into(),
            vec![
                param("step_param_0", 0, 8, 8, ParamKind::Pointer),
                param("step_param_1", 8, 16, 8, ParamKind::Value),
                param("step_param_2", 24, 4, 4, ParamKind::Value),
            ],
        )],
        regions: vec![
            RegionSpec {
                decl: region("counts", 256, DType::U32),
                initial: Some(counts.clone()),
                expected: Some((counts.iter().map(|b| b.wrapping_add(1)).collect(), Tolerance::Exact)),
            },
            RegionSpec {
                decl: grid2d,
                initial: Some(vec![0; 256]),
                expected: Some((
                    (0..64).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect(),
                    Tolerance::Close { rtol: 1e-5, atol: 1e-6 },
                )),
            },
            RegionSpec { decl: scratch, initial: None, expected: None },
            RegionSpec {
                decl: region("flags", 32, DType::Bytes),
                initial: Some(table),
                expected: Some((vec![0; 32], Tolerance::MismatchFraction { max_fraction: 0.25 })),
            },
        ],
        region_relocs: vec![(3, Reloc { offset: 0, target: 0, target_offset: 64 })],
        ops: vec![
            OpSpec::Marker("start".into()),
            OpSpec::Alloc(2),
            OpSpec::Memset(MemsetOp { region: 2, offset: 0, len: 128, width: 8, pattern: 0x0102_0304_0506_0708 }),
            OpSpec::While(
                Condition { region: 3, offset: 16, max_iterations: 1000 },
                vec![
                    step(0),
                    OpSpec::If(
                        Condition { region: 3, offset: 20, max_iterations: 0 },
                        vec![
                            OpSpec::Copy(CopyOp { src: 0, src_offset: 0, dst: 2, dst_offset: 64, len: 64 }),
                            OpSpec::Memset(MemsetOp { region: 3, offset: 20, len: 4, width: 4, pattern: 0 }),
                        ],
                    ),
                    OpSpec::If(Condition { region: 3, offset: 24, max_iterations: 0 }, vec![]),
                    OpSpec::Memset(MemsetOp { region: 3, offset: 16, len: 2, width: 2, pattern: 0 }),
                ],
            ),
            OpSpec::Free(2),
            OpSpec::Marker("end".into()),
        ],
        bindings: vec![
            ("counts".into(), 0, Direction::InOut),
            ("field".into(), 1, Direction::Out),
            ("flags".into(), 3, Direction::In),
        ],
        meta: vec![("producer".into(), "recap tests".into()), ("note".into(), "golden file: every record kind".into())],
    }
}

/// `(name, how to build it, the checked-in bytes)`.
type Golden = (&'static str, fn() -> ArchiveSpec, &'static [u8]);

const GOLDEN: [Golden; 2] = [
    ("minimal", golden_minimal, include_bytes!("../golden/minimal.recap")),
    ("all-features", golden_all_features, include_bytes!("../golden/all-features.recap")),
];

#[test]
fn golden_files_are_written_byte_for_byte_and_read_back() {
    let bless = std::env::var_os("RECAP_BLESS").is_some();
    for (name, spec, stored) in GOLDEN {
        let spec = spec();
        let written = spec.write().unwrap();
        if bless {
            let path = recap_tests::repo_root().join(format!("tests/golden/{name}.recap"));
            std::fs::write(&path, &written).unwrap();
            continue;
        }
        let a = Archive::open(stored).unwrap_or_else(|e| panic!("golden {name}: {e}"));
        a.validate().unwrap();
        assert_paths_agree(stored);
        assert_eq!(a.version(), (1, 0));
        spec.assert_matches(&a);
        assert!(written == stored, "golden {name}: the writer no longer reproduces it byte for byte");
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips of arbitrary archives.

/// An op before it is made valid for the archive it lands in: arbitrary numbers, reduced into range.
#[derive(Clone, Debug)]
enum RawOp {
    Launch(u32, [u32; 6], u32, Vec<u8>),
    Copy(u32, u32, u64, u64, u64),
    Memset(u32, u64, u64, u8, u64),
    AllocFree,
    While(u64, u32, Vec<RawOp>),
    If(u32, u64, Vec<RawOp>),
    Marker(String),
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    let leaf = prop_oneof![
        (any::<u32>(), any::<[u32; 6]>(), 0u32..49152, prop::collection::vec(any::<u8>(), 0..48))
            .prop_map(|(k, d, s, p)| RawOp::Launch(k, d, s, p)),
        (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(a, b, c, d, e)| RawOp::Copy(a, b, c, d, e)),
        (any::<u32>(), any::<u64>(), any::<u64>(), 0u8..4, any::<u64>())
            .prop_map(|(a, b, c, d, e)| RawOp::Memset(a, b, c, d, e)),
        Just(RawOp::AllocFree),
        "[a-z ]{0,12}".prop_map(RawOp::Marker),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            (any::<u64>(), any::<u32>(), prop::collection::vec(inner.clone(), 0..6))
                .prop_map(|(o, m, b)| RawOp::While(o, m, b)),
            (any::<u32>(), any::<u64>(), prop::collection::vec(inner, 0..6)).prop_map(|(r, o, b)| RawOp::If(r, o, b)),
        ]
    })
}

#[derive(Clone, Debug)]
struct RawRegion {
    size: u64,
    dtype: usize,
    align_log2: u32,
    shape: Vec<u64>,
    scratch: bool,
    initial: Option<u8>,
    expected: Option<(u8, u8)>,
}

fn raw_region() -> impl Strategy<Value = RawRegion> {
    (
        8u64..600,
        0usize..DType::ALL.len(),
        0u32..10,
        prop::collection::vec(1u64..100, 0..5),
        any::<bool>(),
        prop::option::of(any::<u8>()),
        prop::option::of((any::<u8>(), 0u8..3)),
    )
        .prop_map(|(size, dtype, align_log2, mut shape, scratch, initial, expected)| {
            shape.truncate(4);
            RawRegion { size, dtype, align_log2, shape, scratch, initial, expected }
        })
}

/// Parameter layout as `(size, align, pointer)` in declaration order.
fn raw_params() -> impl Strategy<Value = Vec<(u32, u32, bool)>> {
    prop::collection::vec(
        prop_oneof![
            Just((8, 8, true)),
            Just((4, 4, false)),
            Just((8, 8, false)),
            Just((24, 8, false)),
            Just((2, 2, false))
        ],
        0..6,
    )
}

fn bytes_from(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_mul(31).wrapping_add(i as u8)).collect()
}

/// Turns arbitrary raw values into a valid spec.
fn build_spec(
    regions: Vec<RawRegion>,
    kernels: Vec<Vec<(u32, u32, bool)>>,
    ops: Vec<RawOp>,
    cubins: Vec<(u32, Vec<u8>)>,
    region_relocs: Vec<(u32, u64, u32, u64)>,
    meta: Vec<(String, String)>,
) -> ArchiveSpec {
    let mut spec = ArchiveSpec::default();
    let mut cubins_by_sm: Vec<(u32, Vec<u8>)> = Vec::new();
    for (sm, c) in cubins {
        if !cubins_by_sm.iter().any(|x| x.0 == sm) {
            cubins_by_sm.push((sm, c));
        }
    }
    spec.modules.push(ModuleSpec { name: "m0".into(), ptx: PTX.into(), cubins: cubins_by_sm });
    spec.modules.push(ModuleSpec { name: "m1".into(), ptx: String::new(), cubins: vec![] });
    // Region 0 always exists, is not scratch and can hold a condition word.
    spec.regions.push(RegionSpec { decl: region("cond", 64, DType::U32), initial: Some(vec![0; 64]), expected: None });
    for (i, r) in regions.iter().enumerate() {
        let mut decl = region(&format!("r{i}"), r.size, DType::ALL[r.dtype]);
        decl.align = 1 << r.align_log2;
        decl.shape = r.shape.clone();
        decl.scratch = r.scratch;
        let tol = |k: u8| match k {
            0 => Tolerance::Exact,
            1 => Tolerance::Close { rtol: 1e-3, atol: 0.5 },
            _ => Tolerance::MismatchFraction { max_fraction: 0.125 },
        };
        spec.regions.push(RegionSpec {
            decl,
            initial: r.initial.map(|s| bytes_from(s, r.size as usize)),
            expected: r.expected.map(|(s, k)| (bytes_from(s, r.size as usize), tol(k))),
        });
    }
    let n_regions = spec.regions.len() as u32;
    let sizes: Vec<u64> = spec.regions.iter().map(|r| r.decl.size).collect();
    let scratch: Vec<u32> = (0..n_regions).filter(|&r| spec.regions[r as usize].decl.scratch).collect();
    for (i, layout) in kernels.iter().enumerate() {
        let mut end = 0;
        let params = layout
            .iter()
            .enumerate()
            .map(|(j, &(size, align, ptr))| {
                let offset = u32::div_ceil(end, align) * align;
                end = offset + size;
                param(
                    &format!("k{i}_p{j}"),
                    offset,
                    size,
                    align,
                    if ptr { ParamKind::Pointer } else { ParamKind::Value },
                )
            })
            .collect();
        spec.kernels.push(((i % 2) as u32, format!("k{i}"), params));
    }
    for (owner, off, target, toff) in region_relocs {
        let owner = owner % n_regions;
        if sizes[owner as usize] < 8 {
            continue;
        }
        let target = target % n_regions;
        spec.region_relocs.push((
            owner,
            Reloc {
                offset: off % (sizes[owner as usize] - 7),
                target,
                target_offset: toff % (sizes[target as usize] + 1),
            },
        ));
    }
    fn make(spec: &ArchiveSpec, raw: &[RawOp], sizes: &[u64], scratch: &[u32]) -> Vec<OpSpec> {
        let n = sizes.len() as u32;
        raw.iter()
            .filter_map(|op| {
                Some(match op {
                    RawOp::Launch(k, dims, shared, extra) => {
                        if spec.kernels.is_empty() {
                            return Some(OpSpec::Marker("no kernels".into()));
                        }
                        let kernel = k % spec.kernels.len() as u32;
                        let params = &spec.kernels[kernel as usize].2;
                        let need = params.last().map_or(0, |p| p.offset + p.size) as usize;
                        let mut bytes = extra.clone();
                        bytes.resize(need.max(extra.len()), 0xAB);
                        let relocs = params
                            .iter()
                            .filter(|p| p.kind == ParamKind::Pointer)
                            .map(|p| {
                                let target = (p.offset + dims[0]) % n;
                                bytes[p.offset as usize..p.offset as usize + 8].fill(0);
                                Reloc {
                                    offset: p.offset as u64,
                                    target,
                                    target_offset: dims[1] as u64 % (sizes[target as usize] + 1),
                                }
                            })
                            .collect();
                        let block = [dims[3] % 32 + 1, dims[4] % 8 + 1, dims[5] % 4 + 1];
                        OpSpec::Launch(LaunchDecl {
                            kernel,
                            grid: [dims[0] % 100_000 + 1, dims[1] % 65535 + 1, dims[2] % 65535 + 1],
                            block,
                            shared_bytes: *shared,
                            params: bytes,
                            relocs,
                        })
                    }
                    RawOp::Copy(s, d, so, doff, len) => {
                        let (src, dst) = (s % n, d % n);
                        let len = len % (sizes[src as usize].min(sizes[dst as usize]) / 2 + 1);
                        let src_offset = so % (sizes[src as usize] / 2 - len / 2 + 1).max(1);
                        let src_offset = src_offset.min(sizes[src as usize] - len);
                        let mut dst_offset = (doff % (sizes[dst as usize] - len + 1)).min(sizes[dst as usize] - len);
                        if src == dst && src_offset < dst_offset + len && dst_offset < src_offset + len {
                            // Overlapping copies within a region are refused; move the destination clear.
                            if src_offset + 2 * len <= sizes[dst as usize] {
                                dst_offset = src_offset + len;
                            } else if src_offset >= len {
                                dst_offset = src_offset - len;
                            } else {
                                return Some(OpSpec::Marker("no room".into()));
                            }
                        }
                        OpSpec::Copy(CopyOp { src, src_offset, dst, dst_offset, len })
                    }
                    RawOp::Memset(r, off, len, w, pattern) => {
                        let region = r % n;
                        let width = 1u32 << w;
                        let size = sizes[region as usize] / width as u64 * width as u64;
                        let offset = off % (size + 1) / width as u64 * width as u64;
                        let len = len % (size - offset + 1) / width as u64 * width as u64;
                        let pattern = if width == 8 { *pattern } else { pattern & ((1u64 << (8 * width)) - 1) };
                        OpSpec::Memset(MemsetOp { region, offset, len, width, pattern })
                    }
                    RawOp::AllocFree => {
                        let &r = scratch.first()?;
                        return Some(OpSpec::If(
                            Condition { region: 0, offset: 0, max_iterations: 0 },
                            vec![OpSpec::Alloc(r), OpSpec::Free(r)],
                        ));
                    }
                    RawOp::While(off, max, body) => OpSpec::While(
                        Condition { region: 0, offset: off % 16 * 4, max_iterations: *max },
                        make(spec, body, sizes, scratch),
                    ),
                    RawOp::If(r, off, body) => {
                        let region = r % n;
                        let words = sizes[region as usize] / 4;
                        if words == 0 {
                            return None;
                        }
                        OpSpec::If(
                            Condition { region, offset: off % words * 4, max_iterations: 0 },
                            make(spec, body, sizes, scratch),
                        )
                    }
                    RawOp::Marker(s) => OpSpec::Marker(s.clone()),
                })
            })
            .collect()
    }
    spec.ops = make(&spec, &ops, &sizes, &scratch);
    for r in 0..n_regions {
        let dir = [Direction::In, Direction::Out, Direction::InOut][r as usize % 3];
        spec.bindings.push((format!("b{r}"), r, dir));
    }
    let mut seen = std::collections::HashSet::new();
    spec.meta = meta.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect();
    spec
}

fn arbitrary_spec() -> impl Strategy<Value = ArchiveSpec> {
    (
        prop::collection::vec(raw_region(), 0..5),
        prop::collection::vec(raw_params(), 0..4),
        prop::collection::vec(raw_op(), 0..24),
        prop::collection::vec(
            (prop_oneof![Just(75u32), Just(80), Just(90)], prop::collection::vec(any::<u8>(), 0..64)),
            0..3,
        ),
        prop::collection::vec((any::<u32>(), any::<u64>(), any::<u32>(), any::<u64>()), 0..4),
        prop::collection::vec(("[a-z]{1,6}", "\\PC{0,10}"), 0..4),
    )
        .prop_map(|(regions, kernels, ops, cubins, relocs, meta)| {
            build_spec(regions, kernels, ops, cubins, relocs, meta)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_archives_round_trip(spec in arbitrary_spec()) {
        let bytes = spec.write().unwrap();
        let a = Archive::open(&bytes).unwrap_or_else(|e| panic!("{e}"));
        a.validate().unwrap();
        assert_paths_agree(&bytes);
        spec.assert_matches(&a);
        // The same spec writes the same bytes.
        prop_assert_eq!(spec.write().unwrap(), bytes);
    }

    #[test]
    fn damaged_archives_give_errors_not_panics(
        spec in arbitrary_spec(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
        reseal_after in any::<bool>(),
    ) {
        let mut bytes = spec.write().unwrap();
        for (at, bit) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        // Resealed damage gets past the checksums and reaches the structural checks.
        if reseal_after && cut.is_none() && Archive::open(&bytes).is_err() {
            let fits = bytes.len() >= HEADER_LEN && sections_fit(&bytes);
            if fits {
                reseal(&mut bytes);
            }
        }
        if let Ok(a) = Archive::open(&bytes) {
            let _ = a.validate();
            walk(&a);
        }
        assert_paths_agree(&bytes);
    }
}

/// Whether the header's section table and every entry lie inside the file (so `reseal` can run).
fn sections_fit(bytes: &[u8]) -> bool {
    let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as u64;
    let end = count.checked_mul(SECTION_ENTRY_LEN as u64).and_then(|l| l.checked_add(table));
    if end.is_none_or(|e| e > bytes.len() as u64) {
        return false;
    }
    sections(bytes).iter().all(|&(_, off, len)| off.checked_add(len).is_some_and(|e| e <= bytes.len() as u64))
}

/// Calls every accessor on everything the archive lists.
fn walk(a: &Archive) {
    for m in a.modules() {
        let _ = m.ptx_text();
        for (_, c) in &m.cubins {
            let _ = c.decode();
        }
    }
    for k in a.kernels() {
        let _ = k.params_size();
    }
    for r in a.regions() {
        for b in r.initial.iter().chain(r.expected.iter()) {
            let _ = b.decode();
        }
    }
    let _ = a.region_relocs().count();
    for id in 0..a.op_count() as u32 {
        if let Op::Launch(l) = a.op(id) {
            let _ = a.relocs(l.relocs).count();
        }
        let _ = a.children(a.body(id)).count();
    }
    let _ = (a.top_level().count(), a.bindings().count(), a.meta().count());
}

// ---------------------------------------------------------------------------------------------
// Hostile input: one clear error each, naming the section, the byte and the reason.

fn all_features() -> Vec<u8> {
    golden_all_features().write().unwrap()
}

/// The error of the in-memory path (`open` + `validate`); the bounded reader path must refuse the
/// same bytes, with the same error when `open` refused them and in the same section otherwise.
fn open_err(bytes: &[u8]) -> FormatError {
    let e = match Archive::open(bytes) {
        Ok(a) => a.validate().expect_err("damaged archive was accepted"),
        Err(e) => e,
    };
    let bounded =
        validate_reader(&mut std::io::Cursor::new(bytes)).expect_err("the bounded path accepted a damaged archive");
    assert_eq!(scanned_validate(bytes), Err(bounded.clone()), "the scanned path gives the bounded path's error");
    if Archive::open(bytes).is_err() {
        assert_eq!(bounded, e);
    } else {
        assert_eq!(bounded.section, e.section, "bounded: {bounded}; in memory: {e}");
    }
    e
}

/// Both validation paths agree on `bytes`: both accept (with the same counts) or both refuse.
fn assert_paths_agree(bytes: &[u8]) {
    let in_memory = Archive::open(bytes).and_then(|a| {
        a.validate()?;
        Ok(ArchiveCounts {
            ops: a.op_count() as u64,
            kernels: a.kernel_count() as u64,
            regions: a.region_count() as u64,
        })
    });
    let bounded = validate_reader(&mut std::io::Cursor::new(bytes));
    assert_eq!(scanned_validate(bytes), bounded, "the scanned path agrees with the bounded path");
    match (&in_memory, &bounded) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("in memory: {in_memory:?}, bounded: {bounded:?}"),
    }
    if let Err(e) = Archive::open(bytes) {
        assert_eq!(bounded.unwrap_err(), e, "open's refusals are the bounded path's too");
    }
}

/// The upload's path: the bytes go through `scan` in uneven pieces (as they arrive), then the
/// file is validated with what the scan found.
fn scanned_validate(bytes: &[u8]) -> Result<ArchiveCounts, FormatError> {
    let scanned = scan(std::io::BufReader::with_capacity(7919, bytes)).unwrap();
    assert_eq!(scanned.len(), bytes.len() as u64);
    validate_scanned(&mut std::io::Cursor::new(bytes), &scanned)
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// File offset of field `field` of record `i` of a table section.
fn record(bytes: &[u8], kind: SectionKind, i: usize, field: usize) -> usize {
    let (off, _) = section(bytes, kind);
    let stride = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
    off + layout::TABLE_HEADER_LEN + i * stride + field
}

#[test]
fn truncation_anywhere_is_one_clear_error() {
    let good = all_features();
    for len in [0, 10, HEADER_LEN - 1, HEADER_LEN, good.len() / 2, good.len() - 1] {
        let e = open_err(&good[..len]);
        assert_eq!(e.section, "header", "{e}");
        assert!(e.reason.contains("shorter than the 64-byte header") || e.reason.contains("truncated"), "{e}");
    }
    let e = open_err(&good[..good.len() - 1]);
    assert_eq!(
        e.to_string(),
        format!(
            "header at byte 32: header says the file is {} bytes but it is {} (truncated or padded)",
            good.len(),
            good.len() - 1
        )
    );
}

#[test]
fn a_flipped_bit_in_any_section_names_that_section() {
    let good = all_features();
    let table_at = u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    let mut checked = 0;
    for (code, off, len) in sections(&good) {
        let kind = SectionKind::from_code(code).unwrap();
        if len == 0 {
            continue;
        }
        for at in [off as usize, (off + len / 2) as usize, (off + len - 1) as usize] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            let e = open_err(&bad);
            assert_eq!(e.section, kind.name(), "flip at {at}: {e}");
            assert!(e.offset >= off && e.offset < off + len, "flip at {at}: {e}");
            assert!(e.reason.contains("checksum mismatch"), "{e}");
            checked += 1;
        }
    }
    assert!(checked >= 3 * 11, "every section was damaged ({checked} flips)");
    for at in [layout::header::FLAGS, table_at + 3, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 1;
        let e = open_err(&bad);
        assert_eq!((e.section, e.offset), ("header", layout::header::CHECKSUM as u64), "{e}");
    }
}

#[test]
fn wrong_magic_and_future_major_are_refused() {
    let mut bad = all_features();
    bad[0..4].copy_from_slice(b"PK\x03\x04");
    assert_eq!(open_err(&bad).to_string(), "header at byte 0: not a recap archive (wrong magic bytes)");

    let mut future = all_features();
    future[layout::header::MAJOR..layout::header::MAJOR + 2].copy_from_slice(&2u16.to_le_bytes());
    let e = open_err(&future);
    assert_eq!((e.section, e.offset), ("header", 8));
    assert!(e.reason.contains("format version 2.0"), "{e}");
}

#[test]
fn a_newer_minor_with_longer_records_and_unknown_optional_sections_still_opens() {
    // A later 1.x may append fields to records and add sections a 1.0 reader does not know. Build
    // such a file by hand from a 1.0 one: widen every op record by 8 bytes, add an optional section.
    let good = all_features();
    let (ops_off, ops_len) = section(&good, SectionKind::Ops);
    let count = u32::from_le_bytes(good[ops_off..ops_off + 4].try_into().unwrap()) as usize;
    let mut wide_ops = Vec::new();
    wide_ops.extend_from_slice(&(count as u32).to_le_bytes());
    wide_ops.extend_from_slice(&((layout::OP_LEN + 8) as u32).to_le_bytes());
    for i in 0..count {
        let at = ops_off + 8 + i * layout::OP_LEN;
        wide_ops.extend_from_slice(&good[at..at + layout::OP_LEN]);
        wide_ops.extend_from_slice(&[0xEE; 8]);
    }
    assert_eq!(ops_len, 8 + count * layout::OP_LEN);
    let mut out = good[..good.len()].to_vec();
    // Append the new ops section and an unknown optional one, then a new section table.
    let new_ops_off = out.len();
    out.extend_from_slice(&wide_ops);
    let extra_off = out.len();
    out.extend_from_slice(b"a future optional section");
    let table_off = out.len();
    let mut entries = sections(&good);
    for e in &mut entries {
        if e.0 == SectionKind::Ops as u32 {
            *e = (e.0, new_ops_off as u64, wide_ops.len() as u64);
        }
    }
    entries.push((999, extra_off as u64, 25));
    let old_table = u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    for (i, (code, off, len)) in entries.iter().enumerate() {
        let mut e = [0u8; SECTION_ENTRY_LEN];
        e[0..4].copy_from_slice(&code.to_le_bytes());
        let flags = if *code == 999 {
            0
        } else {
            u32::from_le_bytes(good[old_table + i * SECTION_ENTRY_LEN + 4..][..4].try_into().unwrap())
        };
        e[4..8].copy_from_slice(&flags.to_le_bytes());
        e[8..16].copy_from_slice(&off.to_le_bytes());
        e[16..24].copy_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&e);
    }
    // The old ops bytes stay in place but no section claims them any more.
    put_u64(&mut out, 16, table_off as u64);
    put_u32(&mut out, 24, entries.len() as u32);
    let file_len = out.len() as u64;
    put_u64(&mut out, 32, file_len);
    out[layout::header::MINOR..layout::header::MINOR + 2].copy_from_slice(&7u16.to_le_bytes());
    reseal(&mut out);
    let a = Archive::open(&out).unwrap_or_else(|e| panic!("{e}"));
    a.validate().unwrap();
    assert_eq!(a.version(), (1, 7));
    golden_all_features().assert_matches(&a);

    // The same unknown section marked required is refused.
    let at = table_off + (entries.len() - 1) * SECTION_ENTRY_LEN + 4;
    put_u32(&mut out, at, layout::SECTION_REQUIRED);
    reseal(&mut out);
    let e = open_err(&out);
    assert_eq!((e.section, e.offset), ("section table", (at - 4) as u64));
    assert!(e.reason.contains("kind 999, unknown to this reader and marked required"), "{e}");
}

/// Breaks one field of a valid archive (resealing the checksums) and checks the error.
fn assert_refused(patch: impl FnOnce(&mut Vec<u8>) -> usize, section: &str, reason: &str) {
    let mut bytes = all_features();
    let at = patch(&mut bytes);
    reseal(&mut bytes);
    let e = open_err(&bytes);
    assert_eq!((e.section, e.offset), (section, at as u64), "{e}");
    assert!(e.reason.contains(reason), "expected {reason:?} in: {e}");
}

#[test]
fn huge_counts_are_refused_before_any_allocation() {
    assert_refused(
        |b| {
            let (off, _) = section(b, SectionKind::Ops);
            put_u32(b, off, u32::MAX);
            off
        },
        "ops",
        "4294967295 records of 64 bytes need",
    );
    assert_refused(
        |b| {
            let (off, _) = section(b, SectionKind::Strings);
            put_u32(b, off, u32::MAX - 1);
            off
        },
        "strings",
        "strings do not fit",
    );
    let mut bytes = all_features();
    put_u32(&mut bytes, layout::header::SECTION_COUNT, u32::MAX);
    let e = open_err(&bytes);
    assert_eq!((e.section, e.offset), ("header", layout::header::TABLE_OFFSET as u64), "{e}");
    assert!(e.reason.contains("section table of 4294967295 entries"), "{e}");
    // A blob claiming to decode to far more than its compressed bytes could hold.
    assert_refused(
        |b| {
            let at = record(b, SectionKind::Regions, 0, 64 + 16);
            put_u64(b, at, 1 << 40);
            let size_at = record(b, SectionKind::Regions, 0, 16);
            put_u64(b, size_at, 1 << 40);
            at - 16
        },
        "regions",
        "cannot decode to the 1099511627776 claimed",
    );
}

#[test]
fn overlapping_and_escaping_sections_are_refused() {
    let good = all_features();
    let table = u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    let entries = sections(&good);
    let ops_i = entries.iter().position(|e| e.0 == SectionKind::Ops as u32).unwrap();
    let strings_i = entries.iter().position(|e| e.0 == SectionKind::Strings as u32).unwrap();
    assert_refused(
        |b| {
            // Point the strings section at the ops section's bytes.
            put_u64(b, table + strings_i * SECTION_ENTRY_LEN + 8, entries[ops_i].1);
            table
        },
        "section table",
        "sections overlap",
    );
    assert_refused(
        |b| {
            put_u64(b, table + ops_i * SECTION_ENTRY_LEN + 16, u64::MAX - 3);
            table + ops_i * SECTION_ENTRY_LEN
        },
        "section table",
        "runs past the end of the file",
    );
    assert_refused(
        |b| {
            put_u32(b, table + ops_i * SECTION_ENTRY_LEN, SectionKind::Strings as u32);
            table + ops_i.max(strings_i) * SECTION_ENTRY_LEN
        },
        "section table",
        "appears twice",
    );
}

/// A new value for one field of one record.
#[derive(Clone, Copy)]
enum Field {
    U32(u32),
    U64(u64),
}

/// Sets field `field` of record `i` of `kind` and checks that opening names exactly that field.
fn assert_field_refused(kind: SectionKind, i: usize, field: usize, value: Field, reason: &str) {
    assert_refused(
        |b| {
            let at = record(b, kind, i, field);
            match value {
                Field::U32(v) => put_u32(b, at, v),
                Field::U64(v) => put_u64(b, at, v),
            }
            at
        },
        kind.name(),
        reason,
    );
}

#[test]
fn bad_body_nesting_is_refused() {
    // Op 3 is the while with a body of 6 (ops 4..=9); op 5 is the if inside it with a body of 2.
    // Ops 6..=10 would run past the while's body; 1000 ops past the op list.
    assert_field_refused(SectionKind::Ops, 5, 8, Field::U32(5), "runs past its enclosing body");
    assert_field_refused(SectionKind::Ops, 3, 8, Field::U32(1000), "runs past its enclosing body or the op list");
}

#[test]
fn out_of_range_relocations_and_region_ranges_are_refused() {
    use Field::*;
    use SectionKind::{Ops, Relocs};
    let cases: [(SectionKind, usize, usize, Field, &str); 8] = [
        // 24 + 8 > the launch's 28 parameter bytes.
        (Relocs, 0, 8, U64(24), "runs past its owner's 28 bytes"),
        (Relocs, 1, 16, U32(77), "target region 77 does not exist"),
        // Region 0 ("counts") is 256 bytes; one past the end is allowed, two is not.
        (Relocs, 2, 24, U64(257), "points 257 bytes into region 0 of 256 bytes"),
        // Op 6 copies 64 bytes from "counts".
        (Ops, 6, 16, U64(250), "copy source bytes 250..314 fall outside its region of 256 bytes"),
        // Op 3's condition word, in the 32-byte "flags".
        (Ops, 3, 16, U64(30), "not 4-byte aligned"),
        (Ops, 2, 4, U32(9), "memset region 9 does not exist"),
        // Op 1 allocates "tmp"; region 0 is not scratch.
        (Ops, 1, 4, U32(0), "which is not scratch"),
        (Ops, 4, 20, U32(2048), "more than 1024 threads"),
    ];
    for (kind, i, field, value, reason) in cases {
        assert_field_refused(kind, i, field, value, reason);
    }
    assert_refused(
        |b| {
            let at = record(b, SectionKind::Bindings, 1, 0);
            let first = u32::from_le_bytes(b[record(b, SectionKind::Bindings, 0, 0)..][..4].try_into().unwrap());
            put_u32(b, at, first);
            at
        },
        "bindings",
        "is declared twice",
    );
    assert_refused(
        |b| {
            let at = record(b, SectionKind::Params, 1, 4);
            put_u32(b, at, 4); // the 16-byte struct at 4 would overlap the pointer at 0 (and be misaligned)
            at + 8
        },
        "params",
        "bad alignment 8",
    );
}

#[test]
fn corrupt_compressed_data_is_caught_by_validate() {
    // Damage the bytes of the last blob and reseal: open succeeds (blobs are not read at open),
    // validate names the blob.
    let mut bytes = all_features();
    let (off, len) = section(&bytes, SectionKind::Blobs);
    for b in &mut bytes[off + len - 12..off + len - 4] {
        *b ^= 0x5A;
    }
    reseal(&mut bytes);
    let a = Archive::open(&bytes).unwrap();
    let e = a.validate().unwrap_err();
    assert_eq!(e.section, "blobs", "{e}");
    assert!(e.offset >= off as u64 && e.offset < (off + len) as u64, "{e}");
    let bounded = validate_reader(&mut std::io::Cursor::new(&bytes)).unwrap_err();
    assert_eq!(bounded.section, "blobs", "{bounded}");
    assert!(bounded.offset >= off as u64 && bounded.offset < (off + len) as u64, "{bounded}");
    // Unsealed, the same damage is a checksum mismatch on both paths.
    let mut unsealed = all_features();
    unsealed[off + len - 8] ^= 0x5A;
    let e = open_err(&unsealed);
    assert!(e.reason.contains("checksum mismatch"), "{e}");
}

#[test]
fn ptx_that_is_not_utf8_is_refused_by_both_paths() {
    // The writer takes PTX as text, so the bad bytes are written as a region's data (the same lz4
    // frame settings, the same length) and that frame replaces the PTX's.
    let text = "// caf\u{e9} marker\n";
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    w.add_module("m", text).unwrap();
    let mut bytes = w.finish().unwrap().into_inner();
    let mut bad = text.as_bytes().to_vec();
    let at = bad.windows(2).position(|p| p == [0xc3, 0xa9]).unwrap();
    bad[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(region("r", bad.len() as u64, DType::U8)).unwrap();
    w.set_initial_bytes(r, &bad).unwrap();
    let donor = w.finish().unwrap().into_inner();
    let (off, len) = section(&bytes, SectionKind::Blobs);
    let (donor_off, donor_len) = section(&donor, SectionKind::Blobs);
    assert_eq!(len, donor_len, "both frames hold the same number of literal bytes");
    bytes[off..off + len].copy_from_slice(&donor[donor_off..donor_off + len]);
    reseal(&mut bytes);
    let e = open_err(&bytes);
    assert_eq!(e.section, "modules", "{e}");
    assert!(e.reason.contains("not UTF-8"), "{e}");
}

#[test]
fn the_bounded_path_reads_a_real_file_with_large_blobs() {
    // 24 MiB of incompressible initial data and 8 MiB of zeros as expected data.
    let noise = recap_tests::noise(24 << 20, 1);
    let file = tempfile::tempfile().unwrap();
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file)).unwrap();
    w.add_module("m", PTX).unwrap();
    let a = w.add_region(region("noise", noise.len() as u64, DType::U8)).unwrap();
    w.set_initial_bytes(a, &noise).unwrap();
    let b = w.add_region(region("zeros", 8 << 20, DType::F32)).unwrap();
    w.set_expected_bytes(b, &vec![0u8; 8 << 20], Tolerance::Exact).unwrap();
    let mut file = w.finish().unwrap().into_inner().unwrap();
    let counts = validate_reader(&mut std::io::BufReader::new(&mut file)).unwrap();
    assert_eq!(counts, ArchiveCounts { ops: 0, kernels: 0, regions: 2 });

    // One byte changed in the middle of the noise: the streamed checksum catches it.
    use std::io::{Read, Seek, Write};
    let mut bytes = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut bytes).unwrap();
    assert_paths_agree(&bytes);
    let (off, len) = section(&bytes, SectionKind::Blobs);
    bytes[off + len / 3] ^= 0x40;
    let mut damaged = tempfile::tempfile().unwrap();
    damaged.write_all(&bytes).unwrap();
    let e = validate_reader(&mut std::io::BufReader::new(damaged)).unwrap_err();
    assert_eq!((e.section, e.offset), ("blobs", off as u64), "{e}");
    assert!(e.reason.contains("checksum mismatch"), "{e}");
    assert_paths_agree(&bytes);
    // Resealed, the change may be data only (accepted) or hit a block header (refused): the two
    // paths agree either way.
    reseal(&mut bytes);
    assert_paths_agree(&bytes);
}

#[test]
fn the_writer_refuses_what_the_reader_would() {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(region("r", 64, DType::U32)).unwrap();
    let bad_memset = w.memset(MemsetOp { region: r, offset: 2, len: 8, width: 4, pattern: 1 });
    assert!(bad_memset.unwrap_err().to_string().contains("not aligned to its 4-byte pattern"));
    let bad_copy = w.copy(CopyOp { src: r, src_offset: 0, dst: r, dst_offset: 8, len: 16 });
    assert!(bad_copy.unwrap_err().to_string().contains("overlaps itself"));
    assert!(w.alloc(r).unwrap_err().to_string().contains("not declared scratch"));
    let bad_cond = w.begin_while(Condition { region: r, offset: 62, max_iterations: 0 });
    assert!(bad_cond.unwrap_err().to_string().contains("not 4-byte aligned"));
    let m = w.add_module("m", "").unwrap();
    let overlapping = vec![param("a", 0, 8, 8, ParamKind::Pointer), param("b", 4, 4, 4, ParamKind::Value)];
    assert!(w.add_kernel(m, "k", overlapping).unwrap_err().to_string().contains("overlaps"));
    let k = w.add_kernel(m, "k", vec![param("a", 0, 8, 8, ParamKind::Pointer)]).unwrap();
    let launch =
        |grid| LaunchDecl { kernel: k, grid, block: [32, 1, 1], shared_bytes: 0, params: vec![0; 8], relocs: vec![] };
    assert!(w.launch(launch([0, 1, 1])).unwrap_err().to_string().contains("empty grid"));
    // A short source leaves the writer unable to finish rather than writing a corrupt file.
    assert!(w.set_initial(r, &mut &[0u8; 10][..]).is_err());
    assert!(w.finish().unwrap_err().to_string().contains("earlier blob failed"));
}

#[test]
fn blobs_are_shared_whole_or_not_at_all() {
    // Identical initial and expected bytes are stored once, and both refs name the same bytes.
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(region("same", 64, DType::U8)).unwrap();
    w.set_initial_bytes(r, &[7; 64]).unwrap();
    w.set_expected_bytes(r, &[7; 64], Tolerance::Exact).unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let a = Archive::open(&bytes).unwrap();
    a.validate().unwrap();
    let v = a.region(r);
    assert_eq!(v.initial.unwrap().decode().unwrap(), v.expected.unwrap().decode().unwrap());
    assert_eq!(section(&bytes, SectionKind::Blobs).1 as u64, v.initial.unwrap().stored_len());

    // A ref that starts inside another blob is refused.
    assert_refused(
        |b| {
            let ptx_offset = u64::from_le_bytes(b[record(b, SectionKind::Modules, 0, 16)..][..8].try_into().unwrap());
            let at = record(b, SectionKind::Regions, 0, 64);
            put_u64(b, at, ptx_offset + 1);
            at
        },
        "regions",
        "overlap other blob bytes",
    );
}

#[test]
fn records_own_their_runs_of_cubins_and_parameters() {
    assert_field_refused(SectionKind::Modules, 0, 4, Field::U32(1), "module 0 lists cubins 1..2");
    assert_refused(
        |b| {
            let at = record(b, SectionKind::Kernels, 0, 12);
            put_u32(b, at, 2); // leaves the third parameter owned by no kernel
            section(b, SectionKind::Params).0 + layout::TABLE_HEADER_LEN
        },
        "params",
        "3 parameters but the kernels list 2",
    );
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    let mut spec = ArchiveSpec {
        regions: vec![RegionSpec { decl: region("c", 4, DType::U32), initial: None, expected: None }],
        ..Default::default()
    };
    let cond = Condition { region: 0, offset: 0, max_iterations: 1 };
    let mut body = vec![OpSpec::Marker("a".into()), OpSpec::Marker("b".into())];
    for _ in 0..MAX_NESTING {
        body = vec![OpSpec::While(cond, body)];
    }
    spec.ops = body.clone();
    let bytes = spec.write().unwrap();
    spec.assert_matches(&Archive::open(&bytes).unwrap());
    // The writer refuses a 65th level.
    let mut deeper = spec.clone();
    deeper.ops = vec![OpSpec::While(cond, body)];
    assert!(deeper.write().unwrap_err().to_string().contains("nest more than 64 deep"));
    // So does the reader: turn the first marker into a while around the second.
    let mut b = bytes;
    let at = record(&b, SectionKind::Ops, MAX_NESTING, 0);
    put_u32(&mut b, at, 6);
    put_u32(&mut b, at + 4, 0); // the condition region (the marker's name before)
    put_u32(&mut b, at + 8, 1);
    reseal(&mut b);
    let e = open_err(&b);
    assert_eq!((e.section, e.offset), ("ops", at as u64), "{e}");
    assert!(e.reason.contains("bodies nest more than 64 deep"), "{e}");
}

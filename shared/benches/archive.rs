//! Opening (structural validation) and deep validation of a generated 1M-op archive.
//!
//! `cargo bench -p recap-shared --bench archive`. The archive mixes what captured pipelines hold:
//! launches with two pointer relocations each, memsets, copies, markers, and while/if bodies nested
//! two deep, over 64 regions with initial data.

use std::hint::black_box;
use std::io::Cursor;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shared::archive::*;

const OPS: usize = 1_000_000;

fn generate(ops: usize) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("bench", ".version 8.0\n.target sm_90\n.address_size 64\n").unwrap();
    let param =
        |name: &str, offset, size, kind| ParamDecl { name: name.into(), offset, size, align: size.min(8), kind };
    let kernels: Vec<KernelId> = (0..16)
        .map(|k| {
            let params = vec![
                param("a", 0, 8, ParamKind::Pointer),
                param("b", 8, 8, ParamKind::Pointer),
                param("n", 16, 4, ParamKind::Value),
                param("s", 20, 4, ParamKind::Value),
            ];
            w.add_kernel(m, &format!("kernel_{k}"), params).unwrap()
        })
        .collect();
    let regions: Vec<RegionId> = (0..64)
        .map(|r| {
            let id = w.add_region(RegionDecl::new(format!("r{r}"), 4096, DType::F32)).unwrap();
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + r) as u8).collect();
            w.set_initial_bytes(id, &data).unwrap();
            id
        })
        .collect();
    let mut n = 0usize;
    let mut i = 0usize;
    let launch = |w: &mut ArchiveWriter<Cursor<Vec<u8>>>, i: usize| {
        let (a, b) = (regions[i % 64], regions[(i * 7 + 1) % 64]);
        let mut params = vec![0u8; 24];
        params[16..20].copy_from_slice(&1024u32.to_le_bytes());
        w.launch(LaunchDecl {
            kernel: kernels[i % 16],
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![
                Reloc { offset: 0, target: a, target_offset: 0 },
                Reloc { offset: 8, target: b, target_offset: 64 },
            ],
        })
        .unwrap();
    };
    // 16 ops per group: while { 8 launches, if { memset, copy }, launch, marker }, 2 launches.
    while n + 16 <= ops {
        let cond = Condition { region: regions[i % 64], offset: 0, max_iterations: 100 };
        w.begin_while(cond).unwrap();
        for _ in 0..8 {
            launch(&mut w, i);
            i += 1;
        }
        w.begin_if(Condition { region: regions[(i + 3) % 64], offset: 4, max_iterations: 0 }).unwrap();
        w.memset(MemsetOp { region: regions[i % 64], offset: 0, len: 1024, width: 4, pattern: 0 }).unwrap();
        w.copy(CopyOp { src: regions[i % 64], src_offset: 0, dst: regions[(i + 1) % 64], dst_offset: 1024, len: 1024 })
            .unwrap();
        w.end_body().unwrap();
        launch(&mut w, i);
        w.marker("step").unwrap();
        w.end_body().unwrap();
        launch(&mut w, i + 1);
        launch(&mut w, i + 2);
        i += 3;
        n += 16;
    }
    while n < ops {
        w.marker("tail").unwrap();
        n += 1;
    }
    w.finish().unwrap().into_inner()
}

fn bench(c: &mut Criterion) {
    let bytes = generate(OPS);
    assert_eq!(Archive::open(&bytes).unwrap().op_count(), OPS);
    eprintln!("1M-op archive: {} bytes", bytes.len());
    let mut g = c.benchmark_group("archive_1m_ops");
    g.sample_size(10);
    g.throughput(Throughput::Elements(OPS as u64));
    g.bench_function("open", |b| b.iter(|| Archive::open(black_box(&bytes)).unwrap().op_count()));
    g.bench_function("open_and_validate", |b| {
        b.iter(|| {
            let a = Archive::open(black_box(&bytes)).unwrap();
            a.validate().unwrap();
            a.op_count()
        })
    });
    g.bench_function("walk_ops", |b| {
        let a = Archive::open(&bytes).unwrap();
        b.iter(|| a.ops().filter(|op| matches!(op, Op::Launch(_))).count())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

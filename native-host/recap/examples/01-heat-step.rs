//! A 2-D heat simulation step: three kernels and a copy per step, run eagerly, captured into a
//! graph, saved as one archive with named bindings, loaded again and replayed with new inputs.
//!
//! `cargo run --example 01-heat-step -- --device cpu` (or `--device cuda`). Exits 0 only when every
//! result matches a plain Rust version of the same step.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use recap::capture::Result;
use recap::{args, Buffer, Device, Graph, Kernel, StructArg};

const PTX: &str = include_str!("kernels/heat.ptx");
const NX: usize = 96;
const NY: usize = 64;
const STEPS: usize = 25;
const ALPHA: f32 = 0.2;
const DT: f32 = 0.05;
const AMBIENT: f32 = 10.0;
const RATE: f32 = 0.002;

struct Kernels {
    diffuse: Kernel,
    source: Kernel,
    cool: Kernel,
}

/// `struct Field { float* data; int nx; int ny; }` by value: the pointer field is marked.
fn field(u: &Buffer<f32>) -> StructArg {
    StructArg::new(16).pointer(0, u.raw(), 0).value(8, &(NX as i32)).value(12, &(NY as i32))
}

/// One step: u <- cool(add_source(diffuse(u))), through v.
fn step(d: &Device, k: &Kernels, u: &Buffer<f32>, v: &Buffer<f32>, source: &Buffer<f32>) -> Result<()> {
    let n = (NX * NY) as u32;
    let grid2 = ((NX as u32).div_ceil(16), (NY as u32).div_ceil(16));
    d.launch(&k.diffuse, grid2, (16, 16), 0, &args![field(u), field(v), ALPHA])?;
    d.launch(&k.source, n.div_ceil(256), 256, 0, &args![v, source, DT, n as i32])?;
    d.launch(&k.cool, n.div_ceil(256), 256, 0, &args![v, AMBIENT, RATE, n as i32])?;
    d.copy(v, u)
}

/// The same step in plain Rust, as the reference.
fn reference(u0: &[f32], source: &[f32], steps: usize) -> Vec<f32> {
    let mut u = u0.to_vec();
    let mut v = vec![0.0f32; u.len()];
    for _ in 0..steps {
        for y in 0..NY {
            for x in 0..NX {
                let i = y * NX + x;
                let c = u[i];
                v[i] = if x == 0 || y == 0 || x == NX - 1 || y == NY - 1 {
                    c
                } else {
                    let lap = u[i - 1] + u[i + 1] + u[i - NX] + u[i + NX] - 4.0 * c;
                    ALPHA.mul_add(lap, c)
                };
            }
        }
        for i in 0..v.len() {
            v[i] = DT.mul_add(source[i], v[i]);
            v[i] = RATE.mul_add(AMBIENT - v[i], v[i]);
        }
        u.copy_from_slice(&v);
    }
    u
}

/// A hot square at (cx, cy) on an ambient background.
fn hot_square(cx: usize, cy: usize, half: usize, t: f32) -> Vec<f32> {
    let mut u = vec![AMBIENT; NX * NY];
    for y in cy - half..cy + half {
        for x in cx - half..cx + half {
            u[y * NX + x] = t;
        }
    }
    u
}

fn point_sources(points: &[(usize, usize, f32)]) -> Vec<f32> {
    let mut s = vec![0.0f32; NX * NY];
    for &(x, y, q) in points {
        s[y * NX + x] = q;
    }
    s
}

fn run(dev: &Device) -> Result<bool> {
    println!("01-heat-step on {}: {NX}x{NY} grid, {STEPS} steps of 3 kernels + 1 copy", dev.name());
    let module = dev.load_ptx("heat", PTX)?;
    let k = Kernels {
        diffuse: module.kernel("heat_diffuse")?,
        source: module.kernel("heat_add_source")?,
        cool: module.kernel("heat_cool")?,
    };
    let u0 = hot_square(30, 30, 8, 100.0);
    let s0 = point_sources(&[(70, 20, 50.0), (70, 44, 50.0)]);
    let u = dev.upload(&u0)?.named("u");
    let v = dev.alloc::<f32>(NX * NY)?.named("v");
    let source = dev.upload(&s0)?.named("source");
    let mut ok = true;

    // Eager, one op at a time.
    let t = Instant::now();
    for _ in 0..STEPS {
        step(dev, &k, &u, &v, &source)?;
    }
    let eager = u.read()?;
    let eager_time = t.elapsed();
    let want = reference(&u0, &s0, STEPS);
    let (diff, scale) = common::max_diff(&eager, &want);
    ok &= common::check("eager steps vs Rust reference", diff, 1e-4 * scale);

    // Captured: the same calls, recorded into a graph, then replayed from the same start.
    dev.write(&u, &u0)?;
    let graph = dev.capture(|d| {
        for _ in 0..STEPS {
            step(d, &k, &u, &v, &source)?;
        }
        Ok(())
    })?;
    println!("  captured a graph of {} ops over {} regions", graph.op_count(), graph.region_count());
    let t = Instant::now();
    graph.launch()?;
    let first_time = t.elapsed();
    let (diff, _) = common::max_diff(&u.read()?, &eager);
    ok &= common::check("graph replay vs eager", diff, 0.0);
    // Again from the same start: the graph is built by now, this is the replay alone.
    dev.write(&u, &u0)?;
    let t = Instant::now();
    graph.launch()?;
    let graph_time = t.elapsed();
    let (diff, _) = common::max_diff(&u.read()?, &eager);
    ok &= common::check("second graph replay vs eager", diff, 0.0);

    // Saved with the starting field as its initial data, then loaded as a fresh graph.
    dev.write(&u, &u0)?;
    let dir = std::env::temp_dir().join(format!("recap-example-01-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| recap::CaptureError::Usage(e.to_string()))?;
    let path = dir.join("heat.recap");
    graph.save(&path, &[("u", u.raw()), ("source", source.raw())], &[("u", u.raw())])?;
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("  saved {} ({bytes} bytes)", path.display());
    let loaded = Graph::load(&path, dev)?;
    for b in loaded.bindings() {
        println!("    binding {:<8} {:<5} {} bytes of {}", b.name, b.direction.name(), b.bytes, b.dtype.name());
    }
    loaded.launch()?;
    let (diff, _) = common::max_diff(&loaded.get_param_as::<f32>("u")?, &eager);
    ok &= common::check("loaded archive, saved inputs vs eager", diff, 0.0);

    // New inputs by name: another hot spot and other sources.
    let u1 = hot_square(60, 32, 12, 80.0);
    let s1 = point_sources(&[(10, 10, 200.0), (85, 55, -40.0), (48, 8, 120.0)]);
    loaded.set_param("u", &u1)?;
    loaded.set_param("source", &s1)?;
    loaded.launch()?;
    let got = loaded.get_param_as::<f32>("u")?;
    let (diff, scale) = common::max_diff(&got, &reference(&u1, &s1, STEPS));
    ok &= common::check("loaded archive, new inputs vs Rust reference", diff, 1e-4 * scale);
    let mean = got.iter().sum::<f32>() / got.len() as f32;
    println!("  new inputs: mean temperature {mean:.4}, max {:.4}", got.iter().fold(f32::MIN, |a, b| a.max(*b)));
    println!(
        "  eager {STEPS} steps: {:.2} ms; first graph launch: {:.2} ms; second: {:.2} ms (one sample each)",
        eager_time.as_secs_f64() * 1e3,
        first_time.as_secs_f64() * 1e3,
        graph_time.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

fn main() -> ExitCode {
    common::main("01-heat-step", run)
}

//! An iterative solver whose loop runs on the device: Jacobi sweeps for -laplacian(x) = f until the
//! largest change of a sweep falls below a tolerance. A kernel computes that change, another writes
//! the loop's condition word; the captured graph holds the whole loop, so a replay makes no round
//! trip to the host per iteration (on CUDA: a conditional WHILE node).
//!
//! `cargo run --example 02-jacobi-while -- --device cpu` (or `--device cuda`). Exits 0 only when the
//! device loop stopped by itself below the tolerance and the answer matches a plain Rust solver
//! run for the same number of sweeps, for the captured graph and for the archive reloaded with a
//! new right-hand side.

mod common;

use std::process::ExitCode;
use std::time::Instant;

use recap::capture::Result;
use recap::{args, Buffer, Device, Graph, Kernel};

const PTX: &str = include_str!("kernels/jacobi.ptx");
const N: usize = 24;
const TOL: f32 = 2e-6;
const MAX_ITERATIONS: u32 = 5000;

struct Solver {
    sweep: Kernel,
    change: Kernel,
    decide: Kernel,
    x: Buffer<f32>,
    y: Buffer<f32>,
    f: Buffer<f32>,
    max_bits: Buffer<u32>,
    flag: Buffer<u32>,
    iterations: Buffer<u32>,
}

fn h2() -> f32 {
    let h = 1.0 / (N - 1) as f32;
    h * h
}

impl Solver {
    /// The whole solve: reset, then loop on the device while the change is above TOL.
    fn solve(&self, d: &Device) -> Result<()> {
        let n = N as u32;
        let grid2 = (n.div_ceil(8), n.div_ceil(8));
        let count = (N * N) as u32;
        d.zero(&self.x)?;
        d.zero(&self.iterations)?;
        d.fill(&self.flag, 1u32)?;
        d.while_nonzero(&self.flag, MAX_ITERATIONS + 1, |d| {
            d.zero(&self.max_bits)?;
            d.launch(&self.sweep, grid2, (8, 8), 0, &args![&self.x, &self.y, &self.f, n as i32, h2()])?;
            d.launch(&self.sweep, grid2, (8, 8), 0, &args![&self.y, &self.x, &self.f, n as i32, h2()])?;
            d.launch(
                &self.change,
                count.div_ceil(128),
                128,
                0,
                &args![&self.x, &self.y, &self.max_bits, count as i32],
            )?;
            d.launch(&self.decide, 1, 32, 0, &args![&self.max_bits, &self.flag, &self.iterations, TOL, MAX_ITERATIONS])
        })
    }
}

/// Plain Rust Jacobi, `iterations` double sweeps, the same arithmetic as the kernel.
fn reference(f: &[f32], iterations: u32) -> Vec<f32> {
    let mut x = vec![0.0f32; N * N];
    let mut y = vec![0.0f32; N * N];
    let sweep = |a: &[f32], b: &mut [f32]| {
        for j in 0..N {
            for i in 0..N {
                let k = j * N + i;
                b[k] = if i == 0 || j == 0 || i == N - 1 || j == N - 1 {
                    0.0
                } else {
                    0.25 * h2().mul_add(f[k], a[k - 1] + a[k + 1] + a[k - N] + a[k + N])
                };
            }
        }
    };
    for _ in 0..iterations {
        sweep(&x, &mut y);
        sweep(&y, &mut x);
    }
    x
}

fn rhs(scale: f32, bump: (usize, usize)) -> Vec<f32> {
    let mut f = vec![scale; N * N];
    f[bump.1 * N + bump.0] += 40.0 * scale;
    f
}

/// Checks one finished solve: stopped by the device below TOL, and equal to the reference.
fn check(label: &str, x: &[f32], iterations: u32, last_change: f32, f: &[f32]) -> bool {
    println!("  {label}: {iterations} iterations ({} sweeps), last change {last_change:.3e}", 2 * iterations);
    let mut ok = iterations > 1 && iterations < MAX_ITERATIONS && last_change <= TOL;
    if !ok {
        println!("  {label}: the device loop did not stop by itself below the tolerance  FAIL");
    }
    let (diff, scale) = common::max_diff(x, &reference(f, iterations));
    ok &= common::check(&format!("{label} vs Rust Jacobi"), diff, 1e-5 * scale.max(1e-3));
    ok
}

fn read_state(s: &Solver) -> Result<(Vec<f32>, u32, f32)> {
    Ok((s.x.read()?, s.iterations.read()?[0], f32::from_bits(s.max_bits.read()?[0])))
}

fn run(dev: &Device) -> Result<bool> {
    println!("02-jacobi-while on {}: {N}x{N} Poisson problem, tolerance {TOL:e}", dev.name());
    let module = dev.load_ptx("jacobi", PTX)?;
    let f0 = rhs(1.0, (6, 15));
    let s = Solver {
        sweep: module.kernel("jacobi_sweep")?,
        change: module.kernel("max_change")?,
        decide: module.kernel("continue_while")?,
        x: dev.alloc::<f32>(N * N)?.named("x"),
        y: dev.alloc::<f32>(N * N)?.named("y"),
        f: dev.upload(&f0)?.named("f"),
        max_bits: dev.alloc::<u32>(1)?.named("max_change"),
        flag: dev.alloc::<u32>(1)?.named("keep_going"),
        iterations: dev.alloc::<u32>(1)?.named("iterations"),
    };
    let mut ok = true;

    // Eagerly the host reads the condition word back after every iteration.
    let t = Instant::now();
    s.solve(dev)?;
    let eager_time = t.elapsed();
    let (eager_x, eager_iterations, change) = read_state(&s)?;
    ok &= check("eager (host loop)", &eager_x, eager_iterations, change, &f0);

    let graph = dev.capture(|d| s.solve(d))?;
    println!("  captured a graph of {} ops (the loop body is 5 ops)", graph.op_count());
    let t = Instant::now();
    graph.launch()?;
    let first_time = t.elapsed();
    // The graph is built by now: the second launch is the replay alone (it resets its own state).
    let t = Instant::now();
    graph.launch()?;
    let graph_time = t.elapsed();
    let (x, iterations, change) = read_state(&s)?;
    ok &= check("graph (device loop)", &x, iterations, change, &f0);
    ok &= iterations == eager_iterations;
    ok &= common::check("graph vs eager", common::max_diff(&x, &eager_x).0, 0.0);

    let dir = std::env::temp_dir().join(format!("recap-example-02-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| recap::CaptureError::Usage(e.to_string()))?;
    let path = dir.join("jacobi.recap");
    graph.save(
        &path,
        &[("f", s.f.raw())],
        &[("x", s.x.raw()), ("iterations", s.iterations.raw()), ("max_change", s.max_bits.raw())],
    )?;
    println!("  saved {} ({} bytes)", path.display(), std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0));

    let loaded = Graph::load(&path, dev)?;
    let f1 = rhs(3.0, (17, 5));
    loaded.set_param("f", &f1)?;
    loaded.launch()?;
    let x1 = loaded.get_param_as::<f32>("x")?;
    let it1 = loaded.get_param_as::<u32>("iterations")?[0];
    let change1 = f32::from_bits(loaded.get_param_as::<u32>("max_change")?[0]);
    ok &= check("loaded archive, new f", &x1, it1, change1, &f1);
    println!(
        "  eager solve: {:.2} ms; first graph launch: {:.2} ms; second: {:.2} ms (one sample each)",
        eager_time.as_secs_f64() * 1e3,
        first_time.as_secs_f64() * 1e3,
        graph_time.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

fn main() -> ExitCode {
    common::main("02-jacobi-while", run)
}

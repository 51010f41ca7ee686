//! What the numbered examples share: the `--device` flag and the pass/fail ending.

use std::process::ExitCode;

use recap::Device;

/// The device named by `--device cpu|cuda|cuda:N` (default cpu), or a clear message and exit 2.
fn device_from_args(example: &str) -> Result<Device, ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut spec = "cpu".to_owned();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--device" if i + 1 < args.len() => {
                spec = args[i + 1].clone();
                i += 2;
            }
            s if s.starts_with("--device=") => {
                spec = s["--device=".len()..].to_owned();
                i += 1;
            }
            other => {
                eprintln!("{example}: unknown argument {other:?}\nusage: {example} [--device cpu|cuda|cuda:N]");
                return Err(ExitCode::from(2));
            }
        }
    }
    Device::from_spec(&spec).map_err(|e| {
        eprintln!("{example}: {e}");
        ExitCode::from(2)
    })
}

/// Largest |a - b| and largest |b| over two slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(0.0f32, f32::max);
    (diff, scale)
}

/// Prints one check line and says whether it passed.
pub fn check(what: &str, diff: f32, limit: f32) -> bool {
    let ok = diff <= limit && diff.is_finite();
    println!("  {:<48} max |diff| = {diff:.3e} (limit {limit:.1e})  {}", what, if ok { "ok" } else { "FAIL" });
    ok
}

/// Runs an example on the device from the command line: exit 0 only when its checks passed.
pub fn main(example: &str, run: impl FnOnce(&Device) -> recap::capture::Result<bool>) -> ExitCode {
    let dev = match device_from_args(example) {
        Ok(d) => d,
        Err(code) => return code,
    };
    match run(&dev) {
        Ok(passed) => finish(example, passed),
        Err(e) => {
            eprintln!("{example}: {e}");
            finish(example, false)
        }
    }
}

fn finish(example: &str, passed: bool) -> ExitCode {
    if passed {
        println!("{example}: PASS");
        ExitCode::SUCCESS
    } else {
        println!("{example}: FAIL");
        ExitCode::FAILURE
    }
}

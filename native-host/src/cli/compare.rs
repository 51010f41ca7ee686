//! `recap compare FILE --devices A,B [--all] [--json]`: replays one archive on two devices (or two
//! CPU engines) side by side, op by op, and names the first op whose writes differ (the driver is
//! `recap::compare`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use recap::compare::{compare, same_shape, CompareError, CompareOptions, Quiet};
use recap::cuda::OpenError;
use recap::device::DeviceSpec;
use recap::mapped::MappedFile;
use shared::archive::{Archive, OpId};
use shared::compare::Outcome;

use super::limits::LimitArgs;

/// Two devices, `A,B`; a CPU side that names no engine (`cpu`) runs native code (`jit`).
#[derive(Clone, Copy, Debug)]
pub struct Sides(pub DeviceSpec, pub DeviceSpec);

impl std::str::FromStr for Sides {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let side = |s: &str| s.trim().parse::<DeviceSpec>().map(|d| d.engine_or(shared::ptx::Engine::Jit));
        match s.split_once(',') {
            Some((a, b)) => Ok(Sides(side(a)?, side(b)?)),
            None => anyhow::bail!("expected two devices as A,B (e.g. cpu,cuda), got {s:?}"),
        }
    }
}

/// Replay an archive on two devices side by side and name the first op whose results differ
#[derive(clap::Args)]
pub struct Args {
    pub file: PathBuf,
    /// The two sides, A,B: cpu (native code), interp, jit, jit-scalar (or cpu:ENGINE), cuda or cuda:N
    #[arg(long, default_value = "interp,jit")]
    pub devices: Sides,
    /// Go on past the first op that differs and report every one
    #[arg(long)]
    pub all: bool,
    /// One JSON object with the whole outcome instead of text
    #[arg(long)]
    pub json: bool,
    /// Side B replays this archive instead of FILE (the same ops and regions, other kernels or
    /// data: two captures of one program, before and after a change)
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
    /// Most PTX instructions the iteration may execute on a CPU side
    #[arg(long)]
    pub budget: Option<u64>,
    /// Tensor-core arithmetic on a CPU side: ieee (IEEE fused multiply-adds in k order), sm80
    /// (Ampere's unit) or sm90 (Hopper's); by default that of the GPU the archive was captured on.
    /// The GPU models also fuse plain mul and add pairs as ptxas does; ieee keeps PTX's literal
    /// meaning
    #[arg(long, value_enum)]
    pub mma_model: Option<super::replay::MmaModelArg>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let map = MappedFile::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", args.file.display()))?;
    let other_map = match &args.against {
        Some(f) => Some(MappedFile::open(f).with_context(|| format!("opening {}", f.display()))?),
        None => None,
    };
    let other = match (&other_map, &args.against) {
        (Some(m), Some(f)) => {
            let other = Archive::open(m).with_context(|| format!("reading {}", f.display()))?;
            same_shape(&archive, &other)
                .with_context(|| format!("{} cannot be held beside {}", f.display(), args.file.display()))?;
            other
        }
        _ => archive.clone(),
    };
    let Sides(a, b) = args.devices;
    let file_b = args.against.as_ref().unwrap_or(&args.file);
    let options = CompareOptions {
        budget: args.budget,
        limits: args.limits.limits(),
        all: args.all,
        cancel: None,
        mma_model: args.mma_model.map(Into::into),
    };
    let outcome = compare(&archive, &other, (a, b), options, &mut Quiet).map_err(compare_failed)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"a": a.to_string(), "b": b.to_string(), "agree": outcome.agree(), "outcome": outcome})
        );
    } else {
        let name = |side: DeviceSpec, file: &PathBuf| match &args.against {
            Some(_) => {
                format!("{side} ({})", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default())
            }
            None => side.to_string(),
        };
        print!("{}", report(&archive, &outcome, &name(a, &args.file), &name(b, file_b)));
    }
    Ok(if outcome.agree() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// A failed comparison as one message. The library's errors already say their cause in their own
/// words, so the cause is not chained after them a second time; a machine without a CUDA driver
/// is told what compare takes instead (its flag is `--devices`, not replay's `--device`).
fn compare_failed(e: CompareError) -> anyhow::Error {
    match e {
        CompareError::OpenCuda { ordinal, source: OpenError::NoDriver } => anyhow::anyhow!(
            "cuda:{ordinal} cannot be opened: no CUDA driver found (libcuda.so could not be loaded); \
             compare two CPU engines instead, e.g. --devices interp,jit"
        ),
        other => anyhow::anyhow!("{other}"),
    }
}

/// The outcome as text: where the two sides part, or that they agree.
fn report(archive: &Archive, outcome: &Outcome, a: &str, b: &str) -> String {
    let mut s = String::new();
    for d in &outcome.divergences {
        s.push_str(&d.report(a, b));
        s.push('\n');
    }
    if let Some((after, na, nb)) = outcome.control {
        let next = |o: Option<OpId>| {
            o.map_or("nothing (its iteration was over)".to_string(), |op| format!("op {op} ({})", archive.op_label(op)))
        };
        let after = after.map_or("the start".to_string(), |op| format!("op {op} ({})", archive.op_label(op)));
        s.push_str(&format!("control flow parts after {after}: {a} ran {}, {b} ran {}\n", next(na), next(nb)));
    }
    let verdict = if outcome.agree() && outcome.within > 0 {
        format!("{a} and {b} agree, {} op(s) only within tolerance (bits differ)", outcome.within)
    } else if outcome.agree() {
        format!("{a} and {b} agree bit for bit")
    } else {
        format!("{a} and {b} differ at {} op(s)", outcome.divergences.len() + outcome.control.is_some() as usize)
    };
    s.push_str(&format!("{verdict}: {} ops, {} region comparisons\n", outcome.ops, outcome.regions));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::ptx::Engine;

    #[test]
    fn sides_parse() {
        let s: Sides = "cpu,cuda:1".parse().unwrap();
        assert_eq!((s.0, s.1), (DeviceSpec::Cpu(Some(Engine::Jit)), DeviceSpec::Cuda(1)));
        assert_eq!((s.0.to_string(), s.1.to_string()), ("jit".to_string(), "cuda:1".to_string()));
        let s: Sides = "interp, jit-scalar".parse().unwrap();
        assert_eq!((s.0, s.1), (DeviceSpec::Cpu(Some(Engine::Interpreter)), DeviceSpec::Cpu(Some(Engine::JitScalar))));
        assert!("cpu".parse::<Sides>().unwrap_err().to_string().contains("A,B"));
        assert!("cpu,tpu".parse::<Sides>().unwrap_err().to_string().contains("tpu"));
    }
}

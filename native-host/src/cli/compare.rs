//! `recap compare FILE --devices A,B [--all] [--json]`: replays one archive on two devices (or two
//! CPU engines) side by side, op by op, and names the first op whose writes differ.
//!
//! Both sides start from the archive's initial state and run one iteration. After every op the
//! regions that op may write (the plan's write set) are read on both sides and compared under the
//! region's tolerance (`shared::compare`). A CPU side is stepped op by op (`CpuReplay::step`); a
//! CUDA side replays on a stream, synchronising after each op, and calls back as each finishes,
//! and the CPU side is stepped from inside that callback, so neither side runs ahead.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use recap::mapped::MappedFile;
use shared::archive::{Archive, Op, OpId};
use shared::compare::{Comparison, Outcome};
use shared::plan::Plan;
use shared::ptx::Engine;
use shared::replay::{CpuReplay, Cursor, NoObserver, ReplayOptions};

use super::limits::LimitArgs;

/// One side of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Cpu(Engine),
    Cuda(u32),
}

impl std::str::FromStr for Side {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "cpu" | "jit" => Side::Cpu(Engine::Jit),
            "jit-scalar" => Side::Cpu(Engine::JitScalar),
            "interp" => Side::Cpu(Engine::Interpreter),
            "cuda" => Side::Cuda(0),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => Side::Cuda(n),
                _ => return Err(format!("unknown device {s:?}: expected cpu, interp, jit, jit-scalar, cuda or cuda:N")),
            },
        })
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Side::Cpu(Engine::Jit) => write!(f, "jit"),
            Side::Cpu(Engine::JitScalar) => write!(f, "jit-scalar"),
            Side::Cpu(Engine::Interpreter) => write!(f, "interp"),
            Side::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Two devices, `A,B`.
#[derive(Clone, Copy, Debug)]
pub struct Sides(pub Side, pub Side);

impl std::str::FromStr for Sides {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(',') {
            Some((a, b)) => Ok(Sides(a.trim().parse()?, b.trim().parse()?)),
            None => Err(format!("expected two devices as A,B (e.g. cpu,cuda), got {s:?}")),
        }
    }
}

/// Replay an archive on two devices side by side and name the first op whose results differ
#[derive(clap::Args)]
pub struct Args {
    pub file: PathBuf,
    /// The two sides, A,B: cpu (native code), interp, jit, jit-scalar, cuda or cuda:N
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
            same_shape(&archive, &other).with_context(|| format!("{} cannot be held beside {}", f.display(), args.file.display()))?;
            other
        }
        _ => archive.clone(),
    };
    let plan = Plan::build(&archive);
    let Sides(a, b) = args.devices;
    let file_b = args.against.as_ref().unwrap_or(&args.file);
    let options = |engine: Engine| ReplayOptions { instruction_budget: args.budget, engine, limits: args.limits.limits(), ..Default::default() };
    fn cpu<'a>(archive: &Archive<'a>, options: ReplayOptions) -> Result<CpuReplay<'a>> {
        CpuReplay::new(archive, options).context("loading the archive for the CPU")
    }
    let mut comparison = Comparison::new(&archive, &plan, args.all);
    match (a, b) {
        (Side::Cpu(ea), Side::Cpu(eb)) => {
            let (mut ra, mut rb) = (cpu(&archive, options(ea))?, cpu(&other, options(eb)).with_context(|| file_b.display().to_string())?);
            let (mut ca, mut cb) = (Cursor::default(), Cursor::default());
            loop {
                let oa = ra.step(&mut ca, &mut NoObserver).with_context(|| format!("replaying on {a}"))?;
                let ob = rb.step(&mut cb, &mut NoObserver).with_context(|| format!("replaying on {b}"))?;
                let go = comparison.after_op(oa, ob, |r| ra.region_bytes(r), |r| rb.region_bytes(r))?;
                if !go {
                    break;
                }
            }
        }
        (Side::Cuda(ordinal), Side::Cpu(engine)) | (Side::Cpu(engine), Side::Cuda(ordinal)) => {
            let cuda_first = matches!(a, Side::Cuda(_));
            let (cpu_archive, gpu_archive) = if cuda_first { (&other, &archive) } else { (&archive, &other) };
            let mut host = cpu(cpu_archive, options(engine))?;
            let device = recap::cuda::Device::open(ordinal as usize).with_context(|| format!("opening cuda:{ordinal}"))?;
            let options = recap::cuda::ReplayOptions { mode: recap::cuda::Mode::Stream, sync_each_op: true, ..Default::default() };
            let mut gpu = recap::cuda::CudaReplay::load(&device, gpu_archive, options)
                .with_context(|| format!("loading the archive for cuda:{ordinal}"))?;
            let mut cursor = Cursor::default();
            let mut failed: Option<anyhow::Error> = None;
            let mut going = true;
            let mut hook = |gpu: &mut recap::cuda::CudaReplay, op: OpId| -> Result<(), recap::cuda::CudaError> {
                if !going {
                    return Ok(());
                }
                let theirs = match host.step(&mut cursor, &mut NoObserver) {
                    Ok(o) => o,
                    Err(e) => {
                        failed = Some(anyhow::Error::new(e).context(format!("replaying on {}", Side::Cpu(engine))));
                        going = false;
                        return Ok(());
                    }
                };
                let read_cpu = |r| host.region_bytes(r).map_err(anyhow::Error::new);
                let read_gpu = |r| gpu.read_region(r).map_err(anyhow::Error::new);
                let result = if cuda_first {
                    comparison.after_op(Some(op), theirs, read_gpu, read_cpu)
                } else {
                    comparison.after_op(theirs, Some(op), read_cpu, read_gpu)
                };
                match result {
                    Ok(go) => going = go,
                    Err(e) => {
                        failed = Some(e);
                        going = false;
                    }
                }
                Ok(())
            };
            gpu.replay_each_op(&mut hook).with_context(|| format!("replaying on cuda:{ordinal}"))?;
            if let Some(e) = failed {
                return Err(e);
            }
            if going {
                // The GPU's iteration is over: so must the CPU's be.
                let rest = host.step(&mut cursor, &mut NoObserver)?;
                let (oa, ob) = if cuda_first { (None, rest) } else { (rest, None) };
                comparison.after_op(oa, ob, |_| Ok::<_, anyhow::Error>(Vec::new()), |_| Ok(Vec::new()))?;
            }
        }
        (Side::Cuda(_), Side::Cuda(_)) => {
            bail!("compare holds one GPU beside a CPU engine, or two CPU engines: compare each GPU with cpu")
        }
    }
    let outcome = comparison.finish();
    if args.json {
        println!("{}", serde_json::json!({"a": a.to_string(), "b": b.to_string(), "agree": outcome.agree(), "outcome": outcome}));
    } else {
        let name = |side: Side, file: &PathBuf| match &args.against {
            Some(_) => format!("{side} ({})", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()),
            None => side.to_string(),
        };
        print!("{}", report(&archive, &outcome, &name(a, &args.file), &name(b, file_b)));
    }
    Ok(if outcome.agree() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Whether `b` can be replayed beside `a` op by op: the same ops (kind and kernel name, in order)
/// over regions of the same sizes and types, in order (names may differ: a capture numbers the
/// buffers nobody named).
fn same_shape(a: &Archive, b: &Archive) -> Result<()> {
    if a.op_count() != b.op_count() || a.region_count() != b.region_count() {
        bail!("{} ops and {} regions against {} ops and {} regions", b.op_count(), b.region_count(), a.op_count(), a.region_count());
    }
    for (ra, rb) in a.regions().zip(b.regions()) {
        if (ra.size, ra.dtype) != (rb.size, rb.dtype) {
            bail!("region {} is {:?} of {} bytes here and {:?} of {} bytes there", ra.id, rb.name, rb.size, ra.name, ra.size);
        }
    }
    for id in 0..a.op_count() as OpId {
        let (oa, ob) = (a.op(id), b.op(id));
        let same = match (&oa, &ob) {
            (Op::Launch(x), Op::Launch(y)) => a.kernel(x.kernel).name == b.kernel(y.kernel).name,
            _ => oa.kind_name() == ob.kind_name(),
        };
        if !same {
            bail!("op {id} is {} here and {} there", b.op_label(id), a.op_label(id));
        }
    }
    Ok(())
}

/// The outcome as text: where the two sides part, or that they agree.
fn report(archive: &Archive, outcome: &Outcome, a: &str, b: &str) -> String {
    let mut s = String::new();
    for d in &outcome.divergences {
        s.push_str(&d.report(a, b));
        s.push('\n');
    }
    if let Some((after, na, nb)) = outcome.control {
        let next = |o: Option<OpId>| o.map_or("nothing (its iteration was over)".to_string(), |op| format!("op {op} ({})", archive.op_label(op)));
        let after = after.map_or("the start".to_string(), |op| format!("op {op} ({})", archive.op_label(op)));
        s.push_str(&format!("control flow parts after {after}: {a} ran {}, {b} ran {}\n", next(na), next(nb)));
    }
    let verdict = if outcome.agree() {
        format!("{a} and {b} agree")
    } else {
        format!("{a} and {b} differ at {} op(s)", outcome.divergences.len() + outcome.control.is_some() as usize)
    };
    s.push_str(&format!("{verdict}: {} ops, {} region comparisons\n", outcome.ops, outcome.regions));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_parse() {
        let s: Sides = "cpu,cuda:1".parse().unwrap();
        assert_eq!((s.0, s.1), (Side::Cpu(Engine::Jit), Side::Cuda(1)));
        let s: Sides = "interp, jit-scalar".parse().unwrap();
        assert_eq!((s.0, s.1), (Side::Cpu(Engine::Interpreter), Side::Cpu(Engine::JitScalar)));
        assert!("cpu".parse::<Sides>().unwrap_err().contains("A,B"));
        assert!("cpu,tpu".parse::<Sides>().unwrap_err().contains("tpu"));
    }
}

//! `recap trim FILE (--ops I..J | --body OP) -o OUT`: an archive of a stretch of another's ops,
//! standing on its own.
//!
//! The stretch is ops I through J of one body level (a while/if inside it comes whole), or the
//! body of one while/if (its first pass, run once). OUT's initial state is FILE's state just
//! before op I, computed by replaying FILE on the CPU up to there; its expected state is the state
//! just after op J, from FILE's own expected data where the stretch ends FILE (what the producer's
//! GPU gave) and from the same CPU replay otherwise. Regions, kernels and modules that the kept ops
//! cannot reach are left out; bindings and metadata of what remains are kept, with `trimmed_from`
//! and `trimmed_ops` added.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use recap::mapped::MappedFile;
use shared::archive::{
    Archive, ArchiveWriter, CopyOp, KernelId, LaunchDecl, MemsetOp, ModuleId, Op, OpId, RegionDecl, RegionId, Reloc,
};
use shared::plan::Plan;
use shared::replay::{CpuReplay, Cursor, NoObserver, ReplayOptions};

use super::limits::LimitArgs;

/// Cut a stretch of ops out of an archive into an archive of its own
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("stretch").required(true).args(["ops", "body"])))]
pub struct Args {
    pub file: PathBuf,
    /// Keep ops I through J (both included; `I..J`, or `I` alone), all of one body level
    #[arg(long, value_name = "I..J")]
    pub ops: Option<String>,
    /// Keep the body of this while/if op (one pass)
    #[arg(long, value_name = "OP")]
    pub body: Option<OpId>,
    /// The archive to write
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Most PTX instructions the CPU replay that computes the states may execute
    #[arg(long)]
    pub budget: Option<u64>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// `I..J` or `I`.
fn parse_range(s: &str) -> Result<(OpId, OpId)> {
    let num = |t: &str| t.trim().parse::<OpId>().with_context(|| format!("--ops {s:?}: {t:?} is not an op index"));
    let (i, j) = match s.split_once("..") {
        Some((i, j)) => (num(i)?, num(j.trim_start_matches('='))?),
        None => (num(s)?, num(s)?),
    };
    if i > j {
        bail!("--ops {s:?}: the first op comes after the last");
    }
    Ok((i, j))
}

/// The while/if each op is directly inside (`None` at the top level).
fn parents(a: &Archive) -> Vec<Option<OpId>> {
    let mut out = vec![None; a.op_count()];
    let mut open: Vec<(OpId, OpId)> = Vec::new(); // (owner, end)
    for id in 0..a.op_count() as OpId {
        while open.last().is_some_and(|&(_, end)| end == id) {
            open.pop();
        }
        out[id as usize] = open.last().map(|&(owner, _)| owner);
        if let Op::While { body_len, .. } | Op::If { body_len, .. } = a.op(id) {
            if body_len > 0 {
                open.push((id, id + 1 + body_len));
            }
        }
    }
    out
}

pub fn run(args: Args) -> Result<()> {
    let map = MappedFile::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", args.file.display()))?;
    let n = archive.op_count() as OpId;
    let (first, last) = match (&args.ops, args.body) {
        (Some(r), _) => parse_range(r)?,
        (_, Some(op)) => match (op < n).then(|| archive.op(op)) {
            Some(Op::While { body_len, .. } | Op::If { body_len, .. }) if body_len > 0 => (op + 1, op + body_len),
            Some(Op::While { .. } | Op::If { .. }) => bail!("op {op} has an empty body"),
            Some(_) => bail!("op {op} ({}) is not a while or if", archive.op_label(op)),
            None => bail!("op {op} does not exist: the archive has {n} ops"),
        },
        _ => unreachable!("clap requires --ops or --body"),
    };
    if last >= n {
        bail!("op {last} does not exist: the archive has {n} ops");
    }
    let parent = parents(&archive);
    for id in first..=last {
        if let Op::While { body_len, .. } | Op::If { body_len, .. } = archive.op(id) {
            if id + body_len > last {
                bail!(
                    "ops {first}..{last} cross a while/if body (op {id} ({}) ends at op {}): keep whole bodies, or one body with --body",
                    archive.op_label(id),
                    id + body_len
                );
            }
        }
        // Every kept op is inside the first one's body level, or inside a while/if that is kept.
        let mut p = parent[id as usize];
        while p.is_some_and(|q| q >= first && q <= last) {
            p = parent[p.unwrap() as usize];
        }
        if p != parent[first as usize] {
            bail!(
                "ops {first}..{last} cross a while/if body (op {id} is inside op {}): keep whole bodies, or one body with --body",
                p.or(parent[first as usize]).map_or("none".into(), |o| o.to_string())
            );
        }
    }

    // The states before and after the stretch, on the CPU.
    let options = ReplayOptions {
        instruction_budget: args.budget,
        limits: args.limits.limits(),
        jit_dump: recap::jit_dump::from_env(),
        ..Default::default()
    };
    let mut replay =
        CpuReplay::new(&archive, options).with_context(|| format!("loading {} for the CPU", args.file.display()))?;
    let mut cursor = Cursor::default();
    if !replay.run_to(&mut cursor, first).context("replaying up to the stretch")? {
        bail!("op {first} ({}) never runs in one iteration of {}", archive.op_label(first), args.file.display());
    }
    let plan = Plan::build(&archive);
    let mut regions: BTreeSet<RegionId> = BTreeSet::new();
    for id in first..=last {
        let access = &plan.access[id as usize];
        regions.extend(access.reads.iter().chain(&access.writes).map(|s| s.region));
        match archive.op(id) {
            Op::Alloc(r) | Op::Free(r) => {
                regions.insert(r);
            }
            Op::While { cond, .. } | Op::If { cond, .. } => {
                regions.insert(cond.region);
            }
            _ => {}
        }
    }
    // A pointer stored in a kept region keeps its target.
    loop {
        let more: Vec<RegionId> = archive
            .region_relocs()
            .filter(|(owner, r)| regions.contains(owner) && !regions.contains(&r.target))
            .map(|(_, r)| r.target)
            .collect();
        if more.is_empty() {
            break;
        }
        regions.extend(more);
    }
    let mut before: HashMap<RegionId, Option<Vec<u8>>> = HashMap::new();
    for &r in &regions {
        // A scratch region the stretch does not find allocated stays scratch: its own ops allocate it.
        before.insert(r, replay.read_region(r).ok());
    }
    // The stretch is over when its outermost op that holds `last` finishes (a while/if that does
    // not run its body finishes without running `last` at all).
    let mut tail = last;
    while let Some(p) = parent[tail as usize].filter(|&p| p >= first) {
        tail = p;
    }
    loop {
        match replay.step(&mut cursor, &mut NoObserver).context("replaying the stretch")? {
            Some(op) if op == tail => break,
            Some(_) => {}
            None => bail!("the iteration ended before op {last} finished"),
        }
    }
    let ends_archive = last + 1 == n && parent[first as usize].is_none();
    let mut after: HashMap<RegionId, Vec<u8>> = HashMap::new();
    for &r in &regions {
        if let Ok(bytes) = replay.read_region(r) {
            after.insert(r, bytes);
        }
    }

    // The new archive.
    let file = std::fs::File::create(&args.output).with_context(|| format!("creating {}", args.output.display()))?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let mut kernels: BTreeSet<KernelId> = BTreeSet::new();
    for id in first..=last {
        if let Op::Launch(l) = archive.op(id) {
            kernels.insert(l.kernel);
        }
    }
    let modules: BTreeSet<ModuleId> = kernels.iter().map(|&k| archive.kernel(k).module).collect();
    let mut module_ids = HashMap::new();
    for m in archive.modules().filter(|m| modules.contains(&m.id)) {
        let id = w.add_module(m.name, &m.ptx_text()?)?;
        for (sm, cubin) in &m.cubins {
            w.add_cubin(id, *sm, &cubin.decode()?)?;
        }
        module_ids.insert(m.id, id);
    }
    let mut kernel_ids = HashMap::new();
    for &k in &kernels {
        let kv = archive.kernel(k);
        kernel_ids.insert(k, w.add_kernel(module_ids[&kv.module], kv.name, kv.params.clone())?);
    }
    // The devices stay as they were, so that ops and regions keep their placement.
    for d in archive.devices() {
        w.add_device(&d)?;
    }
    let mut region_ids = HashMap::new();
    for &r in &regions {
        let rv = archive.region(r);
        let scratch = before[&r].is_none();
        let decl = RegionDecl {
            name: rv.name.to_string(),
            size: rv.size,
            align: rv.align,
            dtype: rv.dtype,
            shape: rv.shape.clone(),
            scratch,
            device: rv.device,
        };
        let id = w.add_region(decl)?;
        if let Some(bytes) = &before[&r] {
            w.set_initial_bytes(id, bytes)?;
        }
        let tolerance = rv.tolerance.unwrap_or(shared::archive::Tolerance::Exact);
        match (ends_archive, rv.expected, after.get(&r)) {
            (true, Some(blob), _) => w.set_expected_bytes(id, &blob.decode()?, tolerance)?,
            (_, _, Some(bytes)) => w.set_expected_bytes(id, bytes, tolerance)?,
            _ => {}
        }
        region_ids.insert(r, id);
    }
    let remap = |r: &Reloc| Reloc { offset: r.offset, target: region_ids[&r.target], target_offset: r.target_offset };
    for (owner, r) in archive.region_relocs().filter(|(owner, _)| regions.contains(owner)) {
        w.add_region_reloc(region_ids[&owner], remap(&r))?;
    }
    let mut ends: Vec<OpId> = Vec::new();
    for id in first..=last {
        while ends.last() == Some(&id) {
            ends.pop();
            w.end_body()?;
        }
        let region = |r: RegionId| region_ids[&r];
        w.set_device(archive.op_device(id))?;
        match archive.op(id) {
            Op::Launch(l) => {
                let relocs = archive.relocs(l.relocs.clone()).map(|r| remap(&r)).collect();
                w.launch(LaunchDecl {
                    kernel: kernel_ids[&l.kernel],
                    grid: l.grid,
                    block: l.block,
                    shared_bytes: l.shared_bytes,
                    params: l.params.to_vec(),
                    relocs,
                })?;
            }
            Op::Copy(c) => {
                w.copy(CopyOp { src: region(c.src), dst: region(c.dst), ..c })?;
            }
            Op::Memset(m) => {
                w.memset(MemsetOp { region: region(m.region), ..m })?;
            }
            Op::Alloc(r) => {
                w.alloc(region(r))?;
            }
            Op::Free(r) => {
                w.free(region(r))?;
            }
            Op::While { cond, body_len } | Op::If { cond, body_len } => {
                let cond = shared::archive::Condition { region: region(cond.region), ..cond };
                if matches!(archive.op(id), Op::While { .. }) {
                    w.begin_while(cond)?;
                } else {
                    w.begin_if(cond)?;
                }
                if body_len == 0 {
                    w.end_body()?;
                } else {
                    ends.push(id + 1 + body_len);
                }
            }
            Op::Marker(name) => {
                w.marker(name)?;
            }
            Op::Signal(e) => {
                w.signal(e)?;
            }
            Op::Wait(e) => {
                w.wait(e)?;
            }
            Op::Library(l) => {
                w.library(l.map_regions(region))?;
            }
        }
    }
    for _ in ends {
        w.end_body()?;
    }
    for b in archive.bindings().filter(|b| regions.contains(&b.region)) {
        w.add_binding(b.name, region_ids[&b.region], b.direction)?;
    }
    for (k, v) in archive.meta() {
        w.set_meta(k, v);
    }
    let source = args.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    w.set_meta("trimmed_from", &source);
    w.set_meta("trimmed_ops", &format!("{first}..{last}"));
    use std::io::Write as _;
    w.finish()?.flush()?;
    println!(
        "wrote {}: ops {first}..{last} of {} ({} ops, {} regions, {} kernels)",
        args.output.display(),
        args.file.display(),
        last - first + 1,
        regions.len(),
        kernels.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("3..7").unwrap(), (3, 7));
        assert_eq!(parse_range("3..=7").unwrap(), (3, 7));
        assert_eq!(parse_range("4").unwrap(), (4, 4));
        assert!(parse_range("7..3").is_err());
        assert!(parse_range("a..3").is_err());
    }
}

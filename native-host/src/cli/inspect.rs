//! `recap inspect FILE`: a readable summary of an archive and its op list.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use recap::mapped::MappedFile;
use serde_json::{json, Value};
use shared::archive::{Archive, Op, OpId, ParamKind, Tolerance};

/// Print an archive's modules, kernels, regions, bindings, metadata and op list
#[derive(clap::Args)]
pub struct Args {
    pub file: PathBuf,
    /// JSON Lines instead of text: one object per header, module, kernel, region, pointer inside a
    /// region, binding, metadata entry and op, each with a `type`
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let map = MappedFile::open(&args.file).with_context(|| format!("{}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("{}", args.file.display()))?;
    if args.json {
        let mut out = std::io::stdout().lock();
        for record in records(&archive) {
            writeln!(out, "{record}")?;
        }
    } else {
        print!("{}", summary(&archive));
    }
    // The structure above was checked by `open`; the data it describes is checked here, so a
    // damaged archive never passes for a good one.
    archive.verify_blobs().with_context(|| format!("{}", args.file.display()))?;
    Ok(())
}

/// A byte count for people: `1.5 MiB`.
/// `f32 ×254 at 8..1024 (<f4), ...`: the first few stretches the program's arrays typed.
fn declared_line(d: &[shared::archive::declared::DeclaredType]) -> String {
    const SHOWN: usize = 6;
    let mut parts: Vec<String> = d
        .iter()
        .take(SHOWN)
        .map(|t| {
            format!(
                "{} ×{} at {}..{} ({})",
                t.ty.name(),
                t.len / t.ty.size() as u64,
                t.offset,
                t.offset + t.len,
                t.from
            )
        })
        .collect();
    if d.len() > SHOWN {
        parts.push(format!("and {} more", d.len() - SHOWN));
    }
    parts.join(", ")
}

pub(crate) fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / (1u64 << 10) as f64),
        b => format!("{b} B"),
    }
}

fn tolerance(t: &Tolerance) -> String {
    match t {
        Tolerance::Exact => "exact".into(),
        Tolerance::Close { rtol, atol } => format!("rtol {rtol:e} atol {atol:e}"),
        Tolerance::MismatchFraction { max_fraction } => format!("at most {max_fraction} of elements differ"),
    }
}

/// The archive as records, one per entity, in the order of the text report: what `--json` prints
/// and what `recap diff` compares. A module's PTX is named by its BLAKE3 hash (16 hex digits), so two
/// archives' modules compare without their text.
pub fn records(a: &Archive) -> Vec<Value> {
    let mut out = Vec::new();
    let (major, minor) = a.version();
    out.push(json!({
        "type": "header", "format": format!("{major}.{minor}"), "bytes": a.len(),
        "modules": a.module_count(), "kernels": a.kernel_count(), "regions": a.region_count(),
        "bindings": a.binding_count(), "ops": a.op_count()
    }));
    if a.device_count() > 1 {
        out[0]["devices"] = json!(a.device_count());
    }
    for (i, d) in a.devices().enumerate() {
        out.push(json!({"type": "device", "id": i, "name": d.name, "sm": d.sm}));
    }
    for m in a.modules() {
        let ptx = m.ptx_text().map(|t| blake3::hash(t.as_bytes()).to_hex()[..16].to_string()).ok();
        let cubins: Vec<Value> = m.cubins.iter().map(|(sm, c)| json!({"sm": sm, "bytes": c.len()})).collect();
        out.push(json!({"type": "module", "id": m.id, "name": m.name, "ptx_bytes": m.ptx.len(), "ptx_blake3": ptx, "cubins": cubins}));
    }
    let types = declared_types(a);
    for k in a.kernels() {
        out.push(json!({
            "type": "kernel", "id": k.id, "name": k.name, "module": k.module, "params": k.params,
            "param_types": types[k.id as usize],
        }));
    }
    let declared = shared::archive::declared::of_archive(a);
    if let Err(e) = &declared {
        out.push(json!({"type": "error", "what": e.to_string()}));
    }
    for r in a.regions() {
        out.push(json!({
            "type": "region", "id": r.id, "name": r.name, "size": r.size, "dtype": r.dtype.name(), "shape": r.shape,
            "align": r.align, "scratch": r.scratch, "initial": r.initial.is_some(), "expected": r.expected.is_some(),
            "tolerance": r.tolerance,
        }));
        if let Some(layout) = a.typed_layout(r.id) {
            out.last_mut().expect("just pushed")["types"] = json!(layout);
        }
        if let Some(d) = declared.as_ref().ok().and_then(|d| d.get(&r.id)) {
            out.last_mut().expect("just pushed")["declared_types"] = json!(d);
        }
        if a.device_count() > 1 {
            out.last_mut().expect("just pushed")["device"] = json!(r.device);
        }
    }
    for (owner, r) in a.region_relocs() {
        out.push(json!({
            "type": "region_pointer", "region": a.region(owner).name, "offset": r.offset,
            "target": a.region(r.target).name, "target_offset": r.target_offset,
        }));
    }
    for b in a.bindings() {
        out.push(json!({"type": "binding", "name": b.name, "direction": b.direction.name(), "region": a.region(b.region).name}));
    }
    for (k, v) in a.meta() {
        out.push(json!({"type": "meta", "key": k, "value": v}));
    }
    let mut open: Vec<OpId> = Vec::new();
    for id in 0..a.op_count() as OpId {
        while open.last() == Some(&id) {
            open.pop();
        }
        let op = a.op(id);
        let mut rec =
            json!({"type": "op", "id": id, "kind": op.kind_name(), "depth": open.len(), "label": a.op_label(id)});
        let fields = match op {
            Op::Launch(l) => {
                let relocs: Vec<Value> = a
                    .relocs(l.relocs.clone())
                    .map(|r| json!({"offset": r.offset, "target": a.region(r.target).name, "target_offset": r.target_offset}))
                    .collect();
                let hex: String = l.params.iter().map(|b| format!("{b:02x}")).collect();
                json!({
                    "kernel": a.kernel(l.kernel).name, "grid": l.grid, "block": l.block,
                    "shared_bytes": l.shared_bytes, "params": hex, "pointers": relocs,
                })
            }
            Op::Copy(c) => json!({
                "src": a.region(c.src).name, "src_offset": c.src_offset, "dst": a.region(c.dst).name,
                "dst_offset": c.dst_offset, "len": c.len,
            }),
            Op::Memset(m) => json!({
                "region": a.region(m.region).name, "offset": m.offset, "len": m.len, "width": m.width, "pattern": m.pattern,
            }),
            Op::Alloc(r) | Op::Free(r) => json!({"region": a.region(r).name}),
            Op::While { cond, body_len } | Op::If { cond, body_len } => {
                if body_len > 0 {
                    open.push(id + 1 + body_len);
                }
                json!({
                    "region": a.region(cond.region).name, "offset": cond.offset,
                    "max_iterations": cond.max_iterations, "body_len": body_len,
                })
            }
            Op::Marker(name) => json!({"name": name}),
            Op::Signal(e) | Op::Wait(e) => json!({"event": e}),
            Op::Library(l) => json!({
                "routine": l.name(), "count": l.count(), "dtype": l.dtype().name(),
                "operands": l.operands().unwrap_or_default().iter().map(|o| json!({
                    "role": o.role, "region": a.region(o.at.region).name, "offset": o.at.offset, "len": o.len,
                    "written": o.written,
                })).collect::<Vec<_>>(),
            }),
        };
        if a.device_count() > 1 {
            rec["device"] = json!(a.op_device(id));
        }
        if let (Some(rec), Value::Object(fields)) = (rec.as_object_mut(), fields) {
            rec.extend(fields);
        }
        out.push(rec);
    }
    out
}

/// The whole report as text (kept separate from printing so it can be tested and reused).
pub fn summary(a: &Archive) -> String {
    let mut s = String::new();
    let (major, minor) = a.version();
    let _ = writeln!(s, "recap archive, format {major}.{minor}, {} ({} bytes)", human(a.len()), a.len());

    let _ = writeln!(s, "\nmodules ({})", a.module_count());
    for m in a.modules() {
        let _ = write!(s, "  [{}] {}: PTX {} ({} stored)", m.id, m.name, human(m.ptx.len()), human(m.ptx.stored_len()));
        for (sm, c) in &m.cubins {
            let _ = write!(s, ", cubin sm_{sm} {}", human(c.len()));
        }
        s.push('\n');
    }

    if a.device_count() > 1 {
        let _ = writeln!(s, "\ndevices ({})", a.device_count());
        for (i, d) in a.devices().enumerate() {
            let sm = if d.sm > 0 { format!(", captured on sm_{}", d.sm) } else { String::new() };
            let _ = writeln!(s, "  [{i}] {}{sm}", d.name);
        }
    }

    let _ = writeln!(s, "\nkernels ({})", a.kernel_count());
    let types = declared_types(a);
    for k in a.kernels() {
        let _ = writeln!(s, "  [{}] {} (module {}, {} parameter bytes)", k.id, k.name, k.module, k.params_size());
        for (p, ty) in k.params.iter().zip(&types[k.id as usize]) {
            let kind = if p.kind == ParamKind::Pointer { "pointer" } else { "value" };
            let ty = ty.as_deref().map(|t| format!(".{t}")).unwrap_or_default();
            let _ =
                writeln!(s, "      +{:<4} {:>4} B align {:<2} {kind:<7} {ty:<6} {}", p.offset, p.size, p.align, p.name);
        }
    }

    let _ = writeln!(s, "\nregions ({})", a.region_count());
    let declared = shared::archive::declared::of_archive(a);
    if let Err(e) = &declared {
        let _ = writeln!(s, "  the program's array types are unreadable: {e}");
    }
    for r in a.regions() {
        let shape = r.shape.iter().map(u64::to_string).collect::<Vec<_>>().join("×");
        let _ = write!(s, "  [{}] {}: {} {}[{shape}], align {}", r.id, r.name, human(r.size), r.dtype.name(), r.align);
        if a.device_count() > 1 {
            let _ = write!(s, ", on device {}", r.device);
        }
        if r.scratch {
            s.push_str(", scratch");
        }
        if let Some(b) = &r.initial {
            let _ = write!(s, ", initial ({} stored)", human(b.stored_len()));
        }
        if let Some(b) = &r.expected {
            let _ = write!(s, ", expected ({} stored)", human(b.stored_len()));
        }
        if let Some(t) = &r.tolerance {
            let _ = write!(s, ", tolerance {}", tolerance(t));
        }
        s.push('\n');
        if let Some(layout) = a.typed_layout(r.id) {
            let _ = writeln!(s, "      types: {}", super::infer_types::layout_line(&layout));
        }
        if let Some(d) = declared.as_ref().ok().and_then(|d| d.get(&r.id)) {
            let _ = writeln!(s, "      the program's arrays: {}", declared_line(d));
        }
        for sp in a.recorded_spread(r.id) {
            let _ = writeln!(
                s,
                "      spread at capture: bytes {}..{}: repeated runs disagree on {} elements by up to {} ulps (|d| {:.3e})",
                sp.offset,
                sp.offset + sp.len,
                sp.elements,
                sp.ulps,
                sp.abs
            );
        }
    }
    let region_relocs: Vec<_> = a.region_relocs().collect();
    if !region_relocs.is_empty() {
        let _ = writeln!(s, "\npointers inside regions ({})", region_relocs.len());
        for (owner, r) in region_relocs {
            let _ = writeln!(
                s,
                "  {}+{} -> {}+{}",
                a.region(owner).name,
                r.offset,
                a.region(r.target).name,
                r.target_offset
            );
        }
    }
    let effects: Vec<_> = a.effects().collect();
    if !effects.is_empty() {
        let _ = writeln!(s, "\nrecorded effects ({}): launches without PTX, applied by CPU replays", effects.len());
        for e in effects {
            let writes: Vec<String> = e
                .writes
                .iter()
                .map(|(r, offset, bytes)| format!("{}+{offset} ({})", a.region(*r).name, human(bytes.len())))
                .collect();
            let writes = if writes.is_empty() { "nothing".to_string() } else { writes.join(", ") };
            let _ = writeln!(s, "  op {}: wrote {writes}; inputs {}", e.op, shared::effects::hex(&e.inputs));
        }
    }

    let _ = writeln!(s, "\nbindings ({})", a.binding_count());
    for b in a.bindings() {
        let _ = writeln!(s, "  {} ({}) -> region {}", b.name, b.direction.name(), a.region(b.region).name);
    }

    let meta: Vec<_> = a.meta().collect();
    if !meta.is_empty() {
        let _ = writeln!(s, "\nmeta");
        for (k, v) in meta {
            let _ = writeln!(s, "  {k}: {v}");
        }
    }

    let _ = writeln!(s, "\nops ({})", a.op_count());
    write_ops(&mut s, a);
    s
}

/// Each kernel's parameters' declared element types (`u32`, `f32`), in kernel and parameter order,
/// read from its module's `.entry`; `None` where the PTX does not declare one that matches.
fn declared_types(a: &Archive) -> Vec<Vec<Option<String>>> {
    let mut texts: Vec<Option<String>> = vec![None; a.module_count()];
    a.kernels()
        .map(|k| {
            let text =
                texts[k.module as usize].get_or_insert_with(|| a.module(k.module).ptx_text().unwrap_or_default());
            let entry = shared::ptx::signature::entry_params(text, k.name).unwrap_or_default();
            k.params
                .iter()
                .map(|p| entry.iter().find(|e| e.offset == p.offset && e.size == p.size).map(|e| e.ty.clone()))
                .collect()
        })
        .collect()
}

/// The op list in stored (pre-order) order, bodies indented under their while/if and closed with `}`.
fn write_ops(s: &mut String, a: &Archive) {
    let types = declared_types(a);
    // Ends of the bodies currently open, innermost last.
    let mut open: Vec<OpId> = Vec::new();
    for id in 0..a.op_count() as OpId {
        while open.last() == Some(&id) {
            open.pop();
            let _ = writeln!(s, "{}      }}", "  ".repeat(open.len() + 1));
        }
        let indent = "  ".repeat(open.len() + 1);
        let _ = write!(s, "{indent}{id:>4}  ");
        if a.device_count() > 1 {
            let _ = write!(s, "[device {}] ", a.op_device(id));
        }
        let region = |r: u32| a.region(r).name;
        match a.op(id) {
            Op::Launch(l) => {
                let k = a.kernel(l.kernel);
                let _ = write!(
                    s,
                    "launch {} grid {}x{}x{} block {}x{}x{}",
                    k.name, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]
                );
                if l.shared_bytes > 0 {
                    let _ = write!(s, " shared {} B", l.shared_bytes);
                }
                let relocs: Vec<_> = a.relocs(l.relocs.clone()).collect();
                let args: Vec<String> = k
                    .params
                    .iter()
                    .zip(&types[l.kernel as usize])
                    .map(|(p, ty)| {
                        let short = p.name.strip_prefix(k.name).and_then(|n| n.strip_prefix('_')).unwrap_or(&p.name);
                        let (start, end) = (p.offset as u64, p.offset as u64 + p.size as u64);
                        let inside: Vec<String> = relocs
                            .iter()
                            .filter(|r| r.offset >= start && r.offset < end)
                            .map(|r| {
                                let at =
                                    if r.offset == start { String::new() } else { format!("+{}=", r.offset - start) };
                                let plus =
                                    if r.target_offset == 0 { String::new() } else { format!("+{}", r.target_offset) };
                                format!("{at}&{}{plus}", region(r.target))
                            })
                            .collect();
                        let bytes = &l.params[start as usize..end as usize];
                        let value = match (inside.is_empty(), p.size) {
                            (false, 8) if relocs.iter().any(|r| r.offset == start) => inside.join(""),
                            (false, _) => format!("{{{} B: {}}}", p.size, inside.join(", ")),
                            // Values as their declared type reads them (a u32 an integer, an f32 a float).
                            (true, n) if n <= 32 => shared::ptx::signature::format_value(ty.as_deref(), bytes),
                            (true, n) => format!("{{{n} B}}"),
                        };
                        format!("{short}={value}")
                    })
                    .collect();
                if !args.is_empty() {
                    let _ = write!(s, " ({})", args.join(", "));
                }
            }
            Op::Copy(c) => {
                let _ = write!(
                    s,
                    "copy {} B {}+{} -> {}+{}",
                    c.len,
                    region(c.src),
                    c.src_offset,
                    region(c.dst),
                    c.dst_offset
                );
            }
            Op::Memset(m) => {
                let _ = write!(
                    s,
                    "memset {} B of {}+{} with {:#0w$x} ({}-byte pattern)",
                    m.len,
                    region(m.region),
                    m.offset,
                    m.pattern,
                    m.width,
                    w = 2 + 2 * m.width as usize
                );
            }
            Op::Alloc(r) => {
                let _ = write!(s, "alloc {}", region(r));
            }
            Op::Free(r) => {
                let _ = write!(s, "free {}", region(r));
            }
            op @ (Op::While { cond, body_len } | Op::If { cond, body_len }) => {
                let kind = op.kind_name();
                let _ = write!(s, "{kind} u32 at {}+{} != 0", region(cond.region), cond.offset);
                if kind == "while" && cond.max_iterations > 0 {
                    let _ = write!(s, " (at most {} iterations)", cond.max_iterations);
                }
                let _ = write!(s, " {{ {body_len} op(s)");
                if body_len == 0 {
                    let _ = write!(s, " }}");
                } else {
                    open.push(id + 1 + body_len);
                }
            }
            Op::Marker(name) => {
                let _ = write!(s, "marker {name}");
            }
            Op::Signal(e) => {
                let _ = write!(s, "signal event {e}");
            }
            Op::Wait(e) => {
                let _ = write!(s, "wait for event {e}");
            }
            Op::Library(_) => {
                let _ = write!(s, "library {}", a.op_label(id));
            }
        }
        s.push('\n');
    }
    while open.pop().is_some() {
        let _ = writeln!(s, "{}      }}", "  ".repeat(open.len() + 1));
    }
}

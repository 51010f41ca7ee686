//! The recording of a range written as a `.recap` archive.
//!
//! Allocations become regions named by their allocation order (`alloc7`), their contents at first
//! touch the initial state and at the end of the range the expected state, so every capture checks
//! itself on replay. Host data a copy uploaded becomes a region of its own (`upload3`) and the copy
//! a device copy from it. Pointers found in kernel parameters and in region contents become
//! relocations and their bytes zeros. Each region's captured address is kept apart, in the
//! metadata (`capture.addresses`), for replays that place regions there: where the capture
//! cannot be certain it saw every pointer (placement.rs), the archive asks for that, and a region
//! that holds pointers keeps its expected state; otherwise it has none (a replay's addresses
//! differ), which the report says.
//!
//! A range that ran on several GPUs gets one archive device per GPU (`cuda:N`, with that GPU's
//! architecture), each region on the device of its allocation and each op on the device it was
//! issued to; where the device changes from one op to the next, a signal on the device left and a
//! wait on the device entered keep issue order between them (`record/devices.rs`). A range on one
//! GPU declares no devices, and its archive is what it always was.
//!
//! The writer reads nothing of the process around it: the request (in the recording), the
//! bindings and the code images come in as arguments, and what it learns goes into the report the
//! caller hands it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use shared::archive::{
    ArchiveWriter, Condition, CopyOp, DType, DeviceDecl, DeviceId, EventId, LaunchDecl, MemsetOp, ModuleId, OpId,
    ParamDecl, ParamKind, RegionDecl, RegionId, Reloc, Tolerance,
};

use crate::control::Bind;
use crate::images::ModuleImage;
use crate::record::module_vars::Vars;
use crate::record::{region_name, OpRec, Recording};
use crate::sys::CUdevice;
use shared::capture::{KernelReport, Report};
use shared::launch_attrs::LaunchAttrUse;
use shared::placement::{self, Address, Placement};
use shared::tensor_map::TensorMapUse;

/// What a binding of the controlled range makes of the region of its allocation.
struct Bound<'b> {
    bind: &'b Bind,
    /// The region's size: the binding's bytes, which may end before the allocation does (an
    /// allocator rounds sizes up).
    size: u64,
}

/// The region each binding names: the allocation that starts at its pointer. A pointer inside an
/// allocation (a memory pool's block) or memory the range never touched is reported instead.
fn bound_regions<'b>(report: &mut Report, rec: &Recording, binds: &'b [Bind]) -> HashMap<usize, Bound<'b>> {
    let mut out = HashMap::new();
    for bind in binds {
        // The newest region at that address: an allocation freed in the range may have had it before
        // (a framework's temporaries), and a binding names memory live when the range ends.
        let exact = rec.regions.iter().rposition(|r| r.alloc.base == bind.ptr && bind.bytes <= r.alloc.size);
        match exact {
            Some(r) if out.contains_key(&r) => report.incomplete(format!(
                "binding {}: its memory is already bound under another name",
                bind.name
            )),
            Some(r) => drop(out.insert(r, Bound { bind, size: bind.bytes })),
            None => match rec.regions.iter().rfind(|r| r.alloc.base < bind.ptr && bind.ptr < r.alloc.base + r.alloc.size) {
                Some(r) => report.incomplete(format!(
                    "binding {}: it lies {} bytes into {} ({} bytes), a memory pool's block, so it is not bound; \
                     disable the pool for the capture (PYTORCH_NO_CUDA_MEMORY_CACHING=1, cupy.cuda.set_allocator(None))",
                    bind.name,
                    bind.ptr - r.alloc.base,
                    region_name(&r.alloc),
                    r.alloc.size
                )),
                None => report.incomplete(format!(
                    "binding {}: the captured work never touched its memory, so it is not bound",
                    bind.name
                )),
            },
        }
    }
    out
}

/// The element types the program's arrays declared as the range ended (`declared.rs`), kept as
/// the archive's metadata, with a note of what they typed.
fn declare_types<W: std::io::Write + std::io::Seek>(
    report: &mut Report,
    rec: &Recording,
    bound: &HashMap<usize, Bound<'_>>,
    regions: &[RegionId],
    w: &mut ArchiveWriter<W>,
) {
    let sizes: Vec<u64> =
        rec.regions.iter().enumerate().map(|(i, r)| bound.get(&i).map_or(r.alloc.size, |b| b.size)).collect();
    let (mut declared, _, dropped) = crate::declared::for_regions(rec, &sizes);
    crate::declared::clear();
    if dropped > 0 {
        report.note(format!("the program held more live arrays than recap keeps types of: {dropped} were left out"));
    }
    if declared.is_empty() {
        return;
    }
    let mut by_source: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for d in &declared {
        *by_source.entry(d.from.as_str()).or_default() += 1;
    }
    let sources: Vec<String> = by_source.iter().map(|(from, n)| format!("{from} ×{n}")).collect();
    report.note(format!(
        "{} stretches ({} bytes) typed by the program's arrays as the range ended: {}",
        declared.len(),
        declared.iter().map(|d| d.len).sum::<u64>(),
        sources.join(", ")
    ));
    for d in &mut declared {
        d.region = regions[d.region as usize];
    }
    w.set_meta(
        shared::archive::declared::META_KEY,
        &serde_json::to_string(&declared).expect("declared types serialise"),
    );
}

/// Writes the archive of `rec` (through a temporary file, renamed into place when complete) where
/// its request says, with `binds` as its bindings, and the report where the request asks (JSON).
/// Cubins NVRTC made get their program's PTX in `modules` now; everything the writing finds out
/// (and what `ptxas` runs and nvJitLink's links of LTO-IR did) goes into `report`.
pub fn write(rec: &Recording, binds: &[Bind], modules: &mut [ModuleImage], vars: &Vars, report: &mut Report) {
    let request = &rec.request;
    // After the range, so that NVRTC's compiles cost the program's range nothing (nvrtc.rs).
    crate::nvrtc::complete(modules, report);
    // Links of LTO-IR made again with nvJitLink for their PTX (nvjitlink.rs).
    crate::nvjitlink::notes(report);
    // `ptxas` runs that left no cubin to key their PTX by (ptxas.rs).
    crate::ptxas::notes(report);
    report.sm = rec.sm;
    report.regions = rec.regions.len() as u64;
    report.upload_bytes = rec.uploads.iter().map(|u| u.bytes.len() as u64).sum();
    let out = &request.output;
    if rec.ops.iter().all(|op| matches!(op, OpRec::Refused)) {
        report.error = Some("the range recorded no work".into());
    } else {
        let tmp = out.with_extension("recap.partial");
        let written = build(rec, binds, modules, vars, report, &tmp)
            .and_then(|()| std::fs::rename(&tmp, out).map_err(BuildError::from));
        match written {
            Ok(()) => report.archive = Some(out.display().to_string()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                report.error = Some(format!("writing {}: {e}", out.display()));
            }
        }
    }
    if let Some(path) = &request.report {
        let json = serde_json::to_string_pretty(report).expect("the report serialises");
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("recap capture: writing the report {}: {e}", path.display());
        }
    }
}

/// Why an archive could not be written; the report keeps the message after the archive's path.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Archive(#[from] shared::archive::WriteError),
    #[error("a launch of a kernel with no launches recorded")]
    UnrecordedKernel,
    #[error("an upload that was not written")]
    UnwrittenUpload,
}

/// The archive device of each GPU the range used, in ordinal order, declared in `w`: none when it
/// used one GPU (everything is then on the archive's one implicit device).
fn declare_devices<W: std::io::Write + std::io::Seek>(
    rec: &Recording,
    report: &mut Report,
    w: &mut ArchiveWriter<W>,
) -> Result<BTreeMap<CUdevice, DeviceId>, BuildError> {
    let mut used: BTreeSet<CUdevice> = rec.regions.iter().map(|r| r.alloc.device).collect();
    for (i, op) in rec.ops.iter().enumerate() {
        if !matches!(op, OpRec::Refused | OpRec::EndBody) {
            used.insert(rec.devices.of_op(i));
        }
    }
    let mut placed = BTreeMap::new();
    if used.len() <= 1 {
        return Ok(placed);
    }
    if let Some(why) = reach_across_devices(rec) {
        report.note(format!(
            "the range ran on {} GPUs, but {why}, which an archive's devices cannot express (peer access): \
             written as a one-device archive, which replays on one GPU or the CPU",
            used.len()
        ));
        return Ok(placed);
    }
    let mut names = Vec::new();
    for &ordinal in &used {
        let sm = rec.devices.sms.get(&ordinal).copied().unwrap_or(0);
        let name = format!("cuda:{ordinal}");
        placed.insert(ordinal, w.add_device(&DeviceDecl { name: name.clone(), sm })?);
        names.push(format!("{name} (sm_{sm})"));
    }
    report.note(format!(
        "the range ran on {} GPUs ({}): one archive device each, their order kept by a signal and a wait at \
         every change of device",
        used.len(),
        names.join(", ")
    ));
    Ok(placed)
}

/// The first piece of work of `rec` that reaches the memory of a GPU other than its own (a kernel
/// given a pointer into a peer's memory, a memset or a loop condition there, a pointer stored in
/// one GPU's memory to another's), said as a phrase; `None` when each piece stays on its GPU.
/// Copies between GPUs are not counted: the archive keeps them as copies.
fn reach_across_devices(rec: &Recording) -> Option<String> {
    let device_of = |region: usize| rec.regions[region].alloc.device;
    let name = |region: usize| region_name(&rec.regions[region].alloc);
    for (i, op) in rec.ops.iter().enumerate() {
        let on = rec.devices.of_op(i);
        let reached = match op {
            OpRec::Launch { kernel, relocs, .. } => relocs.iter().find(|r| device_of(r.1) != on).map(|r| {
                format!(
                    "op {i} (kernel {}) on GPU {on} is given a pointer into {}",
                    rec.kernels[*kernel].name,
                    name(r.1)
                )
            }),
            OpRec::Upload { upload, dst, .. } => {
                rec.uploads[*upload].relocs.iter().find(|r| device_of(r.1) != device_of(*dst)).map(|r| {
                    format!("op {i} (a copy from the host) stores in {} a pointer into {}", name(*dst), name(r.1))
                })
            }
            OpRec::Memset { dst, .. } if device_of(*dst) != on => {
                Some(format!("op {i} (a memset on GPU {on}) fills {}", name(*dst)))
            }
            OpRec::While { region } | OpRec::If { region } if device_of(*region) != on => {
                Some(format!("op {i} (a loop or branch on GPU {on}) reads its condition in {}", name(*region)))
            }
            _ => None,
        };
        if reached.is_some() {
            return reached;
        }
    }
    rec.regions.iter().enumerate().find_map(|(i, r)| {
        r.relocs
            .iter()
            .find(|reloc| device_of(reloc.1) != r.alloc.device)
            .map(|reloc| format!("{} holds a pointer into {} of another GPU", name(i), name(reloc.1)))
    })
}

fn build(
    rec: &Recording,
    binds: &[Bind],
    modules: &[ModuleImage],
    vars: &Vars,
    report: &mut Report,
    path: &Path,
) -> Result<(), BuildError> {
    let mut w = ArchiveWriter::new(BufWriter::new(File::create(path)?))?;

    // Which parameters ever held a pointer: those are declared pointers.
    let mut pointer_words: HashMap<usize, Vec<u64>> = HashMap::new();
    for op in &rec.ops {
        if let OpRec::Launch { kernel, relocs, .. } = op {
            pointer_words.entry(*kernel).or_default().extend(relocs.iter().map(|r| r.0));
        }
    }

    let images = modules;
    let mut modules: HashMap<usize, ModuleId> = HashMap::new();
    let mut kernels = Vec::new();
    let mut reports = Vec::new();
    for (k, kernel) in rec.kernels.iter().enumerate() {
        // Only launches the driver refused: the archive has no use for the kernel.
        if kernel.launches == 0 {
            kernels.push(None);
            continue;
        }
        let image = &images[kernel.module];
        let parsed = image.parsed();
        // The machine code kept: the cubin for the capture GPU's architecture (a bare cubin, sm 0,
        // is for the GPU it was loaded on), at most one.
        let cubin = parsed
            .and_then(|p| p.cubins.iter().find(|(sm, _)| *sm == rec.sm || *sm == 0).map(|(_, bytes)| bytes.as_slice()));
        // A module that sets conditions gets them as stores into their regions, and is replayed
        // from that PTX only (its cubin calls the driver's function).
        let ptx = parsed.and_then(|p| p.ptx.as_deref()).unwrap_or("");
        let conditional = shared::cuda_graph::define_set_conditional(ptx);
        let cubin = if conditional.is_some() { None } else { cubin };
        let module = match modules.get(&kernel.module) {
            Some(&m) => m,
            None => {
                let ptx = conditional.as_deref().unwrap_or(ptx);
                let m = w.add_module(&format!("module{}", kernel.module), ptx)?;
                if let Some(cubin) = cubin {
                    w.add_cubin(m, rec.sm, cubin)?;
                }
                modules.insert(kernel.module, m);
                m
            }
        };
        let words = pointer_words.get(&k).cloned().unwrap_or_default();
        let params = kernel
            .layout
            .params
            .iter()
            .map(|(name, offset, size, align)| ParamDecl {
                name: name.clone(),
                offset: *offset,
                size: *size,
                align: *align,
                kind: if *size == 8 && words.contains(&(*offset as u64)) {
                    ParamKind::Pointer
                } else {
                    ParamKind::Value
                },
            })
            .collect();
        kernels.push(Some(w.add_kernel(module, &kernel.name, params)?));
        reports.push(KernelReport {
            name: kernel.name.clone(),
            module: image.via.clone(),
            launches: kernel.launches,
            ptx: parsed.is_some_and(|p| p.ptx.is_some()),
            ptx_from: parsed.map_or_else(|| "none: the image could not be read".into(), |p| p.ptx_from.clone()),
            cubins: cubin.map(|_| rec.sm).into_iter().collect(),
            layout_from: kernel.layout.from.to_string(),
        });
    }
    report.kernels = reports;

    // Regions at their captured addresses on replay, where the capture cannot be certain it saw
    // every pointer (placement.rs); a region holding pointers is then checked too.
    let placed = crate::placement::decide(rec, rec.request.place_regions);
    if placed.is_some() {
        for (a, b) in crate::placement::overlaps(rec) {
            report.incomplete(format!(
                "{a} and {b} had overlapping addresses (memory freed and allocated again in the range), \
                 so a replay cannot place both at their captured addresses"
            ));
        }
    }
    report.placement = placed.clone();

    let devices = declare_devices(rec, report, &mut w)?;
    let on = |ordinal: CUdevice| devices.get(&ordinal).copied().unwrap_or(0);
    let bound = bound_regions(report, rec, binds);
    let mut regions = Vec::new();
    for (index, r) in rec.regions.iter().enumerate() {
        let (decl, size) = match bound.get(&index) {
            Some(b) => {
                let mut decl = RegionDecl::new(region_name(&r.alloc), b.size, b.bind.dtype);
                decl.shape = b.bind.shape.clone();
                (decl, b.size as usize)
            }
            None => (RegionDecl::new(region_name(&r.alloc), r.alloc.size, DType::Bytes), r.alloc.size as usize),
        };
        let id = w.add_region(decl.on(on(r.alloc.device)))?;
        w.set_initial_bytes(id, &r.initial[..size])?;
        match (&r.expected, placed.is_some() || !rec.pointer_holders.contains(&index)) {
            (Some(expected), true) => w.set_expected_bytes(id, &expected[..size], Tolerance::Exact)?,
            (Some(_), false) => report.note(format!(
                "{} holds pointers, so its final contents are not checked (a replay's addresses differ)",
                region_name(&r.alloc)
            )),
            (None, _) => {}
        }
        regions.push(id);
    }
    declare_types(report, rec, &bound, &regions, &mut w);
    crate::record::module_vars::write(vars, rec, &regions, &modules, &mut w)?;
    // Uploads only of ops the driver did, each on the device of the region it fills.
    let used: HashMap<usize, CUdevice> = rec
        .ops
        .iter()
        .filter_map(|op| match op {
            OpRec::Upload { upload, dst, .. } => Some((*upload, rec.regions[*dst].alloc.device)),
            _ => None,
        })
        .collect();
    let mut uploads = Vec::new();
    for (i, upload) in rec.uploads.iter().enumerate() {
        let Some(&device) = used.get(&i) else {
            uploads.push(None);
            continue;
        };
        let size = upload.bytes.len() as u64;
        let id = w.add_region(RegionDecl::new(format!("upload{i}"), size, DType::Bytes).on(on(device)))?;
        w.set_initial_bytes(id, &upload.bytes)?;
        uploads.push(Some(id));
    }
    for (r, rr) in rec.regions.iter().enumerate() {
        for &(offset, target, target_offset) in &rr.relocs {
            w.add_region_reloc(regions[r], Reloc { offset, target: regions[target], target_offset })?;
        }
    }
    for (u, upload) in rec.uploads.iter().enumerate() {
        let Some(id) = uploads[u] else { continue };
        for &(offset, target, target_offset) in &upload.relocs {
            w.add_region_reloc(id, Reloc { offset, target: regions[target], target_offset })?;
        }
    }
    // Launch attributes the op cannot hold, by op index (launch_attrs.rs), and the launches'
    // tensor maps (shared::tensor_map).
    let mut attributes = Vec::new();
    let mut tensor_maps = Vec::new();
    // Each recorded op's id in the archive (none for refused work and the end of a body).
    let mut op_ids: Vec<Option<OpId>> = Vec::with_capacity(rec.ops.len());
    // The archive device ops go to now, and the events of its changes.
    let (mut current, mut events): (Option<DeviceId>, EventId) = (None, 0);
    for (i, op) in rec.ops.iter().enumerate() {
        if !devices.is_empty() && !matches!(op, OpRec::Refused | OpRec::EndBody) {
            let device = on(rec.devices.of_op(i));
            if current != Some(device) {
                // Everything issued so far, on the device left, comes before what follows.
                if current.is_some() {
                    w.signal(events)?;
                }
                w.set_device(device)?;
                if current.is_some() {
                    w.wait(events)?;
                    events += 1;
                }
                current = Some(device);
            }
        }
        let id = match op {
            OpRec::Launch { kernel, grid, block, shared, params, relocs, attrs, tensor_maps: maps } => {
                let relocs = relocs
                    .iter()
                    .map(|&(offset, target, target_offset)| Reloc { offset, target: regions[target], target_offset })
                    .collect();
                let kernel = kernels[*kernel].ok_or(BuildError::UnrecordedKernel)?;
                let id = w.launch(LaunchDecl {
                    kernel,
                    grid: *grid,
                    block: *block,
                    shared_bytes: *shared,
                    params: params.clone(),
                    relocs,
                })?;
                if !attrs.is_empty() {
                    attributes.push(LaunchAttrUse { op: id, attributes: attrs.clone() });
                }
                tensor_maps.extend(maps.iter().map(|(param_offset, region, offset, encode)| TensorMapUse {
                    op: id,
                    param_offset: *param_offset,
                    region: regions[*region],
                    offset: *offset,
                    encode: encode.clone(),
                }));
                Some(id)
            }
            OpRec::While { region } => {
                Some(w.begin_while(Condition { region: regions[*region], offset: 0, max_iterations: 0 })?)
            }
            OpRec::If { region } => {
                Some(w.begin_if(Condition { region: regions[*region], offset: 0, max_iterations: 0 })?)
            }
            OpRec::EndBody => {
                w.end_body()?;
                None
            }
            OpRec::Refused => None,
            OpRec::Upload { upload, dst, dst_offset } => {
                let len = rec.uploads[*upload].bytes.len() as u64;
                Some(w.copy(CopyOp {
                    src: uploads[*upload].ok_or(BuildError::UnwrittenUpload)?,
                    src_offset: 0,
                    dst: regions[*dst],
                    dst_offset: *dst_offset,
                    len,
                })?)
            }
            OpRec::Copy { src, src_offset, dst, dst_offset, len } => Some(w.copy(CopyOp {
                src: regions[*src],
                src_offset: *src_offset,
                dst: regions[*dst],
                dst_offset: *dst_offset,
                len: *len,
            })?),
            OpRec::Memset { dst, offset, len, width, pattern } => Some(w.memset(MemsetOp {
                region: regions[*dst],
                offset: *offset,
                len: *len,
                width: *width,
                pattern: *pattern,
            })?),
        };
        op_ids.push(id);
    }
    // What launches without PTX wrote, for CPU replays (`--record-effects`), by the recording's op
    // number turned into the archive's.
    for e in &rec.effects {
        let Some(op) = op_ids.get(e.op).copied().flatten() else { continue };
        let writes: Vec<(RegionId, u64, &[u8])> =
            e.writes.iter().map(|(r, offset, bytes)| (regions[*r], *offset, bytes.as_slice())).collect();
        w.add_effects(op, e.inputs, &writes)?;
    }
    for (index, b) in &bound {
        w.add_binding(&b.bind.name, regions[*index], b.bind.direction)?;
    }
    w.set_meta("producer", "recap capture");
    w.set_meta("capture.range", &report.range);
    if let Some(command) = &rec.request.command {
        w.set_meta("capture.command", command);
    }
    let addresses: Vec<Address> = rec
        .regions
        .iter()
        .enumerate()
        .filter(|(_, rr)| crate::placement::has_address(rr))
        .map(|(r, rr)| Address { region: regions[r], address: rr.alloc.base })
        .collect();
    w.set_meta(placement::ADDRESSES_KEY, &serde_json::to_string(&addresses).expect("addresses serialise"));
    if placed.is_some() {
        w.set_meta(placement::PLACEMENT_KEY, Placement::Captured.as_str());
    }
    if !tensor_maps.is_empty() {
        let json = serde_json::to_string(&tensor_maps).expect("tensor maps serialise");
        w.set_meta(shared::tensor_map::META_KEY, &json);
    }
    if !attributes.is_empty() {
        let json = serde_json::to_string(&attributes).expect("launch attributes serialise");
        w.set_meta(shared::launch_attrs::META_KEY, &json);
    }
    w.set_meta("capture.report", &serde_json::to_string(report).expect("the report serialises"));
    w.finish()?;
    Ok(())
}

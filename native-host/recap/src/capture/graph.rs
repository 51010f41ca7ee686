//! Graphs: replay in place (through the archive replay engine, `replay.rs`), save as an archive,
//! load an archive on any device, bindings by name.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Cursor};
use std::path::Path;
use std::sync::Mutex;

use shared::archive::{Archive, ArchiveWriter, DType, Direction, Op, RegionDecl, RegionId, Reloc, Tolerance};

use super::device::{Device, Element, Kernel, RawBuffer};
use super::record::{GOp, GraphData, GraphRegion};
use super::replay::Engine;
use super::{usage, ArchiveFailure, CaptureError, Result};

/// A named input or output of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    pub name: String,
    pub direction: Direction,
    pub bytes: u64,
    pub dtype: DType,
    pub(crate) region: RegionId,
}

/// Recorded work on one device (captured there, or loaded from an archive), or on several
/// ([`super::capture_devices`]).
pub struct Graph {
    device: Device,
    /// Every device, `device` first; logical device `i` of a saved archive is `devices[i]`.
    devices: Vec<Device>,
    data: GraphData,
    bindings: Vec<BindingInfo>,
    /// The archive replay of its devices' kind (`replay.rs`), built from this recording at the
    /// first launch.
    engine: Mutex<Option<Engine>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("device", &self.device.name())
            .field("ops", &self.data.op_count())
            .field("regions", &self.data.regions.len())
            .field("bindings", &self.bindings)
            .finish()
    }
}

fn archive_error(path: &Path, failure: ArchiveFailure) -> CaptureError {
    CaptureError::Archive { path: path.display().to_string(), source: Box::new(failure) }
}

impl Graph {
    pub(crate) fn from_data(device: Device, data: GraphData, bindings: Vec<BindingInfo>) -> Graph {
        Graph { devices: vec![device.clone()], device, data, bindings, engine: Mutex::new(None) }
    }

    pub(crate) fn from_devices(devices: Vec<Device>, data: GraphData) -> Graph {
        Graph { device: devices[0].clone(), devices, data, bindings: Vec::new(), engine: Mutex::new(None) }
    }

    /// The device (the first, for a graph of several).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Every device of the graph, in the order of the archive's logical devices.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device that runs top-level op `index`.
    fn device_of_op(&self, index: usize) -> usize {
        self.data.devices.get(index).copied().unwrap_or(0) as usize
    }

    /// The device whose memory holds `region`.
    pub(super) fn region_device(&self, region: RegionId) -> &Device {
        let d = self.data.regions.get(region as usize).map_or(0, |r| r.decl.device as usize);
        &self.devices[d.min(self.devices.len() - 1)]
    }

    /// Number of ops, counting those inside while/if bodies.
    pub fn op_count(&self) -> usize {
        self.data.op_count()
    }

    pub fn region_count(&self) -> usize {
        self.data.regions.len()
    }

    /// Replays the recorded work on the graph's device, over its buffers, and waits for it.
    ///
    /// The recording runs as an archive on the archive replay engine of its devices' kind, built
    /// at the first launch: on CUDA one CUDA graph (kernel, memcpy and memset nodes, conditional
    /// nodes for while/if, edges only where data flows); on the CPU `shared::replay`, so while,
    /// if and scratch mean what they mean in every CPU replay (a while still true at its limit is
    /// an error, `ReplayError::LoopLimit`). The engine owns its regions, so the live buffers are
    /// copied in before and out after each launch; a failed launch leaves them as they were.
    pub fn launch(&self) -> Result<()> {
        let mut slot = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        let engine = match slot.as_mut() {
            Some(e) => e,
            None => slot.insert(Engine::build(self)?),
        };
        engine.run(self)
    }

    // ---- bindings ----

    pub fn bindings(&self) -> &[BindingInfo] {
        &self.bindings
    }

    fn binding(&self, name: &str) -> Result<(&BindingInfo, &RawBuffer)> {
        let Some(b) = self.bindings.iter().find(|b| b.name == name) else {
            let names: Vec<&str> = self.bindings.iter().map(|b| b.name.as_str()).collect();
            return Err(CaptureError::Binding {
                name: name.to_owned(),
                message: if names.is_empty() {
                    "the graph has no bindings".to_owned()
                } else {
                    format!("no such binding; the graph has {}", names.join(", "))
                },
            });
        };
        match &self.data.regions[b.region as usize].buffer {
            Some(buf) => Ok((b, buf)),
            None => Err(CaptureError::Binding { name: name.to_owned(), message: "bound to a scratch region".into() }),
        }
    }

    /// The device buffer behind a binding.
    pub fn binding_buffer(&self, name: &str) -> Result<RawBuffer> {
        Ok(self.binding(name)?.1.clone())
    }

    /// Replaces a binding's contents; `data` must be exactly the bound region's size in bytes.
    pub fn set_param<T: Element>(&self, name: &str, data: &[T]) -> Result<()> {
        let (b, buf) = self.binding(name)?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 != b.bytes {
            return Err(CaptureError::Binding {
                name: name.to_owned(),
                message: format!(
                    "is {} bytes ({} x {}); {} bytes were given",
                    b.bytes,
                    b.dtype.name(),
                    b.bytes / b.dtype.size() as u64,
                    bytes.len()
                ),
            });
        }
        self.device.write_bytes(buf, 0, bytes)
    }

    /// A binding's bytes.
    pub fn get_param(&self, name: &str) -> Result<Vec<u8>> {
        self.binding(name)?.1.read_bytes()
    }

    /// A binding's contents as `T`s; its size must be a multiple of `T`'s.
    pub fn get_param_as<T: Element>(&self, name: &str) -> Result<Vec<T>> {
        let bytes = self.get_param(name)?;
        if bytes.len() % size_of::<T>() != 0 {
            return Err(CaptureError::Binding {
                name: name.to_owned(),
                message: format!("{} bytes are not a whole number of {}-byte elements", bytes.len(), size_of::<T>()),
            });
        }
        let mut out = vec![T::zeroed(); bytes.len() / size_of::<T>()];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }

    // ---- saving ----

    /// Writes the graph as one archive. Each region's current contents become its initial data;
    /// `inputs` and `outputs` name buffers the graph uses (a buffer in both is in-out).
    pub fn save(
        &self,
        path: impl AsRef<Path>,
        inputs: &[(&str, &RawBuffer)],
        outputs: &[(&str, &RawBuffer)],
    ) -> Result<()> {
        self.save_with(path.as_ref(), inputs, outputs, &[])
    }

    /// Writes the graph as [`Graph::save`] does, plus the outputs' expected state: the graph runs
    /// once in place, each output's final contents become its expected contents (judged by
    /// `tolerance`), and every buffer is then put back as it was, so the archive starts from what
    /// the buffers held before and a replay with a check judges itself against this run.
    pub fn save_checked(
        &self,
        path: impl AsRef<Path>,
        inputs: &[(&str, &RawBuffer)],
        outputs: &[(&str, &RawBuffer)],
        tolerance: Tolerance,
    ) -> Result<()> {
        let buffers: Vec<RawBuffer> = self.data.regions.iter().filter_map(|r| r.buffer.clone()).collect();
        let before = buffers.iter().map(RawBuffer::read_bytes).collect::<Result<Vec<_>>>()?;
        let ran = self.launch();
        let expected = ran.and_then(|()| {
            outputs.iter().map(|(_, b)| Ok(((*b).clone(), b.read_bytes()?, tolerance))).collect::<Result<Vec<_>>>()
        });
        for (b, bytes) in buffers.iter().zip(&before) {
            b.0.device.backend.write(b.addr(), bytes)?;
        }
        self.save_with(path.as_ref(), inputs, outputs, &expected?)
    }

    fn save_with(
        &self,
        path: &Path,
        inputs: &[(&str, &RawBuffer)],
        outputs: &[(&str, &RawBuffer)],
        expected: &[(RawBuffer, Vec<u8>, Tolerance)],
    ) -> Result<()> {
        let tmp = path.with_extension("recap.partial");
        let file = File::create(&tmp).map_err(|e| archive_error(path, ArchiveFailure::Create(e)))?;
        let outcome = self
            .write_archive(BufWriter::new(file), inputs, outputs, expected)
            .map(|(w, _)| w)
            .and_then(|w| w.into_inner().map_err(|e| CaptureError::Io(e.into_error())))
            .and_then(|f| f.sync_all().map_err(CaptureError::Io))
            .and_then(|()| std::fs::rename(&tmp, path).map_err(CaptureError::Io));
        if let Err(e) = outcome {
            let _ = std::fs::remove_file(&tmp);
            return Err(archive_error(path, ArchiveFailure::Capture(e)));
        }
        Ok(())
    }

    /// The archive's bytes, as [`Graph::save`] would write them (for tests and in-memory uses).
    pub fn to_archive_bytes(&self, inputs: &[(&str, &RawBuffer)], outputs: &[(&str, &RawBuffer)]) -> Result<Vec<u8>> {
        Ok(self.write_archive(Cursor::new(Vec::new()), inputs, outputs, &[])?.0.into_inner())
    }

    pub(super) fn write_archive<W: std::io::Write + std::io::Seek>(
        &self,
        out: W,
        inputs: &[(&str, &RawBuffer)],
        outputs: &[(&str, &RawBuffer)],
        expected: &[(RawBuffer, Vec<u8>, Tolerance)],
    ) -> Result<(W, Vec<Option<RawBuffer>>)> {
        let werr = CaptureError::Write;
        let mut w = ArchiveWriter::new(out).map_err(werr)?;
        w.set_meta("producer", "recap capture API");
        w.set_meta("device", &self.devices.iter().map(Device::name).collect::<Vec<_>>().join(", "));
        if self.devices.len() > 1 {
            for d in &self.devices {
                let sm = d.compute_capability().map_or(0, |(major, minor)| (major * 10 + minor) as u32);
                w.add_device(&shared::archive::DeviceDecl { name: d.name(), sm }).map_err(werr)?;
            }
        }

        // Regions: the graph's own, then buffers reached only through pointer fields.
        let mut regions: Vec<(RegionDecl, Option<RawBuffer>)> =
            self.data.regions.iter().map(|r| (r.decl.clone(), r.buffer.clone())).collect();
        let mut by_buffer: HashMap<u64, RegionId> = HashMap::new();
        for (i, (_, b)) in regions.iter().enumerate() {
            if let Some(b) = b {
                by_buffer.insert(b.id(), i as RegionId);
            }
        }
        let mut i = 0;
        while i < regions.len() {
            if let Some(b) = regions[i].1.clone() {
                for f in b.pointer_fields() {
                    if let std::collections::hash_map::Entry::Vacant(e) = by_buffer.entry(f.target.id()) {
                        e.insert(regions.len() as RegionId);
                        let device = self.devices.iter().position(|d| d.owns(&f.target)).unwrap_or(0) as u32;
                        let decl = RegionDecl::new(f.target.name(), f.target.byte_len(), f.target.dtype()).on(device);
                        regions.push((decl, Some(f.target.clone())));
                    }
                }
            }
            i += 1;
        }
        for (decl, buffer) in &regions {
            let id = w.add_region(decl.clone()).map_err(werr)?;
            if let Some(b) = buffer {
                let mut bytes = b.read_bytes()?;
                // No raw device address is ever stored: pointer fields are relocations.
                for f in b.pointer_fields() {
                    bytes[f.offset as usize..f.offset as usize + 8].fill(0);
                    let reloc =
                        Reloc { offset: f.offset, target: by_buffer[&f.target.id()], target_offset: f.target_offset };
                    w.add_region_reloc(id, reloc).map_err(werr)?;
                }
                w.set_initial(id, &mut bytes.as_slice()).map_err(werr)?;
            }
        }
        for (buffer, bytes, tolerance) in expected {
            if let Some(&id) = by_buffer.get(&buffer.id()) {
                w.set_expected_bytes(id, bytes, *tolerance).map_err(werr)?;
            }
        }

        let mut module_ids: HashMap<u64, u32> = HashMap::new();
        let mut kernel_ids = Vec::with_capacity(self.data.kernels.len());
        for k in &self.data.kernels {
            let m = match module_ids.get(&k.module.id) {
                Some(&m) => m,
                None => {
                    let m = w.add_module(&k.module.name, &k.module.ptx).map_err(werr)?;
                    module_ids.insert(k.module.id, m);
                    m
                }
            };
            kernel_ids.push(w.add_kernel(m, &k.entry, k.params.clone()).map_err(werr)?);
        }
        for (i, op) in self.data.ops.iter().enumerate() {
            w.set_device(self.device_of_op(i) as u32).map_err(werr)?;
            write_ops(&mut w, std::slice::from_ref(op), &kernel_ids).map_err(werr)?;
        }

        let mut directions: Vec<(&str, RegionId, Direction)> = Vec::new();
        for (list, dir) in [(inputs, Direction::In), (outputs, Direction::Out)] {
            for (name, buf) in list {
                let Some(&region) = by_buffer.get(&buf.id()) else {
                    return Err(CaptureError::Binding {
                        name: name.to_string(),
                        message: format!("buffer {} is not used by the graph", buf.name()),
                    });
                };
                match directions.iter_mut().find(|d| d.0 == *name) {
                    Some(d) if d.1 == region && d.2 != dir => d.2 = Direction::InOut,
                    Some(_) => {
                        return Err(CaptureError::Binding { name: name.to_string(), message: "is named twice".into() })
                    }
                    None => directions.push((name, region, dir)),
                }
            }
        }
        for (name, region, dir) in directions {
            w.add_binding(name, region, dir).map_err(werr)?;
        }
        Ok((w.finish().map_err(werr)?, regions.into_iter().map(|(_, b)| b).collect()))
    }

    // ---- loading ----

    /// Loads an archive onto `device`: allocates and fills its regions, loads its modules.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Graph> {
        let path = path.as_ref();
        let map = crate::mapped::MappedFile::open(path).map_err(|e| archive_error(path, ArchiveFailure::Open(e)))?;
        let archive = Archive::open(&map).map_err(|e| archive_error(path, ArchiveFailure::Format(e)))?;
        archive.validate().map_err(|e| archive_error(path, ArchiveFailure::Format(e)))?;
        Graph::from_archive(&archive, device).map_err(|e| match e {
            CaptureError::Archive { .. } => e,
            other => archive_error(path, ArchiveFailure::Capture(other)),
        })
    }

    /// Instantiates an open archive on `device`.
    pub fn from_archive(archive: &Archive<'_>, device: &Device) -> Result<Graph> {
        let ferr = CaptureError::Format;
        let mut modules = Vec::with_capacity(archive.module_count());
        for m in archive.modules() {
            modules.push(device.load_ptx(m.name, &m.ptx_text().map_err(ferr)?)?);
        }
        let mut kernels = Vec::with_capacity(archive.kernel_count());
        for k in archive.kernels() {
            let module = &modules[k.module as usize];
            // The archive's own layout is authoritative: it is what the launch bytes were packed for.
            let mut kernel: Kernel = module.kernel(k.name)?;
            kernel.params = k.params.clone();
            kernels.push(kernel);
        }
        let mut regions = Vec::with_capacity(archive.region_count());
        for r in archive.regions() {
            let decl = RegionDecl {
                name: r.name.to_owned(),
                size: r.size,
                align: r.align,
                dtype: r.dtype,
                shape: r.shape.clone(),
                scratch: r.scratch,
                // Loaded onto one device, every region lives in its memory.
                device: 0,
            };
            let buffer = if r.scratch {
                None
            } else {
                let b = device.alloc_raw(r.size as usize, r.dtype)?;
                b.set_name(r.name);
                if let Some(init) = &r.initial {
                    device.write_bytes(&b, 0, &init.decode().map_err(ferr)?)?;
                }
                Some(b)
            };
            regions.push(GraphRegion { decl, buffer });
        }
        for (owner, reloc) in archive.region_relocs() {
            let (Some(o), Some(t)) = (&regions[owner as usize].buffer, &regions[reloc.target as usize].buffer) else {
                return usage(format!(
                    "region relocation {owner} -> {} involves scratch, which has no fixed address",
                    reloc.target
                ));
            };
            device.write_pointer(o, reloc.offset, t, reloc.target_offset)?;
        }
        let ops = read_ops(archive, archive.top_level().collect(), &kernels)?;
        let bindings = archive
            .bindings()
            .map(|b| {
                let r = archive.region(b.region);
                BindingInfo {
                    name: b.name.to_owned(),
                    direction: b.direction,
                    bytes: r.size,
                    dtype: r.dtype,
                    region: b.region,
                }
            })
            .collect();
        Ok(Graph::from_data(device.clone(), GraphData { regions, kernels, ops, devices: Vec::new() }, bindings))
    }
}

fn write_ops<W: std::io::Write + std::io::Seek>(
    w: &mut ArchiveWriter<W>,
    ops: &[GOp],
    kernels: &[u32],
) -> Result<(), shared::archive::WriteError> {
    for op in ops {
        match op {
            GOp::Launch { kernel, grid, block, shared, params, relocs } => {
                w.launch(shared::archive::LaunchDecl {
                    kernel: kernels[*kernel],
                    grid: *grid,
                    block: *block,
                    shared_bytes: *shared,
                    params: params.clone(),
                    relocs: relocs.clone(),
                })?;
            }
            GOp::Copy(c) => {
                w.copy(*c)?;
            }
            GOp::Memset(m) => {
                w.memset(*m)?;
            }
            GOp::Alloc(r) => {
                w.alloc(*r)?;
            }
            GOp::Free(r) => {
                w.free(*r)?;
            }
            GOp::While { cond, body } => {
                w.begin_while(*cond)?;
                write_ops(w, body, kernels)?;
                w.end_body()?;
            }
            GOp::If { cond, body } => {
                w.begin_if(*cond)?;
                write_ops(w, body, kernels)?;
                w.end_body()?;
            }
        }
    }
    Ok(())
}

fn read_ops(archive: &Archive<'_>, ids: Vec<u32>, kernels: &[Kernel]) -> Result<Vec<GOp>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let op = match archive.op(id) {
            Op::Launch(l) => {
                let kernel = l.kernel as usize;
                let need =
                    kernels[kernel].params.iter().map(|p| p.offset as usize + p.size as usize).max().unwrap_or(0);
                let mut params = l.params.to_vec();
                params.resize(params.len().max(need), 0);
                GOp::Launch {
                    kernel,
                    grid: l.grid,
                    block: l.block,
                    shared: l.shared_bytes,
                    params,
                    relocs: archive.relocs(l.relocs.clone()).collect(),
                }
            }
            Op::Copy(c) => GOp::Copy(c),
            Op::Memset(m) => GOp::Memset(m),
            Op::Alloc(r) => GOp::Alloc(r),
            Op::Free(r) => GOp::Free(r),
            Op::While { cond, .. } => GOp::While { cond, body: read_ops(archive, body_ids(archive, id), kernels)? },
            Op::If { cond, .. } => GOp::If { cond, body: read_ops(archive, body_ids(archive, id), kernels)? },
            // One device runs the ops in archive order, which already holds what a signal and a
            // wait between devices ask for.
            Op::Marker(_) | Op::Signal(_) | Op::Wait(_) => continue,
            Op::Library(l) => {
                return usage(format!(
                    "op {id} is a library op ({}), which a graph of the capture API cannot hold",
                    l.name()
                ))
            }
        };
        out.push(op);
    }
    Ok(out)
}

fn body_ids(archive: &Archive<'_>, id: u32) -> Vec<u32> {
    archive.children(archive.body(id)).collect()
}

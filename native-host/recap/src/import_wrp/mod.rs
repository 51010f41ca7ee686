//! Turns an NVIDIA Warp capture (`.wrp` and its `_modules/` folder, read by `shared::wrp`) into a
//! `.recap` archive: `recap import-wrp`.
//!
//! The mapping, op by op (docs/FORMAT.md, "Warp captures"):
//! - a Warp region becomes a region (named by its binding, else `region{id}`), with its contents;
//!   Warp stores no element types, so a region is bytes unless an `--expected` file gives its dtype
//!   and shape;
//! - a launch becomes a launch of the module's PTX entry (`*_cuda_kernel_forward`/`_backward`): its
//!   first parameter is Warp's launch bounds, built from the record, then every argument's bytes at
//!   the offset the PTX `.entry` declares, each data pointer a relocation, each null pointer zeros;
//!   the grid is one dimension of `ceil(threads / block)` blocks (Warp's entries loop over a grid
//!   stride or return past the last thread, so both kinds are covered);
//! - copies, memsets and fills of a 1, 2, 4 or 8-byte value become copies and memsets; a fill of
//!   another width and an upload become a copy from a region holding the bytes;
//! - a WHILE is a while; an IF is an if, and its else branch an if on a flag set to 1 before and
//!   cleared inside the then branch (Warp reads the condition once);
//! - Warp's sorts, scans, reductions and run-length encoding become library ops (`library.rs`),
//!   which every replay computes again; its other library routines (sparse matrices, BVHs, hash
//!   grids) run no kernel of the capture and have no recap op: the import stops there and names
//!   the op, never writing a smaller graph than the capture.
//!
//! PTX: a CUDA capture may package it (`.ptx` in `_modules/`); a CPU capture packages host object
//! files, so the PTX comes from `--ptx-from DIR`, where `wp.compile_aot_module(..., use_ptx=True)`
//! wrote it (`wp_<module>_<hash>.sm<arch>.ptx`, matched by module name and checked to define every
//! entry the capture launches). The archive's metadata says where each module's PTX came from.

mod bundle;
mod library;
mod source;

pub use bundle::{import_bundle, unpack_bundle, BundleKind};

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use shared::archive::{
    ArchiveWriter, Condition, CopyOp, DType, Direction, KernelId, LaunchDecl, MemsetOp, RegionDecl, RegionId, Reloc,
    Tolerance, WriteError,
};
use shared::npy;
use shared::ptx::signature::SignatureError;
use shared::replay::ReplayLimits;
use shared::wrp::{self, BoundsLayout, Capture, CaptureDevice, Launch, OpKind, Param, PointerTarget, WrpError, WrpOp};

/// Threads per block when the capture names none (Warp's GPU default).
const DEFAULT_BLOCK: u32 = 256;
/// The most blocks a one-dimensional grid has.
const MAX_GRID_X: u64 = (1 << 31) - 1;

/// Why a capture could not be imported; each names the file, module or op.
#[derive(Debug, thiserror::Error)]
pub enum WrpImportError {
    // The causes are part of the message (fields not named `source`), so a chain printed with
    // `{:#}` says each once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {error}")]
    Format { path: PathBuf, error: WrpError },
    #[error("{path}: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("module {module}: {reason}")]
    Ptx { module: String, reason: String },
    #[error("--expected {name}: {reason}")]
    Expected { name: String, reason: String },
    #[error("writing {path}: {error}")]
    Write { path: PathBuf, error: WriteError },
    #[error("the bundle: {0}")]
    Bundle(String),
}

/// What the import reads besides the `.wrp` file.
#[derive(Clone, Debug)]
pub struct WrpOptions {
    /// The capture's modules folder (default: `<stem>_modules` beside the file).
    pub modules: Option<PathBuf>,
    /// Where `wp.compile_aot_module` wrote the PTX of modules the capture did not package as PTX.
    pub ptx_from: Option<PathBuf>,
    /// Warp's headers (`warp/native`), for compiling the CUDA source a capture packaged
    /// (`source_fallback`) where it packaged no PTX (`source.rs`).
    pub warp_include: Option<PathBuf>,
    /// `(binding, .npy file)`: what the binding holds after one replay (Warp's own replay's output).
    pub expected: Vec<(String, PathBuf)>,
    /// Tolerance of floating-point expected states (integers are judged exactly).
    pub rtol: f64,
    pub atol: f64,
    /// What a replay of the archive may be asked for: a capture whose regions are over these is
    /// refused here, by the rule a replay would refuse it with, before anything is allocated.
    pub limits: ReplayLimits,
}

impl Default for WrpOptions {
    /// Nothing besides the file, float tolerances of 1e-5 relative and 1e-6 absolute (Warp's own
    /// replay ran compiled C++ or another GPU, recap runs the PTX), and the default replay limits.
    fn default() -> Self {
        WrpOptions {
            modules: None,
            ptx_from: None,
            warp_include: None,
            expected: Vec::new(),
            rtol: 1e-5,
            atol: 1e-6,
            limits: ReplayLimits::DEFAULT,
        }
    }
}

/// What was imported.
#[derive(Clone, Debug, Default)]
pub struct WrpSummary {
    /// `NVIDIA Warp 1.19.0, CPU capture`.
    pub producer: String,
    /// `(module, where its PTX came from)`.
    pub modules: Vec<(String, String)>,
    pub regions: usize,
    pub launches: usize,
    /// Recap ops written (an else branch and a wide fill take more than one).
    pub ops: usize,
    /// Launches of zero threads, which Warp skips too.
    pub empty_launches: usize,
    pub expected: usize,
    pub archive_bytes: u64,
}

/// Imports `wrp` into the archive `out`.
pub fn import_wrp(wrp: &Path, options: &WrpOptions, out: &Path) -> Result<WrpSummary, WrpImportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| WrpImportError::Io { path, error }
    };
    let bytes = std::fs::read(wrp).map_err(io(wrp))?;
    let capture = wrp::parse(&bytes).map_err(|error| WrpImportError::Format { path: wrp.to_path_buf(), error })?;
    // Lookups by key, so that the import's work grows with the capture, not with its square.
    let mut kernels = HashMap::new();
    let mut kernels_of_module: HashMap<&str, Vec<&wrp::Kernel>> = HashMap::new();
    for k in &capture.kernels {
        kernels.entry((k.module_hash.as_str(), k.key.as_str())).or_insert(k);
        kernels_of_module.entry(k.module_hash.as_str()).or_default().push(k);
    }
    let mut modules = HashMap::new();
    for m in &capture.modules {
        modules.entry(m.hash.as_str()).or_insert(m);
    }
    let modules_dir = options.modules.clone().unwrap_or_else(|| {
        let stem = wrp.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        wrp.with_file_name(format!("{stem}_modules"))
    });
    let mut importer = Importer {
        wrp,
        capture: &capture,
        options,
        modules_dir,
        w: ArchiveWriter::new(std::io::Cursor::new(Vec::new()))
            .map_err(|error| WrpImportError::Write { path: out.to_path_buf(), error })?,
        out,
        regions: HashMap::new(),
        kernel_of: kernels,
        kernels_of_module,
        module_of: modules,
        ptx: HashMap::new(),
        kernels: HashMap::new(),
        hidden: 0,
        summary: WrpSummary::default(),
    };
    importer.import()?;
    let Importer { w, mut summary, .. } = importer;
    let archive = w.finish().map_err(|error| WrpImportError::Write { path: out.to_path_buf(), error })?.into_inner();
    summary.archive_bytes = archive.len() as u64;
    let tmp = out.with_extension("recap.partial");
    std::fs::write(&tmp, &archive).map_err(io(&tmp))?;
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        WrpImportError::Io { path: out.to_path_buf(), error: e }
    })?;
    Ok(summary)
}

/// A module's PTX, where it came from, and the dynamic shared memory of its entries.
struct ModulePtx {
    text: String,
    smem: HashMap<String, u32>,
}

struct Importer<'c, 'a> {
    wrp: &'a Path,
    capture: &'c Capture<'c>,
    options: &'a WrpOptions,
    modules_dir: PathBuf,
    w: ArchiveWriter<std::io::Cursor<Vec<u8>>>,
    out: &'a Path,
    /// Warp region id -> recap region and its size.
    regions: HashMap<i32, (RegionId, u64)>,
    /// (module hash, kernel key) -> the capture's first kernel of that key.
    kernel_of: HashMap<(&'c str, &'c str), &'c wrp::Kernel>,
    /// Module hash -> the capture's kernels of that module.
    kernels_of_module: HashMap<&'c str, Vec<&'c wrp::Kernel>>,
    /// Module hash -> the capture's first module of that hash.
    module_of: HashMap<&'c str, &'c wrp::WrpModule>,
    /// Module hash -> recap module and its PTX.
    ptx: HashMap<String, (shared::archive::ModuleId, ModulePtx)>,
    /// (module hash, entry) -> recap kernel and its parameter layout.
    kernels: HashMap<(String, String), (KernelId, Vec<shared::ptx::signature::EntryParam>)>,
    /// Regions the import adds (fill patterns, uploads, else flags), counted for their names.
    hidden: usize,
    summary: WrpSummary,
}

/// The PTX entry of a kernel's forward or backward function: a CPU capture names its host
/// functions (`_cpu_forward`); the PTX of the same kernel names them `_cuda_kernel_forward`.
fn ptx_entry(kernel: &wrp::Kernel, forward: bool) -> String {
    let name = if forward { &kernel.forward_name } else { &kernel.backward_name };
    for (cpu, cuda) in [("_cpu_forward", "_cuda_kernel_forward"), ("_cpu_backward", "_cuda_kernel_backward")] {
        if let Some(stem) = name.strip_suffix(cpu) {
            return format!("{stem}{cuda}");
        }
    }
    name.clone()
}

/// Where an op is, for messages: `op 3`, `op 1 of the body of op 5`.
fn op_path(parent: &str, index: usize) -> String {
    if parent.is_empty() {
        format!("op {index}")
    } else {
        format!("op {index} of {parent}")
    }
}

impl Importer<'_, '_> {
    fn unsupported<T>(&self, reason: impl Into<String>) -> Result<T, WrpImportError> {
        Err(WrpImportError::Unsupported { path: self.wrp.to_path_buf(), reason: reason.into() })
    }

    fn write<T>(&self, result: Result<T, WriteError>) -> Result<T, WrpImportError> {
        result.map_err(|error| WrpImportError::Write { path: self.out.to_path_buf(), error })
    }

    fn import(&mut self) -> Result<(), WrpImportError> {
        let c = self.capture;
        if c.meshes > 0 || c.handle_locations > 0 {
            return self.unsupported(format!(
                "the capture rebuilds {} mesh(es) (wp.Mesh) at load, which a recap archive cannot hold",
                c.meshes.max(1)
            ));
        }
        self.summary.producer = match c.device {
            CaptureDevice::Cpu => format!("NVIDIA Warp {}, CPU capture", c.producer),
            CaptureDevice::Cuda { arch } => format!("NVIDIA Warp {}, CUDA capture (sm_{arch})", c.producer),
        };
        let expected = self.read_expected()?;
        self.add_regions(&expected)?;
        self.load_modules()?;
        self.ops(&c.ops, "")?;
        self.check_region_count()?;
        for e in expected {
            let region = self.regions[&(e.warp_region as i32)].0;
            let tolerance = if e.dtype.is_float() {
                Tolerance::Close { rtol: self.options.rtol, atol: self.options.atol }
            } else {
                Tolerance::Exact
            };
            let result = self.w.set_expected_bytes(region, &e.bytes, tolerance);
            self.write(result)?;
            self.summary.expected += 1;
        }
        self.w.set_meta("importer", concat!("recap import-wrp ", env!("CARGO_PKG_VERSION")));
        self.w.set_meta("producer", &self.summary.producer);
        for (module, source) in &self.summary.modules {
            self.w.set_meta(&format!("ptx.{module}"), source);
        }
        Ok(())
    }

    /// The `--expected` files, checked against the regions they fill: each file's header before any
    /// of its data is read, so a file larger than its region is refused unread.
    fn read_expected(&self) -> Result<Vec<Expected>, WrpImportError> {
        let c = self.capture;
        let mut first_binding: HashMap<&str, u32> = HashMap::new();
        for (name, id) in &c.bindings {
            first_binding.entry(name.as_str()).or_insert(*id);
        }
        let sizes: HashMap<u32, u64> = c.regions.iter().map(|r| (r.id, r.size)).collect();
        let mut out: Vec<Expected> = Vec::new();
        let mut by_region: HashMap<u32, usize> = HashMap::new();
        for (name, file) in &self.options.expected {
            let fail = |reason: String| WrpImportError::Expected { name: name.clone(), reason };
            let Some(&warp_region) = first_binding.get(name.as_str()) else {
                let names: Vec<&str> = c.bindings.iter().take(20).map(|(n, _)| n.as_str()).collect();
                let more = if c.bindings.len() > names.len() { ", ..." } else { "" };
                return Err(fail(format!(
                    "the capture has no binding named {name:?} (it has {}{more})",
                    names.join(", ")
                )));
            };
            let size = sizes.get(&warp_region).copied().unwrap_or(0);
            let (header, data) = read_npy(file, size).map_err(|e| fail(e.to_string()))?;
            let dtype = npy::dtype_of(&header.descr)
                .ok_or_else(|| fail(format!("{}: dtype {} is not one a region holds", file.display(), header.descr)))?;
            if header.fortran_order && header.shape.iter().filter(|&&d| d > 1).count() > 1 {
                return Err(fail(format!(
                    "{}: Fortran-ordered data: save it in C order (`np.ascontiguousarray`)",
                    file.display()
                )));
            }
            // Two names of one region (an array passed as an input and as an output) may both be given.
            if let Some(&i) = by_region.get(&warp_region) {
                if out[i].bytes != data {
                    return Err(fail(format!(
                        "{} differs from the expected state given for {:?}, another name of region {warp_region}",
                        file.display(),
                        out[i].name
                    )));
                }
                continue;
            }
            by_region.insert(warp_region, out.len());
            out.push(Expected { name: name.clone(), warp_region, bytes: data, dtype, shape: header.shape });
        }
        Ok(out)
    }

    /// Every Warp region as a region, named by its first binding; typed by its expected file.
    /// Their sizes are checked against the replay limits first, as a replay would check them.
    fn add_regions(&mut self, expected: &[Expected]) -> Result<(), WrpImportError> {
        let c = self.capture;
        let mut first_binding: HashMap<u32, &str> = HashMap::new();
        for (name, id) in &c.bindings {
            first_binding.entry(*id).or_insert(name);
        }
        let expected_of: HashMap<u32, &Expected> = expected.iter().map(|e| (e.warp_region, e)).collect();
        let mut ids: Vec<&wrp::Region> = c.regions.iter().collect();
        ids.sort_by_key(|r| r.id);
        let names: Vec<String> = ids
            .iter()
            .map(|r| first_binding.get(&r.id).map_or_else(|| format!("region{}", r.id), |n| n.to_string()))
            .collect();
        let limited = self.options.limits.check_regions(names.iter().zip(&ids).map(|(n, r)| (n.as_str(), r.size)));
        if let Err(e) = limited {
            return self.unsupported(e.to_string());
        }
        for (r, name) in ids.into_iter().zip(names) {
            let (dtype, shape) = match expected_of.get(&r.id) {
                Some(e) => {
                    (e.dtype, if e.shape.len() > 1 && e.shape.len() <= 4 { e.shape.clone() } else { Vec::new() })
                }
                None => (DType::Bytes, Vec::new()),
            };
            let decl = RegionDecl { shape, ..RegionDecl::new(name, r.size, dtype) };
            let result = self.w.add_region(decl);
            let region = self.write(result)?;
            if let Some(bytes) = r.initial {
                let result = self.w.set_initial_bytes(region, bytes);
                self.write(result)?;
            }
            self.regions.insert(r.id as i32, (region, r.size));
        }
        let mut bound: HashSet<&str> = HashSet::new();
        for (name, id) in &c.bindings {
            // A name listed as both input and output is one binding.
            if !bound.insert(name) {
                continue;
            }
            let Some(&(region, _)) = self.regions.get(&(*id as i32)) else {
                return self
                    .unsupported(format!("binding {name:?} names region {id}, which the capture does not declare"));
            };
            let result = self.w.add_binding(name, region, Direction::InOut);
            self.write(result)?;
        }
        self.summary.regions = self.regions.len();
        Ok(())
    }

    /// The regions the import added (uploads, wide fills, else flags) count against the limit on
    /// regions too.
    fn check_region_count(&self) -> Result<(), WrpImportError> {
        let count = (self.regions.len() + self.hidden) as u64;
        let limits = &self.options.limits;
        match shared::replay::LimitError::over("the number of regions".into(), count, limits.max_regions, "max-regions")
        {
            Ok(()) => Ok(()),
            Err(e) => self.unsupported(e.to_string()),
        }
    }

    /// The PTX of every module a launch uses, as recap modules.
    fn load_modules(&mut self) -> Result<(), WrpImportError> {
        let c = self.capture;
        // The entries each module must define.
        let mut needed: HashMap<&str, BTreeSet<String>> = HashMap::new();
        collect_entries(&self.kernel_of, &c.ops, &mut needed);
        let mut hashes: Vec<&&str> = needed.keys().collect();
        hashes.sort();
        for hash in hashes.into_iter().copied() {
            let entries: Vec<String> = needed[hash].iter().cloned().collect();
            let Some(&module) = self.module_of.get(hash) else {
                return self
                    .unsupported(format!("a launch names module {}, which the capture does not declare", short(hash)));
            };
            let (ptx, source) = self.module_ptx(module, &entries)?;
            let result = self.w.add_module(&module.name, &ptx.text);
            let id = self.write(result)?;
            self.summary.modules.push((module.name.clone(), source));
            self.ptx.insert(hash.to_string(), (id, ptx));
        }
        Ok(())
    }

    /// The dynamic shared memory the capture records for each entry of `module`'s kernels.
    fn recorded_smem(&self, module: &wrp::WrpModule) -> HashMap<String, u32> {
        let kernels = self.kernels_of_module.get(module.hash.as_str()).map_or(&[][..], Vec::as_slice);
        kernels
            .iter()
            .flat_map(|k| [(ptx_entry(k, true), k.forward_smem_bytes), (ptx_entry(k, false), k.backward_smem_bytes)])
            .collect()
    }

    /// Finds a module's PTX: packaged with the capture, else in `--ptx-from`, else compiled from
    /// the CUDA source it packaged (`source.rs`).
    fn module_ptx(&self, module: &wrp::WrpModule, entries: &[String]) -> Result<(ModulePtx, String), WrpImportError> {
        let fail = |reason: String| WrpImportError::Ptx { module: module.name.clone(), reason };
        let file = &module.binary_filename;
        if file.ends_with(".ptx") {
            if file.contains(['/', '\\']) || file.starts_with('.') {
                return Err(fail(format!("the capture names its PTX {file:?}, which is not a plain file name")));
            }
            let path = self.modules_dir.join(file);
            let text = read_ptx(&path).map_err(|e| fail(e.to_string()))?;
            check_entries(&text, entries).map_err(|e| fail(format!("{}: {e}", path.display())))?;
            let smem = self.recorded_smem(module);
            return Ok((ModulePtx { text, smem }, format!("packaged with the capture ({file})")));
        }
        let Some(dir) = &self.options.ptx_from else {
            if let (false, CaptureDevice::Cuda { arch }) = (module.source_filename.is_empty(), self.capture.device) {
                let include = self.options.warp_include.as_deref();
                let text = source::compile(module, arch, &self.modules_dir, include).map_err(fail)?;
                check_entries(&text, entries).map_err(|e| fail(format!("{}: {e}", module.source_filename)))?;
                let from = format!("compiled from its CUDA source {} with NVRTC", module.source_filename);
                return Ok((ModulePtx { text, smem: self.recorded_smem(module) }, from));
            }
            return Err(fail(format!(
                "the capture packaged {file}, not PTX: give --ptx-from DIR with the PTX that \
                 `wp.compile_aot_module(\"{}\", arch=90, module_dir=DIR, use_ptx=True)` writes (or capture with \
                 `wp.config.cuda_output = \"ptx\"` on a GPU)",
                module.name
            )));
        };
        let prefix = format!("wp_{}_", module.name);
        let listing = std::fs::read_dir(dir).map_err(|e| fail(format!("reading {}: {e}", dir.display())))?;
        let mut candidates: Vec<(u32, PathBuf)> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.to_string();
                let rest = name.strip_prefix(&prefix)?.strip_suffix(".ptx")?;
                let arch = rest.rsplit_once(".sm")?.1.trim_end_matches(['a', 'f']).parse::<u32>().ok()?;
                // A module named `a` must not take the files of a module named `a_b`: the rest is
                // the hash alone.
                (!rest.rsplit_once(".sm")?.0.contains('_')).then_some((arch, p))
            })
            .collect();
        // The capture's own architecture first, then sm_90, then the newest.
        let wanted = match self.capture.device {
            CaptureDevice::Cuda { arch } => arch,
            CaptureDevice::Cpu => 90,
        };
        candidates.sort_by_key(|(arch, p)| (*arch != wanted, std::cmp::Reverse(*arch), p.clone()));
        let mut refused = Vec::new();
        for (_, path) in &candidates {
            let text = read_ptx(path).map_err(|e| fail(e.to_string()))?;
            match check_entries(&text, entries) {
                Ok(()) => {
                    let smem = read_meta(&path.with_extension("")).map_err(|e| fail(e.to_string()))?;
                    let source =
                        format!("AOT PTX {} (--ptx-from)", path.file_name().unwrap_or_default().to_string_lossy());
                    return Ok((ModulePtx { text, smem }, source));
                }
                Err(e) => refused.push(format!("{}: {e}", path.display())),
            }
        }
        Err(fail(match refused.is_empty() {
            true => format!("{} has no {prefix}*.sm*.ptx", dir.display()),
            false => format!("no PTX in {} defines the capture's entries: {}", dir.display(), refused.join("; ")),
        }))
    }

    fn ops(&mut self, ops: &[WrpOp<'_>], parent: &str) -> Result<(), WrpImportError> {
        for (index, op) in ops.iter().enumerate() {
            let path = op_path(parent, index);
            self.op(op, &path).map_err(|e| match e {
                WrpImportError::Unsupported { path: file, reason } if !reason.starts_with("op ") => {
                    WrpImportError::Unsupported {
                        path: file,
                        reason: format!("{path} (at byte {}): {reason}", op.offset),
                    }
                }
                other => other,
            })?;
        }
        Ok(())
    }

    fn region(&self, id: i32) -> Result<RegionId, WrpImportError> {
        self.region_and_size(id).map(|(region, _)| region)
    }

    fn region_and_size(&self, id: i32) -> Result<(RegionId, u64), WrpImportError> {
        match self.regions.get(&id) {
            Some(&r) => Ok(r),
            None => self.unsupported(format!("region {id} is not one the capture declares")),
        }
    }

    /// A region the import adds, holding `bytes`.
    fn hidden_region(&mut self, what: &str, bytes: &[u8], dtype: DType) -> Result<RegionId, WrpImportError> {
        self.hidden += 1;
        let decl = RegionDecl::new(format!("wrp_{what}{}", self.hidden), bytes.len() as u64, dtype);
        let result = self.w.add_region(decl);
        let region = self.write(result)?;
        let result = self.w.set_initial_bytes(region, bytes);
        self.write(result)?;
        Ok(region)
    }

    fn emitted<T>(&mut self, result: Result<T, WriteError>) -> Result<T, WrpImportError> {
        self.summary.ops += 1;
        self.write(result)
    }

    fn op(&mut self, op: &WrpOp<'_>, path: &str) -> Result<(), WrpImportError> {
        match &op.kind {
            OpKind::Launch(l) => self.launch(l)?,
            &OpKind::Copy { dst, src, dst_offset, src_offset, size } => {
                let c = CopyOp { src: self.region(src)?, src_offset, dst: self.region(dst)?, dst_offset, len: size };
                let result = self.w.copy(c);
                self.emitted(result)?;
            }
            &OpKind::Upload { dst, dst_offset, data } => {
                let src = self.hidden_region("upload", data, DType::Bytes)?;
                let c = CopyOp { src, src_offset: 0, dst: self.region(dst)?, dst_offset, len: data.len() as u64 };
                let result = self.w.copy(c);
                self.emitted(result)?;
            }
            &OpKind::Memset { region, value, offset, size } => {
                let m = MemsetOp { region: self.region(region)?, offset, len: size, width: 1, pattern: value as u64 };
                let result = self.w.memset(m);
                self.emitted(result)?;
            }
            &OpKind::Fill { region: warp_region, offset, count, value } => {
                let (region, size) = self.region_and_size(warp_region)?;
                let width = value.len() as u64;
                // Checked before anything is made of it: the count is the file's to choose.
                let Some(len) =
                    count.checked_mul(width).filter(|len| offset.checked_add(*len).is_some_and(|end| end <= size))
                else {
                    return self.unsupported(format!(
                        "a fill of {count} values of {width} bytes at byte {offset} of region {warp_region}, \
                         which has {size} bytes"
                    ));
                };
                if matches!(value.len(), 1 | 2 | 4 | 8) {
                    let mut pattern = [0u8; 8];
                    pattern[..value.len()].copy_from_slice(value);
                    let m = MemsetOp { region, offset, len, width: width as u32, pattern: u64::from_le_bytes(pattern) };
                    let result = self.w.memset(m);
                    self.emitted(result)?;
                } else if len > 0 {
                    // One value copied in from a region holding it, then the filled part copied
                    // onto the rest, doubling each time: the archive holds the value once, however
                    // wide the fill.
                    let src = self.hidden_region("fill", value, DType::Bytes)?;
                    let result =
                        self.w.copy(CopyOp { src, src_offset: 0, dst: region, dst_offset: offset, len: width });
                    self.emitted(result)?;
                    let mut done = width;
                    while done < len {
                        let n = done.min(len - done);
                        let c =
                            CopyOp { src: region, src_offset: offset, dst: region, dst_offset: offset + done, len: n };
                        let result = self.w.copy(c);
                        self.emitted(result)?;
                        done += n;
                    }
                }
            }
            // Warp's replay does nothing for these: its regions exist from the start.
            OpKind::Alloc { .. } => {}
            OpKind::While { region, offset, body } => {
                let cond = Condition { region: self.region(*region)?, offset: *offset, max_iterations: 0 };
                let result = self.w.begin_while(cond);
                self.emitted(result)?;
                self.ops(body, &format!("the body of {path}"))?;
                let result = self.w.end_body();
                self.write(result)?;
            }
            OpKind::If { region, offset, then, otherwise } => {
                let cond = Condition { region: self.region(*region)?, offset: *offset, max_iterations: 0 };
                // The else branch runs on a flag the then branch clears: Warp tests the condition
                // once, and the then branch may change it.
                let flag = match otherwise.is_empty() {
                    true => None,
                    false => {
                        let flag = self.hidden_region("else", &[0; 4], DType::U32)?;
                        let set = MemsetOp { region: flag, offset: 0, len: 4, width: 4, pattern: 1 };
                        let result = self.w.memset(set);
                        self.emitted(result)?;
                        Some(flag)
                    }
                };
                let result = self.w.begin_if(cond);
                self.emitted(result)?;
                if let Some(flag) = flag {
                    let clear = MemsetOp { region: flag, offset: 0, len: 4, width: 4, pattern: 0 };
                    let result = self.w.memset(clear);
                    self.emitted(result)?;
                }
                self.ops(then, &format!("the then branch of {path}"))?;
                let result = self.w.end_body();
                self.write(result)?;
                if let Some(flag) = flag {
                    let result = self.w.begin_if(Condition { region: flag, offset: 0, max_iterations: 0 });
                    self.emitted(result)?;
                    self.ops(otherwise, &format!("the else branch of {path}"))?;
                    let result = self.w.end_body();
                    self.write(result)?;
                }
            }
            OpKind::Scan { .. }
            | OpKind::RadixSort { .. }
            | OpKind::SegmentedSort { .. }
            | OpKind::RunLengthEncode { .. }
            | OpKind::Reduction { .. } => self.library(&op.kind)?,
            OpKind::Library { opcode } => {
                return self.unsupported(format!(
                    "{} (Warp op type {opcode}) runs Warp's library code, not a kernel of the capture, and a recap \
                     archive has no op for it (recap replays Warp's sorts, scans, reductions and run-length \
                     encoding)",
                    wrp::opcode_name(*opcode)
                ));
            }
        }
        Ok(())
    }

    fn launch(&mut self, l: &Launch<'_>) -> Result<(), WrpImportError> {
        let Some(&kernel) = self.kernel_of.get(&(l.module_hash.as_str(), l.kernel_key.as_str())) else {
            return self.unsupported(format!(
                "a launch of {}, which module {} does not declare",
                l.kernel_key,
                short(&l.module_hash)
            ));
        };
        if !l.forward && kernel.backward_name.is_empty() {
            return self.unsupported(format!("a backward launch of {}, built without adjoints", l.kernel_key));
        }
        let entry = ptx_entry(kernel, l.forward);
        if l.dim == 0 {
            self.summary.empty_launches += 1;
            return Ok(());
        }
        let (kernel_id, layout) = self.kernel(&l.module_hash, &entry)?;
        let args: Vec<&Param> = l.params.iter().chain(&l.adjoints).collect();
        if layout.len() != args.len() + 1 {
            return self.unsupported(format!(
                "a launch of {} passes {} arguments but .entry {entry} declares {} after the launch bounds",
                l.kernel_key,
                args.len(),
                layout.len().saturating_sub(1)
            ));
        }
        let mut params = vec![0u8; layout.last().map_or(0, |p| (p.offset + p.size) as usize)];
        let bounds = launch_bounds(l, self.capture.bounds);
        if layout[0].size as usize != bounds.len() {
            return self.unsupported(format!(
                ".entry {entry} takes {} bytes of launch bounds; a launch of {} dimensions has {}",
                layout[0].size,
                l.ndim,
                bounds.len()
            ));
        }
        params[..bounds.len()].copy_from_slice(&bounds);
        let mut relocs = Vec::new();
        for (i, (arg, slot)) in args.iter().zip(&layout[1..]).enumerate() {
            if arg.value.len() != slot.size as usize {
                return self.unsupported(format!(
                    "argument {i} of {} is {} bytes but .entry {entry} declares {} as {} bytes",
                    l.kernel_key,
                    arg.value.len(),
                    slot.name,
                    slot.size
                ));
            }
            let at = slot.offset as usize;
            params[at..at + arg.value.len()].copy_from_slice(&arg.value);
            for p in &arg.pointers {
                let word = at + p.at as usize;
                // The capture's bytes there are the address the pointer had then: meaningless here.
                params[word..word + 8].fill(0);
                match p.target {
                    PointerTarget::Data { region, offset } => {
                        relocs.push(Reloc { offset: word as u64, target: self.region(region)?, target_offset: offset })
                    }
                    PointerTarget::Null => {}
                    PointerTarget::Handle => {
                        return self.unsupported(format!(
                            "argument {i} of {} holds a wp.handle (a mesh, volume or BVH), which a recap archive cannot hold",
                            l.kernel_key
                        ))
                    }
                }
            }
        }
        let block = if l.block_dim > 0 { l.block_dim } else { DEFAULT_BLOCK };
        let mut blocks = l.dim.div_ceil(block as u64);
        if l.max_blocks > 0 && l.grid_stride {
            blocks = blocks.min(l.max_blocks as u64);
        }
        if blocks > MAX_GRID_X {
            if !l.grid_stride {
                return self.unsupported(format!("a launch of {} threads of {} in one dimension", l.dim, l.kernel_key));
            }
            blocks = MAX_GRID_X;
        }
        let shared_bytes = if l.smem_bytes > 0 {
            l.smem_bytes
        } else {
            self.ptx[&l.module_hash].1.smem.get(&entry).copied().unwrap_or(0)
        };
        let decl = LaunchDecl {
            kernel: kernel_id,
            grid: [blocks as u32, 1, 1],
            block: [block, 1, 1],
            shared_bytes,
            params,
            relocs,
        };
        let result = self.w.launch(decl);
        self.emitted(result)?;
        self.summary.launches += 1;
        Ok(())
    }

    /// The recap kernel of a module's entry, declared on first use with the PTX's layout.
    fn kernel(
        &mut self,
        module_hash: &str,
        entry: &str,
    ) -> Result<(KernelId, Vec<shared::ptx::signature::EntryParam>), WrpImportError> {
        let key = (module_hash.to_string(), entry.to_string());
        if let Some(found) = self.kernels.get(&key) {
            return Ok(found.clone());
        }
        let (module, ptx) = &self.ptx[module_hash];
        let module = *module;
        let name = self.module_of.get(module_hash).map_or_else(|| short(module_hash), |m| m.name.clone());
        let layout = shared::ptx::signature::entry_params(&ptx.text, entry)
            .map_err(|e| WrpImportError::Ptx { module: name, reason: e.to_string() })?;
        // Warp's arguments are values; the pointers inside them are relocations.
        let decls = layout.iter().map(|p| p.decl(false)).collect();
        let result = self.w.add_kernel(module, entry, decls);
        let id = self.write(result)?;
        self.kernels.insert(key, (id, layout.clone()));
        Ok((id, layout))
    }
}

/// An `--expected` file, checked.
struct Expected {
    name: String,
    warp_region: u32,
    bytes: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
}

/// The entries launches use, per module hash.
fn collect_entries<'c>(
    kernels: &HashMap<(&str, &str), &'c wrp::Kernel>,
    ops: &[WrpOp<'_>],
    out: &mut HashMap<&'c str, BTreeSet<String>>,
) {
    for op in ops {
        match &op.kind {
            OpKind::Launch(l) if l.dim > 0 => {
                if let Some(k) = kernels.get(&(l.module_hash.as_str(), l.kernel_key.as_str())) {
                    out.entry(k.module_hash.as_str()).or_default().insert(ptx_entry(k, l.forward));
                }
            }
            OpKind::While { body, .. } => collect_entries(kernels, body, out),
            OpKind::If { then, otherwise, .. } => {
                collect_entries(kernels, then, out);
                collect_entries(kernels, otherwise, out);
            }
            _ => {}
        }
    }
}

/// Why an `--expected` file could not be read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum NpyFileError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {error}")]
    Header { path: PathBuf, error: npy::NpyError },
    #[error("{path}: not a .npy file: shape {shape:?} of {descr} needs {needs} bytes of data but the file has {has}")]
    Truncated { path: PathBuf, shape: Vec<u64>, descr: String, needs: u64, has: u64 },
    #[error("{path} holds {holds} bytes but the region has {region}")]
    WrongSize { path: PathBuf, holds: u64, region: u64 },
    #[error("{path}: {bytes} bytes do not fit in memory")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("{path} changed while it was read")]
    Changed { path: PathBuf },
}

/// An `--expected` file's header and data: the header read and checked first, then exactly the
/// `region_size` bytes it must describe.
fn read_npy(file: &Path, region_size: u64) -> Result<(npy::NpyHeader, Vec<u8>), NpyFileError> {
    let path = || file.to_path_buf();
    let io = |error| NpyFileError::Io { path: path(), error };
    let mut f = std::fs::File::open(file).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    let mut prefix = Vec::new();
    (&mut f).take(npy::HEADER_PREFIX as u64).read_to_end(&mut prefix).map_err(io)?;
    let (header, start, data_len) =
        npy::parse_header(&prefix).map_err(|error| NpyFileError::Header { path: path(), error })?;
    if file_len.checked_sub(start as u64) != Some(data_len) {
        return Err(NpyFileError::Truncated {
            path: path(),
            shape: header.shape.clone(),
            descr: header.descr.clone(),
            needs: data_len,
            has: file_len.saturating_sub(start as u64),
        });
    }
    if data_len != region_size {
        return Err(NpyFileError::WrongSize { path: path(), holds: data_len, region: region_size });
    }
    let mut data = prefix.split_off(start.min(prefix.len()));
    let rest = data_len - data.len() as u64;
    data.try_reserve_exact(rest as usize).map_err(|_| NpyFileError::TooLarge { path: path(), bytes: data_len })?;
    (&mut f).take(rest).read_to_end(&mut data).map_err(io)?;
    if data.len() as u64 != data_len {
        return Err(NpyFileError::Changed { path: path() });
    }
    Ok((header, data))
}

/// The first 12 hex digits of a module hash, for messages.
fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// Why a module's PTX file or its `.meta` file could not be read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum PtxFileError {
    #[error("reading {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path} is not text")]
    NotText { path: PathBuf },
    #[error("{path}: {error}")]
    Meta { path: PathBuf, error: serde_json::Error },
}

/// A PTX file as text (NVRTC ends it with a NUL byte, which is dropped).
fn read_ptx(path: &Path) -> Result<String, PtxFileError> {
    let bytes = std::fs::read(path).map_err(|error| PtxFileError::Read { path: path.to_path_buf(), error })?;
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    String::from_utf8(bytes[..end].to_vec()).map_err(|_| PtxFileError::NotText { path: path.to_path_buf() })
}

/// Whether `ptx` defines every entry in `entries`.
fn check_entries(ptx: &str, entries: &[String]) -> Result<(), SignatureError> {
    for entry in entries {
        shared::ptx::signature::entry_params(ptx, entry)?;
    }
    Ok(())
}

/// Dynamic shared memory per entry from the `.meta` file `wp.compile_aot_module` writes beside its
/// PTX (`<stem>.meta`, JSON `{"<entry>_smem_bytes": n}`); none when there is no such file.
fn read_meta(ptx_stem: &Path) -> Result<HashMap<String, u32>, PtxFileError> {
    // `wp_m_hash.sm90.ptx` -> stem `wp_m_hash.sm90` -> `wp_m_hash.meta`.
    let meta = ptx_stem.with_extension("meta");
    let Ok(text) = std::fs::read_to_string(&meta) else { return Ok(HashMap::new()) };
    let map: HashMap<String, u64> =
        serde_json::from_str(&text).map_err(|error| PtxFileError::Meta { path: meta.clone(), error })?;
    Ok(map
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_suffix("_smem_bytes")?.to_string(), u32::try_from(v).ok()?)))
        .collect())
}

/// Warp's `launch_bounds_t` for a launch, as the capture's release lays it out: from Warp 1.14
/// `launch_bounds_t<ndim>` (the shape as `ndim` u32s, then the thread count and the coordinate
/// multiplier as u64s, each at 8-byte alignment); in Warp 1.13 four shape words, `ndim`, and the
/// thread count at byte 24.
fn launch_bounds(l: &Launch<'_>, layout: BoundsLayout) -> Vec<u8> {
    let ndim = l.ndim as usize;
    if layout == BoundsLayout::Fixed {
        let mut out = vec![0u8; 32];
        for (i, s) in l.shape[..ndim].iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&s.to_le_bytes());
        }
        out[16..20].copy_from_slice(&l.ndim.to_le_bytes());
        out[24..32].copy_from_slice(&l.size.to_le_bytes());
        return out;
    }
    let size_at = (4 * ndim).div_ceil(8) * 8;
    let mut out = vec![0u8; size_at + 16];
    for (i, s) in l.shape[..ndim].iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&s.to_le_bytes());
    }
    let covered: u64 = l.shape[..ndim].iter().map(|&s| s as u64).product();
    // Threads beyond the shape's (folded launch dimensions) share coordinates in runs of this.
    let coord_mult = if covered > 0 && l.size / covered > 1 { l.size / covered } else { 1 };
    out[size_at..size_at + 8].copy_from_slice(&l.size.to_le_bytes());
    out[size_at + 8..size_at + 16].copy_from_slice(&coord_mult.to_le_bytes());
    out
}

//! The streaming writer.
//!
//! Bulk bytes (PTX, cubins, region contents) are compressed and written to the output as they are
//! added, straight after the header; only the small fixed-size tables stay in memory until
//! [`ArchiveWriter::finish`] appends them and the section table and patches the header. A multi-GiB
//! region is therefore never held in memory, not even once, when it is added from a reader.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

use super::layout::{self, SectionKind, *};
use super::model::*;
use super::rules::{self, Broken};
use crate::effects::INPUTS_HASH_LEN;

/// Why the writer refused.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing the archive failed: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Invalid(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, WriteError> {
    Err(WriteError::Invalid(msg.into()))
}

/// A broken rule as a writer error about `what`.
fn refuse<T>(what: &str, rule: Result<T, Broken>) -> Result<T, WriteError> {
    rule.map_err(|(_, reason)| WriteError::Invalid(format!("{what}: {reason}")))
}

#[derive(Clone, Copy, Default)]
struct BlobRef {
    offset: u64,
    stored_len: u64,
    raw_len: u64,
    codec: u32,
}

impl BlobRef {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.offset);
        put_u64(out, self.stored_len);
        put_u64(out, self.raw_len);
        put_u32(out, self.codec);
        put_u32(out, 0);
    }
}

struct RegionRecord {
    decl: RegionDecl,
    name: StrId,
    initial: Option<BlobRef>,
    expected: Option<(BlobRef, Tolerance)>,
}

struct ModuleRecord {
    name: StrId,
    ptx: BlobRef,
    cubins: Vec<(u32, BlobRef)>,
}

struct KernelRecord {
    module: ModuleId,
    name: StrId,
    params: Vec<ParamDecl>,
}

/// Writes one archive to `W`. See the module docs for what is held in memory.
pub struct ArchiveWriter<W: Write + Seek> {
    out: W,
    start: u64,
    /// Bytes written to the blobs section so far.
    blobs_len: u64,
    blobs_hash: blake3::Hasher,
    string_ids: HashMap<String, StrId>,
    strings: Vec<String>,
    modules: Vec<ModuleRecord>,
    kernels: Vec<KernelRecord>,
    regions: Vec<RegionRecord>,
    launch_relocs: Vec<(OpId, Reloc)>,
    region_relocs: Vec<(RegionId, Reloc)>,
    ops: Vec<[u8; OP_LEN]>,
    param_bytes: Vec<u8>,
    bindings: Vec<(StrId, RegionId, Direction)>,
    /// The names in `bindings`: a duplicate is found without a scan (importers add many thousands).
    bound: std::collections::HashSet<StrId>,
    meta: Vec<(StrId, StrId)>,
    open_bodies: Vec<OpId>,
    /// Declared logical devices; none means a one-device archive without a `devices` section.
    devices: Vec<(StrId, u32)>,
    /// Regions that are module variables: `(region, module, name)` (the `module-vars` section).
    module_vars: Vec<(RegionId, ModuleId, StrId)>,
    /// The regions and the `(module, name, device)` variables in `module_vars`.
    module_var_seen: (std::collections::HashSet<RegionId>, std::collections::HashSet<(ModuleId, String, DeviceId)>),
    /// Library ops in op order (the `library` section).
    library: Vec<super::library::LibraryOp>,
    /// The device the next ops run on.
    current_device: DeviceId,
    /// A blob write failed part way: bytes of unknown length are in the output, so the archive
    /// cannot be finished.
    broken_blob: bool,
    /// Blobs already written, by BLAKE3 of their raw contents.
    blob_by_content: HashMap<[u8; 32], BlobRef>,
    /// Recorded effects: `(launch op, region, offset, inputs hash, bytes)`, in op order.
    effects: Vec<(OpId, u32, u64, [u8; INPUTS_HASH_LEN], BlobRef)>,
    /// Typed layouts of regions (the `types` section).
    types: Vec<(RegionId, Vec<Stretch>)>,
}

/// Hashes the raw bytes of a blob on their way into the compressor.
struct HashingReader<'a> {
    inner: &'a mut dyn Read,
    hash: blake3::Hasher,
}

impl Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Counts and hashes what passes through on its way to the output.
struct BlobSink<'a, W: Write> {
    out: &'a mut W,
    written: u64,
    hash: &'a mut blake3::Hasher,
}

impl<W: Write> Write for BlobSink<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hash.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write + Seek> ArchiveWriter<W> {
    /// Starts an archive at the output's current position.
    pub fn new(mut out: W) -> Result<Self, WriteError> {
        let start = out.stream_position()?;
        out.write_all(&[0u8; HEADER_LEN])?;
        Ok(ArchiveWriter {
            out,
            start,
            blobs_len: 0,
            blobs_hash: blake3::Hasher::new(),
            string_ids: HashMap::new(),
            strings: Vec::new(),
            modules: Vec::new(),
            kernels: Vec::new(),
            regions: Vec::new(),
            launch_relocs: Vec::new(),
            region_relocs: Vec::new(),
            ops: Vec::new(),
            param_bytes: Vec::new(),
            bindings: Vec::new(),
            bound: Default::default(),
            meta: Vec::new(),
            open_bodies: Vec::new(),
            devices: Vec::new(),
            module_vars: Vec::new(),
            module_var_seen: Default::default(),
            library: Vec::new(),
            current_device: 0,
            broken_blob: false,
            blob_by_content: HashMap::new(),
            effects: Vec::new(),
            types: Vec::new(),
        })
    }

    /// Interns a string; the same text always gets the same id.
    pub fn string(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as StrId;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    /// Compresses `raw_len` bytes from `src` into the blobs section.
    fn write_blob(&mut self, src: &mut dyn Read, raw_len: u64) -> Result<BlobRef, WriteError> {
        if self.broken_blob {
            return invalid("an earlier blob failed to write, so the blobs section is not usable");
        }
        self.broken_blob = true;
        let mut hashing = HashingReader { inner: src, hash: blake3::Hasher::new() };
        let blob = self.stream_blob(&mut hashing, raw_len)?;
        self.broken_blob = false;
        self.blob_by_content.entry(*hashing.hash.finalize().as_bytes()).or_insert(blob);
        Ok(blob)
    }

    /// Like [`Self::write_blob`] for bytes already in memory, which are stored only once however
    /// often they are added (a buffer a kernel only reads has identical initial and expected data).
    fn write_blob_bytes(&mut self, bytes: &[u8]) -> Result<BlobRef, WriteError> {
        if let Some(blob) = self.blob_by_content.get(blake3::hash(bytes).as_bytes()) {
            return Ok(*blob);
        }
        self.write_blob(&mut &bytes[..], bytes.len() as u64)
    }

    fn stream_blob(&mut self, src: &mut dyn Read, raw_len: u64) -> Result<BlobRef, WriteError> {
        let offset = self.blobs_len;
        let sink = BlobSink { out: &mut self.out, written: 0, hash: &mut self.blobs_hash };
        let mut info = lz4_flex::frame::FrameInfo::new();
        info.content_size = Some(raw_len);
        // The smallest block size that holds the whole blob: decoders allocate one block, so a small
        // region never costs a 4 MiB buffer to read, and large ones stream in 4 MiB steps.
        info.block_size = match raw_len {
            0..=0x1_0000 => lz4_flex::frame::BlockSize::Max64KB,
            0x1_0001..=0x4_0000 => lz4_flex::frame::BlockSize::Max256KB,
            0x4_0001..=0x10_0000 => lz4_flex::frame::BlockSize::Max1MB,
            _ => lz4_flex::frame::BlockSize::Max4MB,
        };
        // Each blob carries its own content checksum, so decoding one region verifies it without
        // hashing the whole blobs section.
        info.content_checksum = true;
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, sink);
        let copied = io::copy(&mut src.take(raw_len), &mut enc)?;
        if copied != raw_len {
            return invalid(format!("blob source ended after {copied} of {raw_len} bytes"));
        }
        let sink = enc.finish().map_err(|e| WriteError::Io(io::Error::other(e)))?;
        let stored_len = sink.written;
        self.blobs_len += stored_len;
        Ok(BlobRef { offset, stored_len, raw_len, codec: CODEC_LZ4_FRAME })
    }

    /// Adds a module from its PTX text.
    pub fn add_module(&mut self, name: &str, ptx: &str) -> Result<ModuleId, WriteError> {
        let name = self.string(name);
        let ptx = self.write_blob_bytes(ptx.as_bytes())?;
        self.modules.push(ModuleRecord { name, ptx, cubins: Vec::new() });
        Ok(self.modules.len() as ModuleId - 1)
    }

    /// Adds a prebuilt cubin of a module for one SM architecture (e.g. 90 for sm_90).
    pub fn add_cubin(&mut self, module: ModuleId, sm: u32, cubin: &[u8]) -> Result<(), WriteError> {
        if module as usize >= self.modules.len() {
            return invalid(format!("cubin for unknown module {module}"));
        }
        if self.modules[module as usize].cubins.iter().any(|c| c.0 == sm) {
            return invalid(format!("module {module} already has a cubin for sm_{sm}"));
        }
        let blob = self.write_blob_bytes(cubin)?;
        self.modules[module as usize].cubins.push((sm, blob));
        Ok(())
    }

    /// Adds a kernel: an entry of a module with its parameter layout.
    pub fn add_kernel(&mut self, module: ModuleId, name: &str, params: Vec<ParamDecl>) -> Result<KernelId, WriteError> {
        if module as usize >= self.modules.len() {
            return invalid(format!("kernel {name} names unknown module {module}"));
        }
        rules::params(&params).map_err(|(_, (_, reason))| WriteError::Invalid(format!("kernel {name}: {reason}")))?;
        let name = self.string(name);
        for p in &params {
            self.string(&p.name);
        }
        self.kernels.push(KernelRecord { module, name, params });
        Ok(self.kernels.len() as KernelId - 1)
    }

    /// Declares the next logical device (the first is device 0). An archive that declares devices
    /// is a 1.1 archive with a `devices` section; one that declares none has the single device 0.
    /// Declare devices before regions and ops are placed on them.
    pub fn add_device(&mut self, decl: &DeviceDecl) -> Result<DeviceId, WriteError> {
        let name = self.string(&decl.name);
        self.devices.push((name, decl.sm));
        Ok(self.devices.len() as DeviceId - 1)
    }

    /// Says that `region` is the storage of variable `name` (a PTX `.global` or `.const`, or a
    /// cubin's global symbol) of `module` on the region's device: replays give the region the
    /// variable's own storage instead of an allocation, restore its initial contents there and
    /// check its expected contents from there. An archive with module variables is a 1.2 archive.
    pub fn add_module_var(&mut self, region: RegionId, module: ModuleId, name: &str) -> Result<(), WriteError> {
        let regions = &self.regions;
        let of_region = || {
            let d = &regions[region as usize].decl;
            (d.scratch, d.device)
        };
        let (seen_regions, seen_vars) = &mut self.module_var_seen;
        let (count, modules) = (self.regions.len(), self.modules.len());
        super::reader::module_vars::rule(region, count, of_region, module, modules, name, seen_regions, seen_vars)
            .map_err(|(_, reason)| WriteError::Invalid(format!("module variable {name}: {reason}")))?;
        let name = self.string(name);
        self.module_vars.push((region, module, name));
        Ok(())
    }

    /// The oldest minor version whose features the archive uses.
    fn minor(&self) -> u16 {
        if !self.library.is_empty() {
            MINOR_LIBRARY
        } else if !self.module_vars.is_empty() {
            MINOR_MODULE_VARS
        } else if !self.devices.is_empty() {
            MINOR_DEVICES
        } else {
            0
        }
    }

    /// Logical devices the archive has: those declared, or the implicit one.
    pub fn device_count(&self) -> u32 {
        self.devices.len().max(1) as u32
    }

    /// The ops pushed from now on run on logical device `device`. Inside a while/if body every op
    /// runs on the body's device.
    pub fn set_device(&mut self, device: DeviceId) -> Result<(), WriteError> {
        refuse("op", rules::device(0, "the next op", device, self.device_count()))?;
        if let Some(&owner) = self.open_bodies.last() {
            let body_device = self.op_device(owner);
            if device != body_device {
                return invalid(format!(
                    "op {owner}'s body runs on device {body_device}; its ops cannot move to device {device}"
                ));
            }
        }
        self.current_device = device;
        Ok(())
    }

    fn op_device(&self, op: OpId) -> DeviceId {
        u32::from_le_bytes(self.ops[op as usize][OP_DEVICE..OP_DEVICE + 4].try_into().unwrap())
    }

    /// Refuses an op on the current device that acts on `region` of another device.
    fn check_placed(&self, what: &str, role: &str, region: RegionId) -> Result<(), WriteError> {
        let region_device = self.regions[region as usize].decl.device;
        refuse(what, rules::same_device(0, role, region, region_device, self.current_device))
    }

    pub fn add_region(&mut self, decl: RegionDecl) -> Result<RegionId, WriteError> {
        refuse(&format!("region {}", decl.name), rules::region(&decl.shape, decl.align))?;
        refuse(&format!("region {}", decl.name), rules::device(0, "the region", decl.device, self.device_count()))?;
        let name = self.string(&decl.name);
        self.regions.push(RegionRecord { decl, name, initial: None, expected: None });
        Ok(self.regions.len() as RegionId - 1)
    }

    fn region_size(&self, region: RegionId) -> Result<u64, WriteError> {
        match self.regions.get(region as usize) {
            Some(r) => Ok(r.decl.size),
            None => invalid(format!("unknown region {region}")),
        }
    }

    /// Streams a region's initial contents (exactly its size) from `src`.
    pub fn set_initial(&mut self, region: RegionId, src: &mut dyn Read) -> Result<(), WriteError> {
        let size = self.region_size(region)?;
        let blob = self.write_blob(src, size)?;
        self.regions[region as usize].initial = Some(blob);
        Ok(())
    }

    pub fn set_initial_bytes(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), WriteError> {
        self.check_len(region, bytes.len())?;
        let blob = self.write_blob_bytes(bytes)?;
        self.regions[region as usize].initial = Some(blob);
        Ok(())
    }

    /// Streams the region's expected final contents and the tolerance to judge a replay by.
    pub fn set_expected(
        &mut self,
        region: RegionId,
        src: &mut dyn Read,
        tolerance: Tolerance,
    ) -> Result<(), WriteError> {
        let size = self.region_size(region)?;
        refuse(&format!("region {region}"), rules::tolerance(&tolerance))?;
        let blob = self.write_blob(src, size)?;
        self.regions[region as usize].expected = Some((blob, tolerance));
        Ok(())
    }

    pub fn set_expected_bytes(
        &mut self,
        region: RegionId,
        bytes: &[u8],
        tolerance: Tolerance,
    ) -> Result<(), WriteError> {
        self.check_len(region, bytes.len())?;
        refuse(&format!("region {region}"), rules::tolerance(&tolerance))?;
        let blob = self.write_blob_bytes(bytes)?;
        self.regions[region as usize].expected = Some((blob, tolerance));
        Ok(())
    }

    fn check_len(&self, region: RegionId, len: usize) -> Result<(), WriteError> {
        let size = self.region_size(region)?;
        if size != len as u64 {
            return invalid(format!("region {region} is {size} bytes but {len} were given"));
        }
        Ok(())
    }

    /// Records that 8 bytes of a region's contents hold a device pointer.
    pub fn add_region_reloc(&mut self, region: RegionId, reloc: Reloc) -> Result<(), WriteError> {
        let size = self.region_size(region)?;
        self.check_reloc(size, &reloc, &format!("region {region}"))?;
        let (owner, target) =
            (self.regions[region as usize].decl.device, self.regions[reloc.target as usize].decl.device);
        refuse(
            &format!("pointer in region {region}"),
            rules::same_device(0, "its target", reloc.target, target, owner),
        )?;
        self.region_relocs.push((region, reloc));
        Ok(())
    }

    fn check_reloc(&self, owner_size: u64, r: &Reloc, owner: &str) -> Result<(), WriteError> {
        let target = self.region_size(r.target)?;
        refuse(&format!("relocation in {owner}"), rules::reloc(r, owner_size, target))
    }

    fn push_record(&mut self, rec: Vec<u8>) -> OpId {
        let mut fixed = [0u8; OP_LEN];
        fixed[..rec.len()].copy_from_slice(&rec);
        fixed[OP_DEVICE..OP_DEVICE + 4].copy_from_slice(&self.current_device.to_le_bytes());
        self.ops.push(fixed);
        self.ops.len() as OpId - 1
    }

    pub fn launch(&mut self, l: LaunchDecl) -> Result<OpId, WriteError> {
        let Some(k) = self.kernels.get(l.kernel as usize) else {
            return invalid(format!("launch of unknown kernel {}", l.kernel));
        };
        let need = k.params.iter().map(|p| p.offset as u64 + p.size as u64).max().unwrap_or(0);
        if (l.params.len() as u64) < need {
            return invalid(format!(
                "launch of kernel {} has {} parameter bytes; its parameters need {need}",
                self.strings[k.name as usize],
                l.params.len()
            ));
        }
        refuse(&format!("launch of kernel {}", self.strings[k.name as usize]), rules::launch_dims(l.grid, l.block))?;
        if l.params.len() as u64 > rules::MAX_PARAM_BYTES {
            return invalid(format!(
                "launch has {} parameter bytes, more than {}",
                l.params.len(),
                rules::MAX_PARAM_BYTES
            ));
        }
        let op = self.ops.len() as OpId;
        for r in &l.relocs {
            self.check_reloc(l.params.len() as u64, r, &format!("launch op {op}"))?;
            self.check_placed(&format!("launch op {op}"), "a parameter's", r.target)?;
        }
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, layout::op::LAUNCH);
        put_u32(&mut rec, l.kernel);
        for v in l.grid.iter().chain(&l.block) {
            put_u32(&mut rec, *v);
        }
        put_u32(&mut rec, l.shared_bytes);
        put_u32(&mut rec, l.params.len() as u32);
        put_u64(&mut rec, self.param_bytes.len() as u64);
        put_u32(&mut rec, self.launch_relocs.len() as u32);
        put_u32(&mut rec, l.relocs.len() as u32);
        self.param_bytes.extend_from_slice(&l.params);
        self.launch_relocs.extend(l.relocs.iter().map(|r| (op, *r)));
        Ok(self.push_record(rec))
    }

    pub fn copy(&mut self, c: CopyOp) -> Result<OpId, WriteError> {
        let (src, dst) = (self.region_size(c.src)?, self.region_size(c.dst)?);
        refuse("copy", rules::copy(&c, src, dst))?;
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, layout::op::COPY);
        put_u32(&mut rec, c.src);
        put_u32(&mut rec, c.dst);
        put_u32(&mut rec, 0);
        put_u64(&mut rec, c.src_offset);
        put_u64(&mut rec, c.dst_offset);
        put_u64(&mut rec, c.len);
        Ok(self.push_record(rec))
    }

    pub fn memset(&mut self, m: MemsetOp) -> Result<OpId, WriteError> {
        let size = self.region_size(m.region)?;
        refuse(&format!("memset of region {}", m.region), rules::memset(&m, size))?;
        self.check_placed("memset", "its", m.region)?;
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, layout::op::MEMSET);
        put_u32(&mut rec, m.region);
        put_u32(&mut rec, m.width);
        put_u32(&mut rec, 0);
        put_u64(&mut rec, m.offset);
        put_u64(&mut rec, m.len);
        put_u64(&mut rec, m.pattern);
        Ok(self.push_record(rec))
    }

    /// Allocates graph-owned scratch (a region declared with `scratch: true`).
    pub fn alloc(&mut self, region: RegionId) -> Result<OpId, WriteError> {
        self.check_scratch(region)?;
        self.region_op(layout::op::ALLOC, region)
    }

    pub fn free(&mut self, region: RegionId) -> Result<OpId, WriteError> {
        self.check_scratch(region)?;
        self.region_op(layout::op::FREE, region)
    }

    fn check_scratch(&self, region: RegionId) -> Result<(), WriteError> {
        self.region_size(region)?;
        if !self.regions[region as usize].decl.scratch {
            return invalid(format!("region {region} is not declared scratch, so it cannot be allocated or freed"));
        }
        self.check_placed("alloc/free", "its scratch", region)
    }

    fn region_op(&mut self, kind: u32, region: RegionId) -> Result<OpId, WriteError> {
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, kind);
        put_u32(&mut rec, region);
        Ok(self.push_record(rec))
    }

    /// Opens a `while (cond != 0) { body }` loop; the ops pushed until [`Self::end_body`] form its body.
    pub fn begin_while(&mut self, cond: Condition) -> Result<OpId, WriteError> {
        self.begin_body(layout::op::WHILE, cond)
    }

    /// Opens an `if (cond != 0) { body }`; the ops pushed until [`Self::end_body`] form its body.
    pub fn begin_if(&mut self, cond: Condition) -> Result<OpId, WriteError> {
        self.begin_body(layout::op::IF, cond)
    }

    fn begin_body(&mut self, kind: u32, cond: Condition) -> Result<OpId, WriteError> {
        if self.open_bodies.len() >= rules::MAX_NESTING {
            return invalid(format!("while/if bodies nest more than {} deep", rules::MAX_NESTING));
        }
        let size = self.region_size(cond.region)?;
        refuse(&format!("condition in region {}", cond.region), rules::condition(&cond, size))?;
        self.check_placed("while/if", "its condition's", cond.region)?;
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, kind);
        put_u32(&mut rec, cond.region);
        put_u32(&mut rec, 0); // body length, patched by end_body
        put_u32(&mut rec, cond.max_iterations);
        put_u64(&mut rec, cond.offset);
        let id = self.push_record(rec);
        self.open_bodies.push(id);
        Ok(id)
    }

    /// Closes the innermost open while/if body.
    pub fn end_body(&mut self) -> Result<(), WriteError> {
        let Some(id) = self.open_bodies.pop() else {
            return invalid("end_body without an open while/if");
        };
        let body_len = (self.ops.len() as u32) - id - 1;
        self.ops[id as usize][8..12].copy_from_slice(&body_len.to_le_bytes());
        Ok(())
    }

    /// Records event `event` on the current device: a later [`Self::wait`] for it (on any device)
    /// waits for everything this device was given before the signal.
    pub fn signal(&mut self, event: EventId) -> Result<OpId, WriteError> {
        self.event_op(layout::op::SIGNAL, "signal", event)
    }

    /// The current device waits for the latest earlier [`Self::signal`] of `event` before it runs
    /// the ops that follow (a wait with no earlier signal does not wait, as in CUDA).
    pub fn wait(&mut self, event: EventId) -> Result<OpId, WriteError> {
        self.event_op(layout::op::WAIT, "wait", event)
    }

    fn event_op(&mut self, kind: u32, what: &str, event: EventId) -> Result<OpId, WriteError> {
        if self.devices.is_empty() {
            return invalid(format!(
                "a {what} op needs declared devices (add_device): one-device archives have no events"
            ));
        }
        self.region_op(kind, event)
    }

    /// A library routine (a sort, scan, reduction or run-length encoding) over regions of the
    /// current device: an archive with one is a 1.3 archive. Refused like the reader refuses it:
    /// an operand outside its region, a parameter the routine does not take, an output that
    /// overlaps another operand.
    pub fn library(&mut self, op: super::library::LibraryOp) -> Result<OpId, WriteError> {
        let sizes = |r: RegionId| self.regions.get(r as usize).map(|r| r.decl.size);
        refuse(&format!("library op {}", op.name()), super::library::rule(&op, sizes))?;
        for o in op.operands().unwrap_or_default() {
            self.check_placed(&format!("library op {}", op.name()), o.role, o.at.region)?;
        }
        let mut rec = Vec::with_capacity(OP_LEN);
        put_u32(&mut rec, layout::op::LIBRARY);
        put_u32(&mut rec, self.library.len() as u32);
        self.library.push(op);
        Ok(self.push_record(rec))
    }

    /// A named timing marker.
    pub fn marker(&mut self, name: &str) -> Result<OpId, WriteError> {
        let name = self.string(name);
        self.region_op(layout::op::MARKER, name)
    }

    pub fn add_binding(&mut self, name: &str, region: RegionId, dir: Direction) -> Result<(), WriteError> {
        self.region_size(region)?;
        let id = self.string(name);
        if !self.bound.insert(id) {
            return invalid(format!("binding {name} is declared twice"));
        }
        self.bindings.push((id, region, dir));
        Ok(())
    }

    /// Records what launch `op` wrote, for replays that cannot run its kernel: `writes` are
    /// `(region, offset, bytes)`, each within its region, applied when the launch's inputs hash
    /// to `inputs` (`shared::effects`). Launches get their effects in op order, once each; an
    /// empty `writes` says the launch changed nothing.
    pub fn add_effects(
        &mut self,
        op: OpId,
        inputs: [u8; INPUTS_HASH_LEN],
        writes: &[(RegionId, u64, &[u8])],
    ) -> Result<(), WriteError> {
        let is_launch = self.ops.get(op as usize).is_some_and(|o| o[0..4] == layout::op::LAUNCH.to_le_bytes());
        if !is_launch {
            return invalid(format!("effects of op {op}, which is not a launch"));
        }
        if self.effects.last().is_some_and(|e| e.0 >= op) {
            return invalid(format!("effects of op {op} after those of a later or the same op"));
        }
        if writes.is_empty() {
            let empty = self.write_blob_bytes(&[])?;
            self.effects.push((op, EFFECT_NO_REGION, 0, inputs, empty));
        }
        for &(region, offset, bytes) in writes {
            let Some(r) = self.regions.get(region as usize) else {
                return invalid(format!("effects of op {op} write region {region}, which does not exist"));
            };
            if r.decl.scratch || offset.checked_add(bytes.len() as u64).is_none_or(|end| end > r.decl.size) {
                return invalid(format!(
                    "effects of op {op} write {} bytes at {offset} of region {}, which is {} bytes{}",
                    bytes.len(),
                    self.strings[r.name as usize],
                    r.decl.size,
                    if r.decl.scratch { " and scratch" } else { "" }
                ));
            }
            let blob = self.write_blob_bytes(bytes)?;
            self.effects.push((op, region, offset, inputs, blob));
        }
        Ok(())
    }

    /// The typed layout of `region`: the element type of each stretch of its bytes, covering it
    /// exactly (docs/FORMAT.md, "Typed layouts"). A second call replaces the first.
    pub fn set_typed_layout(&mut self, region: RegionId, stretches: &[Stretch]) -> Result<(), WriteError> {
        let Some(r) = self.regions.get(region as usize) else {
            return invalid(format!("typed layout of region {region}, which does not exist"));
        };
        if let Err((i, reason)) = super::types::check_layout(r.decl.size, stretches) {
            return invalid(format!("typed layout of region {region}: stretch {i}: {reason}"));
        }
        self.types.retain(|t| t.0 != region);
        self.types.push((region, stretches.to_vec()));
        Ok(())
    }

    /// Free-form metadata (producer, source, notes).
    pub fn set_meta(&mut self, key: &str, value: &str) {
        let k = self.string(key);
        let v = self.string(value);
        self.meta.retain(|m| m.0 != k);
        self.meta.push((k, v));
    }

    /// Writes the tables and the section table, patches the header, and hands the output back.
    pub fn finish(mut self) -> Result<W, WriteError> {
        if !self.open_bodies.is_empty() {
            return invalid(format!("{} while/if bodies were never closed", self.open_bodies.len()));
        }
        if self.broken_blob {
            return invalid("an earlier blob failed to write, so the blobs section is not usable");
        }
        let mut sections: Vec<(SectionKind, u64, u64, [u8; CHECKSUM_LEN])> = Vec::new();
        let blobs_checksum = {
            let mut out = [0u8; CHECKSUM_LEN];
            out.copy_from_slice(&self.blobs_hash.finalize().as_bytes()[..CHECKSUM_LEN]);
            out
        };
        sections.push((SectionKind::Blobs, self.start + HEADER_LEN as u64, self.blobs_len, blobs_checksum));
        let mut pos = self.start + HEADER_LEN as u64 + self.blobs_len;
        let tables = self.encode_tables();
        for (kind, bytes) in tables {
            // Keep every section 8-byte aligned so records can be read without surprises.
            let pad = (8 - (pos % 8)) % 8;
            self.out.write_all(&[0u8; 8][..pad as usize])?;
            pos += pad;
            self.out.write_all(&bytes)?;
            sections.push((kind, pos, bytes.len() as u64, layout::checksum(&[&bytes])));
            pos += bytes.len() as u64;
        }
        let pad = (8 - (pos % 8)) % 8;
        self.out.write_all(&[0u8; 8][..pad as usize])?;
        pos += pad;
        let table_offset = pos - self.start;
        let mut table = Vec::with_capacity(sections.len() * SECTION_ENTRY_LEN);
        for (kind, offset, len, sum) in &sections {
            put_u32(&mut table, *kind as u32);
            put_u32(&mut table, if kind.required() { SECTION_REQUIRED } else { 0 });
            put_u64(&mut table, offset - self.start);
            put_u64(&mut table, *len);
            table.extend_from_slice(sum);
            put_u64(&mut table, 0);
        }
        self.out.write_all(&table)?;
        let file_len = table_offset + table.len() as u64;
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(&MAGIC);
        put_u16(&mut header, MAJOR);
        // The oldest minor that has every feature used, so one-device archives stay 1.0.
        put_u16(&mut header, self.minor());
        put_u32(&mut header, 0);
        put_u64(&mut header, table_offset);
        put_u32(&mut header, sections.len() as u32);
        put_u32(&mut header, 0);
        put_u64(&mut header, file_len);
        put_u64(&mut header, 0);
        let sum = layout::checksum(&[&header, &table]);
        header.extend_from_slice(&sum);
        debug_assert_eq!(header.len(), HEADER_LEN);
        self.out.seek(SeekFrom::Start(self.start))?;
        self.out.write_all(&header)?;
        self.out.seek(SeekFrom::Start(self.start + file_len))?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn encode_tables(&self) -> Vec<(SectionKind, Vec<u8>)> {
        let mut out = Vec::new();

        let mut strings = table_header(self.strings.len(), 0);
        let mut off = 0u32;
        put_u32(&mut strings, 0);
        for s in &self.strings {
            off += s.len() as u32;
            put_u32(&mut strings, off);
        }
        for s in &self.strings {
            strings.extend_from_slice(s.as_bytes());
        }
        out.push((SectionKind::Strings, strings));

        let mut modules = table_header(self.modules.len(), MODULE_LEN);
        let mut cubins = table_header(self.modules.iter().map(|m| m.cubins.len()).sum(), CUBIN_LEN);
        let mut cubin_index = 0u32;
        for (i, m) in self.modules.iter().enumerate() {
            put_u32(&mut modules, m.name);
            put_u32(&mut modules, cubin_index);
            put_u32(&mut modules, m.cubins.len() as u32);
            put_u32(&mut modules, 0);
            m.ptx.put(&mut modules);
            for (sm, blob) in &m.cubins {
                put_u32(&mut cubins, i as u32);
                put_u32(&mut cubins, *sm);
                blob.put(&mut cubins);
                cubin_index += 1;
            }
        }
        out.push((SectionKind::Modules, modules));
        if cubin_index > 0 {
            out.push((SectionKind::Cubins, cubins));
        }

        let mut kernels = table_header(self.kernels.len(), KERNEL_LEN);
        let mut params = table_header(self.kernels.iter().map(|k| k.params.len()).sum(), PARAM_LEN);
        let mut param_index = 0u32;
        for k in &self.kernels {
            put_u32(&mut kernels, k.module);
            put_u32(&mut kernels, k.name);
            put_u32(&mut kernels, param_index);
            put_u32(&mut kernels, k.params.len() as u32);
            for p in &k.params {
                put_u32(&mut params, self.string_ids[&p.name]);
                put_u32(&mut params, p.offset);
                put_u32(&mut params, p.size);
                put_u32(&mut params, p.align);
                put_u32(&mut params, if p.kind == ParamKind::Pointer { 1 } else { 0 });
                param_index += 1;
            }
        }
        out.push((SectionKind::Kernels, kernels));
        out.push((SectionKind::Params, params));

        let mut regions = table_header(self.regions.len(), REGION_LEN);
        for r in &self.regions {
            let mut flags = 0;
            if r.initial.is_some() {
                flags |= REGION_HAS_INITIAL;
            }
            if r.expected.is_some() {
                flags |= REGION_HAS_EXPECTED;
            }
            if r.decl.scratch {
                flags |= REGION_SCRATCH;
            }
            put_u32(&mut regions, r.name);
            put_u32(&mut regions, r.decl.dtype.code());
            put_u32(&mut regions, flags);
            put_u32(&mut regions, r.decl.align);
            put_u64(&mut regions, r.decl.size);
            put_u32(&mut regions, r.decl.shape.len() as u32);
            put_u32(&mut regions, r.decl.device);
            for i in 0..4 {
                put_u64(&mut regions, r.decl.shape.get(i).copied().unwrap_or(0));
            }
            r.initial.unwrap_or_default().put(&mut regions);
            let (expected, tol) = match &r.expected {
                Some((b, t)) => (*b, t.code()),
                None => (BlobRef::default(), (0, 0.0, 0.0)),
            };
            expected.put(&mut regions);
            put_u32(&mut regions, tol.0);
            put_u32(&mut regions, 0);
            put_u64(&mut regions, tol.1.to_bits());
            put_u64(&mut regions, tol.2.to_bits());
        }
        out.push((SectionKind::Regions, regions));

        let mut relocs = table_header(self.launch_relocs.len() + self.region_relocs.len(), RELOC_LEN);
        let all = self
            .launch_relocs
            .iter()
            .map(|(op, r)| (RELOC_OWNER_LAUNCH, *op, r))
            .chain(self.region_relocs.iter().map(|(reg, r)| (RELOC_OWNER_REGION, *reg, r)));
        for (kind, owner, r) in all {
            put_u32(&mut relocs, kind);
            put_u32(&mut relocs, owner);
            put_u64(&mut relocs, r.offset);
            put_u32(&mut relocs, r.target);
            put_u32(&mut relocs, 0);
            put_u64(&mut relocs, r.target_offset);
        }
        out.push((SectionKind::Relocs, relocs));

        if !self.devices.is_empty() {
            let mut devices = table_header(self.devices.len(), DEVICE_LEN);
            for (name, sm) in &self.devices {
                put_u32(&mut devices, *name);
                put_u32(&mut devices, *sm);
                put_u64(&mut devices, 0);
            }
            out.push((SectionKind::Devices, devices));
        }
        if !self.module_vars.is_empty() {
            out.push((SectionKind::ModuleVars, super::reader::module_vars::encode(&self.module_vars)));
        }
        if !self.library.is_empty() {
            out.push((SectionKind::Library, super::library::encode(&self.library)));
        }

        let mut ops = table_header(self.ops.len(), OP_LEN);
        for rec in &self.ops {
            ops.extend_from_slice(rec);
        }
        out.push((SectionKind::Ops, ops));
        out.push((SectionKind::ParamBytes, self.param_bytes.clone()));

        let mut bindings = table_header(self.bindings.len(), BINDING_LEN);
        for (name, region, dir) in &self.bindings {
            put_u32(&mut bindings, *name);
            put_u32(&mut bindings, *region);
            put_u32(&mut bindings, dir.code());
            put_u32(&mut bindings, 0);
        }
        out.push((SectionKind::Bindings, bindings));

        if !self.types.is_empty() {
            out.push((SectionKind::Types, super::types::encode(&self.types)));
        }

        if !self.effects.is_empty() {
            let mut effects = table_header(self.effects.len(), EFFECT_LEN);
            for (op, region, offset, inputs, blob) in &self.effects {
                put_u32(&mut effects, *op);
                put_u32(&mut effects, *region);
                put_u64(&mut effects, *offset);
                effects.extend_from_slice(inputs);
                blob.put(&mut effects);
            }
            out.push((SectionKind::Effects, effects));
        }

        if !self.meta.is_empty() {
            let mut meta = table_header(self.meta.len(), META_LEN);
            for (k, v) in &self.meta {
                put_u32(&mut meta, *k);
                put_u32(&mut meta, *v);
            }
            out.push((SectionKind::Meta, meta));
        }
        out
    }
}

fn table_header(count: usize, record_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(TABLE_HEADER_LEN + count * record_len.max(4));
    put_u32(&mut v, count as u32);
    put_u32(&mut v, record_len as u32);
    v
}

fn put_u16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

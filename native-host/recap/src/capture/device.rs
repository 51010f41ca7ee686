//! Devices, buffers, modules and kernels, and the eager-or-recorded dispatch of every op.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use shared::archive::{Condition, CopyOp, DType, MemsetOp, ParamDecl};
use shared::ptx::signature;

use super::args::{pack, Arg, PointerField};
use super::graph::Graph;
use super::record::{GOp, Recording};
use super::{cpu, cuda, usage, CaptureError, PtxFailure, Result};
use crate::device::DeviceSpec;

/// A plain element type a [`Buffer`] can hold.
pub trait Element: bytemuck::Pod + Send + Sync {
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {$( impl Element for $t { const DTYPE: DType = DType::$d; } )*};
}
elements!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
    f32 => F32, f64 => F64);

/// Grid or block dimensions; `32`, `(16, 16)` and `(8, 8, 4)` all convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim3(pub [u32; 3]);

impl From<u32> for Dim3 {
    fn from(x: u32) -> Self {
        Dim3([x, 1, 1])
    }
}
impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Self {
        Dim3([x, y, 1])
    }
}
impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Dim3([x, y, z])
    }
}
impl From<[u32; 3]> for Dim3 {
    fn from(d: [u32; 3]) -> Self {
        Dim3(d)
    }
}

/// The device-specific half of a device: raw memory, modules and launches by address.
pub(crate) enum Backend {
    Cpu(cpu::CpuBackend),
    Cuda(cuda::CudaBackend),
}

/// A loaded module as the backend holds it.
pub(crate) enum ModuleHandle {
    Cpu(cpu::CpuModule),
    Cuda(cuda::CudaModule),
}

impl Backend {
    pub fn alloc(&self, size: u64, align: u32) -> Result<u64> {
        match self {
            Backend::Cpu(b) => b.alloc(size, align),
            Backend::Cuda(b) => b.alloc(size),
        }
    }
    pub fn free(&self, addr: u64) -> Result<()> {
        match self {
            Backend::Cpu(b) => b.free(addr),
            Backend::Cuda(b) => b.free(addr),
        }
    }
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        match self {
            Backend::Cpu(b) => b.write(addr, bytes),
            Backend::Cuda(b) => b.write(addr, bytes),
        }
    }
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        match self {
            Backend::Cpu(b) => b.read(addr, out),
            Backend::Cuda(b) => b.read(addr, out),
        }
    }
    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        match self {
            Backend::Cpu(b) => b.copy(src, dst, len),
            Backend::Cuda(b) => b.copy(src, dst, len),
        }
    }
    pub fn fill(&self, addr: u64, len: u64, width: u32, pattern: u64) -> Result<()> {
        match self {
            Backend::Cpu(b) => b.fill(addr, len, width, pattern),
            Backend::Cuda(b) => b.fill(addr, len, width, pattern),
        }
    }
    /// `has_kernels`: the module's `.entry` declarations read, so it records even where this
    /// device cannot run it.
    pub fn load_module(&self, name: &str, ptx: &str, has_kernels: bool) -> Result<ModuleHandle> {
        match self {
            Backend::Cpu(b) => b.load_module(name, ptx, has_kernels).map(ModuleHandle::Cpu),
            Backend::Cuda(b) => b.load_module(name, ptx).map(ModuleHandle::Cuda),
        }
    }
    pub fn launch(&self, kernel: &Kernel, grid: [u32; 3], block: [u32; 3], shared: u32, params: &[u8]) -> Result<()> {
        match (self, &kernel.module.handle) {
            (Backend::Cpu(b), ModuleHandle::Cpu(m)) => {
                let m = m.as_ref().map_err(|e| cpu::refused(&kernel.module.name, e))?;
                b.launch(m, &kernel.entry, grid, block, shared, params)
            }
            (Backend::Cuda(b), ModuleHandle::Cuda(m)) => {
                b.launch(m, &kernel.entry, &kernel.params, grid, block, shared, params)
            }
            _ => usage(format!("kernel {} belongs to another kind of device", kernel.entry)),
        }
    }
    pub fn read_u32(&self, addr: u64) -> Result<u32> {
        let mut w = [0u8; 4];
        self.read(addr, &mut w)?;
        Ok(u32::from_le_bytes(w))
    }
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Backend::Cpu(_) => Ok(()),
            Backend::Cuda(b) => b.synchronize(),
        }
    }
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".to_owned(),
            Backend::Cuda(b) => b.describe(),
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct DeviceInner {
    pub backend: Backend,
    recording: Mutex<Option<Recording>>,
    /// Buffers and modules made on this device so far, plus one: names of buffers a capture
    /// makes (`const3`, `scratch4`) count per device, so they do not depend on other devices.
    made: AtomicU64,
}

impl DeviceInner {
    /// A fresh id for a buffer or module, unique in the process: a capture of several devices
    /// tells buffers apart by it.
    pub(crate) fn next_id(&self) -> u64 {
        self.made.fetch_add(1, Ordering::Relaxed);
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    }
}

/// A device that runs (or records) work: the CPU, or one CUDA GPU. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.name())
    }
}

impl Device {
    fn with_backend(backend: Backend) -> Device {
        Device { inner: Arc::new(DeviceInner { backend, recording: Mutex::new(None), made: AtomicU64::new(1) }) }
    }

    /// The CPU: kernels run as PTX on `shared::ptx`'s executor over all cores.
    pub fn cpu() -> Device {
        Device::with_backend(Backend::Cpu(cpu::CpuBackend::new()))
    }

    /// CUDA GPU number `ordinal`. Fails with a clear error (never a panic) without a driver or device.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Ok(Device::with_backend(Backend::Cuda(cuda::CudaBackend::new(ordinal)?)))
    }

    /// `cpu`, `cuda` (GPU 0) or `cuda:N`, parsed as every interface parses a device
    /// ([`DeviceSpec`]). A CPU engine spelling (`cpu:interp`) is refused: the CPU device runs its
    /// own engine.
    pub fn from_spec(spec: &str) -> Result<Device> {
        match spec.parse::<DeviceSpec>()? {
            DeviceSpec::Cpu(None) => Ok(Device::cpu()),
            DeviceSpec::Cuda(n) => Device::cuda(n as usize),
            engine @ DeviceSpec::Cpu(Some(_)) => Err(CaptureError::CpuEngine(engine)),
        }
    }

    /// `cpu`, or `cuda:N (GPU name)`.
    pub fn name(&self) -> String {
        self.inner.backend.describe()
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self.inner.backend, Backend::Cuda(_))
    }

    /// Waits for all work queued on the device.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.backend.synchronize()
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    fn recording(&self) -> MutexGuard<'_, Option<Recording>> {
        self.inner.recording.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_device(&self, b: &RawBuffer) -> Result<()> {
        if !Arc::ptr_eq(&b.0.device, &self.inner) {
            return usage(format!("buffer {} belongs to another device", b.name()));
        }
        Ok(())
    }

    /// Whether a capture is open on this device.
    pub fn is_capturing(&self) -> bool {
        self.recording().is_some()
    }

    // ---- modules ----

    /// Loads a module from PTX text.
    pub fn load_ptx(&self, name: &str, ptx: &str) -> Result<Module> {
        let layouts = kernel_layouts(name, ptx)?;
        let handle = self.inner.backend.load_module(name, ptx, !layouts.is_empty())?;
        Ok(Module(Arc::new(ModuleInner {
            id: self.inner.next_id(),
            device: self.inner.clone(),
            name: name.to_owned(),
            ptx: ptx.to_owned(),
            layouts,
            handle,
        })))
    }

    /// Compiles CUDA C with NVRTC (when installed) and loads the PTX it yields. Kernels must be
    /// `extern "C"` so their entry names are not mangled.
    pub fn compile_cuda(&self, name: &str, source: &str) -> Result<Module> {
        let ptx = cuda::compile_cuda(name, source, self.compute_capability())?;
        self.load_ptx(name, &ptx)
    }

    pub(crate) fn compute_capability(&self) -> Option<(i32, i32)> {
        match &self.inner.backend {
            Backend::Cuda(b) => b.compute_capability(),
            Backend::Cpu(_) => None,
        }
    }

    // ---- buffers ----

    fn new_buffer(&self, name: String, size: u64, align: u32, dtype: DType, scratch: bool) -> Result<RawBuffer> {
        let addr = if scratch { 0 } else { self.inner.backend.alloc(size, align)? };
        Ok(RawBuffer(Arc::new(BufferInner {
            id: self.inner.next_id(),
            device: self.inner.clone(),
            addr,
            size,
            align,
            dtype,
            scratch,
            name: Mutex::new(name),
            pointer_fields: Mutex::new(Vec::new()),
            shape: Mutex::new(Vec::new()),
        })))
    }

    /// A zeroed buffer of `len` elements; inside a capture, graph-owned scratch.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        self.alloc_raw(len * size_of::<T>(), T::DTYPE).map(Buffer::from_raw_unchecked)
    }

    /// A zeroed buffer of `bytes` bytes of `dtype` elements, for callers that know element types
    /// only at run time (the Python package); inside a capture, graph-owned scratch.
    pub fn alloc_raw(&self, bytes: usize, dtype: DType) -> Result<RawBuffer> {
        let mut rec = self.recording();
        let id = self.inner.made.load(Ordering::Relaxed);
        match rec.as_mut() {
            Some(r) => {
                let b = self.new_buffer(format!("scratch{id}"), bytes as u64, 256, dtype, true)?;
                r.alloc_scratch(&b)?;
                Ok(b)
            }
            None => {
                drop(rec);
                let b = self.new_buffer(format!("buf{id}"), bytes as u64, 256, dtype, false)?;
                self.inner.backend.fill(b.0.addr, bytes as u64, 1, 0)?;
                Ok(b)
            }
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let b = self.alloc::<T>(data.len())?;
        self.write(&b, data)?;
        Ok(b)
    }

    /// Releases a buffer. Inside a capture this records the end of a scratch buffer's life.
    pub fn free<T: Element>(&self, buffer: Buffer<T>) -> Result<()> {
        self.check_device(&buffer.raw)?;
        if let Some(r) = self.recording().as_mut() {
            return r.free_scratch(&buffer.raw);
        }
        Ok(())
    }

    // ---- data movement ----

    /// Host to device: `data` must fill the buffer exactly. Inside a capture the data is kept in the
    /// graph as a constant region and copied in at every replay.
    pub fn write<T: Element>(&self, dst: &Buffer<T>, data: &[T]) -> Result<()> {
        self.write_bytes(&dst.raw, 0, bytemuck::cast_slice(data))
    }

    /// Host to device: `bytes` into `dst` at byte `offset`; inside a capture, recorded as
    /// [`Device::write`] records.
    pub fn write_bytes(&self, dst: &RawBuffer, offset: u64, bytes: &[u8]) -> Result<()> {
        self.check_device(dst)?;
        if offset + bytes.len() as u64 > dst.byte_len() {
            return usage(format!(
                "writing {} bytes at offset {offset} into buffer {} of {} bytes",
                bytes.len(),
                dst.name(),
                dst.byte_len()
            ));
        }
        let mut rec = self.recording();
        if let Some(r) = rec.as_mut() {
            let id = self.inner.made.load(Ordering::Relaxed);
            let constant = self.new_buffer(format!("const{id}"), bytes.len() as u64, 256, dst.dtype(), false)?;
            self.inner.backend.write(constant.0.addr, bytes)?;
            let src = r.region(&constant)?;
            let dst_region = r.region(dst)?;
            r.push(GOp::Copy(CopyOp {
                src,
                src_offset: 0,
                dst: dst_region,
                dst_offset: offset,
                len: bytes.len() as u64,
            }));
            return Ok(());
        }
        drop(rec);
        dst.check_live()?;
        self.inner.backend.write(dst.0.addr + offset, bytes)
    }

    /// Device to device, whole buffers of the same size.
    pub fn copy<T: Element>(&self, src: &Buffer<T>, dst: &Buffer<T>) -> Result<()> {
        same_len(src, dst)?;
        self.copy_range(src, 0, dst, 0, src.len())
    }

    /// Copies `src` into `dst` where the two live on different devices (or the same): the copy
    /// runs on this device, which holds one of them. Inside a capture of several devices
    /// ([`capture_devices`]) it is recorded as a copy between their memories; eagerly the bytes
    /// go through the host.
    pub fn copy_between<T: Element>(&self, src: &Buffer<T>, dst: &Buffer<T>) -> Result<()> {
        same_len(src, dst)?;
        if !self.owns(&src.raw) && !self.owns(&dst.raw) {
            return usage(format!(
                "copy from {} to {}: neither buffer belongs to {}",
                src.raw.name(),
                dst.raw.name(),
                self.name()
            ));
        }
        let mut rec = self.recording();
        if let Some(r) = rec.as_mut() {
            let (s, d) = (r.region(&src.raw)?, r.region(&dst.raw)?);
            r.push(GOp::Copy(CopyOp { src: s, src_offset: 0, dst: d, dst_offset: 0, len: src.raw.byte_len() }));
            return Ok(());
        }
        drop(rec);
        if Arc::ptr_eq(&src.raw.0.device, &dst.raw.0.device) {
            return Device { inner: src.raw.0.device.clone() }.copy(src, dst);
        }
        let bytes = src.raw.read_bytes()?;
        dst.raw.check_live()?;
        dst.raw.0.device.backend.write(dst.raw.0.addr, &bytes)
    }

    /// Device to device: `count` elements from `src[src_start..]` to `dst[dst_start..]`.
    pub fn copy_range<T: Element>(
        &self,
        src: &Buffer<T>,
        src_start: usize,
        dst: &Buffer<T>,
        dst_start: usize,
        count: usize,
    ) -> Result<()> {
        let e = size_of::<T>() as u64;
        let (so, doff, len) = (src_start as u64 * e, dst_start as u64 * e, count as u64 * e);
        for (b, o) in [(&src.raw, so), (&dst.raw, doff)] {
            self.check_device(b)?;
            if o + len > b.byte_len() {
                return usage(format!(
                    "copy of {len} bytes at offset {o} runs past buffer {} ({} bytes)",
                    b.name(),
                    b.byte_len()
                ));
            }
        }
        let mut rec = self.recording();
        if let Some(r) = rec.as_mut() {
            let (s, d) = (r.region(&src.raw)?, r.region(&dst.raw)?);
            r.push(GOp::Copy(CopyOp { src: s, src_offset: so, dst: d, dst_offset: doff, len }));
            return Ok(());
        }
        drop(rec);
        src.raw.check_live()?;
        dst.raw.check_live()?;
        self.inner.backend.copy(src.raw.0.addr + so, dst.raw.0.addr + doff, len)
    }

    /// Sets every byte of the buffer to zero.
    pub fn zero<T: Element>(&self, buf: &Buffer<T>) -> Result<()> {
        self.memset(&buf.raw, 1, 0)
    }

    /// Sets every element to `value`; the element must be 1, 2, 4 or 8 bytes.
    pub fn fill<T: Element>(&self, buf: &Buffer<T>, value: T) -> Result<()> {
        let bytes = bytemuck::bytes_of(&value);
        if ![1, 2, 4, 8].contains(&bytes.len()) {
            return usage(format!(
                "fill of buffer {}: a {}-byte value; 1, 2, 4 or 8 bytes expected",
                buf.raw.name(),
                bytes.len()
            ));
        }
        let mut p = [0u8; 8];
        p[..bytes.len()].copy_from_slice(bytes);
        self.memset(&buf.raw, bytes.len() as u32, u64::from_le_bytes(p))
    }

    /// Fills a whole buffer with a `width`-byte little-endian `pattern` (width 1, 2, 4 or 8): the
    /// untyped [`Device::fill`].
    pub fn fill_pattern(&self, buf: &RawBuffer, width: u32, pattern: u64) -> Result<()> {
        if ![1, 2, 4, 8].contains(&width) {
            return usage(format!(
                "fill of buffer {}: a {width}-byte pattern; 1, 2, 4 or 8 bytes expected",
                buf.name()
            ));
        }
        self.memset(buf, width, pattern)
    }

    fn memset(&self, buf: &RawBuffer, width: u32, pattern: u64) -> Result<()> {
        self.check_device(buf)?;
        let len = buf.byte_len();
        let mut rec = self.recording();
        if let Some(r) = rec.as_mut() {
            let region = r.region(buf)?;
            r.push(GOp::Memset(MemsetOp { region, offset: 0, len, width, pattern }));
            return Ok(());
        }
        drop(rec);
        buf.check_live()?;
        self.inner.backend.fill(buf.0.addr, len, width, pattern)
    }

    /// Writes the device address of `target` + `target_offset` into `buf` at `byte_offset`, and
    /// remembers that those 8 bytes hold a pointer, so a saved archive relocates them. Always eager:
    /// it sets up data, it is not an op.
    pub fn write_pointer(
        &self,
        buf: &RawBuffer,
        byte_offset: u64,
        target: &RawBuffer,
        target_offset: u64,
    ) -> Result<()> {
        self.check_device(buf)?;
        self.check_device(target)?;
        buf.check_live()?;
        target.check_live()?;
        if byte_offset + 8 > buf.byte_len() || target_offset > target.byte_len() {
            return usage(format!(
                "pointer at offset {byte_offset} of buffer {} to offset {target_offset} of {} is out of range",
                buf.name(),
                target.name()
            ));
        }
        self.inner.backend.write(buf.0.addr + byte_offset, &(target.0.addr + target_offset).to_le_bytes())?;
        let mut fields = buf.0.pointer_fields.lock().unwrap_or_else(|p| p.into_inner());
        fields.retain(|f| f.offset != byte_offset);
        fields.push(PointerField { offset: byte_offset, target: target.clone(), target_offset });
        Ok(())
    }

    // ---- launches ----

    /// Launches `kernel` over `grid` blocks of `block` threads with `shared_bytes` of dynamic
    /// shared memory. Arguments are checked against the parameters the PTX declares.
    pub fn launch(
        &self,
        kernel: &Kernel,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<()> {
        if !Arc::ptr_eq(&kernel.module.device, &self.inner) {
            return usage(format!("kernel {} was loaded on another device", kernel.entry));
        }
        let (grid, block) = (grid.into().0, block.into().0);
        if grid.contains(&0) || block.contains(&0) {
            return usage(format!(
                "launch of kernel {}: grid {grid:?} and block {block:?} must not be zero",
                kernel.entry
            ));
        }
        let mut packed = pack(kernel, args)?;
        for p in &packed.pointers {
            self.check_device(&p.target)?;
        }
        let mut rec = self.recording();
        if let Some(r) = rec.as_mut() {
            return r.launch(kernel, grid, block, shared_bytes, packed);
        }
        drop(rec);
        for p in &packed.pointers {
            p.target.check_live()?;
            let at = p.offset as usize;
            packed.bytes[at..at + 8].copy_from_slice(&(p.target.0.addr + p.target_offset).to_le_bytes());
        }
        self.inner.backend.launch(kernel, grid, block, shared_bytes, &packed.bytes)
    }

    // ---- device-side control ----

    /// `while (cond[0] != 0) { body }`, the test on the device word before each iteration.
    /// `max_iterations` bounds the loop (0: unbounded). Eagerly, the host reads the word back.
    pub fn while_nonzero(
        &self,
        cond: &Buffer<u32>,
        max_iterations: u32,
        body: impl FnMut(&Device) -> Result<()>,
    ) -> Result<()> {
        self.control(cond, max_iterations, true, body)
    }

    /// `if (cond[0] != 0) { body }`, tested on the device.
    pub fn if_nonzero(&self, cond: &Buffer<u32>, body: impl FnMut(&Device) -> Result<()>) -> Result<()> {
        self.control(cond, 0, false, body)
    }

    fn control(
        &self,
        cond: &Buffer<u32>,
        max_iterations: u32,
        is_loop: bool,
        mut body: impl FnMut(&Device) -> Result<()>,
    ) -> Result<()> {
        self.check_device(&cond.raw)?;
        if cond.is_empty() {
            return usage(format!("condition buffer {} is empty", cond.raw.name()));
        }
        let region = {
            let mut rec = self.recording();
            match rec.as_mut() {
                Some(r) => {
                    let region = r.region(&cond.raw)?;
                    r.begin_body();
                    Some(region)
                }
                None => None,
            }
        };
        let Some(region) = region else {
            let mut i = 0u32;
            while (max_iterations == 0 || i < max_iterations) && cond.read_word()? != 0 {
                body(self)?;
                i += 1;
                if !is_loop {
                    break;
                }
            }
            return Ok(());
        };
        let outcome = body(self);
        let mut rec = self.recording();
        let r = rec.as_mut().ok_or_else(|| CaptureError::Usage("the capture ended inside a while/if body".into()))?;
        let ops = r.end_body()?;
        outcome?;
        let cond = Condition { region, offset: 0, max_iterations };
        r.push(if is_loop { GOp::While { cond, body: ops } } else { GOp::If { cond, body: ops } });
        Ok(())
    }

    // ---- capture ----

    /// Starts recording: until [`Device::end_capture`], ops on this device are recorded, not run.
    pub fn begin_capture(&self) -> Result<()> {
        let mut rec = self.recording();
        if rec.is_some() {
            return usage("a capture is already open on this device");
        }
        *rec = Some(Recording::new());
        Ok(())
    }

    /// Ends the recording and hands back the graph.
    pub fn end_capture(&self) -> Result<Graph> {
        let rec = self.recording().take();
        let Some(r) = rec else {
            return usage("end_capture without begin_capture");
        };
        Ok(Graph::from_data(self.clone(), r.finish()?, Vec::new()))
    }

    /// Records what `body` does on this device into a graph.
    pub fn capture(&self, body: impl FnOnce(&Device) -> Result<()>) -> Result<Graph> {
        self.begin_capture()?;
        let outcome = body(self);
        let graph = self.end_capture();
        outcome?;
        graph
    }

    pub(crate) fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether `buffer` lives in this device's memory.
    pub(crate) fn owns(&self, buffer: &RawBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &buffer.0.device)
    }
}

/// Refuses a whole-buffer copy between buffers of different lengths.
fn same_len<T: Element>(src: &Buffer<T>, dst: &Buffer<T>) -> Result<()> {
    if src.len() != dst.len() {
        return usage(format!(
            "copy from {} ({} elements) to {} ({} elements): sizes differ",
            src.raw.name(),
            src.len(),
            dst.raw.name(),
            dst.len()
        ));
    }
    Ok(())
}

/// Records what `body` does on several devices into one graph: a multi-device archive once saved,
/// with `devices[i]` as its logical device `i`. Each device records its own launches, fills and
/// loops; [`Device::copy_between`] records the copies from one device's memory to another's. The
/// ops keep the order the program issued them in, and a replay orders them by the data they
/// share, so work of different devices runs side by side. Every device is a CUDA GPU, or every
/// one the CPU.
pub fn capture_devices(devices: &[&Device], body: impl FnOnce(&[Device]) -> Result<()>) -> Result<Graph> {
    let owned: Vec<Device> = devices.iter().map(|d| (*d).clone()).collect();
    if owned.is_empty() {
        return usage("a capture of several devices needs at least one device");
    }
    for (i, d) in owned.iter().enumerate() {
        if owned[..i].iter().any(|e| e.same(d)) {
            return usage(format!("{} is given twice: each device of a capture is a different one", d.name()));
        }
    }
    if owned.iter().any(Device::is_cuda) && !owned.iter().all(Device::is_cuda) {
        return usage("a capture of several devices takes CUDA GPUs only or the CPU only, not both");
    }
    let sequence = Arc::new(AtomicU64::new(0));
    for (i, d) in owned.iter().enumerate() {
        let mut rec = d.recording();
        if rec.is_some() {
            drop(rec);
            for e in &owned[..i] {
                e.recording().take();
            }
            return usage(format!("a capture is already open on {}", d.name()));
        }
        *rec = Some(Recording::in_group(sequence.clone()));
    }
    let outcome = body(&owned);
    let mut parts = Vec::with_capacity(owned.len());
    let mut ended = Ok(());
    for d in &owned {
        match d.recording().take().map(Recording::finish_numbered) {
            Some(Ok(part)) => parts.push(part),
            Some(Err(e)) => ended = Err(e),
            None => {
                ended = usage(format!("the capture on {} was ended inside the capture of several devices", d.name()))
            }
        }
    }
    outcome?;
    ended?;
    let device_of = |b: &RawBuffer| -> Result<u32> {
        match owned.iter().position(|d| Arc::ptr_eq(&d.inner, &b.0.device)) {
            Some(i) => Ok(i as u32),
            None => usage(format!("buffer {} belongs to a device outside this capture", b.name())),
        }
    };
    let data = super::record::merge(parts, device_of)?;
    Ok(Graph::from_devices(owned, data))
}

// ---- buffers ----

pub(crate) struct BufferInner {
    pub id: u64,
    pub device: Arc<DeviceInner>,
    /// Device address; 0 for graph-owned scratch, which has one only while a graph runs.
    pub addr: u64,
    pub size: u64,
    pub align: u32,
    pub dtype: DType,
    pub scratch: bool,
    pub name: Mutex<String>,
    pub pointer_fields: Mutex<Vec<PointerField>>,
    /// The shape an archive records for the region (empty: one dimension).
    pub shape: Mutex<Vec<u64>>,
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        if !self.scratch {
            // Nothing useful can be done with a failure to free while dropping.
            let _ = self.device.backend.free(self.addr);
        }
    }
}

/// A buffer of any element type: what bindings, arguments and pointer fields refer to.
#[derive(Clone)]
pub struct RawBuffer(pub(crate) Arc<BufferInner>);

impl std::fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawBuffer({}, {} bytes)", self.name(), self.byte_len())
    }
}

impl RawBuffer {
    pub fn name(&self) -> String {
        self.0.name.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_name(&self, name: &str) {
        *self.0.name.lock().unwrap_or_else(|p| p.into_inner()) = name.to_owned();
    }

    pub fn byte_len(&self) -> u64 {
        self.0.size
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Whether this is graph-owned scratch (allocated inside a capture).
    pub fn is_scratch(&self) -> bool {
        self.0.scratch
    }

    pub(crate) fn id(&self) -> u64 {
        self.0.id
    }

    /// The shape an archive records for the buffer's region (its element count must match).
    pub fn set_shape(&self, shape: &[u64]) -> Result<()> {
        let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        if count.and_then(|n| n.checked_mul(self.dtype().size() as u64)) != Some(self.byte_len()) {
            return usage(format!(
                "shape {shape:?} of {} does not hold buffer {}'s {} bytes",
                self.dtype().name(),
                self.name(),
                self.byte_len()
            ));
        }
        *self.0.shape.lock().unwrap_or_else(|p| p.into_inner()) = shape.to_vec();
        Ok(())
    }

    pub fn shape(&self) -> Vec<u64> {
        self.0.shape.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The buffer's bytes as a `Buffer<u8>`, whatever its element type: copies of byte ranges.
    pub fn as_bytes(&self) -> Buffer<u8> {
        Buffer::from_raw_unchecked(self.clone())
    }

    /// The buffer as `Buffer<T>`, for the typed calls (a while/if condition is a `Buffer<u32>`);
    /// its element type must be `T`'s, or raw bytes for `u8`.
    pub fn typed<T: Element>(&self) -> Result<Buffer<T>> {
        let ok = self.dtype() == T::DTYPE || (T::DTYPE == DType::U8 && self.dtype() == DType::Bytes);
        if !ok {
            return usage(format!("buffer {} holds {}, not {}", self.name(), self.dtype().name(), T::DTYPE.name()));
        }
        Ok(Buffer::from_raw_unchecked(self.clone()))
    }

    pub(crate) fn align(&self) -> u32 {
        self.0.align
    }

    pub(crate) fn addr(&self) -> u64 {
        self.0.addr
    }

    pub(crate) fn pointer_fields(&self) -> Vec<PointerField> {
        self.0.pointer_fields.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn check_live(&self) -> Result<()> {
        if self.0.scratch {
            return usage(format!(
                "buffer {} is graph scratch (allocated inside a capture); it exists only while the graph runs",
                self.name()
            ));
        }
        Ok(())
    }

    /// The buffer's bytes.
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        self.check_live()?;
        if self.0.device.recording.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return usage(format!(
                "reading buffer {} inside a capture: nothing recorded has run yet; read after graph.launch()",
                self.name()
            ));
        }
        let mut out = vec![0u8; self.0.size as usize];
        self.0.device.backend.read(self.0.addr, &mut out)?;
        Ok(out)
    }
}

/// A typed device buffer of `T`s. Cheap to clone (the clones share the memory).
pub struct Buffer<T> {
    raw: RawBuffer,
    _t: PhantomData<T>,
}

impl<T> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer { raw: self.raw.clone(), _t: PhantomData }
    }
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer<{}>({}, {} elements)", T::DTYPE.name(), self.raw.name(), self.len())
    }
}

impl<T: Element> Buffer<T> {
    fn from_raw_unchecked(raw: RawBuffer) -> Self {
        Buffer { raw, _t: PhantomData }
    }

    /// Gives the buffer a name: archives and error messages use it.
    pub fn named(self, name: &str) -> Self {
        self.raw.set_name(name);
        self
    }

    pub fn raw(&self) -> &RawBuffer {
        &self.raw
    }

    pub fn len(&self) -> usize {
        self.raw.byte_len() as usize / size_of::<T>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the whole buffer back to the host.
    pub fn read(&self) -> Result<Vec<T>> {
        let bytes = self.raw.read_bytes()?;
        let mut out = vec![T::zeroed(); self.len()];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }

    fn read_word(&self) -> Result<u32> {
        self.raw.check_live()?;
        self.raw.0.device.backend.read_u32(self.raw.0.addr)
    }
}

// ---- modules and kernels ----

/// Every kernel's parameter layout, read from the module's `.entry` declarations alone
/// (`shared::ptx::signature`), on every device: a launch is packed the same way whichever device
/// records it, and a module the CPU executor refuses (TMA copies, say) still gets its layouts and
/// records; running it is where a device that cannot refuses it.
fn kernel_layouts(name: &str, ptx: &str) -> Result<Vec<(String, Vec<ParamDecl>)>> {
    let mut layouts: Vec<(String, Vec<ParamDecl>)> = Vec::new();
    for entry in signature::entry_names(ptx) {
        // A prototype and its definition name one kernel.
        if layouts.iter().any(|(n, _)| *n == entry) {
            continue;
        }
        let params = signature::entry_params(ptx, &entry)
            .map_err(|e| CaptureError::Ptx { module: name.to_owned(), source: Box::new(PtxFailure::Signature(e)) })?;
        layouts.push((entry, params.iter().map(|p| p.decl(p.ptr_annotated)).collect()));
    }
    Ok(layouts)
}

pub(crate) struct ModuleInner {
    pub id: u64,
    pub device: Arc<DeviceInner>,
    pub name: String,
    pub ptx: String,
    pub layouts: Vec<(String, Vec<ParamDecl>)>,
    pub handle: ModuleHandle,
}

/// A module loaded on a device.
#[derive(Clone)]
pub struct Module(pub(crate) Arc<ModuleInner>);

impl Module {
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn ptx(&self) -> &str {
        &self.0.ptx
    }

    /// Entry names the module declares.
    pub fn entries(&self) -> Vec<&str> {
        self.0.layouts.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The kernel with this entry name.
    pub fn kernel(&self, entry: &str) -> Result<Kernel> {
        match self.0.layouts.iter().find(|(n, _)| n == entry) {
            Some((_, params)) => Ok(Kernel { module: self.0.clone(), entry: entry.to_owned(), params: params.clone() }),
            None => Err(CaptureError::Ptx {
                module: self.0.name.clone(),
                source: Box::new(PtxFailure::NoEntry { entry: entry.to_owned(), entries: self.entries().join(", ") }),
            }),
        }
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module({}, entries {:?})", self.0.name, self.entries())
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({} of {}, {} parameters)", self.entry, self.module.name, self.params.len())
    }
}

/// A kernel: an entry of a loaded module with its parameter layout.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) module: Arc<ModuleInner>,
    pub(crate) entry: String,
    pub(crate) params: Vec<ParamDecl>,
}

impl Kernel {
    pub fn name(&self) -> &str {
        &self.entry
    }

    /// Parameters as the PTX declares them (offset, size, alignment, pointer or value).
    pub fn params(&self) -> &[ParamDecl] {
        &self.params
    }
}

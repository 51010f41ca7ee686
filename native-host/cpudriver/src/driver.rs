//! The driver's state: its devices' one memory (one `shared::ptx::Memory`: a CPU has one memory,
//! so every device's allocations are regions of it, each owned by the device whose context made
//! it), and the tables every handle is looked up in. One mutex guards it all; work runs
//! synchronously under it, in call order.

use std::alloc::Layout;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use shared::ptx::{ExecOptions, Memory};

use crate::ffi::{CUdevice, CUdeviceptr, Handle};
use crate::result::{CUresult, Result};

/// Objects behind opaque handles. A handle is the address of a small box owned by the table, so
/// it is unique while the object lives, and a handle that is not in the table (never made, or
/// destroyed) is refused with `CUDA_ERROR_INVALID_HANDLE` instead of being dereferenced.
pub(crate) struct Handles<T> {
    objects: HashMap<usize, (Box<u64>, T)>,
}

impl<T> Default for Handles<T> {
    fn default() -> Self {
        Handles { objects: HashMap::new() }
    }
}

impl<T> Handles<T> {
    pub(crate) fn insert(&mut self, value: T) -> Handle {
        let token = Box::new(0u64);
        let key = &*token as *const u64 as usize;
        self.objects.insert(key, (token, value));
        key as Handle
    }

    pub(crate) fn get(&self, h: Handle) -> Result<&T> {
        self.objects.get(&(h as usize)).map(|o| &o.1).ok_or(CUresult::INVALID_HANDLE)
    }

    pub(crate) fn get_mut(&mut self, h: Handle) -> Result<&mut T> {
        self.objects.get_mut(&(h as usize)).map(|o| &mut o.1).ok_or(CUresult::INVALID_HANDLE)
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (Handle, &mut T)> {
        self.objects.iter_mut().map(|(&k, o)| (k as Handle, &mut o.1))
    }

    pub(crate) fn remove(&mut self, h: Handle) -> Result<T> {
        self.objects.remove(&(h as usize)).map(|o| o.1).ok_or(CUresult::INVALID_HANDLE)
    }
}

pub(crate) struct Context {
    /// The device the context was made on.
    pub device: CUdevice,
    /// Whether this is the device's primary context (retained, never destroyed by `cuCtxDestroy`).
    pub primary: bool,
    /// Contexts whose memory this one was given access to (`cuCtxEnablePeerAccess`).
    pub peers: HashSet<usize>,
    /// Retains of the primary context not yet released.
    pub retained: u32,
    /// A kernel fault keeps the context's status, as the real driver's sticky errors do.
    pub fault: Option<CUresult>,
}

impl Context {
    pub(crate) fn new(device: CUdevice, primary: bool) -> Context {
        Context { device, primary, peers: HashSet::new(), retained: 0, fault: None }
    }
}

/// A device allocation: its size, the context (and that context's device) that made it, and
/// what kind of memory it is.
#[derive(Clone, Copy)]
pub(crate) struct Allocation {
    pub size: u64,
    pub ctx: Handle,
    pub device: CUdevice,
    pub kind: Kind,
}

/// What a device address range is (`mapped.rs` has the two kinds of host memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc`: memory of the driver's own, reached only through device addresses.
    Device,
    /// `cuMemAllocManaged`: host memory at an address that is its device address too.
    Managed,
    /// The device address of page-locked host memory mapped into the device; `host` is the
    /// address the host reaches its first byte at.
    Mapped { host: usize },
}

pub(crate) struct Module {
    pub ptx: shared::ptx::Module,
    /// Bytes of its `.const` variables.
    pub const_bytes: u64,
    /// Its kernels' launch bounds, where they declare any (`ptx_text.rs`).
    pub bounds: HashMap<String, crate::ptx_text::Bounds>,
    /// Handles of the kernels asked for so far, by name: the same kernel gives the same handle.
    pub functions: HashMap<String, Handle>,
}

pub(crate) struct Function {
    pub module: Handle,
    /// Index into the module's entries.
    pub entry: usize,
    pub name: CString,
}

pub(crate) struct Event {
    pub recorded: Option<Instant>,
    pub timing: bool,
}

pub(crate) struct Driver {
    pub initialized: bool,
    pub memory: Memory,
    /// Device allocations by base: which addresses are device addresses, and whose.
    pub allocations: BTreeMap<CUdeviceptr, Allocation>,
    /// The sum of `allocations`' sizes.
    pub allocated: u64,
    /// `cuMemAllocHost` allocations, address to layout, so `cuMemFreeHost` frees only those.
    pub host_allocations: HashMap<usize, Layout>,
    /// `cuMemHostRegister`ed host memory, address to size.
    pub registered: HashMap<usize, usize>,
    /// Host memory mapped into the device (`mapped.rs`), by host address.
    pub host_maps: BTreeMap<usize, crate::mapped::HostMap>,
    pub contexts: Handles<Context>,
    /// Each device's primary context, once retained.
    pub primary: HashMap<CUdevice, Handle>,
    pub modules: Handles<Module>,
    pub functions: Handles<Function>,
    /// Streams are bookkeeping (work runs when it is issued): each keeps the context it was made in.
    pub streams: Handles<Handle>,
    pub events: Handles<Event>,
    /// Graphs built node by node, their nodes, and executable graphs (`graph.rs`).
    pub graphs: Handles<crate::graph::Graph>,
    pub graph_nodes: Handles<crate::graph::NodeRef>,
    pub execs: Handles<crate::graph::Exec>,
    /// Links in progress (`link.rs`).
    pub links: Handles<crate::link::Link>,
    /// Memory pools (`pools.rs`), each device's default one, and each device's current one where
    /// `cuDeviceSetMemPool` changed it.
    pub pools: Handles<crate::pools::Pool>,
    pub default_pools: HashMap<CUdevice, Handle>,
    pub current_pools: HashMap<CUdevice, Handle>,
    /// Conditional handles (condition addresses) and the body graph arrays of conditional nodes.
    pub conditions: HashMap<CUdeviceptr, crate::graph::Condition>,
    pub body_arrays: Vec<Box<[Handle]>>,
    pub exec: ExecOptions,
}

// SAFETY: the handles stored in the tables are plain keys (addresses of boxes the tables own),
// never dereferenced; everything else is `Send`.
unsafe impl Send for Driver {}

static DRIVER: LazyLock<Mutex<Driver>> = LazyLock::new(|| {
    Mutex::new(Driver {
        initialized: false,
        memory: Memory::new(),
        allocations: BTreeMap::new(),
        allocated: 0,
        host_allocations: HashMap::new(),
        registered: HashMap::new(),
        host_maps: BTreeMap::new(),
        contexts: Handles::default(),
        primary: HashMap::new(),
        modules: Handles::default(),
        functions: Handles::default(),
        streams: Handles::default(),
        events: Handles::default(),
        graphs: Handles::default(),
        graph_nodes: Handles::default(),
        execs: Handles::default(),
        links: Handles::default(),
        pools: Handles::default(),
        default_pools: HashMap::new(),
        current_pools: HashMap::new(),
        conditions: HashMap::new(),
        body_arrays: Vec::new(),
        exec: ExecOptions { threads: crate::config::config().sms, ..ExecOptions::default() },
    })
});

thread_local! {
    /// The calling thread's current context (the top of its stack), or 0. A `const` cell of a
    /// plain integer has no destructor, so it stays readable while the thread ends and while the
    /// process exits: calls made from exit handlers (an interposer reading the end state) find it.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    /// The calling thread's number for [`STACKS`], 0 until it first pushes a context.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

/// The contexts below each thread's current one, by thread number. Kept out of thread-local
/// storage for the reason above; a thread's entry goes when its stack is empty again. Numbers are
/// never reused, so a new thread never inherits a finished one's stack.
static STACKS: LazyLock<Mutex<HashMap<u64, Vec<usize>>>> = LazyLock::new(Default::default);

fn stacks() -> MutexGuard<'static, HashMap<u64, Vec<usize>>> {
    STACKS.lock().unwrap_or_else(|p| p.into_inner())
}

fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    THREAD.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// The driver's state, whether or not `cuInit` has run (a panic while it was held leaves it usable).
pub(crate) fn lock() -> MutexGuard<'static, Driver> {
    DRIVER.lock().unwrap_or_else(|p| p.into_inner())
}

/// The driver's state after `cuInit`.
pub(crate) fn driver() -> Result<MutexGuard<'static, Driver>> {
    let d = lock();
    if !d.initialized {
        return Err(CUresult::NOT_INITIALIZED);
    }
    Ok(d)
}

/// Whether `cuInit` has run, for calls that need nothing else.
pub(crate) fn initialized() -> Result<()> {
    driver().map(drop)
}

/// The driver after `cuInit`, with a current context and, for a call on a stream, a valid stream.
pub(crate) fn ready(stream: Option<Handle>) -> Result<MutexGuard<'static, Driver>> {
    let d = driver()?;
    d.current()?;
    if let Some(s) = stream {
        d.stream(s)?;
    }
    Ok(d)
}

/// The calling thread's current context, or null.
pub(crate) fn current_handle() -> Handle {
    CURRENT.with(Cell::get) as Handle
}

/// Replaces the top of the calling thread's stack (null pops it), as `cuCtxSetCurrent` does.
pub(crate) fn set_current(ctx: Handle) {
    if ctx.is_null() {
        pop_current();
    } else {
        CURRENT.with(|c| c.set(ctx as usize));
    }
}

pub(crate) fn push_current(ctx: Handle) {
    let below = CURRENT.with(|c| c.replace(ctx as usize));
    if below != 0 {
        stacks().entry(thread_number()).or_default().push(below);
    }
}

/// Pops the calling thread's current context (null when there is none); the one below becomes current.
pub(crate) fn pop_current() -> Handle {
    let top = CURRENT.with(Cell::get);
    let below = if top == 0 {
        0
    } else {
        let number = THREAD.with(Cell::get);
        let mut stacks = stacks();
        let below = stacks.get_mut(&number).and_then(Vec::pop).unwrap_or(0);
        if stacks.get(&number).is_some_and(Vec::is_empty) {
            stacks.remove(&number);
        }
        below
    };
    CURRENT.with(|c| c.set(below));
    top as Handle
}

/// The device ordinal a call names: one of the `RECAP_CPU_DEVICES` devices, 0 to N - 1.
pub(crate) fn device(dev: CUdevice) -> Result<()> {
    if !u32::try_from(dev).is_ok_and(|d| d < crate::config::config().devices) {
        return Err(CUresult::INVALID_DEVICE);
    }
    Ok(())
}

impl Driver {
    /// The calling thread's current context; its sticky fault, if it has one, is the error.
    pub(crate) fn current(&self) -> Result<Handle> {
        let h = current_handle();
        let ctx = self.contexts.get(h).map_err(|_| CUresult::INVALID_CONTEXT)?;
        match ctx.fault {
            Some(fault) => Err(fault),
            None => Ok(h),
        }
    }

    /// A stream handle: null, `CU_STREAM_LEGACY` (1), `CU_STREAM_PER_THREAD` (2) or one created here.
    pub(crate) fn stream(&self, s: Handle) -> Result<()> {
        self.stream_context(s).map(drop)
    }

    /// The context a stream belongs to: the one it was made in, or for the default streams the
    /// calling thread's current one.
    pub(crate) fn stream_context(&self, s: Handle) -> Result<Handle> {
        if (s as usize) <= 2 {
            return self.current();
        }
        self.streams.get(s).copied()
    }

    /// The allocation holding device address `addr`, with its base.
    pub(crate) fn allocation(&self, addr: CUdeviceptr) -> Option<(CUdeviceptr, Allocation)> {
        let (&base, &a) = self.allocations.range(..=addr).next_back()?;
        (addr - base < a.size).then_some((base, a))
    }

    pub(crate) fn is_device(&self, addr: CUdeviceptr) -> bool {
        self.allocation(addr).is_some()
    }

    /// Allocations are host memory, up to the device memory the configuration gives (`config.rs`),
    /// owned by the calling thread's current context and its device.
    pub(crate) fn alloc(&mut self, size: usize) -> Result<CUdeviceptr> {
        let ctx = self.current()?;
        let device = self.context(ctx)?.device;
        if size == 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        if self.allocated.saturating_add(size as u64) > crate::config::config().memory {
            return Err(CUresult::OUT_OF_MEMORY);
        }
        let base = self.memory.add_region(size as u64, 256).map_err(|e| {
            crate::result::report(format_args!("cannot allocate {size} bytes of device memory: {e}"));
            CUresult::OUT_OF_MEMORY
        })?;
        self.allocations.insert(base, Allocation { size: size as u64, ctx, device, kind: Kind::Device });
        self.allocated += size as u64;
        Ok(base)
    }

    /// `cuMemFree` of device or managed memory; the device address of mapped host memory is the
    /// host memory's to free (`cuMemFreeHost`, `cuMemHostUnregister`), as on a GPU.
    pub(crate) fn free(&mut self, base: CUdeviceptr) -> Result<()> {
        if base == 0 {
            return Ok(());
        }
        let a = *self.allocations.get(&base).ok_or(CUresult::INVALID_VALUE)?;
        if matches!(a.kind, Kind::Mapped { .. }) {
            return Err(CUresult::INVALID_VALUE);
        }
        self.allocations.remove(&base);
        self.allocated -= a.size;
        self.memory.remove_region(base).map_err(|_| CUresult::INVALID_VALUE)?;
        if a.kind == Kind::Managed {
            crate::mapped::unmap_managed(base, a.size);
        }
        Ok(())
    }

    /// A context's handle, for calls that name one (null is refused).
    pub(crate) fn context(&mut self, h: Handle) -> Result<&mut Context> {
        self.contexts.get_mut(h).map_err(|_| CUresult::INVALID_CONTEXT)
    }

    /// A function handle's module and entry.
    pub(crate) fn function(&self, f: Handle) -> Result<(&Function, &shared::ptx::Module)> {
        let (func, module) = self.function_module(f)?;
        Ok((func, &module.ptx))
    }

    /// A function handle's module, with what the driver read from its text.
    pub(crate) fn function_module(&self, f: Handle) -> Result<(&Function, &Module)> {
        let func = self.functions.get(f)?;
        let module = self.modules.get(func.module)?;
        Ok((func, module))
    }
}

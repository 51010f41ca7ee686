//! `recap._recap.Replayer`: an archive loaded on the CPU or a CUDA GPU once (its modules
//! compiled, its regions allocated, on a GPU its CUDA graph instantiated), then replayed as often
//! as asked with new inputs: the serving path, one call per step and no rebuild.
//!
//! Every call drives the engine through `shared::replay::Session`, the loop `recap replay`, the
//! host and the browser share. The hard part is Python's: the GIL is released while a replay runs,
//! and Ctrl-C must still stop it. Python runs signal handlers only on its main thread, between
//! bytecodes, so the replay runs on a scoped worker thread while the calling thread waits,
//! checking for signals every few milliseconds; a KeyboardInterrupt sets the cancel flag, which
//! the CPU engine reads between ops and inside kernels and the GPU path reads between iterations
//! (a kernel on a GPU cannot be stopped from the host), and the call raises it once the worker
//! has stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use recap::clock::MonotonicClock;
use recap::device::{DeviceReplay, DeviceSpec, OpenOptions};
use shared::archive::{Archive as Reader, Direction, RegionId};
use shared::check::Verdict;
use shared::protocol::SessionMessage;
use shared::ptx::Engine as CpuEngine;
use shared::replay::{IterationStats, NoObserver, Ran, ReplayObserver, ReplayOptions, Session};

use crate::archive::{Archive, Opened};
use crate::arrays;
use crate::device_array::{self, DeviceArray};
use crate::error::recap_error;

self_cell::self_cell!(
    /// The engine a replayer drives and the archive it borrows (a CPU replay reads its kernels
    /// and initial state from it).
    pub(crate) struct Engine {
        owner: Arc<Opened>,
        #[not_covariant]
        dependent: DeviceReplay,
    }
);

/// How often a waiting call looks for a KeyboardInterrupt.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// The most iterations one `run` call replays. Each comes back as a Python object (its time and
/// counts, and per-op times for the iterations a session samples), so the count bounds the memory
/// a call needs; more iterations are more calls.
pub const MAX_ITERATIONS: u32 = 100_000;

/// An archive loaded on a device, ready to replay again and again.
#[pyclass(frozen, module = "recap._recap")]
pub struct Replayer {
    pub(crate) archive: Py<Archive>,
    pub(crate) opened: Arc<Opened>,
    pub(crate) device: String,
    pub(crate) engine: Mutex<Engine>,
    cancel: Arc<AtomicBool>,
    /// Whether a call has run since loading: the regions no longer hold the initial state, and
    /// `run` restores it first (a session restores it only from its second iteration on).
    pub(crate) used: AtomicBool,
    /// What serving calls resolved about binding names and the arrays given for them (serve.rs).
    pub(crate) bindings: Mutex<crate::serve::Bindings>,
}

fn cpu_engine(name: &str) -> PyResult<CpuEngine> {
    recap::device::engine_named(name).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "unknown CPU engine {name:?}: expected jit, jit-scalar or interp"
        ))
    })
}

/// Loads `archive` on `device` (`cpu`, `cpu:ENGINE`, `cuda`, `cuda:N`: [`DeviceSpec`]), with the
/// GIL released. A device that names a CPU engine overrides `engine`.
pub fn load(
    archive: &Bound<'_, Archive>,
    device: &str,
    engine: &str,
    threads: usize,
    budget: Option<u64>,
) -> PyResult<Replayer> {
    let py = archive.py();
    let a = archive.get();
    let opened = a.opened.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    let spec: DeviceSpec = device
        .parse()
        .map_err(|e: recap::device::DeviceSpecError| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let spec = match spec {
        DeviceSpec::Cpu(None) => DeviceSpec::Cpu(Some(cpu_engine(engine)?)),
        named => named,
    };
    if budget.is_some() && spec.gpu().is_some() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "budget applies to device=\"cpu\" only: a GPU runs kernels without counting instructions",
        ));
    }
    let cpu = ReplayOptions {
        instruction_budget: budget,
        cancel: Some(cancel.clone()),
        threads,
        limits: Default::default(),
        jit_dump: recap::jit_dump::from_env(),
        placement: None,
        ..Default::default()
    };
    let options = OpenOptions { cpu, ..Default::default() };
    let owner = opened.clone();
    // Errors as text inside the closure: a replay error is large to move around.
    let loaded = py
        .detach(|| {
            Engine::try_new(owner, |o| {
                DeviceReplay::open(o.borrow_dependent(), spec, options).map_err(|e| e.to_string())
            })
        })
        .map_err(|e| match spec {
            DeviceSpec::Cpu(_) => recap_error(format!("loading {} on the CPU: {e}", a.source)),
            DeviceSpec::Cuda(_) => recap_error(format!("loading {} on {device}: {e}", a.source)),
        })?;
    Ok(Replayer {
        archive: archive.clone().unbind(),
        opened,
        device: device.to_string(),
        engine: Mutex::new(loaded),
        cancel,
        used: AtomicBool::new(false),
        bindings: Default::default(),
    })
}

/// What a run hands back before it becomes Python objects.
struct Outcome {
    iterations: Vec<(f64, IterationStats, Vec<shared::protocol::OpTiming>)>,
    outputs: Vec<(String, RegionId, Option<Vec<u8>>)>,
    check: Option<Verdict>,
}

impl Engine {
    /// One step of the `Replayer` verbs, whichever engine, over the archive it was loaded from.
    fn with<T>(&mut self, f: impl FnOnce(&mut dyn Verbs, &Reader<'_>) -> T) -> T {
        self.with_dependent_mut(|owner, replay| f(replay, owner.borrow_dependent()))
    }
}

/// The `Replayer` verbs with one error type, so both engines fit one `dyn`.
trait Verbs {
    fn restore(&mut self, a: &Reader<'_>) -> Result<(), String>;
    fn write(&mut self, r: RegionId, bytes: &[u8]) -> Result<(), String>;
    fn run(&mut self, a: &Reader<'_>, o: &mut dyn ReplayObserver) -> Result<Ran, String>;
    fn read(&mut self, r: RegionId) -> Result<Vec<u8>, String>;
    fn judge(&mut self, a: &Reader<'_>) -> Result<Verdict, String>;
    /// A device-to-device copy between a region and foreign device memory (`into_region`: from it).
    fn device_copy(&mut self, r: RegionId, array: &DeviceArray, into_region: bool) -> Result<(), String>;
}

impl<T: shared::replay::Replayer> Verbs for T
where
    T: DeviceCopy,
{
    fn restore(&mut self, a: &Reader<'_>) -> Result<(), String> {
        self.restore_initial(a).map_err(|e| e.to_string())
    }
    fn write(&mut self, r: RegionId, bytes: &[u8]) -> Result<(), String> {
        self.write_region(r, bytes).map_err(|e| e.to_string())
    }
    fn run(&mut self, a: &Reader<'_>, o: &mut dyn ReplayObserver) -> Result<Ran, String> {
        self.run_iteration(a, o).map_err(|e| e.to_string())
    }
    fn read(&mut self, r: RegionId) -> Result<Vec<u8>, String> {
        self.read_region(r).map_err(|e| e.to_string())
    }
    fn judge(&mut self, a: &Reader<'_>) -> Result<Verdict, String> {
        shared::replay::check_state(self, a, &Default::default(), &[]).map_err(|e| e.to_string())
    }
    fn device_copy(&mut self, r: RegionId, array: &DeviceArray, into_region: bool) -> Result<(), String> {
        DeviceCopy::device_copy(self, r, array, into_region)
    }
}

/// Copies between a region and another library's device memory.
trait DeviceCopy {
    fn device_copy(&mut self, r: RegionId, array: &DeviceArray, into_region: bool) -> Result<(), String>;
}

impl DeviceCopy for DeviceReplay<'_> {
    fn device_copy(&mut self, r: RegionId, array: &DeviceArray, into_region: bool) -> Result<(), String> {
        let replay = match self {
            DeviceReplay::Cpu(_) => {
                return Err(format!(
                    "{} is in GPU memory; a CPU replay takes host arrays (numpy, or tensor.cpu())",
                    array.what
                ))
            }
            DeviceReplay::Cuda(replay) => replay,
        };
        let res = if into_region {
            replay.copy_region_from_device(r, array.ptr, array.bytes, array.stream)
        } else {
            replay.copy_region_to_device(r, array.ptr, array.bytes)
        };
        res.map_err(|e| e.to_string())
    }
}

/// The session's engine: the verbs plus the device inputs, copied in before every iteration
/// (after the initial state is restored, like the host inputs the session writes).
struct WithDeviceInputs<'v, 'd> {
    verbs: &'v mut dyn Verbs,
    inputs: &'d [(RegionId, DeviceArray)],
}

impl shared::replay::Replayer for WithDeviceInputs<'_, '_> {
    type Error = String;
    fn restore_initial(&mut self, a: &Reader<'_>) -> Result<(), String> {
        self.verbs.restore(a)
    }
    fn write_region(&mut self, r: RegionId, bytes: &[u8]) -> Result<(), String> {
        self.verbs.write(r, bytes)
    }
    fn run_iteration(&mut self, a: &Reader<'_>, o: &mut dyn ReplayObserver) -> Result<Ran, String> {
        for (region, array) in self.inputs {
            self.verbs.device_copy(*region, array, true)?;
        }
        self.verbs.run(a, o)
    }
    fn read_region(&mut self, r: RegionId) -> Result<Vec<u8>, String> {
        self.verbs.read(r)
    }
}

impl Replayer {
    /// Runs `work` on a worker thread with the GIL released, watching for Ctrl-C meanwhile.
    fn interruptible<T: Send>(&self, py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
        self.cancel.store(false, Ordering::Relaxed);
        let cancel = &self.cancel;
        let (done, result) = mpsc::channel();
        let (value, interrupt) = py.detach(move || {
            let mut interrupt = None;
            let value = std::thread::scope(|s| {
                s.spawn(move || {
                    let _ = done.send(work());
                });
                loop {
                    match result.recv_timeout(SIGNAL_POLL) {
                        Ok(v) => return Some(v),
                        Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                    }
                    if interrupt.is_none() {
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            cancel.store(true, Ordering::Relaxed);
                            interrupt = Some(e);
                        }
                    }
                }
            });
            (value, interrupt)
        });
        if let Some(e) = interrupt {
            return Err(e);
        }
        value.ok_or_else(|| recap_error(format!("the replay on {} stopped without a result", self.device)))
    }
}

#[pymethods]
impl Replayer {
    /// The device it replays on: `cpu`, `cuda` or `cuda:N`.
    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// The archive it was loaded from.
    #[getter]
    fn archive(&self, py: Python<'_>) -> Py<Archive> {
        self.archive.clone_ref(py)
    }

    /// One step of the serving path on a CUDA device: `inputs` copied in, the archive's graph,
    /// the outputs copied out, as one graph launch on `stream` (a `CUstream` as an integer; the
    /// replayer's own when None, waited for), or with `zero_copy` the kernels pointed at the
    /// given GPU arrays. Returns the outputs: the GPU arrays given in `outputs`, numpy arrays for
    /// the rest (waited for).
    #[pyo3(signature = (inputs = None, outputs = None, stream = None, zero_copy = false))]
    fn serve<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyDict>>,
        outputs: Option<&Bound<'py, PyDict>>,
        stream: Option<u64>,
        zero_copy: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        crate::serve::serve(self, py, inputs, outputs, stream, zero_copy)
    }

    /// Runs `iterations` replays, each from the initial state with `inputs` written first, and
    /// returns a dict: `outputs` (binding name to array), `iterations` (time in ms, stats and
    /// per-op times of each) and `check` (the per-region verdicts, when asked).
    #[pyo3(signature = (inputs = None, iterations = 1, check = false, outputs = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyDict>>,
        iterations: i64,
        check: bool,
        outputs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let a = self.archive.get();
        let reader = self.opened.borrow_dependent();
        let iterations = match u32::try_from(iterations) {
            Ok(n) if (1..=MAX_ITERATIONS).contains(&n) => n,
            _ if iterations < 1 => {
                return Err(pyo3::exceptions::PyValueError::new_err("iterations must be at least 1"));
            }
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "iterations={iterations} is more than the {MAX_ITERATIONS} one call runs (each iteration's \
                     time and counts come back): call run() again for more"
                )));
            }
        };
        let mut host: Vec<(RegionId, Vec<u8>)> = Vec::new();
        let mut device: Vec<(RegionId, DeviceArray)> = Vec::new();
        for (name, value) in inputs.into_iter().flatten() {
            let name: String = name.extract()?;
            let region = a.region(&name)?;
            if reader.binding(&name).is_some_and(|b| b.direction == Direction::Out) {
                return Err(recap_error(format!("{}: binding {name} is an output, not an input", a.source)));
            }
            match device_array::of(&value, &name, &region)? {
                Some(array) => device.push((region.id, array)),
                None => host.push((region.id, arrays::region_bytes(&value, &name, &region)?)),
            }
        }

        // Outputs: every output binding, read back to the host unless a device array receives it.
        let mut targets: Vec<(String, RegionId, Option<DeviceArray>)> = Vec::new();
        for b in reader.bindings().filter(|b| matches!(b.direction, Direction::Out | Direction::InOut)) {
            let region = reader.region(b.region);
            let into = match outputs.and_then(|o| o.get_item(b.name).ok().flatten()) {
                Some(v) => Some(device_array::of(&v, b.name, &region)?.ok_or_else(|| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "outputs[{:?}]: only GPU arrays (__cuda_array_interface__ or DLPack) receive outputs in place; \
                         host outputs come back as numpy arrays",
                        b.name
                    ))
                })?),
                None => None,
            };
            targets.push((b.name.to_string(), b.region, into));
        }
        if let Some(o) = outputs {
            for name in o.keys() {
                let name: String = name.extract()?;
                if !targets.iter().any(|t| t.0 == name) {
                    return Err(recap_error(format!("{}: outputs names {name}, which is no output binding", a.source)));
                }
            }
        }

        let cancel = self.cancel.clone();
        let used = self.used.swap(true, Ordering::Relaxed);
        let engine = &self.engine;
        let source = &a.source;
        let device_name = &self.device;
        let outcome = self.interruptible(py, move || -> Result<Outcome, String> {
            let mut guard = engine.lock().unwrap_or_else(|p| p.into_inner());
            guard.with(|verbs, reader| {
                if used {
                    verbs.restore(reader).map_err(|e| format!("restoring {source} on {device_name}: {e}"))?;
                }
                let mut engine = WithDeviceInputs { verbs, inputs: &device };
                let clock = MonotonicClock::new();
                let mut session = Session::new(reader, iterations, &host);
                // Grown as iterations finish, never sized up front from the count asked for.
                let mut ran = Vec::new();
                while !session.done() {
                    if cancel.load(Ordering::Relaxed) {
                        return Err("cancelled".into());
                    }
                    // Per-op times are kept for the iterations the session samples them for (as
                    // the host's charts do), so a long run's memory grows by a few words per
                    // iteration, not by its op count.
                    let mut sampled = None;
                    let mut emit = |m: SessionMessage| {
                        if let SessionMessage::OpTimings { iteration, .. } = m {
                            sampled = Some(iteration);
                        }
                    };
                    let it = session.step(&mut engine, &clock, &mut NoObserver, &mut emit).map_err(|e| {
                        format!("replaying {source} on {device_name}, iteration {}: {e}", ran.len() + 1)
                    })?;
                    let ops = if sampled == Some(it.index) { it.ops } else { Vec::new() };
                    ran.push((it.time_ms, it.stats, ops));
                }
                let mut outs = Vec::with_capacity(targets.len());
                for (name, region, into) in &targets {
                    let bytes = match into {
                        Some(array) => {
                            engine.verbs.device_copy(*region, array, false)?;
                            None
                        }
                        None => Some(engine.verbs.read(*region)?),
                    };
                    outs.push((name.clone(), *region, bytes));
                }
                let check = if check { Some(engine.verbs.judge(reader)?) } else { None };
                Ok(Outcome { iterations: ran, outputs: outs, check })
            })
        })?;
        let outcome = outcome.map_err(recap_error)?;

        let out = PyDict::new(py);
        let arrays = PyDict::new(py);
        for (name, region, bytes) in outcome.outputs {
            match bytes {
                Some(b) => {
                    let r = reader.region(region);
                    arrays.set_item(&name, arrays::to_numpy(py, r.dtype, &r.shape, b)?)?
                }
                None => arrays.set_item(&name, outputs.and_then(|o| o.get_item(&name).ok().flatten()))?,
            }
        }
        out.set_item("outputs", arrays)?;
        let its = PyList::empty(py);
        for (time_ms, stats, ops) in outcome.iterations {
            let d = PyDict::new(py);
            d.set_item("time_ms", time_ms)?;
            d.set_item("ops", stats.ops)?;
            d.set_item("launches", stats.launches)?;
            d.set_item("instructions", stats.instructions)?;
            d.set_item("native_launches", stats.native_launches)?;
            let times = PyList::empty(py);
            for o in ops {
                times.append((o.op, o.kind, o.name, o.time_ms))?;
            }
            d.set_item("op_times", times)?;
            its.append(d)?;
        }
        out.set_item("iterations", its)?;
        // The verdict as JSON, which `recap._archive` turns into its dataclasses: one shape for
        // Python, the CLI's --json and the host's messages.
        match outcome.check {
            Some(verdict) => {
                let report = shared::protocol::CheckReport::of(&verdict);
                let json = serde_json::to_string(&report)
                    .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
                out.set_item("check", json)?;
            }
            None => out.set_item("check", py.None())?,
        }
        Ok(out)
    }
}

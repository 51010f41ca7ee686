//! `Replayer.serve`: the serving path of a replayer loaded on a CUDA GPU, one native call per
//! step. Inputs are copied in, the archive's graph runs and outputs are copied out as ONE CUDA
//! graph launch on the caller's stream (`recap_cuda`'s serve.rs), or with `zero_copy` the kernels
//! read and write the caller's arrays themselves; nothing waits unless results come back to the
//! host, and the GIL is released only around that wait.
//!
//! What a call needs from Python is kept between calls: each binding name's region, and the last
//! few arrays given for it. A torch tensor is read through its own methods (`data_ptr()`, `shape`,
//! `stride()`, and once `dtype` and `is_contiguous()`: no `__cuda_array_interface__` dict, which
//! torch builds in Python, and no DLPack capsule) and recognised again by itself and its pointer,
//! shape and strides, so its dtype and shape are checked once; the cache holds the tensors it
//! names, so none can be freed and its address reused by another one while it is there. Other
//! arrays go through `device_array::of` every call.

use std::collections::HashMap;
use std::sync::{MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use recap::cuda::replay::{ServeCall, Sink, Source};
use recap::device::DeviceReplay;
use shared::archive::{Archive as Reader, Direction, RegionId};

use crate::arrays;
use crate::device_array;
use crate::error::recap_error;
use crate::replay::{Engine, Replayer};

/// How many tensors each binding remembers per direction: a server that cycles through a few
/// buffers finds each of them again.
const REMEMBERED: usize = 4;

/// An array a binding was given, as the fast check sees it.
struct Seen {
    array: Py<PyAny>,
    data: u64,
    shape: Vec<i64>,
    strides: Vec<i64>,
    /// Its device address, checked against the region.
    ptr: u64,
}

/// A binding name as a call uses it.
struct Binding {
    region: RegionId,
    direction: Option<Direction>,
    /// Most recently given first.
    input: Vec<Seen>,
    output: Vec<Seen>,
}

/// Per binding name, what earlier calls resolved.
#[derive(Default)]
pub struct Bindings(HashMap<String, Binding>);

impl Bindings {
    fn resolve(&mut self, reader: &Reader<'_>, source: &str, name: &str) -> PyResult<&mut Binding> {
        if !self.0.contains_key(name) {
            let region = reader.region_named(name).map_err(|e| recap_error(format!("{source}: {e}")))?;
            let direction = reader.binding(name).map(|b| b.direction);
            self.0.insert(name.to_string(), Binding { region, direction, input: Vec::new(), output: Vec::new() });
        }
        Ok(self.0.get_mut(name).expect("inserted above"))
    }
}

/// `value`'s device address for region `region` of binding `name`, checked once per distinct
/// tensor (see the module's doc); `None` when it is no GPU array.
fn device_ptr(
    value: &Bound<'_, PyAny>,
    name: &str,
    reader: &Reader<'_>,
    region: RegionId,
    seen: &mut Vec<Seen>,
) -> PyResult<Option<u64>> {
    let torch = value.hasattr("data_ptr")? && value.hasattr("stride")? && value.hasattr("is_cuda")?;
    if torch && value.getattr("is_cuda")?.extract::<bool>()? {
        let data: u64 = value.call_method0("data_ptr")?.extract()?;
        let shape: Vec<i64> = value.getattr("shape")?.extract()?;
        let strides: Vec<i64> = value.call_method0("stride")?.extract()?;
        let py = value.py();
        let again = seen
            .iter()
            .position(|s| s.array.bind(py).is(value) && s.data == data && s.shape == shape && s.strides == strides);
        if let Some(i) = again {
            seen[..=i].rotate_right(1);
            return Ok(Some(seen[0].ptr));
        }
        let region = reader.region(region);
        let ptr = match torch_descr(value)? {
            Some(descr) => {
                if !value.call_method0("is_contiguous")?.extract::<bool>()? {
                    return Err(recap_error(format!(
                        "input {name}: the tensor is not C-contiguous (strides {strides:?}); pass .contiguous() or a copy"
                    )));
                }
                device_array::fit(name, &region, descr.into(), shape.iter().map(|&d| d as u64).collect())?;
                data
            }
            // A dtype the fast check does not know: the protocols decide.
            None => match device_array::of(value, name, &region)? {
                Some(array) => array.ptr,
                None => return Ok(None),
            },
        };
        seen.insert(0, Seen { array: value.clone().unbind(), data, shape, strides, ptr });
        seen.truncate(REMEMBERED);
        return Ok(Some(ptr));
    }
    Ok(device_array::of(value, name, &reader.region(region))?.map(|a| a.ptr))
}

/// numpy's type string for a torch tensor's dtype (bfloat16 as its raw bits, as DLPack's reader
/// has it); `None` for the others.
fn torch_descr(value: &Bound<'_, PyAny>) -> PyResult<Option<&'static str>> {
    let dtype = value.getattr("dtype")?.str()?.to_string();
    Ok(Some(match dtype.as_str() {
        "torch.float32" => "<f4",
        "torch.float64" => "<f8",
        "torch.float16" => "<f2",
        "torch.bfloat16" => "<u2",
        "torch.int8" => "<i1",
        "torch.int16" => "<i2",
        "torch.int32" => "<i4",
        "torch.int64" => "<i8",
        "torch.uint8" => "<u1",
        _ => return Ok(None),
    }))
}

/// The replayer's engine, waiting for another thread's call with the GIL released.
fn lock<'r>(py: Python<'_>, replayer: &'r Replayer) -> MutexGuard<'r, Engine> {
    loop {
        match replayer.engine.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(TryLockError::WouldBlock) => py.detach(|| std::thread::sleep(Duration::from_micros(20))),
        }
    }
}

/// One serving call (`Replayer.serve`); see the module's doc.
pub fn serve<'py>(
    replayer: &Replayer,
    py: Python<'py>,
    inputs: Option<&Bound<'py, PyDict>>,
    outputs: Option<&Bound<'py, PyDict>>,
    stream: Option<u64>,
    zero_copy: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let reader = replayer.opened.borrow_dependent();
    let source = &replayer.archive.get().source;
    let mut guard = replayer.bindings.lock().unwrap_or_else(|p| p.into_inner());
    let bindings = &mut *guard;

    let mut host: Vec<(RegionId, Vec<u8>)> = Vec::new();
    let mut device_in: Vec<(RegionId, u64)> = Vec::new();
    for (name, value) in inputs.into_iter().flatten() {
        let name: String = name.extract()?;
        let b = bindings.resolve(reader, source, &name)?;
        if b.direction == Some(Direction::Out) {
            return Err(recap_error(format!("{source}: binding {name} is an output, not an input")));
        }
        let region = b.region;
        match device_ptr(&value, &name, reader, region, &mut b.input)? {
            Some(ptr) => device_in.push((region, ptr)),
            None => host.push((region, arrays::region_bytes(&value, &name, &reader.region(region))?)),
        }
    }
    let mut call_inputs: Vec<(RegionId, Source<'_>)> = device_in.iter().map(|&(r, p)| (r, Source::Device(p))).collect();
    call_inputs.extend(host.iter().map(|(r, bytes)| (*r, Source::Host(bytes))));

    // Every output binding: into the GPU array given for it, else back to the host.
    let mut sinks: Vec<(RegionId, Sink)> = Vec::new();
    let mut names: Vec<(&str, RegionId, Option<Bound<'py, PyAny>>)> = Vec::new();
    for b in reader.bindings().filter(|b| matches!(b.direction, Direction::Out | Direction::InOut)) {
        let given = match outputs {
            Some(o) => o.get_item(b.name)?,
            None => None,
        };
        let sink = match &given {
            Some(v) => {
                let entry = bindings.resolve(reader, source, b.name)?;
                match device_ptr(v, b.name, reader, b.region, &mut entry.output)? {
                    Some(ptr) => Sink::Device(ptr),
                    None => {
                        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                            "outputs[{:?}]: only GPU arrays (__cuda_array_interface__ or DLPack) receive outputs \
                             in place; host outputs come back as numpy arrays",
                            b.name
                        )))
                    }
                }
            }
            None => Sink::Host,
        };
        sinks.push((b.region, sink));
        names.push((b.name, b.region, given));
    }
    if let Some(o) = outputs {
        if o.len() > names.iter().filter(|n| n.2.is_some()).count() {
            for name in o.keys() {
                let name: String = name.extract()?;
                if !names.iter().any(|n| n.0 == name) {
                    return Err(recap_error(format!("{source}: outputs names {name}, which is no output binding")));
                }
            }
        }
    }
    drop(guard);

    let call = ServeCall { inputs: &call_inputs, outputs: &sinks, stream, zero_copy };
    replayer.used.store(true, std::sync::atomic::Ordering::Relaxed);
    let to_host = sinks.iter().any(|s| s.1 == Sink::Host);
    let device = &replayer.device;
    let mut engine = lock(py, replayer);
    let host_out = engine.with_dependent_mut(|owner, replay| -> Result<Vec<(RegionId, Vec<u8>)>, String> {
        let DeviceReplay::Cuda(replay) = replay else {
            return Err(format!("serve runs on a CUDA device; this replayer is on {device}: use run()"));
        };
        let at = |e: recap::cuda::CudaError| format!("serving {source} on {device}: {e}");
        replay.serve(owner.borrow_dependent(), &call).map_err(at)?;
        // On the replay's own stream nothing else orders the caller's next step after this one.
        if to_host || stream.is_none() {
            let replay = &mut **replay;
            // As text: the error is large to carry out of the closure.
            py.detach(|| replay.serve_wait().map_err(at))?;
        }
        if !to_host {
            return Ok(Vec::new());
        }
        Ok(sinks
            .iter()
            .filter(|s| s.1 == Sink::Host)
            .map(|s| (s.0, replay.served(s.0).map(<[u8]>::to_vec).unwrap_or_default()))
            .collect())
    });
    drop(engine);
    let host_out = host_out.map_err(recap_error)?;

    let out = PyDict::new(py);
    for (name, region, given) in names {
        match given {
            Some(v) => out.set_item(name, v)?,
            None => {
                let bytes = host_out.iter().find(|h| h.0 == region).map(|h| h.1.clone()).unwrap_or_default();
                let r = reader.region(region);
                out.set_item(name, arrays::to_numpy(py, r.dtype, &r.shape, bytes)?)?;
            }
        }
    }
    Ok(out)
}

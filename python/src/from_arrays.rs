//! `recap._recap.Builder`: archives built from numpy arrays and PTX text through recap's capture
//! API (`recap::Device`, `Buffer`, `Module`, `Graph`), on the CPU (no GPU needed) or a CUDA GPU.
//!
//! Buffers are made first, from arrays or as zeros: they are the archive's regions with their
//! initial contents. The first op (launch, copy, fill, while/if) starts the recording, after which
//! new buffers would be graph scratch, so making one is refused. `save` ends the recording and
//! writes the archive, optionally with the outputs' expected state from one run in place.

use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use recap::{Arg, Device, Graph, Kernel, Module, RawBuffer};
use shared::archive::{DType, ParamKind, Tolerance};

use crate::arrays;
use crate::error::recap_error;

/// A buffer of the archive being built: a region with its name, dtype and shape.
#[pyclass(frozen, module = "recap._recap")]
pub struct Buffer {
    raw: RawBuffer,
}

#[pymethods]
impl Buffer {
    #[getter]
    fn name(&self) -> String {
        self.raw.name()
    }

    #[getter]
    fn nbytes(&self) -> u64 {
        self.raw.byte_len()
    }

    /// numpy's type string (`<f4`, `|u1`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        shared::npy::descr(self.raw.dtype())
    }

    #[getter]
    fn shape(&self) -> Vec<u64> {
        shared::npy::region_shape(self.raw.dtype(), self.raw.byte_len(), &self.raw.shape())
    }

    fn __repr__(&self) -> String {
        format!("Buffer({:?}, {} {:?})", self.raw.name(), self.raw.dtype().name(), self.shape())
    }
}

/// Where a builder is: making buffers, recording ops, or saved.
enum State {
    Buffers,
    Recording,
    Saved,
}

/// Builds one archive.
#[pyclass(frozen, module = "recap._recap")]
pub struct Builder {
    device: Device,
    modules: Mutex<Vec<Module>>,
    state: Mutex<State>,
}

fn err(e: recap::CaptureError) -> PyErr {
    recap_error(e)
}

/// The region dtype of a numpy type string.
fn dtype_of(descr: &str) -> PyResult<DType> {
    shared::npy::dtype_of(descr).ok_or_else(|| {
        PyTypeError::new_err(format!("dtype {descr:?} has no archive type: use a plain integer or float type"))
    })
}

impl Builder {
    fn new_buffer(&self, name: &str, descr: &str, shape: Vec<u64>, bytes: Option<&[u8]>) -> PyResult<Buffer> {
        if !matches!(*self.state.lock().unwrap_or_else(|p| p.into_inner()), State::Buffers) {
            return Err(recap_error(format!(
                "buffer {name}: make every buffer before the first op (after it, new buffers would be graph scratch)"
            )));
        }
        let dtype = dtype_of(descr)?;
        let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let size = count.and_then(|n| n.checked_mul(dtype.size() as u64)).and_then(|s| usize::try_from(s).ok());
        let size = size.ok_or_else(|| PyValueError::new_err(format!("buffer {name}: shape {shape:?} is too large")))?;
        let raw = self.device.alloc_raw(size, dtype).map_err(err)?;
        raw.set_name(name);
        raw.set_shape(&shape).map_err(err)?;
        if let Some(b) = bytes {
            self.device.write_bytes(&raw, 0, b).map_err(err)?;
        }
        Ok(Buffer { raw })
    }

    /// Starts the recording at the first op.
    fn recording(&self) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            State::Buffers => {
                self.device.begin_capture().map_err(err)?;
                *state = State::Recording;
                Ok(())
            }
            State::Recording => Ok(()),
            State::Saved => Err(recap_error("the archive was saved: start a new Builder for more ops")),
        }
    }

    fn kernel(&self, name: &str) -> PyResult<Kernel> {
        let modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        for m in modules.iter() {
            if m.entries().contains(&name) {
                return m.kernel(name).map_err(err);
            }
        }
        let names: Vec<String> = modules.iter().flat_map(|m| m.entries()).map(str::to_string).collect();
        Err(recap_error(format!("no kernel named {name}; the loaded modules have {}", names.join(", "))))
    }

    /// Runs `body(builder)` as the body of a while/if, keeping its Python exception.
    fn body(
        slf: &Bound<'_, Self>,
        body: &Bound<'_, PyAny>,
        dev: &Device,
        cond: &Buffer,
        max: Option<u32>,
    ) -> PyResult<()> {
        let cond = cond.raw.typed::<u32>().map_err(err)?;
        let mut raised = None;
        let mut call = |_: &Device| match body.call1((slf,)) {
            Ok(_) => Ok(()),
            Err(e) => {
                raised = Some(e);
                Err(recap::CaptureError::Usage("the body raised an exception".into()))
            }
        };
        let outcome = match max {
            Some(max) => dev.while_nonzero(&cond, max, &mut call),
            None => dev.if_nonzero(&cond, &mut call),
        };
        if let Some(e) = raised {
            return Err(e);
        }
        outcome.map_err(err)
    }
}

/// One kernel argument from Python: a Buffer is a pointer, `(Buffer, byte_offset)` a pointer into
/// it, a numpy scalar its bytes, an int or float the parameter's size in bytes.
fn argument(value: &Bound<'_, PyAny>, param: &shared::archive::ParamDecl, kernel: &str) -> PyResult<Arg> {
    if let Ok(b) = value.cast::<Buffer>() {
        return Ok(Arg::pointer_at(&b.get().raw, 0));
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        if let Ok((b, offset)) = t.extract::<(Bound<'_, Buffer>, u64)>() {
            return Ok(Arg::pointer_at(&b.get().raw, offset));
        }
    }
    if param.kind == ParamKind::Pointer {
        return Err(PyTypeError::new_err(format!(
            "kernel {kernel}, parameter {}: a pointer; pass a Buffer or (Buffer, byte_offset)",
            param.name
        )));
    }
    if value.hasattr("dtype")? && value.hasattr("tobytes")? {
        let bytes = value.call_method0("tobytes")?;
        return Ok(Arg::bytes(bytes.cast::<PyBytes>()?.as_bytes()));
    }
    let size = param.size as usize;
    let bytes = if let Ok(i) = value.extract::<i64>() {
        match size {
            1 | 2 | 4 | 8 => i.to_le_bytes()[..size].to_vec(),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "kernel {kernel}, parameter {}: {size} bytes; pass a numpy value of that size",
                    param.name
                )))
            }
        }
    } else if let Ok(f) = value.extract::<f64>() {
        match size {
            4 => (f as f32).to_le_bytes().to_vec(),
            8 => f.to_le_bytes().to_vec(),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "kernel {kernel}, parameter {}: {size} bytes; pass a numpy float of that size",
                    param.name
                )))
            }
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "kernel {kernel}, parameter {}: cannot pass a {}",
            param.name,
            value.get_type().name()?
        )));
    };
    Ok(Arg::Value(bytes))
}

fn dim3(v: &Bound<'_, PyAny>) -> PyResult<[u32; 3]> {
    if let Ok(x) = v.extract::<u32>() {
        return Ok([x, 1, 1]);
    }
    let dims: Vec<u32> = v.extract()?;
    match dims.as_slice() {
        [x] => Ok([*x, 1, 1]),
        [x, y] => Ok([*x, *y, 1]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(PyValueError::new_err(format!("grid and block take 1 to 3 dimensions, not {}", dims.len()))),
    }
}

fn bound<'a>(list: &'a [(String, Py<Buffer>)], py: Python<'_>) -> Vec<(&'a str, RawBuffer)> {
    list.iter().map(|(n, b)| (n.as_str(), b.bind(py).get().raw.clone())).collect()
}

#[pymethods]
impl Builder {
    #[new]
    #[pyo3(signature = (device = "cpu"))]
    fn py_new(device: &str) -> PyResult<Self> {
        let device = Device::from_spec(device).map_err(err)?;
        Ok(Builder { device, modules: Mutex::new(Vec::new()), state: Mutex::new(State::Buffers) })
    }

    /// `cpu`, or `cuda:N (GPU name)`.
    #[getter]
    fn device(&self) -> String {
        self.device.name()
    }

    /// A buffer holding a copy of `array` (its dtype and shape).
    fn array(&self, name: &str, array: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let np = array.py().import("numpy")?;
        let a = np.call_method1("ascontiguousarray", (array,))?;
        let descr: String = a.getattr("dtype")?.getattr("str")?.extract()?;
        let shape: Vec<u64> = a.getattr("shape")?.extract()?;
        let bytes = a.call_method0("tobytes")?;
        self.new_buffer(name, &descr, shape, Some(bytes.cast::<PyBytes>()?.as_bytes()))
    }

    /// A zeroed buffer of `shape` and numpy `dtype`.
    #[pyo3(signature = (name, shape, dtype = None))]
    fn zeros(&self, name: &str, shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Buffer> {
        let np = shape.py().import("numpy")?;
        let dtype = match dtype {
            Some(d) => np.call_method1("dtype", (d,))?,
            None => np.call_method1("dtype", ("float32",))?,
        };
        let descr: String = dtype.getattr("str")?.extract()?;
        let shape: Vec<u64> = match shape.extract::<u64>() {
            Ok(n) => vec![n],
            Err(_) => shape.extract()?,
        };
        self.new_buffer(name, &descr, shape, None)
    }

    /// Loads a PTX module; returns its kernels' names.
    fn load_ptx(&self, name: &str, ptx: &str) -> PyResult<Vec<String>> {
        let m = self.device.load_ptx(name, ptx).map_err(err)?;
        let entries = m.entries().iter().map(|e| e.to_string()).collect();
        self.modules.lock().unwrap_or_else(|p| p.into_inner()).push(m);
        Ok(entries)
    }

    /// Records a launch of `kernel` over `grid` blocks of `block` threads.
    #[pyo3(signature = (kernel, grid, block, args, shared_bytes = 0))]
    fn launch(
        &self,
        kernel: &str,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyList>,
        shared_bytes: u32,
    ) -> PyResult<()> {
        let k = self.kernel(kernel)?;
        if args.len() != k.params().len() {
            return Err(PyTypeError::new_err(format!(
                "kernel {kernel} takes {} arguments ({}), not {}",
                k.params().len(),
                k.params().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
                args.len()
            )));
        }
        let args = args.iter().zip(k.params()).map(|(a, p)| argument(&a, p, kernel)).collect::<PyResult<Vec<_>>>()?;
        let (grid, block) = (dim3(grid)?, dim3(block)?);
        self.recording()?;
        self.device.launch(&k, grid, block, shared_bytes, &args).map_err(err)
    }

    /// Records a copy of all of `src` into `dst` (the same size in bytes).
    fn copy(&self, src: &Buffer, dst: &Buffer) -> PyResult<()> {
        self.recording()?;
        self.device.copy(&src.raw.as_bytes(), &dst.raw.as_bytes()).map_err(err)
    }

    /// Records a fill of every element of `buffer` with `value` (converted to its dtype).
    fn fill(&self, buffer: &Buffer, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let np = value.py().import("numpy")?;
        let descr = shared::npy::descr(buffer.raw.dtype());
        let bytes = np.call_method1("array", (value, descr))?.call_method0("tobytes")?;
        let bytes = bytes.cast::<PyBytes>()?.as_bytes();
        let mut pattern = [0u8; 8];
        pattern[..bytes.len()].copy_from_slice(bytes);
        self.recording()?;
        self.device.fill_pattern(&buffer.raw, bytes.len() as u32, u64::from_le_bytes(pattern)).map_err(err)
    }

    /// Records `while cond[0] != 0: body(builder)`, tested on the device (`max_iterations` 0:
    /// unbounded). `cond` is a uint32 buffer.
    #[pyo3(signature = (cond, body, max_iterations = 0))]
    fn while_nonzero(
        slf: &Bound<'_, Self>,
        cond: &Buffer,
        body: &Bound<'_, PyAny>,
        max_iterations: u32,
    ) -> PyResult<()> {
        let this = slf.get();
        this.recording()?;
        Builder::body(slf, body, &this.device, cond, Some(max_iterations))
    }

    /// Records `if cond[0] != 0: body(builder)`, tested on the device. `cond` is a uint32 buffer.
    fn if_nonzero(slf: &Bound<'_, Self>, cond: &Buffer, body: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        this.recording()?;
        Builder::body(slf, body, &this.device, cond, None)
    }

    /// Ends the recording and writes the archive to `path` with the named bindings. With
    /// `expected`, the graph runs once here first and the outputs' results become the expected
    /// state a checked replay is judged by (`rtol`/`atol`: a float tolerance; exact otherwise).
    #[pyo3(signature = (path, inputs, outputs, expected = true, rtol = None, atol = None))]
    #[expect(clippy::too_many_arguments, reason = "the Python method's own keyword arguments")]
    fn save(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        inputs: Vec<(String, Py<Buffer>)>,
        outputs: Vec<(String, Py<Buffer>)>,
        expected: bool,
        rtol: Option<f64>,
        atol: Option<f64>,
    ) -> PyResult<()> {
        self.recording()?;
        let graph: Graph = self.device.end_capture().map_err(err)?;
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = State::Saved;
        let (ins, outs) = (bound(&inputs, py), bound(&outputs, py));
        let ins: Vec<(&str, &RawBuffer)> = ins.iter().map(|(n, b)| (*n, b)).collect();
        let outs: Vec<(&str, &RawBuffer)> = outs.iter().map(|(n, b)| (*n, b)).collect();
        let tolerance = match (rtol, atol) {
            (None, None) => Tolerance::Exact,
            (r, a) => Tolerance::Close { rtol: r.unwrap_or(0.0), atol: a.unwrap_or(0.0) },
        };
        py.detach(|| {
            if expected {
                graph.save_checked(&path, &ins, &outs, tolerance)
            } else {
                graph.save(&path, &ins, &outs)
            }
        })
        .map_err(err)
    }

    /// A buffer's current contents (outside a recording) as a numpy array.
    fn read<'py>(&self, py: Python<'py>, buffer: &Buffer) -> PyResult<Bound<'py, PyAny>> {
        let bytes = buffer.raw.read_bytes().map_err(err)?;
        arrays::to_numpy(py, buffer.raw.dtype(), &buffer.raw.shape(), bytes)
    }
}

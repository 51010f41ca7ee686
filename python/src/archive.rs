//! `recap._recap.Archive`: one archive, opened and validated once, its tables handed to Python as
//! plain dicts and its regions' contents as numpy arrays.
//!
//! The reader borrows the archive's bytes (a memory-mapped file or bytes Python passed), and a
//! Python object must own what it borrows: [`Opened`] keeps the bytes and the `Archive` over them in
//! one value (`self_cell`), shared by every replayer made from it.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use recap::mapped::MappedFile;
use shared::archive::{Archive as Reader, Blob, Direction, Op, ParamKind, RegionView};

use crate::arrays;
use crate::error::recap_error;
use crate::replay::{self, Replayer};

/// Where an archive's bytes live.
pub enum Bytes {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

self_cell::self_cell!(
    /// The archive's bytes and the validated reader over them.
    pub struct Opened {
        owner: Bytes,
        #[covariant]
        dependent: Reader,
    }
);

/// An archive open for inspection and replay.
#[pyclass(frozen, module = "recap._recap")]
pub struct Archive {
    pub(crate) opened: Arc<Opened>,
    /// The file it came from, or `<bytes>`: error messages name it.
    pub(crate) source: String,
}

/// Opens an archive from a path or from its bytes, validating all of its structure.
#[pyfunction]
pub fn open(source: &Bound<'_, PyAny>) -> PyResult<Archive> {
    let (bytes, name) = if let Ok(b) = source.cast::<PyBytes>() {
        (Bytes::Owned(b.as_bytes().to_vec()), "<bytes>".to_string())
    } else if let Ok(path) = source.extract::<PathBuf>() {
        let map = MappedFile::open(&path).map_err(|e| recap_error(format!("opening {}: {e}", path.display())))?;
        (Bytes::Mapped(map), path.display().to_string())
    } else if let Ok(b) = source.call_method0("__bytes__").and_then(|b| b.extract::<Vec<u8>>()) {
        (Bytes::Owned(b), "<bytes>".to_string())
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "recap.open takes a path or the archive's bytes, not {}",
            source.get_type().name()?
        )));
    };
    let opened =
        Opened::try_new(bytes, |b| Reader::open(b)).map_err(|e| recap_error(format!("reading {name}: {e}")))?;
    Ok(Archive { opened: Arc::new(opened), source: name })
}

fn direction(d: Direction) -> &'static str {
    match d {
        Direction::In => "in",
        Direction::Out => "out",
        Direction::InOut => "inout",
    }
}

impl Archive {
    pub(crate) fn reader(&self) -> &Reader<'_> {
        self.opened.borrow_dependent()
    }

    /// The region a binding or region name names, with the archive named in the error.
    pub(crate) fn region(&self, name: &str) -> PyResult<RegionView<'_>> {
        let a = self.reader();
        let id = a.region_named(name).map_err(|e| recap_error(format!("{}: {e}", self.source)))?;
        Ok(a.region(id))
    }

    fn contents<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        which: &str,
        pick: impl for<'r> Fn(&RegionView<'r>) -> Option<Blob<'r>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let r = self.region(name)?;
        let blob = pick(&r)
            .ok_or_else(|| recap_error(format!("{}: region {} has no {which} contents", self.source, r.name)))?;
        let bytes = blob.decode().map_err(|e| recap_error(format!("{}: {e}", self.source)))?;
        arrays::to_numpy(py, r.dtype, &r.shape, bytes)
    }
}

#[pymethods]
impl Archive {
    /// The file the archive was opened from, or `<bytes>`.
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// Format version, size, devices and the producer's metadata.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let a = self.reader();
        let d = PyDict::new(py);
        d.set_item("version", a.version())?;
        d.set_item("size", a.len())?;
        let meta = PyDict::new(py);
        for (k, v) in a.meta() {
            meta.set_item(k, v)?;
        }
        d.set_item("meta", meta)?;
        let devices: Vec<(String, u32)> = a.devices().map(|d| (d.name, d.sm)).collect();
        d.set_item("devices", devices)?;
        Ok(d)
    }

    fn modules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let a = self.reader();
        let list = PyList::empty(py);
        for m in a.modules() {
            let d = PyDict::new(py);
            d.set_item("id", m.id)?;
            d.set_item("name", m.name)?;
            d.set_item("ptx_bytes", m.ptx.len())?;
            d.set_item("cubins", m.cubins.iter().map(|(sm, _)| *sm).collect::<Vec<_>>())?;
            let kernels: Vec<&str> = a.kernels().filter(|k| k.module == m.id).map(|k| k.name).collect();
            d.set_item("kernels", kernels)?;
            list.append(d)?;
        }
        Ok(list)
    }

    fn kernels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let a = self.reader();
        let list = PyList::empty(py);
        for k in a.kernels() {
            let d = PyDict::new(py);
            d.set_item("id", k.id)?;
            d.set_item("name", k.name)?;
            d.set_item("module", a.module(k.module).name)?;
            let params = PyList::empty(py);
            for p in &k.params {
                let kind = match p.kind {
                    ParamKind::Value => "value",
                    ParamKind::Pointer => "pointer",
                };
                params.append((p.name.as_str(), p.offset, p.size, p.align, kind))?;
            }
            d.set_item("params", params)?;
            list.append(d)?;
        }
        Ok(list)
    }

    fn regions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let a = self.reader();
        let list = PyList::empty(py);
        for r in a.regions() {
            let d = PyDict::new(py);
            d.set_item("id", r.id)?;
            d.set_item("name", r.name)?;
            d.set_item("size", r.size)?;
            d.set_item("align", r.align)?;
            d.set_item("dtype", r.dtype.name())?;
            d.set_item("numpy_dtype", shared::npy::descr(r.dtype))?;
            d.set_item("shape", shared::npy::region_shape(r.dtype, r.size, &r.shape))?;
            d.set_item("scratch", r.scratch)?;
            d.set_item("device", r.device)?;
            d.set_item("has_initial", r.initial.is_some())?;
            d.set_item("has_expected", r.expected.is_some())?;
            d.set_item("tolerance", r.tolerance.map(|t| format!("{t:?}")))?;
            // The typed layout as `(type, bytes)` pairs, and the spread recorded at capture.
            let types: Vec<(&str, u64)> =
                a.typed_layout(r.id).unwrap_or_default().iter().map(|s| (s.ty.name(), s.len)).collect();
            d.set_item("types", types)?;
            let spread: Vec<(u64, u64, u64, f64, u64)> =
                a.recorded_spread(r.id).iter().map(|s| (s.offset, s.len, s.ulps, s.abs, s.elements)).collect();
            d.set_item("spread", spread)?;
            list.append(d)?;
        }
        Ok(list)
    }

    fn bindings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let a = self.reader();
        let list = PyList::empty(py);
        for b in a.bindings() {
            list.append((b.name, a.region(b.region).name, direction(b.direction)))?;
        }
        Ok(list)
    }

    /// Every op in archive order, with its nesting depth (ops inside a while/if body are deeper).
    fn ops<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let a = self.reader();
        let list = PyList::empty(py);
        // Ends of the open while/if bodies, innermost last.
        let mut open: Vec<u32> = Vec::new();
        for id in 0..a.op_count() as u32 {
            while open.last().is_some_and(|&end| id >= end) {
                open.pop();
            }
            let op = a.op(id);
            let d = PyDict::new(py);
            d.set_item("id", id)?;
            d.set_item("kind", op.kind_name())?;
            d.set_item("label", a.op_label(id))?;
            d.set_item("depth", open.len())?;
            d.set_item("device", a.op_device(id))?;
            match &op {
                Op::Launch(l) => {
                    d.set_item("kernel", a.kernel(l.kernel).name)?;
                    d.set_item("grid", l.grid.to_vec())?;
                    d.set_item("block", l.block.to_vec())?;
                    d.set_item("shared_bytes", l.shared_bytes)?;
                }
                Op::Copy(c) => {
                    d.set_item("src", a.region(c.src).name)?;
                    d.set_item("dst", a.region(c.dst).name)?;
                    d.set_item("bytes", c.len)?;
                }
                Op::Memset(m) => {
                    d.set_item("region", a.region(m.region).name)?;
                    d.set_item("bytes", m.len)?;
                    d.set_item("width", m.width)?;
                    d.set_item("pattern", m.pattern)?;
                }
                Op::Alloc(r) | Op::Free(r) => d.set_item("region", a.region(*r).name)?,
                Op::While { cond, body_len } | Op::If { cond, body_len } => {
                    d.set_item("region", a.region(cond.region).name)?;
                    d.set_item("body_len", *body_len)?;
                    d.set_item("max_iterations", cond.max_iterations)?;
                }
                Op::Library(l) => {
                    d.set_item("routine", l.name())?;
                    d.set_item("count", l.count())?;
                }
                Op::Marker(_) | Op::Signal(_) | Op::Wait(_) => {}
            }
            if op.body_len() > 0 {
                open.push(id + 1 + op.body_len());
            }
            list.append(d)?;
        }
        Ok(list)
    }

    /// The PTX text of the module holding `kernel` (a kernel or module name).
    fn ptx(&self, kernel: &str) -> PyResult<String> {
        let a = self.reader();
        let module = match a.kernel_by_name(kernel) {
            Some(k) => a.module(k.module),
            None => a.modules().find(|m| m.name == kernel).ok_or_else(|| {
                let names: Vec<&str> = a.kernels().map(|k| k.name).collect();
                recap_error(format!(
                    "{}: no kernel or module named {kernel}; the kernels are {}",
                    self.source,
                    names.join(", ")
                ))
            })?,
        };
        module.ptx_text().map_err(|e| recap_error(format!("{}: {e}", self.source)))
    }

    /// A region's (or binding's) initial contents, as a numpy array of its dtype and shape.
    fn initial<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.contents(py, name, "initial", |r| r.initial)
    }

    /// A region's (or binding's) expected contents, as a numpy array of its dtype and shape.
    fn expected<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.contents(py, name, "expected", |r| r.expected)
    }

    /// Loads the archive on `device` for repeated replays.
    #[pyo3(signature = (device = "cpu", *, engine = "jit", threads = 0, budget = None))]
    fn replayer(
        slf: &Bound<'_, Self>,
        device: &str,
        engine: &str,
        threads: usize,
        budget: Option<u64>,
    ) -> PyResult<Replayer> {
        replay::load(slf, device, engine, threads, budget)
    }
}

//! Turns a corpus case folder (`case.json`, PTX, `NAME.in.bin`, `NAME.out.bin`) into a `.recap` archive.
//!
//! The kernel parameter layout is taken from the PTX `.entry` declaration, not from `case.json`: the
//! archive must describe what the kernel receives, and the PTX is the only authority on offsets and
//! alignment. `case.json` only supplies the values, which are checked against that layout. Every
//! device pointer (a `buffer` parameter, or a `pointers` entry of a by-value struct) is recorded as a
//! relocation with zeros in its 8 bytes, so no raw address ever reaches the archive.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;
use shared::archive::{
    ArchiveWriter, DType, Direction, KernelId, LaunchDecl, RegionDecl, RegionId, Reloc, Tolerance, WriteError,
};
use shared::ptx::signature::{entry_params, EntryParam, SignatureError};

/// Buffer files up to this size are read whole (see `write_case`).
const IN_MEMORY_LIMIT: u64 = 64 << 20;

/// Which of a case's PTX files to import: a key of its `ptx` map, a target name such as `sm_80`,
/// `sm_90a` or `sm_100` (a bare number `80` means `sm_80`). The PTX is stored as it is, so the
/// archive keeps the `.target` that PTX declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxArch(String);

impl PtxArch {
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Default for PtxArch {
    fn default() -> Self {
        PtxArch("sm_90".into())
    }
}

impl fmt::Display for PtxArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `--ptx` value that names no PTX target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown PTX architecture {0:?} (expected a target such as sm_80, sm_90a or sm_100)")]
pub struct UnknownPtxArch(pub String);

impl FromStr for PtxArch {
    type Err = UnknownPtxArch;
    fn from_str(s: &str) -> Result<Self, UnknownPtxArch> {
        let digits = s.strip_prefix("sm_").unwrap_or(s);
        let number = digits.trim_end_matches(|c: char| c.is_ascii_lowercase());
        let suffix = &digits[number.len()..];
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) || suffix.len() > 1 {
            return Err(UnknownPtxArch(s.to_string()));
        }
        Ok(PtxArch(format!("sm_{digits}")))
    }
}

/// Why a case could not be imported. Every variant names the file, and the field where there is one.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    // The causes are part of the message (fields not named `source`), so a chain printed with
    // `{:#}` says each once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {error}")]
    Json { path: PathBuf, error: serde_json::Error },
    #[error("{path}: {field}: {reason}")]
    Case { path: PathBuf, field: String, reason: String },
    #[error("{path}: {reason}")]
    Ptx { path: PathBuf, reason: SignatureError },
    #[error("writing {path}: {error}")]
    Write { path: PathBuf, error: WriteError },
}

/// What an import produced.
#[derive(Clone, Debug)]
pub struct ImportSummary {
    pub case: String,
    pub ptx: PtxArch,
    pub kernels: usize,
    pub regions: usize,
    pub launches: usize,
    /// Size of the written archive in bytes.
    pub archive_bytes: u64,
}

#[derive(Deserialize)]
struct CaseFile {
    name: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    producer: Option<String>,
    #[serde(default)]
    expected_from: Option<String>,
    ptx: HashMap<String, String>,
    buffers: Vec<BufferSpec>,
    launches: Vec<LaunchSpec>,
    #[serde(default)]
    tolerance: Option<ToleranceSpec>,
}

#[derive(Deserialize)]
struct BufferSpec {
    name: String,
    dtype: String,
    count: u64,
    /// A shape hint, outermost first (`[rows, cols]`): 2-D data draws as a heatmap. Its product
    /// must be `count`.
    #[serde(default)]
    shape: Option<Vec<u64>>,
    #[serde(default)]
    initial: Option<String>,
    #[serde(default)]
    expected: Option<String>,
}

#[derive(Deserialize)]
struct LaunchSpec {
    entry: String,
    grid: [u32; 3],
    block: [u32; 3],
    #[serde(default)]
    dynamic_shared_bytes: u32,
    params: Vec<ParamSpec>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum ParamSpec {
    Buffer {
        name: String,
    },
    Scalar {
        r#type: String,
        value: serde_json::Number,
    },
    Bytes {
        hex: String,
        #[serde(default)]
        pointers: Vec<PointerSpec>,
    },
}

#[derive(Deserialize)]
struct PointerSpec {
    offset: u64,
    buffer: String,
}

#[derive(Deserialize)]
struct ToleranceSpec {
    #[serde(default)]
    exact: Option<bool>,
    #[serde(default)]
    rtol: Option<f64>,
    #[serde(default)]
    atol: Option<f64>,
    #[serde(default)]
    mismatch_frac: Option<f64>,
}

/// What is wrong with one value of a case file; [`ImportError::Case`] names the file and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CaseValueError {
    #[error("{0} is not an integer")]
    NotInteger(serde_json::Number),
    #[error("{value} does not fit in {ty}")]
    DoesNotFit { value: i128, ty: String },
    #[error("{0} is not a number")]
    NotNumber(serde_json::Number),
    #[error("unsupported scalar type {0:?}")]
    UnsupportedScalar(String),
    #[error("hex string has an odd length {0}")]
    OddHexLength(usize),
    #[error("hex string is not ASCII")]
    HexNotAscii,
    #[error("bad hex digits at character {0}")]
    BadHexDigits(usize),
    #[error("mismatch_frac {0} is not between 0 and 1")]
    MismatchFraction(f64),
    #[error("rtol {rtol} / atol {atol} must be finite and non-negative")]
    CloseBounds { rtol: f64, atol: f64 },
    #[error("expected {{\"exact\": true}}, {{\"rtol\", \"atol\"}} or {{\"mismatch_frac\"}}")]
    ToleranceShape,
}

/// Little-endian bytes of a `scalar` parameter.
fn scalar_bytes(ty: &str, value: &serde_json::Number) -> Result<Vec<u8>, CaseValueError> {
    let int = |lo: i128, hi: i128| -> Result<i128, CaseValueError> {
        let v = value
            .as_i64()
            .map(i128::from)
            .or_else(|| value.as_u64().map(i128::from))
            .ok_or_else(|| CaseValueError::NotInteger(value.clone()))?;
        if v < lo || v > hi {
            return Err(CaseValueError::DoesNotFit { value: v, ty: ty.to_string() });
        }
        Ok(v)
    };
    let float = || value.as_f64().ok_or_else(|| CaseValueError::NotNumber(value.clone()));
    Ok(match ty {
        "i8" => (int(i8::MIN as i128, i8::MAX as i128)? as i8).to_le_bytes().to_vec(),
        "u8" => (int(0, u8::MAX as i128)? as u8).to_le_bytes().to_vec(),
        "i16" => (int(i16::MIN as i128, i16::MAX as i128)? as i16).to_le_bytes().to_vec(),
        "u16" => (int(0, u16::MAX as i128)? as u16).to_le_bytes().to_vec(),
        "i32" => (int(i32::MIN as i128, i32::MAX as i128)? as i32).to_le_bytes().to_vec(),
        "u32" => (int(0, u32::MAX as i128)? as u32).to_le_bytes().to_vec(),
        "i64" => (int(i64::MIN as i128, i64::MAX as i128)? as i64).to_le_bytes().to_vec(),
        "u64" => (int(0, u64::MAX as i128)? as u64).to_le_bytes().to_vec(),
        "f32" => (float()? as f32).to_le_bytes().to_vec(),
        "f64" => float()?.to_le_bytes().to_vec(),
        other => return Err(CaseValueError::UnsupportedScalar(other.to_string())),
    })
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, CaseValueError> {
    let hex = hex.trim();
    if !hex.len().is_multiple_of(2) {
        return Err(CaseValueError::OddHexLength(hex.len()));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(hex.get(i..i + 2).ok_or(CaseValueError::HexNotAscii)?, 16)
                .map_err(|_| CaseValueError::BadHexDigits(i))
        })
        .collect()
}

fn tolerance_of(spec: Option<&ToleranceSpec>) -> Result<Tolerance, CaseValueError> {
    let Some(t) = spec else { return Ok(Tolerance::Exact) };
    match (t.exact, t.rtol, t.atol, t.mismatch_frac) {
        (_, None, None, Some(f)) if (0.0..=1.0).contains(&f) => Ok(Tolerance::MismatchFraction { max_fraction: f }),
        (_, None, None, Some(f)) => Err(CaseValueError::MismatchFraction(f)),
        (_, r, a, None) if r.is_some() || a.is_some() => {
            let (rtol, atol) = (r.unwrap_or(0.0), a.unwrap_or(0.0));
            if !(rtol.is_finite() && atol.is_finite() && rtol >= 0.0 && atol >= 0.0) {
                return Err(CaseValueError::CloseBounds { rtol, atol });
            }
            Ok(Tolerance::Close { rtol, atol })
        }
        (Some(true), None, None, None) => Ok(Tolerance::Exact),
        _ => Err(CaseValueError::ToleranceShape),
    }
}

struct Importer {
    case_json: PathBuf,
}

impl Importer {
    fn field<T>(&self, field: impl Into<String>, reason: impl Into<String>) -> Result<T, ImportError> {
        Err(ImportError::Case { path: self.case_json.clone(), field: field.into(), reason: reason.into() })
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |error| ImportError::Io { path: path.to_path_buf(), error }
}

/// Reads the case in `dir` and writes its archive to `out` (through a temporary file beside it, renamed
/// into place once complete, so a failed import never leaves a half-written archive at `out`).
pub fn import_case(dir: &Path, ptx: &PtxArch, out: &Path) -> Result<ImportSummary, ImportError> {
    let tmp = out.with_extension("recap.partial");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    let result = write_case(dir, ptx, BufWriter::new(file), out).and_then(|(summary, w)| {
        let file = w.into_inner().map_err(|e| ImportError::Io { path: tmp.clone(), error: e.into_error() })?;
        file.sync_all().map_err(io_err(&tmp))?;
        Ok(summary)
    });
    match result {
        Ok(summary) => {
            std::fs::rename(&tmp, out).map_err(io_err(out))?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn write_case<W: Write + Seek>(
    dir: &Path,
    arch: &PtxArch,
    out: W,
    out_path: &Path,
) -> Result<(ImportSummary, W), ImportError> {
    let case_json = dir.join("case.json");
    let text = std::fs::read_to_string(&case_json).map_err(io_err(&case_json))?;
    let case: CaseFile =
        serde_json::from_str(&text).map_err(|error| ImportError::Json { path: case_json.clone(), error })?;
    let im = Importer { case_json: case_json.clone() };
    let werr = |error| ImportError::Write { path: out_path.to_path_buf(), error };

    let Some(ptx_file) = case.ptx.get(arch.name()) else {
        let mut have: Vec<&str> = case.ptx.keys().map(String::as_str).collect();
        have.sort_unstable();
        return im.field(format!("ptx.{arch}"), format!("this case has no {arch} PTX (it has {})", have.join(", ")));
    };
    let ptx_path = dir.join(ptx_file);
    let ptx_text = std::fs::read_to_string(&ptx_path).map_err(io_err(&ptx_path))?;
    let tolerance = tolerance_of(case.tolerance.as_ref()).or_else(|e| im.field("tolerance", e.to_string()))?;

    let mut w = ArchiveWriter::new(out).map_err(werr)?;
    let module = w.add_module(&case.name, &ptx_text).map_err(werr)?;

    let mut regions: HashMap<&str, RegionId> = HashMap::new();
    for (i, b) in case.buffers.iter().enumerate() {
        let field = |f: &str| format!("buffers[{i}].{f}");
        let Some(dtype) = DType::from_name(&b.dtype) else {
            return im.field(field("dtype"), format!("unknown element type {:?}", b.dtype));
        };
        let Some(size) = b.count.checked_mul(dtype.size() as u64) else {
            return im.field(field("count"), format!("{} elements of {} overflow", b.count, b.dtype));
        };
        if regions.contains_key(b.name.as_str()) {
            return im.field(field("name"), format!("buffer {:?} is declared twice", b.name));
        }
        let mut decl = RegionDecl::new(&b.name, size, dtype);
        decl.shape = match &b.shape {
            None => vec![b.count],
            Some(shape) => {
                let product = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
                if shape.is_empty() || shape.len() > 4 || product != Some(b.count) {
                    return im.field(
                        field("shape"),
                        format!(
                            "shape {shape:?} of buffer {:?} does not hold its {} elements in 1 to 4 dimensions",
                            b.name, b.count
                        ),
                    );
                }
                shape.clone()
            }
        };
        let region = w.add_region(decl).map_err(werr)?;
        regions.insert(&b.name, region);
        for (which, file) in [("initial", &b.initial), ("expected", &b.expected)] {
            let Some(file) = file else { continue };
            let path = dir.join(file);
            let mut f = File::open(&path).map_err(io_err(&path))?;
            let len = f.metadata().map_err(io_err(&path))?.len();
            if len != size {
                return im.field(
                    field(which),
                    format!("{} is {len} bytes but {} × {} is {size}", path.display(), b.count, b.dtype),
                );
            }
            // Buffers up to 64 MiB are read whole so the writer can store bytes that a launch leaves
            // unchanged once for both initial and expected; larger ones stream through.
            if len <= IN_MEMORY_LIMIT {
                let mut bytes = Vec::with_capacity(len as usize);
                f.read_to_end(&mut bytes).map_err(io_err(&path))?;
                if which == "initial" {
                    w.set_initial_bytes(region, &bytes).map_err(werr)?;
                } else {
                    w.set_expected_bytes(region, &bytes, tolerance).map_err(werr)?;
                }
            } else if which == "initial" {
                w.set_initial(region, &mut f).map_err(werr)?;
            } else {
                w.set_expected(region, &mut f, tolerance).map_err(werr)?;
            }
        }
        w.add_binding(&b.name, region, Direction::InOut).map_err(werr)?;
    }

    // Kernels in order of first launch; a parameter is a pointer if the PTX says `.ptr` or if any
    // launch passes a buffer in it.
    let mut kernels: Vec<(String, Vec<EntryParam>, Vec<bool>)> = Vec::new();
    let mut kernel_of_launch = Vec::new();
    for (li, l) in case.launches.iter().enumerate() {
        let k = match kernels.iter().position(|k| k.0 == l.entry) {
            Some(k) => k,
            None => {
                let params = entry_params(&ptx_text, &l.entry)
                    .map_err(|reason| ImportError::Ptx { path: ptx_path.clone(), reason })?;
                let pointers = params.iter().map(|p| p.ptr_annotated).collect();
                kernels.push((l.entry.clone(), params, pointers));
                kernels.len() - 1
            }
        };
        let declared = kernels[k].1.len();
        if l.params.len() != declared {
            return im.field(
                format!("launches[{li}].params"),
                format!("{} parameters given but .entry {} declares {declared}", l.params.len(), l.entry),
            );
        }
        for (pi, p) in l.params.iter().enumerate() {
            if matches!(p, ParamSpec::Buffer { .. }) {
                kernels[k].2[pi] = true;
            }
        }
        kernel_of_launch.push(k);
    }
    let mut kernel_ids: Vec<KernelId> = Vec::new();
    for (entry, params, pointers) in &kernels {
        let decls = params.iter().zip(pointers).map(|(p, &ptr)| p.decl(ptr)).collect();
        kernel_ids.push(w.add_kernel(module, entry, decls).map_err(werr)?);
    }

    for (li, l) in case.launches.iter().enumerate() {
        let (_, layout, _) = &kernels[kernel_of_launch[li]];
        let mut bytes = vec![0u8; layout.last().map_or(0, |p| (p.offset + p.size) as usize)];
        let mut relocs = Vec::new();
        for (pi, (spec, p)) in l.params.iter().zip(layout).enumerate() {
            let field = format!("launches[{li}].params[{pi}]");
            let slot = p.offset as usize..(p.offset + p.size) as usize;
            let region_of = |name: &str, field: &str| match regions.get(name) {
                Some(&r) => Ok(r),
                None => im.field(field, format!("no buffer named {name:?}")),
            };
            match spec {
                ParamSpec::Buffer { name } => {
                    if p.size != 8 {
                        return im.field(
                            field,
                            format!("buffer {name:?} passed in {}, a {}-byte parameter", p.name, p.size),
                        );
                    }
                    let target = region_of(name, &format!("{field}.name"))?;
                    relocs.push(Reloc { offset: p.offset as u64, target, target_offset: 0 });
                }
                ParamSpec::Scalar { r#type, value } => {
                    let v =
                        scalar_bytes(r#type, value).or_else(|e| im.field(format!("{field}.value"), e.to_string()))?;
                    if v.len() != p.size as usize {
                        return im.field(
                            format!("{field}.type"),
                            format!("{} is {} bytes but {} is declared as {} bytes", r#type, v.len(), p.name, p.size),
                        );
                    }
                    bytes[slot].copy_from_slice(&v);
                }
                ParamSpec::Bytes { hex, pointers } => {
                    let mut v = decode_hex(hex).or_else(|e| im.field(format!("{field}.hex"), e.to_string()))?;
                    if v.len() != p.size as usize {
                        return im.field(
                            format!("{field}.hex"),
                            format!("{} bytes given but {} is declared as {} bytes", v.len(), p.name, p.size),
                        );
                    }
                    for (qi, ptr) in pointers.iter().enumerate() {
                        let pfield = format!("{field}.pointers[{qi}]");
                        if ptr.offset.checked_add(8).is_none_or(|e| e > v.len() as u64) {
                            return im.field(
                                format!("{pfield}.offset"),
                                format!("offset {} leaves no room for 8 bytes in {} bytes", ptr.offset, v.len()),
                            );
                        }
                        let target = region_of(&ptr.buffer, &format!("{pfield}.buffer"))?;
                        // Whatever address the producer saw is meaningless here; replay patches these bytes.
                        v[ptr.offset as usize..ptr.offset as usize + 8].fill(0);
                        relocs.push(Reloc { offset: p.offset as u64 + ptr.offset, target, target_offset: 0 });
                    }
                    bytes[slot].copy_from_slice(&v);
                }
            }
        }
        w.launch(LaunchDecl {
            kernel: kernel_ids[kernel_of_launch[li]],
            grid: l.grid,
            block: l.block,
            shared_bytes: l.dynamic_shared_bytes,
            params: bytes,
            relocs,
        })
        .map_err(werr)?;
    }

    w.set_meta("case", &case.name);
    w.set_meta("ptx", arch.name());
    for (key, value) in [("producer", &case.producer), ("source", &case.source), ("expected_from", &case.expected_from)]
    {
        if let Some(v) = value {
            w.set_meta(key, v);
        }
    }
    w.set_meta("importer", concat!("recap import-case ", env!("CARGO_PKG_VERSION")));
    let mut out = w.finish().map_err(werr)?;
    let archive_bytes = out.stream_position().map_err(io_err(out_path))?;
    let summary = ImportSummary {
        case: case.name,
        ptx: arch.clone(),
        kernels: kernels.len(),
        regions: regions.len(),
        launches: case.launches.len(),
        archive_bytes,
    };
    Ok((summary, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_hex() {
        let n = |s: &str| serde_json::from_str::<serde_json::Number>(s).unwrap();
        assert_eq!(scalar_bytes("i32", &n("-3")).unwrap(), (-3i32).to_le_bytes());
        assert_eq!(scalar_bytes("f32", &n("2.5")).unwrap(), 2.5f32.to_le_bytes());
        let too_small = scalar_bytes("u32", &n("-1")).unwrap_err();
        assert_eq!(too_small, CaseValueError::DoesNotFit { value: -1, ty: "u32".into() });
        assert_eq!(too_small.to_string(), "-1 does not fit in u32");
        assert_eq!(decode_hex("00ff10").unwrap(), [0, 255, 16]);
        assert_eq!(decode_hex("0g").unwrap_err(), CaseValueError::BadHexDigits(0));
        assert_eq!(decode_hex("abc").unwrap_err().to_string(), "hex string has an odd length 3");
    }
}

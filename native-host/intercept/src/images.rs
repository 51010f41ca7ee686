//! Code images the program hands the driver, and the PTX and cubins recovered from them.
//!
//! An image arrives as a bare pointer (`cuModuleLoadData`, `cuLibraryLoadData`), a file
//! (`cuModuleLoad`) or the output of the driver's linker. What it is comes from its first bytes
//! (`shared::fatbin::image_kind`) and its length from its own headers. Images inside a loaded
//! library's data (the fat binaries nvcc embeds, which the runtime registers by the hundred in a
//! program like PyTorch) are only referenced, and parsed the first time the range launches one of
//! their kernels; anything else is copied at once, since the program may free it after the call.
//!
//! PTX is taken wherever it exists: the image itself, a fat binary's PTX entry (the lowest
//! architecture, the most portable), the PTX inputs of a link (the driver's linker handed out the
//! very bytes loaded: [`LinkOutputs`]), or — for a bare cubin, as Triton loads them — the `.ptx`
//! file its producer keeps beside a byte-identical copy of the cubin in its cache (Triton's and
//! inductor's cache folders: `ptx_sources.rs`), the NVRTC program that made it (`nvrtc.rs`), or
//! the input of the `ptxas` run that wrote it (`ptxas.rs`).

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shared::fatbin::{self, EntryKind, ImageKind};
use shared::ptx::signature;

use crate::record::Layout;
use crate::sys::{CU_JIT_INPUT_CUBIN, CU_JIT_INPUT_FATBINARY, CU_JIT_INPUT_PTX};

/// What a bare cubin's kernels say when none of the places a cubin's PTX is looked for had it.
pub const NO_PTX: &str = "none: a cubin, and no PTX found beside it, from NVRTC or from ptxas";

/// Why an image's kernels have no PTX or no code at all: the image cannot be read, or is not one
/// the driver takes.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image does not lie in readable memory")]
    Unreadable,
    #[error("the image is neither PTX, a cubin nor a fat binary")]
    UnknownKind,
    #[error("PTX text with no NUL before its memory ends")]
    PtxUnterminated,
    #[error("PTX is not UTF-8: {0}")]
    PtxNotUtf8(#[source] std::str::Utf8Error),
    #[error("a cubin: {0}")]
    Cubin(#[source] fatbin::ElfError),
    #[error("a fat binary wrapper cut short by the end of its memory")]
    WrapperCut,
    #[error("a fat binary wrapper without a fat binary")]
    WrapperEmpty,
    #[error("a fat binary with a malformed header")]
    FatbinHeader,
    #[error("a fat binary of {len} bytes runs past the {readable} readable bytes at its address")]
    FatbinPastEnd { len: u64, readable: usize },
    #[error("fat binary: {0}")]
    Fatbin(#[source] fatbin::FatbinError),
    /// The file could not be read (shared, as a parse error is kept with the image and cloned).
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: Arc<std::io::Error> },
    #[error("{}: not PTX, a cubin or a fat binary", path.display())]
    FileKind { path: PathBuf },
}

/// Where an image's bytes are.
pub enum ImageSource {
    Owned(Vec<u8>),
    /// Inside a loaded object's data, valid for the life of the process.
    Static {
        ptr: usize,
        len: usize,
    },
}

impl ImageSource {
    fn bytes(&self) -> &[u8] {
        match self {
            ImageSource::Owned(b) => b,
            // SAFETY: `from_pointer` only keeps pointers that dladdr places inside a loaded
            // object, with the length the image's own header gives, checked to be readable.
            ImageSource::Static { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr as *const u8, *len) },
        }
    }
}

/// What a module's image holds once parsed.
pub struct Parsed {
    pub ptx: Option<String>,
    /// Where the PTX came from, for the report.
    pub ptx_from: String,
    /// `(sm, cubin)`; sm 0 for a bare cubin, which is for the GPU it was loaded on.
    pub cubins: Vec<(u32, Vec<u8>)>,
}

pub struct ModuleImage {
    /// The call that loaded it.
    pub via: String,
    pub kind: ImageKind,
    source: ImageSource,
    link_inputs: LinkInputs,
    parsed: Option<Result<Parsed, ImageError>>,
    /// The SM version of the GPU it was loaded for (0 where no context said): which of a fat
    /// binary's PTX entries stands for the code that ran (`fatbin::ptx_for_gpu`).
    pub gpu_sm: u32,
}

impl ModuleImage {
    /// Reads (or references) the image at `image`. Nothing is read past the readable memory that
    /// starts there (`readable.rs`): the driver accepts images whose headers claim more than that.
    ///
    /// # Safety
    /// `image` is the pointer a program handed the driver, which accepted it.
    pub unsafe fn from_pointer(image: *const c_void, via: &str) -> Result<ModuleImage, ImageError> {
        let readable = crate::readable::readable_from(image as usize);
        if readable < 4 {
            return Err(ImageError::Unreadable);
        }
        // SAFETY: the process's mappings make these bytes readable.
        let bytes = std::slice::from_raw_parts(image as *const u8, readable);
        let kind = fatbin::image_kind(bytes).ok_or(ImageError::UnknownKind)?;
        let source = match kind {
            ImageKind::Ptx => {
                let end = bytes.iter().position(|&b| b == 0).ok_or(ImageError::PtxUnterminated)?;
                ImageSource::Owned(bytes[..end].to_vec())
            }
            ImageKind::Cubin => {
                let len = fatbin::elf_len(bytes).map_err(ImageError::Cubin)?;
                ImageSource::Owned(bytes[..len as usize].to_vec())
            }
            ImageKind::Fatbin => fatbin_source(image, bytes)?,
            ImageKind::Wrapper => {
                let inner = bytes.get(8..16).ok_or(ImageError::WrapperCut)?;
                let inner = u64::from_le_bytes(inner.try_into().expect("8 bytes")) as *const c_void;
                if inner.is_null() {
                    return Err(ImageError::WrapperEmpty);
                }
                return ModuleImage::from_pointer(inner, via).map(|mut m| {
                    m.kind = ImageKind::Fatbin;
                    m
                });
            }
        };
        Ok(ModuleImage { via: via.to_string(), kind, source, link_inputs: Vec::new(), parsed: None, gpu_sm: 0 })
    }

    /// A module from a file (`cuModuleLoad`, `cuLibraryLoadFromFile`).
    pub fn from_file(path: &Path, via: &str) -> Result<ModuleImage, ImageError> {
        let bytes =
            std::fs::read(path).map_err(|e| ImageError::Read { path: path.to_path_buf(), source: Arc::new(e) })?;
        let kind = fatbin::image_kind(&bytes).ok_or_else(|| ImageError::FileKind { path: path.to_path_buf() })?;
        Ok(ModuleImage {
            via: format!("{via} {}", path.display()),
            kind,
            source: ImageSource::Owned(bytes),
            link_inputs: Vec::new(),
            parsed: None,
            gpu_sm: 0,
        })
    }

    /// The cubin the driver's linker made from `inputs`.
    pub fn linked(via: &str, cubin: Vec<u8>, inputs: LinkInputs) -> ModuleImage {
        ModuleImage {
            via: format!("{via} (linked)"),
            kind: ImageKind::Cubin,
            source: ImageSource::Owned(cubin),
            link_inputs: inputs,
            parsed: None,
            gpu_sm: 0,
        }
    }

    /// Parses the image once; the error says why its kernels have no PTX or no code at all.
    pub fn prepare(&mut self) -> Result<&Parsed, ImageError> {
        if self.parsed.is_none() {
            self.parsed = Some(self.parse());
        }
        self.parsed.as_ref().expect("just parsed").as_ref().map_err(Clone::clone)
    }

    pub fn parsed(&self) -> Option<&Parsed> {
        self.parsed.as_ref().and_then(|p| p.as_ref().ok())
    }

    /// PTX found after the image was parsed (an NVRTC program compiled again, nvrtc.rs).
    pub fn set_ptx(&mut self, ptx: Option<String>, from: String) {
        if let Some(Ok(p)) = &mut self.parsed {
            p.ptx = ptx;
            p.ptx_from = from;
        }
    }

    fn parse(&self) -> Result<Parsed, ImageError> {
        let bytes = self.source.bytes();
        match self.kind {
            ImageKind::Ptx => {
                let text = std::str::from_utf8(bytes).map_err(ImageError::PtxNotUtf8)?;
                Ok(Parsed { ptx: Some(text.to_string()), ptx_from: "loaded as PTX".into(), cubins: Vec::new() })
            }
            ImageKind::Cubin => {
                let linked = self.linked_ptx().or_else(|| crate::nvjitlink::ptx_for_cubin(bytes, self.gpu_sm));
                let (ptx, ptx_from) = match linked {
                    Some(found) => found,
                    None => match crate::ptx_sources::producer_ptx(bytes) {
                        Some((text, path)) => (Some(text), format!("{}", path.display())),
                        // Compiled again for its PTX when the archive is written (nvrtc.rs).
                        None if crate::nvrtc::made(bytes) => (None, crate::nvrtc::PENDING.into()),
                        None => match crate::ptxas::kept(bytes) {
                            Some(kept) => {
                                let from = crate::ptxas::ptx_from(&kept);
                                let text = match kept {
                                    crate::ptxas::Kept::Ptx { text, .. } => Some(text),
                                    crate::ptxas::Kept::Refused(_) => None,
                                };
                                (text, from)
                            }
                            None => (None, NO_PTX.into()),
                        },
                    },
                };
                Ok(Parsed { ptx, ptx_from, cubins: vec![(0, bytes.to_vec())] })
            }
            ImageKind::Fatbin | ImageKind::Wrapper => {
                let entries = fatbin::parse(bytes).map_err(ImageError::Fatbin)?;
                let cubins =
                    entries.iter().filter(|e| e.kind == EntryKind::Cubin).map(|e| (e.sm, e.payload.clone())).collect();
                // PTX only for GPUs newer than this one never ran here: CuPy's CUB, say, ships
                // machine code for each architecture and PTX for the newest, tuned for it.
                Ok(match fatbin::ptx_for_gpu(&entries, self.gpu_sm) {
                    Ok(e) => Parsed {
                        ptx: e.ptx().map(str::to_string),
                        ptx_from: format!("fat binary (compute_{})", e.sm),
                        cubins,
                    },
                    Err(why) => Parsed { ptx: None, ptx_from: format!("none: {why}"), cubins },
                })
            }
        }
    }

    /// The PTX a cubin the driver's linker made was made from ([`link_ptx`]).
    fn linked_ptx(&self) -> Option<(Option<String>, String)> {
        if self.link_inputs.is_empty() {
            return None;
        }
        Some(link_ptx(&self.link_inputs, self.gpu_sm, "the link's PTX input", "the link"))
    }

    /// The layout of kernel `name` from the module's PTX `.entry`, when there is PTX.
    pub fn ptx_layout(&mut self, name: &str) -> Option<Layout> {
        let ptx = self.prepare().ok()?.ptx.as_deref()?;
        let params = signature::entry_params(ptx, name).ok()?;
        Some(Layout {
            params: params.into_iter().map(|p| (p.name, p.offset, p.size, p.align)).collect(),
            from: "PTX .entry",
        })
    }
}

/// What a link input is, whichever linker took it (the driver's `CUjitInputType` or
/// nvJitLink's `nvJitLinkInputType`, which number the same kinds differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Cubin,
    Ptx,
    Fatbin,
    Object,
    Library,
    /// Link-time-optimisation IR (the driver's `CU_JIT_INPUT_NVVM`, nvJitLink's `LTOIR`).
    LtoIr,
    /// An nvJitLink index file.
    Index,
    /// A number neither linker documents.
    Other(u32),
}

impl InputKind {
    /// The driver linker's `CUjitInputType`.
    pub fn of_driver(kind: u32) -> InputKind {
        match kind {
            CU_JIT_INPUT_CUBIN => InputKind::Cubin,
            CU_JIT_INPUT_PTX => InputKind::Ptx,
            CU_JIT_INPUT_FATBINARY => InputKind::Fatbin,
            3 => InputKind::Object,
            4 => InputKind::Library,
            5 => InputKind::LtoIr,
            other => InputKind::Other(other),
        }
    }

    /// For the report.
    fn describe(self) -> String {
        match self {
            InputKind::Cubin => "a cubin".into(),
            InputKind::Ptx => "PTX".into(),
            InputKind::Fatbin => "a fat binary without PTX".into(),
            InputKind::Object => "an object".into(),
            InputKind::Library => "a library".into(),
            InputKind::LtoIr => "LTO-IR".into(),
            InputKind::Index => "an index file".into(),
            InputKind::Other(n) => format!("an input of type {n}"),
        }
    }
}

/// A link's inputs, in the order added.
pub type LinkInputs = Vec<(InputKind, Vec<u8>)>;

/// The PTX a linked cubin was made from when the link had exactly one PTX input (a fat binary
/// input's PTX entry for the GPU counts, `fatbin::ptx_for_gpu`), and where it came from: `found`
/// when there is one, else why not, naming `link`; what else the link joined is named beside it.
/// One module holds one PTX text, so a link of several PTX inputs has none.
pub fn link_ptx(inputs: &[(InputKind, Vec<u8>)], gpu_sm: u32, found: &str, link: &str) -> (Option<String>, String) {
    let mut texts = Vec::new();
    let mut others = Vec::new();
    for (kind, bytes) in inputs {
        match *kind {
            InputKind::Ptx => {
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                texts.push(String::from_utf8_lossy(&bytes[..end]).into_owned());
            }
            InputKind::Fatbin => {
                let ptx = fatbin::parse(bytes).ok().and_then(|entries| {
                    fatbin::ptx_for_gpu(&entries, gpu_sm).ok().and_then(|e| e.ptx().map(str::to_string))
                });
                match ptx {
                    Some(text) => texts.push(text),
                    None => others.push(kind.describe()),
                }
            }
            other => others.push(other.describe()),
        }
    }
    let beside =
        if others.is_empty() { String::new() } else { format!(" (also linked, not kept: {})", others.join(", ")) };
    match texts.len() {
        1 => (texts.pop(), format!("{found}{beside}")),
        0 => (None, format!("none: {link} had no PTX input{beside}")),
        n => (None, format!("none: {link} joined {n} PTX inputs, which one module cannot hold{beside}")),
    }
}

/// Every cubin the driver's linker handed out (`cuLinkComplete`), with the inputs it was linked
/// from. The driver's copy lives only until `cuLinkDestroy`: numba (through cuda.core) copies it,
/// destroys the link and loads the copy. So a loaded image is the link's output when the memory it
/// starts at holds the very bytes the linker handed out, wherever they are.
#[derive(Default)]
pub struct LinkOutputs(Vec<(Vec<u8>, LinkInputs)>);

impl LinkOutputs {
    pub fn add(&mut self, cubin: Vec<u8>, inputs: LinkInputs) {
        if !cubin.is_empty() && !self.0.iter().any(|(made, _)| *made == cubin) {
            self.0.push((cubin, inputs));
        }
    }

    /// The image at `image` as the output of the link that made its bytes, when one did.
    ///
    /// # Safety
    /// `image` is a code image the driver just accepted.
    pub unsafe fn image_at(&self, image: *const c_void, via: &str) -> Option<ModuleImage> {
        if self.0.is_empty() {
            return None;
        }
        let readable = crate::readable::readable_from(image as usize);
        let (made, inputs) = self.0.iter().find(|(made, _)| {
            // SAFETY: the process's mappings make `readable` bytes at `image` readable.
            made.len() <= readable && unsafe { std::slice::from_raw_parts(image as *const u8, made.len()) } == &made[..]
        })?;
        Some(ModuleImage::linked(via, made.clone(), inputs.clone()))
    }
}

/// The PTX this process made for the cubin at `cubin` (`len` bytes) with NVRTC (its program
/// compiled again now), a `ptxas` child or nvJitLink, NUL-terminated and kept for the life of the
/// process; NULL when none of them made it. For recap's CPU driver, which cannot run a GPU cubin
/// and loads its PTX in its place.
///
/// # Safety
/// `cubin` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn recap_cubin_ptx(cubin: *const u8, len: usize) -> *const c_char {
    if cubin.is_null() {
        return std::ptr::null();
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(cubin, len) };
    let ptx = crate::nvrtc::ptx_c(bytes);
    if !ptx.is_null() {
        return ptx;
    }
    let ptx = crate::ptxas::ptx_c(bytes);
    if !ptx.is_null() {
        return ptx;
    }
    crate::nvjitlink::ptx_c(bytes)
}

/// PTX handed to recap's CPU driver, NUL-terminated and kept for the life of the process.
static HANDED: std::sync::Mutex<Vec<std::ffi::CString>> = std::sync::Mutex::new(Vec::new());

/// `text` NUL-terminated and kept for the life of the process (one copy of each text), for
/// [`recap_cubin_ptx`]; NULL when it holds a NUL.
pub fn keep_c(text: String) -> *const c_char {
    let Ok(text) = std::ffi::CString::new(text) else { return std::ptr::null() };
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(same) = handed.iter().find(|t| **t == text) {
        return same.as_ptr();
    }
    // The CString's heap buffer does not move when the vector grows.
    let p = text.as_ptr();
    handed.push(text);
    p
}

/// A fat binary at `image`, whose readable memory is `bytes`: referenced where it lies inside a
/// loaded object, else copied.
///
/// # Safety
/// `bytes` are the readable bytes at `image`.
unsafe fn fatbin_source(image: *const c_void, bytes: &[u8]) -> Result<ImageSource, ImageError> {
    let len = fatbin::container_len(bytes).ok_or(ImageError::FatbinHeader)?;
    if len > bytes.len() as u64 {
        return Err(ImageError::FatbinPastEnd { len, readable: bytes.len() });
    }
    let len = len as usize;
    let mut info: libc::Dl_info = std::mem::zeroed();
    if libc::dladdr(image, &mut info) != 0 && !info.dli_fname.is_null() {
        return Ok(ImageSource::Static { ptr: image as usize, len });
    }
    Ok(ImageSource::Owned(bytes[..len].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &[u8] = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n\0";

    #[test]
    fn a_fat_binarys_ptx_is_kept_only_for_a_gpu_it_could_have_run_on() {
        // nvcc 13: sm_80 and sm_90 machine code, compute_90 PTX.
        let path =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fatbin/nvcc13-sm80-sm90-ptx90-size.fatbin"));
        let parsed = |sm| {
            let mut image = ModuleImage::from_file(path, "cuModuleLoad").unwrap();
            image.gpu_sm = sm;
            let p = image.prepare().unwrap();
            (p.ptx.is_some(), p.ptx_from.clone())
        };
        assert_eq!(parsed(90), (true, "fat binary (compute_90)".to_string()));
        assert_eq!(parsed(0), (true, "fat binary (compute_90)".to_string()), "no context: the most portable");
        let (has_ptx, from) = parsed(80);
        assert!(!has_ptx && from.contains("compute_90") && from.contains("sm_80"), "{from}");
    }

    #[test]
    fn a_links_one_ptx_input_is_kept_and_what_else_it_joined_is_named() {
        let cubin = b"\x7fELF a linked cubin".to_vec();
        let mut one = ModuleImage::linked("cuModuleLoadData", cubin.clone(), vec![(InputKind::Ptx, PTX.to_vec())]);
        let parsed = one.prepare().unwrap();
        assert_eq!(
            (parsed.ptx.as_deref().map(str::len), parsed.ptx_from.as_str()),
            (Some(PTX.len() - 1), "the link's PTX input")
        );
        let with_library = vec![(InputKind::Ptx, PTX.to_vec()), (InputKind::of_driver(4), b"!<arch>\n".to_vec())];
        let mut two = ModuleImage::linked("cuModuleLoadData", cubin.clone(), with_library);
        assert_eq!(two.prepare().unwrap().ptx_from, "the link's PTX input (also linked, not kept: a library)");
        let both = vec![(InputKind::Ptx, PTX.to_vec()), (InputKind::Ptx, PTX.to_vec())];
        let mut three = ModuleImage::linked("cuModuleLoadData", cubin, both);
        let parsed = three.prepare().unwrap();
        assert_eq!(parsed.ptx, None);
        assert_eq!(parsed.ptx_from, "none: the link joined 2 PTX inputs, which one module cannot hold");
    }

    #[test]
    fn a_loaded_image_is_a_links_output_only_when_it_holds_all_the_bytes_the_linker_handed_out() {
        let mut outputs = LinkOutputs::default();
        let made = b"\x7fELF the linker's output, then more of it".to_vec();
        outputs.add(made.clone(), vec![(InputKind::Ptx, PTX.to_vec())]);
        // A copy elsewhere is the same image.
        let copy = made.clone();
        // SAFETY: `copy` is live and readable for its length.
        let found = unsafe { outputs.image_at(copy.as_ptr() as *const c_void, "cuModuleLoadData") }.unwrap();
        assert_eq!(found.via, "cuModuleLoadData (linked)");
        // Its first bytes alone are not: the copy of another link's output that starts the same.
        let mut other = made[..20].to_vec();
        other.extend_from_slice(&[b'x'; 40]);
        // SAFETY: as above.
        assert!(unsafe { outputs.image_at(other.as_ptr() as *const c_void, "cuModuleLoadData") }.is_none());
    }
}

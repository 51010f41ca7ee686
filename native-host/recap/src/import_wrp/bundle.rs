//! A Warp capture sent as one file: a zip or tar (optionally gzip-compressed) holding `NAME.wrp`,
//! `NAME_modules/`, and optionally `ptx/` (the AOT PTX, as `--ptx-from`) and `expected/BINDING.npy`
//! (as `--expected`), at its top or inside one folder. Unpacked into a temporary folder with every
//! path checked (no absolute paths, no `..`, no links) and the unpacked bytes bounded.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::{import_wrp, WrpImportError, WrpOptions, WrpSummary};

/// How a bundle is packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleKind {
    Zip,
    Tar,
    TarGz,
}

impl BundleKind {
    /// From a request's content type: `application/zip`, `application/x-tar`, `application/gzip`.
    pub fn from_content_type(ct: &str) -> Option<BundleKind> {
        match ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
            "application/zip" | "application/x-zip-compressed" => Some(BundleKind::Zip),
            "application/x-tar" => Some(BundleKind::Tar),
            "application/gzip" | "application/x-gzip" | "application/x-compressed-tar" => Some(BundleKind::TarGz),
            _ => None,
        }
    }
}

/// Most entries a bundle may hold.
const MAX_ENTRIES: usize = 100_000;

fn bad(reason: impl Into<String>) -> WrpImportError {
    WrpImportError::Bundle(reason.into())
}

/// The path an entry unpacks to inside `root`, or why it may not.
fn place(root: &Path, name: &Path) -> Result<PathBuf, WrpImportError> {
    let mut out = root.to_path_buf();
    for c in name.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return Err(bad(format!("the entry {} leaves the bundle's folder", name.display()))),
        }
    }
    Ok(out)
}

/// Copies an entry's bytes to `path`, counting them against `left`.
fn unpack(mut src: impl Read, path: &Path, left: &mut u64, limit: u64) -> Result<(), WrpImportError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| WrpImportError::Io { path: dir.to_path_buf(), error })?;
    }
    let mut file =
        std::fs::File::create(path).map_err(|error| WrpImportError::Io { path: path.to_path_buf(), error })?;
    let copied = std::io::copy(&mut (&mut src).take(*left + 1), &mut file)
        .map_err(|e| bad(format!("reading {}: {e}", path.display())))?;
    if copied > *left {
        return Err(bad(format!("the bundle unpacks to more than {limit} bytes")));
    }
    *left -= copied;
    Ok(())
}

/// Unpacks `bundle` into `root`, at most `limit` bytes in all.
fn unpack_all(bundle: &Path, kind: BundleKind, root: &Path, limit: u64) -> Result<(), WrpImportError> {
    let file = std::fs::File::open(bundle).map_err(|error| WrpImportError::Io { path: bundle.to_path_buf(), error })?;
    let mut left = limit;
    match kind {
        BundleKind::Zip => {
            let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip file: {e}")))?;
            if zip.len() > MAX_ENTRIES {
                return Err(bad(format!("{} entries: a bundle holds at most {MAX_ENTRIES}", zip.len())));
            }
            for i in 0..zip.len() {
                let entry = zip.by_index(i).map_err(|e| bad(format!("zip entry {i}: {e}")))?;
                let Some(name) = entry.enclosed_name() else {
                    return Err(bad(format!(
                        "the entry {} leaves the bundle's folder",
                        entry.name().unwrap_or_default()
                    )));
                };
                let path = place(root, &name)?;
                if entry.is_dir() {
                    std::fs::create_dir_all(&path).map_err(|error| WrpImportError::Io { path, error })?;
                } else if entry.is_file() {
                    unpack(entry, &path, &mut left, limit)?;
                } else {
                    return Err(bad(format!("the entry {} is a link, which a bundle may not hold", name.display())));
                }
            }
        }
        BundleKind::Tar | BundleKind::TarGz => {
            let reader: Box<dyn Read> = match kind {
                BundleKind::TarGz => Box::new(flate2::read::GzDecoder::new(file)),
                _ => Box::new(file),
            };
            let mut tar = tar::Archive::new(reader);
            let entries = tar.entries().map_err(|e| bad(format!("not a tar file: {e}")))?;
            for (i, entry) in entries.enumerate() {
                if i >= MAX_ENTRIES {
                    return Err(bad(format!("a bundle holds at most {MAX_ENTRIES} entries")));
                }
                let entry = entry.map_err(|e| bad(format!("tar entry {i}: {e}")))?;
                let name = entry.path().map_err(|e| bad(format!("tar entry {i}: {e}")))?.into_owned();
                let path = place(root, &name)?;
                match entry.header().entry_type() {
                    tar::EntryType::Directory => {
                        std::fs::create_dir_all(&path).map_err(|error| WrpImportError::Io { path, error })?
                    }
                    tar::EntryType::Regular | tar::EntryType::Continuous => unpack(entry, &path, &mut left, limit)?,
                    // pax headers and the like carry no file.
                    tar::EntryType::XHeader | tar::EntryType::XGlobalHeader | tar::EntryType::GNULongName => {}
                    other => {
                        return Err(bad(format!(
                            "the entry {} is a {other:?}, which a bundle may not hold",
                            name.display()
                        )))
                    }
                }
            }
        }
    }
    Ok(())
}

/// Where the parts of an unpacked bundle are.
struct Parts {
    wrp: PathBuf,
    ptx: Option<PathBuf>,
    expected: Vec<(String, PathBuf)>,
}

fn find_parts(root: &Path) -> Result<Parts, WrpImportError> {
    // The .wrp is at the top or inside one folder.
    let list = |dir: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        v.sort();
        v
    };
    let top = list(root);
    let mut wrps: Vec<PathBuf> =
        top.iter().filter(|p| p.extension().is_some_and(|e| e == "wrp") && p.is_file()).cloned().collect();
    if wrps.is_empty() {
        for dir in top.iter().filter(|p| p.is_dir()) {
            wrps.extend(list(dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "wrp") && p.is_file()));
        }
    }
    let wrp = match wrps.len() {
        1 => wrps.remove(0),
        0 => return Err(bad("the bundle holds no .wrp file (at its top or inside one folder)")),
        n => {
            let names: Vec<String> =
                wrps.iter().map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string()).collect();
            return Err(bad(format!(
                "the bundle holds {n} .wrp files ({}): send one capture per upload",
                names.join(", ")
            )));
        }
    };
    let dir = wrp.parent().unwrap_or(root).to_path_buf();
    let ptx = Some(dir.join("ptx")).filter(|p| p.is_dir());
    let mut expected = Vec::new();
    for f in list(&dir.join("expected")) {
        if f.extension().is_some_and(|e| e == "npy") {
            if let Some(stem) = f.file_stem().and_then(|s| s.to_str()) {
                expected.push((stem.to_string(), f.clone()));
            }
        }
    }
    Ok(Parts { wrp, ptx, expected })
}

/// Imports the capture in `bundle` into the archive `out` (`work` is a scratch folder of its own).
/// Gives the summary and the `.wrp` file's name.
pub fn import_bundle(
    bundle: &Path,
    kind: BundleKind,
    work: &Path,
    out: &Path,
    limit: u64,
) -> Result<(WrpSummary, String), WrpImportError> {
    let root = work.join("bundle");
    unpack_all(bundle, kind, &root, limit)?;
    let parts = find_parts(&root)?;
    let options = WrpOptions { ptx_from: parts.ptx, expected: parts.expected, ..Default::default() };
    let summary = import_wrp(&parts.wrp, &options, out)?;
    let name = parts.wrp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok((summary, name))
}

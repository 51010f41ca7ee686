//! A Warp capture sent as one file: a zip or tar (optionally gzip-compressed) holding `NAME.wrp`,
//! `NAME_modules/`, and optionally `ptx/` (the AOT PTX, as `--ptx-from`) and `expected/BINDING.npy`
//! (as `--expected`), at its top or inside one folder. Unpacked into a temporary folder with every
//! path checked (no absolute paths, no `..`, no links) and the unpacked bytes bounded: a tar's every
//! byte (headers, long names and pax records included), a zip's inflated contents. Names in errors
//! are cut short.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use shared::replay::ReplayLimits;

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
/// Longest GNU long name a tar entry may carry (Linux's `PATH_MAX`).
const MAX_LONG_NAME: u64 = 4096;
/// Largest pax extended header a tar entry may carry (what real archivers write is a few hundred
/// bytes: a path, times, ids).
const MAX_PAX_HEADER: u64 = 64 << 10;
/// How much of an entry's name an error message shows.
const SHOWN_NAME: usize = 200;

fn bad(reason: impl Into<String>) -> WrpImportError {
    WrpImportError::Bundle(reason.into())
}

/// An entry's name as an error shows it: the first [`SHOWN_NAME`] characters, then an ellipsis,
/// so that a refusal never echoes a name the size of the upload.
fn shown(name: &str) -> String {
    match name.char_indices().nth(SHOWN_NAME) {
        Some((cut, _)) => format!("{:?}...", &name[..cut]),
        None => format!("{name:?}"),
    }
}

/// The path an entry named `name` unpacks to inside `root`, or why it may not: absolute names,
/// drive letters, `..` and NUL bytes are refused, `/` and `\` both separate components.
fn place(root: &Path, name: &str) -> Result<PathBuf, WrpImportError> {
    let leaves = || bad(format!("the entry {} leaves the bundle's folder", shown(name)));
    if name.contains('\0') || name.starts_with(['/', '\\']) {
        return Err(leaves());
    }
    let mut out = root.to_path_buf();
    for part in name.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return Err(leaves()),
            // `C:`, `C:x`: a Windows drive, absolute or relative to that drive's folder.
            p if p.len() >= 2 && p.as_bytes()[1] == b':' && p.as_bytes()[0].is_ascii_alphabetic() => {
                return Err(leaves())
            }
            p => out.push(p),
        }
    }
    if out == root {
        return Err(bad(format!("the entry {} has no name", shown(name))));
    }
    if name.len() as u64 > MAX_LONG_NAME || name.split(['/', '\\']).any(|part| part.len() > 255) {
        return Err(bad(format!("the entry {} has a name longer than a file system takes", shown(name))));
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
        return Err(too_big(limit));
    }
    *left -= copied;
    Ok(())
}

fn too_big(limit: u64) -> WrpImportError {
    bad(format!("the bundle unpacks to more than {limit} bytes"))
}

/// A reader that fails once more than `left` bytes came through it: every byte of a tar stream
/// (headers, long names, pax records, padding, contents) counts against the unpack limit, so no
/// record the tar format lets a sender size can make the reader hold or skip more than that.
struct Bounded<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = buf.len().min(usize::try_from(self.left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..room])?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(format!("the bundle unpacks to more than {} bytes", self.limit)));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A tar entry's whole contents when they are at most `max` bytes (metadata records only).
fn small_record(entry: &mut impl Read, size: u64, max: u64, what: &str, i: usize) -> Result<Vec<u8>, WrpImportError> {
    if size > max {
        return Err(bad(format!("tar entry {i}: a {what} of {size} bytes (at most {max})")));
    }
    let mut out = Vec::with_capacity(size as usize);
    entry.take(max).read_to_end(&mut out).map_err(|e| bad(format!("tar entry {i}: {e}")))?;
    Ok(out)
}

/// Unpacks a tar stream into `root`. Entries are read raw: GNU long names and pax headers are
/// read here, each bounded, and applied to the entry they describe.
fn unpack_tar(reader: impl Read, root: &Path, limit: u64) -> Result<(), WrpImportError> {
    let mut left = limit;
    let mut tar = tar::Archive::new(Bounded { inner: reader, left: limit, limit });
    let entries = tar.entries().map_err(|e| bad(format!("not a tar file: {e}")))?.raw(true);
    let mut long_name: Option<String> = None;
    let mut pax_path: Option<String> = None;
    let mut pax_size: Option<u64> = None;
    for (i, entry) in entries.enumerate() {
        if i >= MAX_ENTRIES {
            return Err(bad(format!("a bundle holds at most {MAX_ENTRIES} entries")));
        }
        let mut entry = entry.map_err(|e| bad(format!("tar entry {i}: {e}")))?;
        let kind = entry.header().entry_type();
        let size = entry.size();
        match kind {
            tar::EntryType::GNULongName => {
                let mut bytes = small_record(&mut entry, size, MAX_LONG_NAME, "GNU long name", i)?;
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
                let name =
                    String::from_utf8(bytes).map_err(|_| bad(format!("tar entry {i}: a name that is not UTF-8")))?;
                long_name = Some(name);
                continue;
            }
            tar::EntryType::XHeader => {
                let bytes = small_record(&mut entry, size, MAX_PAX_HEADER, "pax header", i)?;
                for record in tar::PaxExtensions::new(&bytes) {
                    let record = record.map_err(|e| bad(format!("tar entry {i}: a pax record: {e}")))?;
                    match record.key() {
                        Ok("path") => {
                            let value = record
                                .value()
                                .map_err(|_| bad(format!("tar entry {i}: a pax path that is not UTF-8")))?;
                            pax_path = Some(value.to_string());
                        }
                        Ok("size") => {
                            let value = record.value().ok().and_then(|v| v.parse::<u64>().ok());
                            pax_size = Some(
                                value.ok_or_else(|| bad(format!("tar entry {i}: a pax size that is not a number")))?,
                            );
                        }
                        _ => {}
                    }
                }
                continue;
            }
            // A global pax header describes the archive, not a file.
            tar::EntryType::XGlobalHeader => continue,
            _ => {}
        }
        let name = match (pax_path.take(), long_name.take()) {
            (Some(name), _) | (None, Some(name)) => name,
            (None, None) => String::from_utf8(entry.header().path_bytes().into_owned())
                .map_err(|_| bad(format!("tar entry {i}: a name that is not UTF-8")))?,
        };
        // Read raw, the entry's size is its header's: a pax size that says otherwise would make
        // this reader and another disagree about where the next entry starts.
        if pax_size.take().is_some_and(|s| s != size) {
            return Err(bad(format!("tar entry {i} ({}): its pax size and its header disagree", shown(&name))));
        }
        let path = place(root, &name)?;
        match kind {
            tar::EntryType::Directory => {
                std::fs::create_dir_all(&path).map_err(|error| WrpImportError::Io { path, error })?
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => unpack(entry, &path, &mut left, limit)?,
            other => {
                return Err(bad(format!("the entry {} is a {other:?}, which a bundle may not hold", shown(&name))))
            }
        }
    }
    Ok(())
}

/// Unpacks the bundle `bundle` (a file, or any bytes: the fuzz target's) into `root`, at most
/// `limit` bytes in all.
pub fn unpack_bundle(
    bundle: impl Read + Seek,
    kind: BundleKind,
    root: &Path,
    limit: u64,
) -> Result<(), WrpImportError> {
    match kind {
        BundleKind::Zip => unpack_zip(bundle, root, limit),
        BundleKind::Tar => unpack_tar(std::io::BufReader::new(bundle), root, limit),
        BundleKind::TarGz => unpack_tar(flate2::read::GzDecoder::new(std::io::BufReader::new(bundle)), root, limit),
    }
}

/// Unpacks a zip file into `root`. Its central directory is part of the upload (bounded by the
/// upload limit); each entry's inflated bytes count against the unpack limit as they come.
fn unpack_zip(file: impl Read + Seek, root: &Path, limit: u64) -> Result<(), WrpImportError> {
    let mut left = limit;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip file: {e}")))?;
    if zip.len() > MAX_ENTRIES {
        return Err(bad(format!("{} entries: a bundle holds at most {MAX_ENTRIES}", zip.len())));
    }
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| bad(format!("zip entry {i}: {e}")))?;
        let name = entry.name().map_err(|e| bad(format!("zip entry {i}: {e}")))?.to_string();
        let path = place(root, &name)?;
        if entry.is_dir() {
            std::fs::create_dir_all(&path).map_err(|error| WrpImportError::Io { path, error })?;
        } else if entry.is_file() {
            unpack(entry, &path, &mut left, limit)?;
        } else {
            return Err(bad(format!("the entry {} is a link, which a bundle may not hold", shown(&name))));
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

/// Imports the capture in `bundle` into the archive `out` (`work` is a scratch folder of its own),
/// unpacking at most `limit` bytes and refusing regions over `limits`. Gives the summary and the
/// `.wrp` file's name.
pub fn import_bundle(
    bundle: &Path,
    kind: BundleKind,
    work: &Path,
    out: &Path,
    limit: u64,
    limits: ReplayLimits,
) -> Result<(WrpSummary, String), WrpImportError> {
    let root = work.join("bundle");
    let file = std::fs::File::open(bundle).map_err(|error| WrpImportError::Io { path: bundle.to_path_buf(), error })?;
    unpack_bundle(file, kind, &root, limit)?;
    let parts = find_parts(&root)?;
    let options = WrpOptions { ptx_from: parts.ptx, expected: parts.expected, limits, ..Default::default() };
    let summary = import_wrp(&parts.wrp, &options, out)?;
    let name = parts.wrp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok((summary, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unpacked(kind: BundleKind, bytes: Vec<u8>, limit: u64) -> (tempfile::TempDir, Result<(), WrpImportError>) {
        let dir = tempfile::tempdir().unwrap();
        let result = unpack_bundle(std::io::Cursor::new(bytes), kind, &dir.path().join("b"), limit);
        (dir, result)
    }

    #[test]
    fn long_names_and_pax_paths_still_name_their_entries() {
        let long = format!("cap/{}/x.wrp", "d".repeat(150));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(4);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, &long, &b"WRP1"[..]).unwrap();
        // A pax path record, as Python's tarfile writes one for a name ustar cannot hold.
        let pax_name = format!("cap/{}/y.npy", "e".repeat(120));
        let body = format!(" path={pax_name}\n");
        let mut len = body.len();
        while format!("{len}{body}").len() != len {
            len = format!("{len}{body}").len();
        }
        let record = format!("{len}{body}");
        let mut h = tar::Header::new_ustar();
        h.set_path("PaxHeader/short").unwrap();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(record.len() as u64);
        h.set_cksum();
        b.append(&h, record.as_bytes()).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("short").unwrap();
        h.set_size(2);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, &b"ok"[..]).unwrap();
        let (dir, result) = unpacked(BundleKind::Tar, b.into_inner().unwrap(), 1 << 20);
        result.unwrap();
        assert_eq!(std::fs::read(dir.path().join("b").join(&long)).unwrap(), b"WRP1");
        assert_eq!(std::fs::read(dir.path().join("b").join(&pax_name)).unwrap(), b"ok");
        assert!(!dir.path().join("b/short").exists(), "the pax path named the entry");
    }

    #[test]
    fn every_byte_of_a_tar_counts_and_metadata_records_are_bounded() {
        // A long name bigger than any path: refused before it is read.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_path("././@LongLink").unwrap();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(10_000);
        h.set_cksum();
        b.append(&h, &vec![b'a'; 10_000][..]).unwrap();
        let (_dir, result) = unpacked(BundleKind::Tar, b.into_inner().unwrap(), 1 << 20);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("GNU long name of 10000 bytes (at most 4096)"), "{e}");
        // Headers count: a thousand empty files are 512 KiB of tar, over a limit of 64 KiB.
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..1000 {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, format!("f{i}"), &[][..]).unwrap();
        }
        let (_dir, result) = unpacked(BundleKind::Tar, b.into_inner().unwrap(), 64 << 10);
        let e = result.unwrap_err().to_string();
        assert!(e.contains("unpacks to more than 65536 bytes"), "{e}");
    }

    #[test]
    fn names_that_leave_the_folder_are_refused_and_shown_short() {
        let root = Path::new("/r");
        for name in ["/abs", "\\abs", "a/../../b", "..", "C:/x", "c:x", "a\0b"] {
            let e = place(root, name).unwrap_err().to_string();
            assert!(e.contains("leaves the bundle's folder"), "{name:?}: {e}");
        }
        assert_eq!(place(root, "./a//b\\c").unwrap(), Path::new("/r/a/b/c"));
        let e = place(root, &format!("../{}", "x".repeat(100_000))).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains("xxx\"..."), "{} bytes", e.len());
        // A zip entry with an absolute name.
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        z.start_file("/etc/cap.wrp", zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut z, b"WRP1").unwrap();
        let (_dir, result) = unpacked(BundleKind::Zip, z.finish().unwrap().into_inner(), 1 << 20);
        assert!(result.unwrap_err().to_string().contains("\"/etc/cap.wrp\" leaves"));
    }
}

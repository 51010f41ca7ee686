//! PTX for a cubin that a `ptxas` child of the program compiled: XLA and Triton run the `ptxas`
//! binary on a temporary PTX file and load the cubin it writes.
//!
//! The audit library, which `LD_AUDIT` loads into that `ptxas` too, keeps each run's input in the
//! capture's folder (`RECAP_PTXAS_DIR`) under the BLAKE3 of the cubin it made (`HASH.ptx`, with the
//! input's name in `HASH.from`), or says why it did not (`HASH.refused`; `note-PID` for a run that
//! left no cubin): `native-host/audit/src/ptxas.rs`. A loaded cubin's bytes hashed the same way find
//! its PTX, as the Triton caches are matched by the cubin's bytes (`ptx_sources.rs`).

use std::ffi::c_char;
use std::path::Path;

/// What `ptxas` left for a cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The PTX it compiled, and the name of the file it read it from.
    Ptx { text: String, input: String },
    /// Why the run's PTX is not the cubin's, in the audit library's words.
    Refused(String),
}

/// What the `ptxas` runs of this capture left for `cubin`, if one of them made it.
pub fn kept(cubin: &[u8]) -> Option<Kept> {
    let dir = crate::request::get().ptxas_dir.as_deref()?;
    kept_in(dir, cubin)
}

fn kept_in(dir: &Path, cubin: &[u8]) -> Option<Kept> {
    let hash = blake3::hash(cubin).to_hex();
    if let Ok(text) = std::fs::read_to_string(dir.join(format!("{hash}.ptx"))) {
        let input = std::fs::read_to_string(dir.join(format!("{hash}.from"))).unwrap_or_default();
        return Some(Kept::Ptx { text, input });
    }
    std::fs::read_to_string(dir.join(format!("{hash}.refused"))).ok().map(Kept::Refused)
}

/// What a module whose cubin `ptxas` made says about its PTX, for the report's `ptx_from`.
pub fn ptx_from(kept: &Kept) -> String {
    match kept {
        Kept::Ptx { input, .. } => format!("ptxas ({input})"),
        Kept::Refused(why) => format!("none: {why}"),
    }
}

/// Adds a note to `report` for every `ptxas` run that left no cubin to key its PTX by.
pub fn notes(report: &mut shared::capture::Report) {
    let Some(dir) = crate::request::get().ptxas_dir.as_deref() else { return };
    for note in notes_in(dir) {
        report.note(note);
    }
}

fn notes_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut notes: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_name().as_encoded_bytes().starts_with(b"note-"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    notes.sort();
    notes
}

/// The PTX `ptxas` compiled `cubin` from, NUL-terminated and kept for the life of the process;
/// NULL when no `ptxas` run of this capture made it.
pub fn ptx_c(cubin: &[u8]) -> *const c_char {
    let Some(Kept::Ptx { text, .. }) = kept(cubin) else { return std::ptr::null() };
    crate::images::keep_c(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_finds_what_ptxas_kept_under_its_hash_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("recap-ptxas-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cubin = b"\x7fELF the cubin ptxas wrote".as_slice();
        let hash = blake3::hash(cubin).to_hex();
        assert_eq!(kept_in(&dir, cubin), None);
        std::fs::write(dir.join(format!("{hash}.refused")), "ptxas a.ptx b.ptx: two inputs").unwrap();
        let refused = kept_in(&dir, cubin).unwrap();
        assert_eq!(ptx_from(&refused), "none: ptxas a.ptx b.ptx: two inputs");
        std::fs::write(dir.join(format!("{hash}.ptx")), ".version 8.0\n.target sm_90\n").unwrap();
        std::fs::write(dir.join(format!("{hash}.from")), "/tmp/tempfile-1").unwrap();
        let found = kept_in(&dir, cubin).unwrap();
        assert_eq!(ptx_from(&found), "ptxas (/tmp/tempfile-1)");
        // One byte more is another cubin.
        assert_eq!(kept_in(&dir, b"\x7fELF the cubin ptxas wrote\0"), None);
        std::fs::write(dir.join("note-12"), "ptxas -o x.cubin: no input file was named; nothing kept").unwrap();
        assert_eq!(notes_in(&dir), ["ptxas -o x.cubin: no input file was named; nothing kept"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

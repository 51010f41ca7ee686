//! Any bytes as a Warp capture bundle, unpacked as a zip, a tar and a gzip-compressed tar by
//! `recap::import_wrp::unpack_bundle` under a small limit: it unpacks or refuses, never panics,
//! writes nothing outside its folder (no link, no path above it) and never more than the limit.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use recap::import_wrp::{unpack_bundle, BundleKind};

/// What one unpack may write: small, so that a bomb is found quickly and costs little.
const LIMIT: u64 = 1 << 20;

/// Bytes of the regular files under `dir`; panics on anything else but folders.
fn written(dir: &Path) -> u64 {
    let Ok(listing) = std::fs::read_dir(dir) else { return 0 };
    let mut total = 0;
    for entry in listing {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        assert!(!kind.is_symlink(), "a link was unpacked: {}", entry.path().display());
        total += if kind.is_dir() { written(&entry.path()) } else { entry.metadata().unwrap().len() };
    }
    total
}

fuzz_target!(|data: &[u8]| {
    // tmpfs where there is one: the target writes files on every run.
    let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let dir = tempfile::tempdir_in(base).unwrap();
    for (kind, name) in [(BundleKind::Zip, "zip"), (BundleKind::Tar, "tar"), (BundleKind::TarGz, "tgz")] {
        let root = dir.path().join(name).join("bundle");
        let _ = unpack_bundle(std::io::Cursor::new(data), kind, &root, LIMIT);
        assert!(written(&dir.path().join(name)) <= LIMIT, "{name}: more than the limit was written");
        // Only the bundle's own folder appears beside it.
        for entry in std::fs::read_dir(dir.path().join(name)).into_iter().flatten() {
            assert_eq!(entry.unwrap().file_name(), "bundle", "{name}: something was written outside");
        }
    }
    let top: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(top.iter().all(|n| n == "zip" || n == "tar" || n == "tgz"), "{top:?}");
});

//! The local cache of a remote blob store (`cache/` of a replica's or worker's data folder), kept
//! under a size: the least recently used archives leave first.
//!
//! Recency is the file's modification time, set again on every use. A file used in the last
//! [`IN_USE`] is never removed, whatever the size: a replay may be about to open the path it was
//! just given (a worker hands it to a `recap session-worker` process). A replay that already has the
//! file open or mapped keeps reading it after its removal (Linux frees it at the last close).

use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long after its last use a cached archive is safe from removal.
pub const IN_USE: Duration = Duration::from_secs(600);

/// The default size of a cache, in bytes.
pub const DEFAULT_MAX: u64 = 20 << 30;

/// Marks `path` as used now (a cache hit).
pub fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Removes the least recently used `*.recap` files of `dir` until what is left is at most `max`
/// bytes, sparing those used within `in_use` of `now`. Returns the bytes left in the cache.
pub fn trim(dir: &Path, max: u64, in_use: Duration, now: SystemTime) -> std::io::Result<u64> {
    let mut files = Vec::new();
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if !meta.is_file() || entry.path().extension().is_none_or(|e| e != "recap") {
            continue;
        }
        total += meta.len();
        files.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), entry.path()));
    }
    if total <= max {
        return Ok(total);
    }
    files.sort();
    for (used, len, path) in files {
        if total <= max {
            break;
        }
        if now.duration_since(used).unwrap_or_default() < in_use {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), bytes = len, "cache over its size: removed the least recently used archive");
                total -= len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, len: usize, age_s: u64, now: SystemTime) {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(now - Duration::from_secs(age_s))
            .unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        n.sort();
        n
    }

    #[test]
    fn the_least_recently_used_leave_first_until_the_cache_fits() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        file(dir.path(), "old.recap", 400, 5000, now);
        file(dir.path(), "older.recap", 400, 9000, now);
        file(dir.path(), "recent.recap", 400, 1000, now);
        file(dir.path(), "notes.txt", 10_000, 99_999, now);
        let left = trim(dir.path(), 900, IN_USE, now).unwrap();
        assert_eq!(left, 800);
        assert_eq!(names(dir.path()), ["notes.txt", "old.recap", "recent.recap"]);
        // Under its size, nothing more goes.
        assert_eq!(trim(dir.path(), 900, IN_USE, now).unwrap(), 800);
        assert_eq!(names(dir.path()).len(), 3);
    }

    #[test]
    fn archives_in_use_stay_even_over_the_size_and_a_touch_makes_one_recent() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        file(dir.path(), "a.recap", 500, 60, now);
        file(dir.path(), "b.recap", 500, 5000, now);
        file(dir.path(), "c.recap", 500, 7000, now);
        touch(&dir.path().join("c.recap"));
        let left = trim(dir.path(), 100, IN_USE, SystemTime::now()).unwrap();
        assert_eq!(left, 1000, "a (used a minute ago) and c (just touched) are in use");
        assert_eq!(names(dir.path()), ["a.recap", "c.recap"]);
    }
}

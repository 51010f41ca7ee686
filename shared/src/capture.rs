//! What `recap capture` and its interposer (the `libcuda.so.1` it puts in front of the driver)
//! agree on: the range to record, the environment that carries the request, and the capture
//! report that comes back (printed by the command, kept in the archive's `capture.report`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The environment variables that carry a capture request to the interposer.
pub mod env {
    /// The real driver's path.
    pub const REAL_DRIVER: &str = "RECAP_REAL_LIBCUDA";
    /// The range, as [`Range::parse`](super::Range::parse) reads it.
    pub const RANGE: &str = "RECAP_CAPTURE_RANGE";
    /// The archive to write.
    pub const OUT: &str = "RECAP_CAPTURE_OUT";
    /// Where to write the report (JSON).
    pub const REPORT: &str = "RECAP_CAPTURE_REPORT";
    /// The command line, for the archive's metadata.
    pub const COMMAND: &str = "RECAP_CAPTURE_COMMAND";
    /// The interposer's path, for the audit library (`LD_AUDIT`) that sends a `dlopen` of the
    /// driver by absolute path to it; set only when that library is in place.
    pub const INTERPOSER: &str = "RECAP_INTERPOSER";
    /// `1`: record what launches of kernels without PTX write (`--record-effects`).
    pub const EFFECTS: &str = "RECAP_CAPTURE_EFFECTS";
    /// `1`: replays place regions at their captured addresses (`--place-regions`).
    pub const PLACE: &str = "RECAP_CAPTURE_PLACE";
    /// Where the audit library links the NVRTC the program opens, for the interposer to forward
    /// to (the interposer's `nvrtc.rs`).
    pub const REAL_NVRTC: &str = "RECAP_REAL_LIBNVRTC";
}

/// Which part of the program is recorded (`recap capture --range`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    /// Between `cuProfilerStart` and `cuProfilerStop` (the first such pair).
    Profiler,
    /// From launch `skip + 1` for `count` launches.
    Launches { skip: u64, count: u64 },
    /// From the first call to the end of the program (or of its context).
    All,
    /// Between the push and pop (or start and end) of the first NVTX range with this message, as
    /// Nsight's `--capture-range=nvtx`.
    Nvtx { message: String, domain: NvtxDomain },
}

/// Which NVTX domain an `nvtx:` range is looked for in (Nsight's `NAME@DOMAIN`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvtxDomain {
    /// `NAME`: the default domain (`nvtxRangePushA`, a NULL domain handle).
    Default,
    /// `NAME@DOMAIN`: the domain `nvtxDomainCreateA(DOMAIN)` made.
    Named(String),
    /// `NAME@*`: any domain.
    Any,
}

impl Range {
    /// Parses `profiler`, `launches:SKIP:COUNT`, `all` or `nvtx:NAME[@DOMAIN]`.
    pub fn parse(text: &str) -> Result<Range, String> {
        match text {
            "profiler" => Ok(Range::Profiler),
            "all" => Ok(Range::All),
            _ => {
                if let Some(rest) = text.strip_prefix("nvtx:") {
                    // The domain follows the last `@`, so a message may hold one.
                    let (message, domain) = match rest.rsplit_once('@') {
                        Some((m, "*")) => (m, NvtxDomain::Any),
                        Some((m, d)) if !d.is_empty() => (m, NvtxDomain::Named(d.to_string())),
                        Some(_) => return Err(format!("range {text:?}: the domain after @ is empty")),
                        None => (rest, NvtxDomain::Default),
                    };
                    if message.is_empty() {
                        return Err(format!("range {text:?}: want nvtx:NAME or nvtx:NAME@DOMAIN"));
                    }
                    return Ok(Range::Nvtx { message: message.to_string(), domain });
                }
                let Some(rest) = text.strip_prefix("launches:") else {
                    return Err(format!(
                        "range {text:?} is not one of profiler, launches:SKIP:COUNT, all, nvtx:NAME[@DOMAIN]"
                    ));
                };
                let (skip, count) =
                    rest.split_once(':').ok_or_else(|| format!("range {text:?}: want launches:SKIP:COUNT"))?;
                let skip = skip.parse().map_err(|_| format!("range {text:?}: SKIP {skip:?} is not a number"))?;
                let count: u64 =
                    count.parse().map_err(|_| format!("range {text:?}: COUNT {count:?} is not a number"))?;
                if count == 0 {
                    return Err(format!("range {text:?}: COUNT must be at least 1"));
                }
                Ok(Range::Launches { skip, count })
            }
        }
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Range::Profiler => f.write_str("profiler"),
            Range::All => f.write_str("all"),
            Range::Launches { skip, count } => write!(f, "launches:{skip}:{count}"),
            Range::Nvtx { message, domain: NvtxDomain::Default } => write!(f, "nvtx:{message}"),
            Range::Nvtx { message, domain: NvtxDomain::Named(d) } => write!(f, "nvtx:{message}@{d}"),
            Range::Nvtx { message, domain: NvtxDomain::Any } => write!(f, "nvtx:{message}@*"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    pub name: String,
    /// The call that loaded its code.
    pub module: String,
    pub launches: u64,
    pub ptx: bool,
    /// Where its PTX came from, or why there is none.
    pub ptx_from: String,
    /// The SM architectures it has machine code for in the archive.
    pub cubins: Vec<u32>,
    /// Where its parameter layout came from.
    pub layout_from: String,
}

/// The typed layouts a capture's archive got from one CPU interpreter replay of its PTX
/// (`check::infer`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TypesReport {
    /// Regions with a typed layout, and the rest (written by no PTX store: host data, library
    /// kernels without PTX, copies).
    pub typed_regions: u64,
    pub untyped_regions: u64,
    /// Launches the interpreter passed over, and the first few with the reason.
    pub skipped_ops: u64,
    pub skipped: Vec<String>,
    /// Why inference ended early (its time or instruction budget), if it did.
    pub stopped: Option<String>,
    /// Why no types were learnt at all, if none were.
    pub error: Option<String>,
    pub seconds: f64,
}

/// The program's own spread (`recap capture --repeat-range N`): the range run N more times on the
/// capture's device, and the stretches where those runs and the program's disagreed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RepeatReport {
    pub runs: u32,
    /// Typed stretches whose spread the archive now records, and the widest in ulps.
    pub stretches: u64,
    pub max_ulps: u64,
    /// Untyped stretches that differed too (kept exact: no type measures them).
    pub untyped_differing: u64,
    /// Why nothing was recorded, if so.
    pub error: Option<String>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub range: String,
    /// What ended the range.
    pub ended_at: String,
    /// The GPU it ran on (`90` for sm_90).
    pub sm: u32,
    /// Ops recorded, by kind.
    pub ops: BTreeMap<String, u64>,
    pub kernels: Vec<KernelReport>,
    pub regions: u64,
    /// Device memory read at first touch (the initial state); the final state is as much again.
    pub bytes_snapshotted: u64,
    pub upload_bytes: u64,
    /// Driver calls made inside the range that the recorder passed through without recording,
    /// with how often.
    pub passed_through: BTreeMap<String, u64>,
    /// What makes the archive an incomplete record of the range, with how often.
    pub incomplete: BTreeMap<String, u64>,
    pub notes: Vec<String>,
    /// Whether a `dlopen` of the driver by absolute path was sent to the interposer too
    /// (`LD_AUDIT`), besides the driver found by name on `LD_LIBRARY_PATH`.
    #[serde(default)]
    pub audit: bool,
    /// Launches of kernels without PTX whose writes were recorded (`--record-effects`), and the
    /// bytes they wrote.
    #[serde(default)]
    pub recorded_effects: u64,
    #[serde(default)]
    pub effects_bytes: u64,
    /// Why replays place regions at their captured addresses (`capture.placement`), if they do.
    #[serde(default)]
    pub placement: Option<String>,
    /// The element types learnt after the program ended (`recap capture` infers them unless told
    /// not to), if that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<TypesReport>,
    /// What `--repeat-range` measured, if asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<RepeatReport>,
    /// The archive written, if one was.
    pub archive: Option<String>,
    /// Why no archive was written.
    pub error: Option<String>,
}

impl Report {
    pub fn new(range: &Range) -> Report {
        Report { range: range.to_string(), ..Report::default() }
    }

    pub fn count(&mut self, op: &str) {
        *self.ops.entry(op.to_string()).or_default() += 1;
    }

    pub fn incomplete(&mut self, what: String) {
        *self.incomplete.entry(what).or_default() += 1;
    }

    pub fn note(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.notes.contains(&what) {
            self.notes.push(what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvtx_ranges_parse_with_and_without_a_domain_and_print_back() {
        for (text, message, domain) in [
            ("nvtx:step", "step", NvtxDomain::Default),
            ("nvtx:train step@trainer", "train step", NvtxDomain::Named("trainer".into())),
            ("nvtx:a@b@c", "a@b", NvtxDomain::Named("c".into())),
            ("nvtx:step@*", "step", NvtxDomain::Any),
        ] {
            let range = Range::parse(text).unwrap();
            assert_eq!(range, Range::Nvtx { message: message.into(), domain });
            assert_eq!(range.to_string(), text);
        }
        for bad in ["nvtx:", "nvtx:@d", "nvtx:step@", "nvtx"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
        assert!(Range::parse("nvtx-ish").unwrap_err().contains("nvtx:NAME[@DOMAIN]"));
    }
}

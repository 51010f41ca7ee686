//! What `recap capture` and its interposer (the `libcuda.so.1` it puts in front of the driver)
//! agree on: the capture request (the range to record, where the archive and the report go) and
//! the environment that carries it, and the capture report that comes back (printed by the
//! command, kept in the archive's `capture.report`).
//!
//! The request crosses a process boundary as environment variables ([`env`]): the command writes
//! them with [`Request::write_env`] and the interposer reads them once with [`Request::from_env`],
//! so the names and their meanings live here and nowhere else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

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
    /// Where the audit library links the nvJitLink the program opens, for the interposer to
    /// forward to (the interposer's `nvjitlink.rs`).
    pub const REAL_NVJITLINK: &str = "RECAP_REAL_LIBNVJITLINK";
    /// The folder where the audit library, loaded into every `ptxas` the program runs, keeps each
    /// compile's input PTX by the hash of the cubin it made (the interposer's `ptxas.rs`).
    pub const PTXAS_DIR: &str = "RECAP_PTXAS_DIR";
}

/// The archive a request without [`env::OUT`] writes, in the program's working folder.
pub const DEFAULT_OUTPUT: &str = "capture.recap";

/// What one capture is asked to do: everything the interposer takes from `recap capture` (through
/// the environment) or from the program's own control calls (the Python package's in-process
/// `recap.capture`, which builds the same value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Which part of the program is recorded.
    pub range: Range,
    /// The archive to write.
    pub output: PathBuf,
    /// Where the report goes as JSON, if anywhere.
    pub report: Option<PathBuf>,
    /// The command line, kept in the archive's metadata.
    pub command: Option<String>,
    /// Record what launches of kernels without PTX write (`--record-effects`).
    pub record_effects: bool,
    /// Replays place regions at their captured addresses (`--place-regions`).
    pub place_regions: bool,
    /// The real driver to forward to.
    pub driver: Option<PathBuf>,
    /// The interposer's own path, present when the audit library (`LD_AUDIT`) sends a `dlopen` of
    /// the driver by absolute path to the interposer too.
    pub interposer: Option<PathBuf>,
    /// The NVRTC the program opens, where the audit library linked it for the interposer.
    pub real_nvrtc: Option<PathBuf>,
    /// The nvJitLink the program opens, where the audit library linked it for the interposer.
    pub real_nvjitlink: Option<PathBuf>,
    /// Where the audit library keeps the PTX of every `ptxas` run the program starts.
    pub ptxas_dir: Option<PathBuf>,
}

impl Request {
    /// A request for `range` into `output`, everything else left out.
    pub fn new(range: Range, output: PathBuf) -> Request {
        Request {
            range,
            output,
            report: None,
            command: None,
            record_effects: false,
            place_regions: false,
            driver: None,
            interposer: None,
            real_nvrtc: None,
            real_nvjitlink: None,
            ptxas_dir: None,
        }
    }

    /// Writes the request into `cmd`'s environment, one variable of [`env`] per field. Fields left
    /// out (`None`, `false`) set nothing, so the program sees whatever its parent had there.
    pub fn write_env(&self, cmd: &mut Command) {
        cmd.env(env::RANGE, self.range.to_string()).env(env::OUT, &self.output);
        let paths = [
            (env::REPORT, &self.report),
            (env::REAL_DRIVER, &self.driver),
            (env::INTERPOSER, &self.interposer),
            (env::REAL_NVRTC, &self.real_nvrtc),
            (env::REAL_NVJITLINK, &self.real_nvjitlink),
            (env::PTXAS_DIR, &self.ptxas_dir),
        ];
        for (name, path) in paths {
            if let Some(path) = path {
                cmd.env(name, path);
            }
        }
        if let Some(command) = &self.command {
            cmd.env(env::COMMAND, command);
        }
        for (name, on) in [(env::EFFECTS, self.record_effects), (env::PLACE, self.place_regions)] {
            if on {
                cmd.env(name, "1");
            }
        }
    }

    /// Reads a request from an environment (`var` looks a variable up: `std::env::var_os` in the
    /// interposer). A missing range is `profiler` and a missing output [`DEFAULT_OUTPUT`]. A range
    /// that does not parse comes back as the error beside the request, which has
    /// [`Range::Profiler`] in its place: the interposer runs inside someone else's program and
    /// says so rather than fail it.
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> (Request, Option<RangeError>) {
        let text = |name| var(name).and_then(|v| v.into_string().ok());
        let flag = |name| var(name).is_some_and(|v| v == "1");
        let (range, bad) = match text(env::RANGE) {
            None => (Range::Profiler, None),
            Some(text) => match Range::parse(&text) {
                Ok(range) => (range, None),
                Err(e) => (Range::Profiler, Some(e)),
            },
        };
        let request = Request {
            range,
            output: var(env::OUT).map_or_else(|| PathBuf::from(DEFAULT_OUTPUT), PathBuf::from),
            report: var(env::REPORT).map(PathBuf::from),
            command: text(env::COMMAND),
            record_effects: flag(env::EFFECTS),
            place_regions: flag(env::PLACE),
            driver: var(env::REAL_DRIVER).map(PathBuf::from),
            interposer: var(env::INTERPOSER).map(PathBuf::from),
            real_nvrtc: var(env::REAL_NVRTC).map(PathBuf::from),
            real_nvjitlink: var(env::REAL_NVJITLINK).map(PathBuf::from),
            ptxas_dir: var(env::PTXAS_DIR).map(PathBuf::from),
        };
        (request, bad)
    }
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
    /// Opened and closed by the program's own calls to the interposer's control API (the Python
    /// package's `with recap.capture(...)`); printed `in-process`, which `--range` does not take.
    InProcess,
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

/// Why a range's text is not a range ([`Range::parse`]); each names the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("range {text:?} is not one of profiler, launches:SKIP:COUNT, all, nvtx:NAME[@DOMAIN]")]
    Unknown { text: String },
    #[error("range {text:?}: the domain after @ is empty")]
    EmptyDomain { text: String },
    #[error("range {text:?}: want nvtx:NAME or nvtx:NAME@DOMAIN")]
    NoMessage { text: String },
    #[error("range {text:?}: want launches:SKIP:COUNT")]
    NoCount { text: String },
    /// `field` is `SKIP` or `COUNT`.
    #[error("range {text:?}: {field} {value:?} is not a number")]
    NotANumber { text: String, field: &'static str, value: String },
    #[error("range {text:?}: COUNT must be at least 1")]
    ZeroCount { text: String },
}

impl Range {
    /// Parses `profiler`, `launches:SKIP:COUNT`, `all` or `nvtx:NAME[@DOMAIN]`: the one reading
    /// of a range's text, for the command line and the interposer alike.
    pub fn parse(text: &str) -> Result<Range, RangeError> {
        let owned = || text.to_string();
        match text {
            "profiler" => Ok(Range::Profiler),
            "all" => Ok(Range::All),
            _ => {
                if let Some(rest) = text.strip_prefix("nvtx:") {
                    // The domain follows the last `@`, so a message may hold one.
                    let (message, domain) = match rest.rsplit_once('@') {
                        Some((m, "*")) => (m, NvtxDomain::Any),
                        Some((m, d)) if !d.is_empty() => (m, NvtxDomain::Named(d.to_string())),
                        Some(_) => return Err(RangeError::EmptyDomain { text: owned() }),
                        None => (rest, NvtxDomain::Default),
                    };
                    if message.is_empty() {
                        return Err(RangeError::NoMessage { text: owned() });
                    }
                    return Ok(Range::Nvtx { message: message.to_string(), domain });
                }
                let Some(rest) = text.strip_prefix("launches:") else {
                    return Err(RangeError::Unknown { text: owned() });
                };
                let (skip, count) = rest.split_once(':').ok_or_else(|| RangeError::NoCount { text: owned() })?;
                let number = |field, value: &str| {
                    value.parse::<u64>().map_err(|_| RangeError::NotANumber {
                        text: owned(),
                        field,
                        value: value.into(),
                    })
                };
                let (skip, count) = (number("SKIP", skip)?, number("COUNT", count)?);
                if count == 0 {
                    return Err(RangeError::ZeroCount { text: owned() });
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
            Range::InProcess => f.write_str("in-process"),
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
        assert!(Range::parse("nvtx-ish").unwrap_err().to_string().contains("nvtx:NAME[@DOMAIN]"));
    }

    #[test]
    fn bad_ranges_say_what_and_where() {
        for (text, message) in [
            ("nvtx-ish", r#"range "nvtx-ish" is not one of profiler, launches:SKIP:COUNT, all, nvtx:NAME[@DOMAIN]"#),
            ("nvtx:step@", r#"range "nvtx:step@": the domain after @ is empty"#),
            ("nvtx:@d", r#"range "nvtx:@d": want nvtx:NAME or nvtx:NAME@DOMAIN"#),
            ("launches:3", r#"range "launches:3": want launches:SKIP:COUNT"#),
            ("launches:x:1", r#"range "launches:x:1": SKIP "x" is not a number"#),
            ("launches:1:-2", r#"range "launches:1:-2": COUNT "-2" is not a number"#),
            ("launches:3:0", r#"range "launches:3:0": COUNT must be at least 1"#),
            // What the control API's range prints is no `--range` value.
            (
                "in-process",
                r#"range "in-process" is not one of profiler, launches:SKIP:COUNT, all, nvtx:NAME[@DOMAIN]"#,
            ),
        ] {
            assert_eq!(Range::parse(text).unwrap_err().to_string(), message);
        }
        assert_eq!(Range::parse("launches:3:2"), Ok(Range::Launches { skip: 3, count: 2 }));
    }

    /// The variables a command's environment holds, as `std::env::var_os` would read them in the
    /// program it runs (the parent's own environment left out).
    fn env_of(cmd: &Command) -> impl Fn(&str) -> Option<OsString> {
        let vars: BTreeMap<String, Option<OsString>> =
            cmd.get_envs().map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(OsString::from))).collect();
        move |name| vars.get(name).cloned().flatten()
    }

    #[test]
    fn a_request_written_into_a_command_reads_back_the_same() {
        let full = Request {
            range: Range::Nvtx { message: "train step".into(), domain: NvtxDomain::Named("trainer".into()) },
            output: PathBuf::from("/tmp/out dir/step.recap"),
            report: Some(PathBuf::from("/tmp/shim/report.json")),
            command: Some("python train.py --steps 3".into()),
            record_effects: true,
            place_regions: true,
            driver: Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")),
            interposer: Some(PathBuf::from("/opt/recap/librecap_intercept.so")),
            real_nvrtc: Some(PathBuf::from("/tmp/shim/real-nvrtc.so")),
            real_nvjitlink: Some(PathBuf::from("/tmp/shim/real-nvjitlink.so")),
            ptxas_dir: Some(PathBuf::from("/tmp/shim/ptxas")),
        };
        let bare = Request::new(Range::Launches { skip: 10, count: 5 }, PathBuf::from("capture.recap"));
        for request in [full, bare] {
            let mut cmd = Command::new("true");
            request.write_env(&mut cmd);
            assert_eq!(Request::from_env(env_of(&cmd)), (request.clone(), None));
        }
    }

    #[test]
    fn an_empty_environment_asks_for_the_profiler_range_and_a_bad_range_says_why() {
        let (request, bad) = Request::from_env(|_| None);
        assert_eq!((request, bad), (Request::new(Range::Profiler, PathBuf::from(DEFAULT_OUTPUT)), None));

        let (request, bad) = Request::from_env(|name| {
            (name == env::RANGE || name == env::EFFECTS)
                .then(|| OsString::from(if name == env::RANGE { "launches:1" } else { "yes" }))
        });
        assert_eq!(request.range, Range::Profiler);
        // Only `1` turns a switch on.
        assert!(!request.record_effects);
        assert_eq!(bad, Some(RangeError::NoCount { text: "launches:1".into() }));
    }
}

//! `ptxas` run as a child of the captured program: its input PTX kept by the hash of the cubin it
//! wrote, so that the interposer can give that cubin its PTX when the program loads it.
//!
//! XLA and Triton compile PTX by running the `ptxas` binary on a temporary file, read the cubin it
//! writes, delete both and load the cubin's bytes: the driver never sees PTX. `LD_AUDIT` passes to
//! every child, so this library is loaded into that `ptxas` too. There it reads its own command
//! line (`/proc/self/cmdline`; the program is `ptxas` when `/proc/self/exe`'s file name starts
//! with `ptxas`), and when `ptxas` exits (this library's `.fini_array`, which the dynamic linker
//! runs for the audit namespace too, at `_dl_fini`) it keeps, in the folder `recap capture` made
//! for the run (`RECAP_PTXAS_DIR`):
//! - `HASH.ptx`, the input PTX, and `HASH.from`, the input's name, where `HASH` is the BLAKE3 of
//!   the cubin in hex;
//! - `HASH.refused`, why the cubin has no PTX, when the run cannot give it one (several inputs:
//!   one module cannot hold them);
//! - `note-PID`, a line for the capture report, when a run leaves no cubin to key anything by (no
//!   output file at exit, no input file, PTX from a string).
//!
//! Nothing changes for `ptxas` or the program: no output, no exit code, no signal; every failure
//! here is written as a note or dropped. Each file appears whole (written under a temporary name,
//! then renamed), as the interposer may read the folder while other compiles run.

use std::path::{Path, PathBuf};

/// The folder `recap capture` names (`shared::capture::env::PTXAS_DIR`).
const DIR_VAR: &str = "RECAP_PTXAS_DIR";

/// `ptxas`'s output when no `-o` names one.
const DEFAULT_OUTPUT: &str = "elf.o";

/// Options that take their value as the next argument when not written `--name=value` (both
/// spellings of each, without their dashes): anything else that is not an option is an input.
const TAKES_VALUE: &[&str] = &[
    "arch",
    "gpu-name",
    "o",
    "output-file",
    "maxrregcount",
    "O",
    "opt-level",
    "e",
    "entry",
    "m",
    "machine",
    "dlcm",
    "def-load-cache",
    "dscm",
    "def-store-cache",
    "flcm",
    "force-load-cache",
    "fscm",
    "force-store-cache",
    "fmad",
    "allow-expensive-optimizations",
    "pic",
    "position-independent-code",
    "optf",
    "options-file",
    "split-compile",
    "func-maxrregcount",
    "device-function-maxrregcount",
    "maxntid",
    "minnctapersm",
    "regUsageLevel",
    "register-usage-level",
    "knob",
];

/// One `ptxas` command line, read.
#[derive(Debug, PartialEq, Eq)]
pub struct Compile {
    pub input: PathBuf,
    pub output: PathBuf,
    /// `-arch`/`--gpu-name`, for the notes.
    pub arch: Option<String>,
}

/// Why a `ptxas` run's PTX is not kept.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No input file: nothing to keep (PTX on standard input is not read back).
    NoInput,
    /// `-` as the input: standard input, which `ptxas` consumed.
    Stdin,
    /// `--input-as-string`: PTX on the command line, one module per string.
    FromString,
    /// Several inputs make one cubin, which one PTX module cannot stand for.
    SeveralInputs(Vec<String>),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoInput => write!(f, "no input file was named"),
            Refusal::Stdin => write!(f, "its input is standard input, which is not kept"),
            Refusal::FromString => write!(f, "its PTX came as --input-as-string, which is not kept"),
            Refusal::SeveralInputs(names) => {
                write!(
                    f,
                    "it compiled {} PTX inputs ({}) into one cubin, which one module cannot hold",
                    names.len(),
                    names.join(", ")
                )
            }
        }
    }
}

/// What a `ptxas` command line (without the program's name) asks for: `Ok(None)` for a run that
/// compiles nothing (`--version`, `--help`).
pub fn parse_args(args: &[String]) -> Result<Option<Compile>, (Refusal, Option<PathBuf>)> {
    let mut inputs = Vec::new();
    let mut output = None;
    let mut arch = None;
    let mut from_string = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "-" {
            inputs.push(arg.clone());
            continue;
        }
        let Some(option) = arg.strip_prefix('-') else {
            inputs.push(arg.clone());
            continue;
        };
        let option = option.strip_prefix('-').unwrap_or(option);
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None if TAKES_VALUE.contains(&option) || matches!(option, "ias" | "input-as-string") => {
                (option, args.next().cloned())
            }
            None => (option, None),
        };
        match name {
            "version" | "V" | "help" | "h" => return Ok(None),
            "o" | "output-file" => output = value.map(PathBuf::from),
            "arch" | "gpu-name" => arch = value,
            "ias" | "input-as-string" => from_string = true,
            _ => {}
        }
    }
    let output_path = output.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_OUTPUT));
    if from_string {
        return Err((Refusal::FromString, Some(output_path)));
    }
    match inputs.as_slice() {
        [] => Err((Refusal::NoInput, output)),
        [one] if one == "-" => Err((Refusal::Stdin, Some(output_path))),
        [one] => Ok(Some(Compile { input: PathBuf::from(one), output: output_path, arch })),
        _ => Err((Refusal::SeveralInputs(inputs), Some(output_path))),
    }
}

/// Whether this process is `ptxas`, by its executable's file name.
fn is_ptxas() -> bool {
    std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|exe| exe.file_name().map(|n| n.as_encoded_bytes().starts_with(b"ptxas")))
        .unwrap_or(false)
}

/// This process's arguments after its name.
fn own_args() -> Option<Vec<String>> {
    let line = std::fs::read("/proc/self/cmdline").ok()?;
    let mut args: Vec<String> = line.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    if args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    (!args.is_empty()).then(|| args.split_off(1))
}

/// Writes `bytes` as `name` in `dir`, whole or not at all.
fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, dir.join(name)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The hex BLAKE3 of the file at `path`, if it is a readable regular file.
fn hash_of(path: &Path) -> Option<String> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    std::fs::read(path).ok().map(|bytes| blake3::hash(&bytes).to_hex().to_string())
}

/// Whether `text` reads as a PTX module: every module declares its version and its target.
fn is_ptx(text: &str) -> bool {
    text.contains(".version") && text.contains(".target")
}

/// What this `ptxas` run leaves in `dir`, once it has finished.
fn keep(dir: &Path, args: &[String]) {
    let note = |what: String| put(dir, &format!("note-{}", std::process::id()), what.as_bytes());
    let shown = args.join(" ");
    let compile = match parse_args(args) {
        Ok(Some(run)) => run,
        Ok(None) => return,
        Err((why, output)) => {
            match output.as_deref().and_then(hash_of) {
                Some(hash) => put(dir, &format!("{hash}.refused"), format!("ptxas {shown}: {why}").as_bytes()),
                None => note(format!("ptxas {shown}: {why}; nothing kept")),
            }
            return;
        }
    };
    let Some(hash) = hash_of(&compile.output) else {
        note(format!(
            "ptxas {shown}: no output file {} at its exit (it failed, or wrote elsewhere); nothing kept",
            compile.output.display()
        ));
        return;
    };
    match std::fs::read_to_string(&compile.input) {
        Ok(text) if is_ptx(&text) => {
            put(dir, &format!("{hash}.ptx"), text.as_bytes());
            put(dir, &format!("{hash}.from"), compile.input.display().to_string().as_bytes());
        }
        Ok(_) => put(
            dir,
            &format!("{hash}.refused"),
            format!("ptxas {shown}: its input {} is not PTX text", compile.input.display()).as_bytes(),
        ),
        Err(e) => put(
            dir,
            &format!("{hash}.refused"),
            format!("ptxas {shown}: its input {} could not be read at exit: {e}", compile.input.display()).as_bytes(),
        ),
    }
}

/// Runs as the process exits: in a `ptxas` under `recap capture`, keeps what it compiled.
extern "C" fn at_exit() {
    // Nothing may unwind into the dynamic linker, nor change how ptxas ends.
    let _ = std::panic::catch_unwind(|| {
        let Some(dir) = crate::env(DIR_VAR) else { return };
        if !dir.is_dir() || !is_ptxas() {
            return;
        }
        if let Some(args) = own_args() {
            keep(&dir, &args);
        }
    });
}

/// The dynamic linker runs the functions in `.fini_array` of every object it loaded, the audit
/// namespace's included, when the process exits through `exit` (a return from `main`).
#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn xla_and_triton_command_lines_name_their_input_output_and_architecture() {
        let xla = parse_args(&args("/tmp/tempfile-vm-1-a -o /tmp/tempfile-vm-1-b -arch=sm_90a --warn-on-spills"));
        let want = Compile {
            input: "/tmp/tempfile-vm-1-a".into(),
            output: "/tmp/tempfile-vm-1-b".into(),
            arch: Some("sm_90a".into()),
        };
        assert_eq!(xla, Ok(Some(want)));
        let triton = parse_args(&args("-lineinfo --fmad=false -v --gpu-name=sm_90a /tmp/k.ptx -o /tmp/k.ptx.o"))
            .unwrap()
            .unwrap();
        assert_eq!((triton.input.to_str(), triton.output.to_str()), (Some("/tmp/k.ptx"), Some("/tmp/k.ptx.o")));
        // A value given as the next argument is not an input; ptxas's default output is elf.o.
        let spaced = parse_args(&args("--gpu-name sm_80 --maxrregcount 64 -O 3 k.ptx")).unwrap().unwrap();
        assert_eq!((spaced.input, spaced.output, spaced.arch), ("k.ptx".into(), "elf.o".into(), Some("sm_80".into())));
    }

    #[test]
    fn runs_that_compile_nothing_are_passed_over_and_the_rest_refused_with_why() {
        assert_eq!(parse_args(&args("--version")), Ok(None));
        assert_eq!(
            parse_args(&args("-arch=sm_90 a.ptx b.ptx -o ab.cubin")).unwrap_err().0.to_string(),
            "it compiled 2 PTX inputs (a.ptx, b.ptx) into one cubin, which one module cannot hold"
        );
        let (why, output) = parse_args(&args("-arch=sm_90 -o out.cubin")).unwrap_err();
        assert_eq!((why, output), (Refusal::NoInput, Some("out.cubin".into())));
        assert_eq!(parse_args(&args("- -o o.cubin")).unwrap_err().0, Refusal::Stdin);
        assert_eq!(parse_args(&args("--input-as-string .version -o o.cubin")).unwrap_err().0, Refusal::FromString);
    }
}

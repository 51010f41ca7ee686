//! The CPU driver (`recap-cpudriver`, a `libcuda.so.1` on `shared::ptx`): the C programs of
//! `tests/capture/programs/`, compiled with the system `cc` against it, run on it and check their
//! own results; these tests check their output too, and what the driver says of errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use recap_tests::{cdylib, repo_root};

/// A C program built against the CPU driver, in a temporary folder that also holds the driver as
/// `libcuda.so.1` and `libcuda.so` (links to the cdylib), which it runs with.
pub(crate) struct Program {
    dir: tempfile::TempDir,
    pub(crate) exe: PathBuf,
}

impl Program {
    /// Compiles `tests/capture/programs/NAME.c`, with `link` after it (`-lcuda`, `-ldl`).
    pub(crate) fn build(name: &str, link: &[&str]) -> Program {
        let dir = tempfile::tempdir().unwrap();
        let driver = cdylib("recap-cpudriver", "recap_cpudriver");
        for alias in ["libcuda.so.1", "libcuda.so"] {
            std::os::unix::fs::symlink(&driver, dir.path().join(alias)).unwrap();
        }
        let programs = repo_root().join("tests/capture/programs");
        let exe = dir.path().join(name);
        let out = Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(programs.join(format!("{name}.c")))
            .arg("-L")
            .arg(dir.path())
            .args(link)
            .output()
            .expect("running cc");
        assert!(out.status.success(), "cc {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
        Program { dir, exe }
    }

    /// The folder holding the program and the CPU driver's two names.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.exe).args(args).env("LD_LIBRARY_PATH", self.dir.path()).output().unwrap()
    }

    /// Runs it and returns its stdout, which must be all it printed: a failure shows stderr.
    fn run_ok(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{} {args:?}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            name(&self.exe),
            out.status
        );
        (stdout, stderr)
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn name(exe: &Path) -> String {
    exe.file_name().unwrap().to_string_lossy().into_owned()
}

// The checksums hash the programs' result buffers, whose every value is exact in float arithmetic,
// so the real driver on a GPU prints the same lines.

#[test]
fn cpudriver_runs_a_program_linked_against_libcuda() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let (stdout, stderr) = program.run_ok(&[]);
    assert_eq!(stdout, "driver_api: ok 21edac99ad72ea56\n", "stderr:\n{stderr}");
    assert!(stderr.is_empty(), "a clean run prints nothing on stderr:\n{stderr}");
}

#[test]
fn cpudriver_runs_a_program_that_resolves_the_driver_like_the_runtime() {
    let program = Program::build("runtime_style", &["-ldl"]);
    let (stdout, stderr) = program.run_ok(&[]);
    assert_eq!(stdout, "runtime_style: ok c5f9b8d206b50347\n", "stderr:\n{stderr}");
    assert!(stderr.is_empty(), "a clean run prints nothing on stderr:\n{stderr}");
}

#[test]
fn cpudriver_launch_through_a_bad_pointer_is_an_illegal_address_naming_the_kernel() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let (stdout, stderr) = program.run_ok(&["bad-pointer"]);
    assert_eq!(stdout, "bad-pointer: 700 CUDA_ERROR_ILLEGAL_ADDRESS\n");
    assert!(
        stderr.contains("recap-cpudriver: kernel `scale_add`") && stderr.contains("address 0x10"),
        "stderr names the kernel and the address:\n{stderr}"
    );
}

#[test]
fn cpudriver_module_that_is_not_ptx_is_an_error_not_a_crash() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let (stdout, stderr) = program.run_ok(&["garbage-module"]);
    // Text that is no module at all is an invalid image; PTX the JIT cannot compile, invalid PTX.
    assert_eq!(stdout, "garbage-module: 200 218\n");
    assert!(stderr.contains("recap-cpudriver: module load: PTX line 6:") && stderr.contains("frobnicate"), "{stderr}");
}

#[test]
fn cpudriver_get_proc_address_of_an_unknown_or_too_new_symbol_is_not_found() {
    let program = Program::build("runtime_style", &["-ldl"]);
    let (stdout, _) = program.run_ok(&["unknown-symbol"]);
    // CUDA_ERROR_NOT_FOUND with CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, then VERSION_NOT_SUFFICIENT
    // (cuLibraryLoadData is CUDA 12.0, asked for as 11.8), the function pointer cleared both times.
    assert_eq!(stdout, "unknown-symbol: 500 1 null\ntoo-new: 500 2 null\n");
}

/// Every line `exit_paths` prints when the driver answers as a GPU's would.
const EXIT_PATHS: &str = "two threads: 0 0\nkey destructor: 1\ncuArrayCreate_v2: found\n\
                          cuArrayCreate_v2 returned a status: error\n\
                          after destroy: alloc 201, synchronize 201, current 0 null\n\
                          exit without teardown\nat exit: 0 11 14\n";

#[test]
fn cpudriver_answers_threads_destructors_calls_after_destroy_and_exit_without_panicking() {
    let program = Program::build("exit_paths", &["-lcuda", "-lpthread", "-ldl"]);
    let (stdout, stderr) = program.run_ok(&[]);
    assert_eq!(stdout, EXIT_PATHS, "stderr:\n{stderr}");
    assert!(stderr.is_empty(), "nothing on stderr, no panic above all:\n{stderr}");
}

#[test]
fn cpudriver_names_a_call_it_lacks_once_when_asked_to() {
    let program = Program::build("exit_paths", &["-lcuda", "-lpthread", "-ldl"]);
    let out =
        Command::new(&program.exe).env("LD_LIBRARY_PATH", program.dir()).env("RECAP_CPU_LOG", "1").output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, EXIT_PATHS);
    assert_eq!(
        stderr, "recap-cpudriver: cuArrayCreate_v2 is not implemented: it returns CUDA_ERROR_NOT_SUPPORTED\n",
        "one line for the call the driver lacks"
    );
}

#[test]
fn cpudriver_under_capture_of_everything_exits_without_panicking() {
    let program = Program::build("exit_paths", &["-lcuda", "-lpthread", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("exit_paths.recap");
    let out = crate::intercept::capture(&program, &["--range", "all", "-o", archive.to_str().unwrap()], &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.starts_with(EXIT_PATHS), "the program ran as without recap:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("internal error"), "stderr:\n{stderr}");
}

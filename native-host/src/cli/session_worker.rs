//! `recap session-worker`: replays one session for `recap serve`, which starts it, sends the job as
//! JSON on stdin and reads the session's messages as JSON lines on stdout. Not for people.

/// Replay one session for the host (used by recap itself)
#[derive(Clone, Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    die_with_the_host();
    recap_host::sessions::run_worker(std::io::stdin().lock(), std::io::stdout().lock())?;
    Ok(())
}

/// Makes the kernel end this worker when the host that started it dies (a `kill -9` of the host
/// must not leave an endless kernel spinning in an orphan).
#[cfg(target_os = "linux")]
fn die_with_the_host() {
    // SAFETY: prctl and getppid only read and set this process's own attributes.
    unsafe {
        let host = libc::getppid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The host may have died before the call above: then this process has been re-parented.
        if libc::getppid() != host {
            std::process::exit(1);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_the_host() {}

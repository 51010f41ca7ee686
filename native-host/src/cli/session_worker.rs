//! `recap session-worker`: replays one CUDA session for `recap serve`, which starts it, sends the
//! job as JSON on stdin and reads the session's messages as JSON lines on stdout. Not for people.

/// Replay one CUDA session for the host (used by recap itself)
#[derive(Clone, Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    recap::sessions::run_worker(std::io::stdin().lock(), std::io::stdout().lock())?;
    Ok(())
}

//! The `recap` command line. Each subcommand lives in `cli/<name>.rs`; this file only wires them up.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(name = "recap", version, about = "Capture GPU compute work once, replay it anywhere")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Capture(cli::capture::Args),
    ImportCase(cli::import_case::Args),
    ImportWrp(cli::import_wrp::Args),
    Inspect(cli::inspect::Args),
    Replay(cli::replay::Args),
    Run(cli::run::Args),
    Validate(cli::validate::Args),
    Extract(cli::extract::Args),
    Compare(cli::compare::Args),
    Diff(cli::diff::Args),
    Trim(cli::trim::Args),
    InferTypes(cli::infer_types::Args),
    Examples(cli::examples::Args),
    Serve(cli::serve::Args),
    Worker(cli::worker::Args),
    Bench(cli::bench::Args),
    #[command(hide = true)]
    CudaProbe(cli::cuda_probe::Args),
    #[command(hide = true)]
    SessionWorker(cli::session_worker::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // This executable is `recap`: a fault that takes the process's CUDA context is probed by
    // running its own `cuda-probe` command.
    recap::child_probe::install_for_this_executable();
    let result = match cli.command {
        Command::ImportCase(args) => cli::import_case::run(args),
        Command::ImportWrp(args) => cli::import_wrp::run(args),
        Command::Inspect(args) => cli::inspect::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Worker(args) => cli::worker::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::CudaProbe(args) => cli::cuda_probe::run(args),
        Command::SessionWorker(args) => cli::session_worker::run(args),
        Command::Validate(args) => return cli::validate::run(args),
        Command::Extract(args) => cli::extract::run(args),
        Command::Trim(args) => cli::trim::run(args),
        Command::InferTypes(args) => cli::infer_types::run(args),
        Command::Examples(args) => cli::examples::run(args),
        Command::Compare(args) => match cli::compare::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Diff(args) => match cli::diff::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Capture(args) => match cli::capture::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Replay(args) => match cli::replay::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Run(args) => match cli::run::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

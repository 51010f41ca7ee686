//! The `recap` subcommands, one module each; `main.rs` wires them into clap.

pub mod bench;
pub mod capture;
pub mod compare;
pub mod cuda_probe;
pub mod data;
pub mod diff;
pub mod examples;
pub mod extract;
pub mod import_case;
pub mod import_wrp;
pub mod infer_types;
pub mod inspect;
pub mod limits;
pub mod repeat_range;
pub mod replay;
pub mod run;
pub mod serve;
pub mod session_worker;
pub mod trim;
pub mod validate;
pub mod worker;

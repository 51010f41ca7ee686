//! End-to-end tests, one module per area.

mod archive;
mod cli;
mod gpu;

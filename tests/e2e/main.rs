//! End-to-end tests, one module per area.

mod archive;
mod browser;
mod capi;
mod capture;
mod cli;
mod cluster;
mod cpu;
mod cpudriver;
mod cpudriver_numba;
mod cpudriver_run;
mod debugging;
mod devices;
mod gpu;
mod hardening;
mod host;
mod hostile_input;
mod intercept;
mod intercept_audit;
mod intercept_edges;
mod intercept_effects;
mod intercept_graphs;
mod intercept_nvtx;
mod intercept_placed;
mod intercept_ptx;
mod verdicts;
mod wrp;

//! The recap viewer: the browser half of recap, compiled to wasm.
//!
//! The key design decision: the page parses archives itself with the same `shared` crate the host
//! uses, so a file dropped on the page is shown (and can be replayed) without ever being uploaded,
//! and what the page shows can never disagree with what the host reads. Everything the views show
//! is computed in [`model`] as plain Rust, tested natively; the `app` module (wasm only) turns it
//! into DOM with web-sys and wires events.

pub mod check_view;
pub mod graph;
pub mod model;
pub mod plot;
pub mod session;
pub mod timeline;

#[cfg(target_arch = "wasm32")]
mod app;

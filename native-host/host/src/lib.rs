//! recap's host: the archive store (blobs and an index), replay sessions run in worker
//! processes, and the HTTP and WebSocket server the web viewer talks to.

pub mod secrets;
pub mod server;
pub mod sessions;
pub mod store;

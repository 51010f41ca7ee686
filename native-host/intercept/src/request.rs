//! The capture request this process runs under (`shared::capture::Request`), read from the
//! environment once, the first time anything asks: the library's constructor, which needs the real
//! driver's path before any program code runs. The recorder's ranges, the real driver and NVRTC
//! and the archive writer all see that one value; the control API builds its own from it for each
//! range it opens (`control.rs`).

use std::sync::LazyLock;

use shared::capture::Request;

static REQUEST: LazyLock<Request> = LazyLock::new(|| {
    let (request, bad) = Request::from_env(|name| std::env::var_os(name));
    if let Some(e) = bad {
        // Inside someone else's program: the program goes on, and the range is the default one.
        eprintln!("recap capture: {e}; recording between cuProfilerStart and cuProfilerStop");
    }
    request
});

/// The request this process runs under.
pub fn get() -> &'static Request {
    &REQUEST
}

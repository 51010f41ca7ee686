//! A range still open when the program ends is written, however the program ends.
//!
//! `exit()` (and returning from `main`): glibc runs the exiting thread's thread-local destructors
//! first (`__call_tls_dtors`), then the atexit handlers, last registered first, then the loaded
//! libraries' destructors (`_dl_fini`). The handler here is registered when the range opens, after
//! the CUDA runtime registered its own teardown (at its initialisation), so it runs before that
//! teardown and before the driver's destructors, while the range's context is alive. But it runs
//! after the exiting thread's thread-locals are gone, the driver's record of that thread's current
//! context among them (a driver written in Rust panics on it; another may find no context). So
//! the end state is read on a thread started for it, whose thread-locals are fresh, with the
//! range's context pushed there (`State::finish`). It is started with `pthread_create` rather
//! than `std::thread`, whose spawn reads the spawning thread's own thread-locals.
//!
//! `_exit()` and `_Exit()` run no handler at all, so this library exports both: a call that binds
//! here (a program linked against the driver, which precedes libc in its lookup order) writes the
//! range, then makes libc's call. A program that binds libc's first (one that loads the driver
//! later with `dlopen`, as Python does for `os._exit`) still ends without the range written; an
//! in-process capture ends its range by call instead (`control.rs`).
//!
//! `abort()` raises SIGABRT: a handler installed when the range opens writes the range, then puts
//! back the handler that was there before and raises the signal again for it. Writing takes locks
//! and allocates, which a signal handler may not always do: `abort()` called while the heap's own
//! lock is held (a corrupted heap) would hang. An alarm ends the process after
//! [`WATCHDOG_SECONDS`] so that it dies, as it meant to, rather than hang; the recorder's own lock
//! is only tried, never waited on for long.
//!
//! Only the process that opened the range writes it: a child made by `fork` inherits these
//! handlers and the recording, but not the driver's contexts.

use std::ffi::{c_int, c_void, CStr};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use crate::record;

/// How long writing the range at `abort()` may take before the process is ended anyway.
const WATCHDOG_SECONDS: u32 = 20;

/// The process that opened the range.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// The SIGABRT disposition that was there before ours.
struct Previous(libc::sigaction);
// SAFETY: plain data (a handler address, a mask and flags), written once before it is read.
unsafe impl Send for Previous {}
unsafe impl Sync for Previous {}
static PREVIOUS_ABORT: OnceLock<Previous> = OnceLock::new();

/// Called as a range opens: notes this process as its owner and installs the handlers, once.
pub fn arm() {
    // SAFETY: no arguments.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    static ARMED: Once = Once::new();
    ARMED.call_once(|| {
        // SAFETY: a plain extern "C" fn; the sigaction structures are complete.
        unsafe {
            libc::atexit(at_exit);
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_abort as extern "C" fn(c_int) as usize;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGABRT, &ours, &mut previous) == 0 {
                let _ = PREVIOUS_ABORT.set(Previous(previous));
            }
        }
    });
}

/// Whether this process has a range open that it opened.
fn owns_open_range() -> bool {
    // SAFETY: no arguments.
    record::recording() && OWNER.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

extern "C" fn at_exit() {
    if !owns_open_range() {
        return;
    }
    extern "C" fn end(_: *mut c_void) -> *mut c_void {
        let _ = catch_unwind(|| record::end_open_range("the end of the program", None, || Some(record::state())));
        std::ptr::null_mut()
    }
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `end` takes no argument and returns nothing that is read.
    unsafe {
        if libc::pthread_create(&mut thread, std::ptr::null(), end, std::ptr::null_mut()) == 0 {
            libc::pthread_join(thread, std::ptr::null_mut());
        } else {
            end(std::ptr::null_mut());
        }
    }
}

/// Writes the range as the program ends by `how`, on this thread (whose thread-locals are alive),
/// trying the recorder's lock for up to a second: this thread itself may hold it.
fn end_abruptly(how: &str) {
    let note = format!("the program ended by {how}, which runs no exit handler: the range ended there");
    let ended = catch_unwind(|| {
        record::end_open_range(how, Some(&note), || {
            for _ in 0..100 {
                if let Some(st) = record::try_state() {
                    return Some(st);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        })
    });
    if !matches!(ended, Ok(true)) {
        eprintln!("recap capture: the program ended by {how} while the recorder was busy; the range was not written");
    }
}

extern "C" fn on_abort(_: c_int) {
    if owns_open_range() {
        // SAFETY: plain calls; the default SIGALRM action ends the process.
        unsafe {
            libc::signal(libc::SIGALRM, libc::SIG_DFL);
            libc::alarm(WATCHDOG_SECONDS);
        }
        end_abruptly("abort()");
        // SAFETY: no arguments.
        unsafe { libc::alarm(0) };
    }
    // SIGABRT is blocked while this runs, so the signal raised again arrives, for the handler that
    // was there before, once this returns.
    // SAFETY: a complete sigaction saved by `arm`.
    unsafe {
        match PREVIOUS_ABORT.get() {
            Some(previous) => libc::sigaction(libc::SIGABRT, &previous.0, std::ptr::null_mut()),
            None => libc::signal(libc::SIGABRT, libc::SIG_DFL) as c_int,
        };
        libc::raise(libc::SIGABRT);
    }
}

/// Makes libc's `name` call (the next definition after this library's), else the system call.
fn next_exit(name: &CStr, status: c_int) -> ! {
    // SAFETY: `name` is NUL-terminated; the symbol, when found, is libc's exit call of that name.
    unsafe {
        let next = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
        if !next.is_null() {
            let next: extern "C" fn(c_int) -> ! = std::mem::transmute(next);
            next(status);
        }
        libc::syscall(libc::SYS_exit_group, status);
    }
    unreachable!("exit_group returned")
}

#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    if owns_open_range() {
        end_abruptly("_exit()");
    }
    next_exit(c"_exit", status)
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    if owns_open_range() {
        end_abruptly("_Exit()");
    }
    next_exit(c"_Exit", status)
}

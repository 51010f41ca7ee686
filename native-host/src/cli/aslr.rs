//! Address-space layout randomisation, off where captured device addresses must come back.
//!
//! With unified addressing the CUDA driver puts device memory in the process's own address space,
//! in the range where the kernel also maps libraries and heaps; the kernel moves that range by a
//! random offset in every process. A region placed at its captured address
//! (`shared::placement`) can be reserved again only if the same range is free in the replaying
//! process, which, with randomisation on, it almost never is. So `recap capture` runs the program
//! with randomisation off (as gdb runs the programs it debugs), and a CUDA replay of an archive
//! that places regions runs itself again with randomisation off: then both processes lay out their
//! memory the same way, and the driver grants the captured ranges (measured on an H100 machine: with
//! randomisation on in either, the reservation lands elsewhere and the replay stops naming both
//! addresses).

use std::ffi::OsString;

/// `personality(2)`'s flag that turns randomisation off for the programs a process executes.
const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
/// Asks `personality(2)` for the current persona without changing it.
const QUERY: libc::c_ulong = 0xffff_ffff;

/// Whether this process runs with randomisation on.
pub fn randomized() -> bool {
    // SAFETY: the query changes nothing.
    let persona = unsafe { libc::personality(QUERY) };
    persona != -1 && (persona as libc::c_ulong & ADDR_NO_RANDOMIZE) == 0
}

/// Turns randomisation off for the programs this process executes from now on (this process keeps
/// its own layout). A sandbox may refuse it: a container's default seccomp profile allows
/// `personality` only with a few values.
pub fn disable_for_exec() -> std::io::Result<()> {
    // SAFETY: both calls only read or set this process's persona.
    let persona = unsafe { libc::personality(QUERY) };
    if persona == -1 || unsafe { libc::personality(persona as libc::c_ulong | ADDR_NO_RANDOMIZE) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs this very command again with randomisation off; returns only where that cannot be done
/// (the error says why), and the caller goes on with randomisation on.
pub fn reexec_without_randomization() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    if let Err(e) = disable_for_exec() {
        return e;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    std::process::Command::new(exe).args(args).exec()
}

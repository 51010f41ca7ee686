//! Where native code goes as it is compiled ([`JitDump`]): set in a launch's options and kept by
//! the code generator with each kernel it compiles.

use std::sync::Arc;

/// A sink for native code as it is compiled, for reading it or matching a profile against it:
/// called once for each compiled function of a kernel with its name (`KERNEL.one` for the code
/// that runs one thread at a time, `KERNEL.group` for the code for groups of threads), its machine
/// code, and Cranelift's listing of it, whose first line says where the code was loaded. A kernel
/// keeps the sink of the launch that compiled it, for its code for groups too.
#[derive(Clone)]
pub struct JitDump(Arc<DumpFn>);

/// What a [`JitDump`] calls: the function's name, its machine code and its listing.
type DumpFn = dyn Fn(&str, &[u8], &str) + Send + Sync;

impl JitDump {
    pub fn new(sink: impl Fn(&str, &[u8], &str) + Send + Sync + 'static) -> JitDump {
        JitDump(Arc::new(sink))
    }

    #[cfg_attr(not(all(feature = "jit", not(target_arch = "wasm32"))), allow(dead_code))]
    pub(crate) fn write(&self, name: &str, code: &[u8], listing: &str) {
        (self.0)(name, code, listing)
    }
}

impl std::fmt::Debug for JitDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JitDump")
    }
}

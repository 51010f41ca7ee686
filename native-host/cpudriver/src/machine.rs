//! Machine code for the CPU driver: what stands in for a cubin, so that tests can load a fat
//! binary without PTX, as cuBLAS and PyTorch ship their kernels.
//!
//! A real cubin is SASS for one GPU architecture, which nothing here can run. The CPU driver's
//! "machine code" is an ELF64 header whose `e_machine` is [`EM_RECAP_CPU`] (a real cubin's is
//! `EM_CUDA`, 190), followed by the PTX the driver runs. To everything that reads images by their
//! format (the interposer, `shared::fatbin`) it is an ELF cubin with no PTX: a fat binary holding
//! it as its only entry is a module without PTX, whose kernels a CPU replay cannot run from the
//! archive. That is the case `recap capture --record-effects` exists for, made testable.
//!
//! Loading a fat binary takes its PTX entry when it has one (the lowest architecture), else its
//! first cubin entry that is CPU machine code; a bare ELF image must be CPU machine code.

use shared::fatbin::{self, EntryKind};

/// `e_machine` of the CPU driver's machine code: "RC" little-endian.
pub const EM_RECAP_CPU: u16 = 0x4352;
const ELF_HEADER: usize = 64;

/// Why an image holds no PTX the CPU driver can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineCodeError {
    #[error("not an ELF image")]
    NotElf,
    /// A GPU cubin: machine code for `machine`, naming its kernels where the bytes do.
    #[error(
        "a cubin for e_machine {machine} (GPU machine code{}) and no PTX: the CPU driver runs PTX, or its own \
         machine code (e_machine {EM_RECAP_CPU:#x}); build with PTX (nvcc -gencode arch=compute_XX,code=compute_XX)",
        kernel_list(kernels)
    )]
    GpuCubin { machine: u16, kernels: Vec<String> },
    #[error("the machine code's PTX is not UTF-8")]
    PtxNotUtf8,
    #[error("a fat binary that does not parse: {0}")]
    Fatbin(#[source] fatbin::FatbinError),
    #[error("a fat binary without PTX or cubin entries")]
    NoEntries,
    /// A fat binary without PTX whose last cubin entry is not CPU machine code.
    #[error("a fat binary without PTX whose cubin is {0}")]
    CubinOnly(#[source] Box<MachineCodeError>),
    /// PTX only for architectures above the driver's (`RECAP_CPU_ARCH`).
    #[error("{0} (RECAP_CPU_ARCH sets the CPU driver's architecture)")]
    PtxTooNew(fatbin::NoPtxFor),
}

impl MachineCodeError {
    /// Whether the image holds GPU machine code only, bare or as a fat binary's cubin: a binary
    /// built for a GPU, which the driver reports as `CUDA_ERROR_NO_BINARY_FOR_GPU`.
    pub fn is_gpu_code(&self) -> bool {
        match self {
            MachineCodeError::GpuCubin { .. } | MachineCodeError::PtxTooNew(_) => true,
            MachineCodeError::CubinOnly(cubin) => cubin.is_gpu_code(),
            _ => false,
        }
    }
}

fn kernel_list(kernels: &[String]) -> String {
    if kernels.is_empty() {
        String::new()
    } else {
        format!(" (kernels {})", kernels.join(", "))
    }
}

/// The PTX inside CPU machine code (an ELF image), or why it is not that.
pub fn elf_ptx(elf: &[u8]) -> Result<&str, MachineCodeError> {
    if elf.len() < ELF_HEADER || &elf[..4] != b"\x7fELF" {
        return Err(MachineCodeError::NotElf);
    }
    let machine = u16::from_le_bytes([elf[18], elf[19]]);
    if machine != EM_RECAP_CPU {
        return Err(MachineCodeError::GpuCubin { machine, kernels: kernel_names(elf) });
    }
    let text = &elf[ELF_HEADER..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    std::str::from_utf8(&text[..end]).map_err(|_| MachineCodeError::PtxNotUtf8)
}

/// The PTX a fat binary's entries give the CPU driver: the one a GPU of the driver's architecture
/// would have compiled (`fatbin::ptx_for_gpu`).
pub fn fatbin_ptx(bytes: &[u8]) -> Result<String, MachineCodeError> {
    let entries = fatbin::parse(bytes).map_err(MachineCodeError::Fatbin)?;
    let newer = match fatbin::ptx_for_gpu(&entries, crate::config::config().arch) {
        Ok(entry) => return Ok(entry.ptx().expect("a PTX entry with text").to_string()),
        Err(e @ fatbin::NoPtxFor::Newer { .. }) => Some(e),
        Err(fatbin::NoPtxFor::MachineCodeOnly) => None,
    };
    let mut why = MachineCodeError::NoEntries;
    for e in entries.iter().filter(|e| e.kind == EntryKind::Cubin) {
        match elf_ptx(&e.payload) {
            Ok(ptx) => return Ok(ptx.to_string()),
            Err(e) => why = MachineCodeError::CubinOnly(Box::new(e)),
        }
    }
    // PTX for newer GPUs only: what a real driver of this architecture says too.
    Err(newer.map_or(why, MachineCodeError::PtxTooNew))
}

/// The kernels of a GPU cubin, for naming them where they cannot run: each kernel's code is a
/// section `.text.NAME`, whose name the section name table holds. A scan of the bytes for those
/// names, which needs nothing of the ELF structure to be valid.
pub fn kernel_names(elf: &[u8]) -> Vec<String> {
    const PREFIX: &[u8] = b"\0.text.";
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(i) = elf[at..].windows(PREFIX.len()).position(|w| w == PREFIX) {
        let start = at + i + PREFIX.len();
        let len = elf[start..].iter().take_while(|&&b| b.is_ascii_graphic()).count();
        if len > 0 && elf.get(start + len) == Some(&0) {
            let name = String::from_utf8_lossy(&elf[start..start + len]).into_owned();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        at = start;
    }
    names
}

/// CPU machine code for `ptx`: what `cuLinkComplete` hands back, as a GPU linker hands back a cubin.
pub fn wrap(ptx: &str) -> Vec<u8> {
    let mut elf = vec![0u8; ELF_HEADER];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // 64-bit
    elf[5] = 1; // little-endian
    elf[6] = 1; // ELF version
    elf[16..18].copy_from_slice(&2u16.to_le_bytes()); // an executable
    elf[18..20].copy_from_slice(&EM_RECAP_CPU.to_le_bytes());
    elf[20..24].copy_from_slice(&1u32.to_le_bytes());
    elf[52..54].copy_from_slice(&(ELF_HEADER as u16).to_le_bytes()); // e_ehsize
    elf.extend_from_slice(ptx.as_bytes());
    elf.push(0);
    elf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPU machine code is told apart by variant, bare or as a fat binary's only cubin; CPU
    /// machine code gives its PTX back.
    #[test]
    fn gpu_machine_code_is_its_own_refusal() {
        assert_eq!(elf_ptx(&wrap(".version 8.0")), Ok(".version 8.0"));
        let mut gpu = wrap("");
        gpu[18..20].copy_from_slice(&190u16.to_le_bytes());
        let e = elf_ptx(&gpu).unwrap_err();
        assert_eq!(e, MachineCodeError::GpuCubin { machine: 190, kernels: Vec::new() });
        assert!(e.to_string().starts_with("a cubin for e_machine 190 (GPU machine code) and no PTX"), "{e}");
        assert!(e.is_gpu_code());
        assert!(MachineCodeError::CubinOnly(Box::new(e)).is_gpu_code());
        assert_eq!(elf_ptx(b"not an image"), Err(MachineCodeError::NotElf));
        assert!(!MachineCodeError::CubinOnly(Box::new(MachineCodeError::NotElf)).is_gpu_code());
    }
}

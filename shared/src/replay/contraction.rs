//! Which arithmetic of plain multiplies and additions a CPU replay runs: ptxas's contraction
//! (`ptx::Module::set_contraction`) wherever it models a GPU, since every GPU runs the machine
//! code ptxas made of the archive's PTX, and PTX's literal meaning under
//! [`ptx::MmaModel::Ieee`]. It follows the replay's model, so `--mma-model ieee` keeps the
//! literal meaning everywhere and a capture's architecture turns the GPU's on.

use super::CpuReplay;
use crate::ptx;

impl CpuReplay<'_> {
    /// Whether kernels run with ptxas's contraction of multiplies and additions: unless the
    /// replay's model ([`CpuReplay::mma_model`]) is [`ptx::MmaModel::Ieee`].
    pub fn contraction(&self) -> bool {
        self.mma_model() != ptx::MmaModel::Ieee
    }

    /// Whether a module of the archive has a multiply and an addition that ptxas fuses (where
    /// [`CpuReplay::contraction`] matters).
    pub fn has_contractions(&self) -> bool {
        self.modules.iter().flatten().any(|m| m.has_contractions())
    }

    /// Puts every module in the form [`CpuReplay::contraction`] says.
    pub(super) fn apply_contraction(&mut self) {
        let on = self.contraction();
        for m in self.modules.iter_mut().flatten() {
            m.set_contraction(on);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use crate::archive::*;
    use crate::ptx::MmaModel;
    use crate::replay::{CpuReplay, NoObserver, ReplayOptions};

    /// `out[0] = a*b + c` for `p = {a, b, c, out}`, as nvcc leaves a product ptxas fuses.
    const MUL_ADD: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry mul_add(.param .u64 p)
{
	.reg .f32 %f<5>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [p];
	ld.global.f32 %f1, [%rd1];
	ld.global.f32 %f2, [%rd1+4];
	ld.global.f32 %f3, [%rd1+8];
	mul.f32 %f4, %f1, %f2;
	add.f32 %f4, %f4, %f3;
	st.global.f32 [%rd1+12], %f4;
	ret;
}
"#;

    /// An archive of one `mul_add` launch over a, b, c with a*b+c rounded once different from
    /// rounded twice, captured on `sm` (0: no device named).
    fn archive(sm: u32) -> Vec<u8> {
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
        if sm != 0 {
            w.add_device(&DeviceDecl { name: "cuda:0".into(), sm }).unwrap();
        }
        // (1 + 2^-12)^2 - 1: the product's 2^-24 is lost when it is rounded on its own.
        let a = 1.0f32 + f32::EPSILON * 2048.0;
        let init: Vec<u8> = [a, a, -1.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let r = w.add_region(RegionDecl::new("p", 16, DType::F32)).unwrap();
        w.set_initial_bytes(r, &init).unwrap();
        let m = w.add_module("m", MUL_ADD).unwrap();
        let p = ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
        let k = w.add_kernel(m, "mul_add", vec![p]).unwrap();
        w.launch(LaunchDecl {
            kernel: k,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
            params: vec![0; 8],
            relocs: vec![Reloc { offset: 0, target: r, target_offset: 0 }],
        })
        .unwrap();
        w.finish().unwrap().into_inner()
    }

    fn result(bytes: &[u8], mma_model: Option<MmaModel>) -> (bool, f32) {
        let archive = Archive::open(bytes).unwrap();
        let mut replay = CpuReplay::new(&archive, ReplayOptions { mma_model, ..ReplayOptions::default() }).unwrap();
        assert!(replay.has_contractions());
        replay.run_iteration(&mut NoObserver).unwrap();
        let out = replay.read_region(0).unwrap();
        (replay.contraction(), f32::from_le_bytes(out[12..16].try_into().unwrap()))
    }

    #[test]
    fn the_capture_s_gpu_fuses_and_ieee_keeps_the_ptx_literal() {
        let a = 1.0f32 + f32::EPSILON * 2048.0;
        let fused = a.mul_add(a, -1.0);
        let literal = a * a - 1.0;
        assert_ne!(fused, literal);
        assert_eq!(result(&archive(90), None), (true, fused));
        assert_eq!(result(&archive(80), None), (true, fused));
        assert_eq!(result(&archive(90), Some(MmaModel::Ieee)), (false, literal));
        // No device named: the PTX's `.target sm_90` says which GPU.
        assert_eq!(result(&archive(0), None), (true, fused));
        assert_eq!(result(&archive(0), Some(MmaModel::Ieee)), (false, literal));
    }
}

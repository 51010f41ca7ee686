//! Where a replay runs, as people spell it, and an archive opened there: [`DeviceSpec`] (`cpu`,
//! `cpu:interp`, `cuda:1`, ...), [`DeviceMap`] (a multi-device archive's devices on several
//! GPUs) and [`DeviceReplay`], the CPU or CUDA replay behind the one `Replayer` trait. The
//! command line, Python, `recap compare` and the host's sessions all parse and open through these.
//!
//! The CUDA side stays optional at run time: opening a GPU on a machine without a CUDA driver is
//! the driver's own "no CUDA driver found" error, never a panic.

// Errors carry the CUDA driver's own words and the JIT log, as `cuda/` does: large, but only on
// the cold path.
#![allow(clippy::result_large_err)]

use shared::archive::{Archive, RegionId};
use shared::ptx::Engine;
use shared::replay::{CpuReplay, Ran, ReplayError, ReplayObserver, Replayer};

use crate::cuda::{CudaError, CudaReplay};

/// The CPU engines a device spelling may name, by their names.
const ENGINES: [(&str, Engine); 3] =
    [("jit", Engine::Jit), ("jit-scalar", Engine::JitScalar), ("interp", Engine::Interpreter)];

/// An engine's name (`jit`, `jit-scalar`, `interp`): how every interface spells it.
pub fn engine_name(engine: Engine) -> &'static str {
    ENGINES.iter().find(|(_, e)| *e == engine).map(|(name, _)| *name).unwrap_or("jit")
}

/// The engine named `name` (`jit`, `jit-scalar`, `interp`).
pub fn engine_named(name: &str) -> Option<Engine> {
    ENGINES.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
}

/// Where a replay runs.
///
/// Spellings: `cpu` (the engine left to the caller's default), `cpu:ENGINE` or a bare engine name
/// (`jit`, `jit-scalar`, `interp`: the CPU with that engine), `cuda` (the first GPU, `cuda:0`) and
/// `cuda:N`. [`Display`](std::fmt::Display) gives `cpu`, the engine's bare name, or `cuda:N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU; the engine where the spelling names one.
    Cpu(Option<Engine>),
    /// The CUDA GPU of this ordinal.
    Cuda(u32),
}

/// A device spelling that names no device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceSpecError {
    #[error(
        "unknown device {0:?}: expected cpu, cuda or cuda:N, or a CPU engine (jit, jit-scalar, interp, cpu:ENGINE)"
    )]
    Unknown(String),
    #[error("unknown CPU engine {engine:?} in {spec:?}: expected jit, jit-scalar or interp")]
    Engine { spec: String, engine: String },
}

impl DeviceSpec {
    /// The CPU with `engine` where the spelling named none; a GPU as it is.
    pub fn engine_or(self, engine: Engine) -> DeviceSpec {
        match self {
            DeviceSpec::Cpu(None) => DeviceSpec::Cpu(Some(engine)),
            other => other,
        }
    }

    /// The GPU ordinal, for a CUDA device.
    pub fn gpu(self) -> Option<u32> {
        match self {
            DeviceSpec::Cuda(n) => Some(n),
            DeviceSpec::Cpu(_) => None,
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = DeviceSpecError;
    fn from_str(s: &str) -> Result<Self, DeviceSpecError> {
        if s == "cpu" {
            return Ok(DeviceSpec::Cpu(None));
        }
        if s == "cuda" {
            return Ok(DeviceSpec::Cuda(0));
        }
        if let Some(engine) = s.strip_prefix("cpu:") {
            return engine_named(engine)
                .map(|e| DeviceSpec::Cpu(Some(e)))
                .ok_or_else(|| DeviceSpecError::Engine { spec: s.to_string(), engine: engine.to_string() });
        }
        if let Some(engine) = engine_named(s) {
            return Ok(DeviceSpec::Cpu(Some(engine)));
        }
        match s.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
            _ => Err(DeviceSpecError::Unknown(s.to_string())),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu(None) => write!(f, "cpu"),
            DeviceSpec::Cpu(Some(engine)) => write!(f, "{}", engine_name(*engine)),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Where each logical device of a multi-device archive replays: `cuda:0,cuda:1` (device `i` on
/// the `i`-th GPU listed), `0=cuda:1,1=cuda:0` (by index), or `cpu` (every device in one memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceMap {
    Cpu,
    /// GPU ordinals, indexed by logical device.
    Cuda(Vec<u32>),
}

/// A device map that places no device, or one twice, or names what is not a GPU.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceMapError {
    #[error("{0:?} in --devices is not a GPU: expected cuda or cuda:N (or cpu alone, for every device)")]
    NotAGpu(String),
    #[error("{0:?} in --devices is not a device index (0, 1, ...)")]
    NotAnIndex(String),
    #[error("device {0} is placed twice in --devices")]
    Twice(usize),
    #[error("--devices places no GPU for device {0}")]
    Missing(String),
    #[error("--devices takes either a list (cuda:0,cuda:1) or a mapping (0=cuda:1,1=cuda:0), not both")]
    Mixed,
}

impl std::str::FromStr for DeviceMap {
    type Err = DeviceMapError;
    fn from_str(s: &str) -> Result<Self, DeviceMapError> {
        if s == "cpu" {
            return Ok(DeviceMap::Cpu);
        }
        let gpu = |spec: &str| match spec.parse::<DeviceSpec>() {
            Ok(DeviceSpec::Cuda(n)) => Ok(n),
            _ => Err(DeviceMapError::NotAGpu(spec.to_string())),
        };
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.iter().all(|p| p.contains('=')) {
            let mut by_index: Vec<Option<u32>> = Vec::new();
            for (index, spec) in parts.iter().filter_map(|p| p.split_once('=')) {
                let index: usize = index.trim().parse().map_err(|_| DeviceMapError::NotAnIndex(index.to_string()))?;
                if by_index.len() <= index {
                    by_index.resize(index + 1, None);
                }
                if by_index[index].replace(gpu(spec.trim())?).is_some() {
                    return Err(DeviceMapError::Twice(index));
                }
            }
            let missing: Vec<String> =
                by_index.iter().enumerate().filter(|(_, g)| g.is_none()).map(|(i, _)| i.to_string()).collect();
            if !missing.is_empty() {
                return Err(DeviceMapError::Missing(missing.join(", ")));
            }
            return Ok(DeviceMap::Cuda(by_index.into_iter().flatten().collect()));
        }
        if parts.iter().any(|p| p.contains('=')) {
            return Err(DeviceMapError::Mixed);
        }
        parts.iter().map(|p| gpu(p)).collect::<Result<_, _>>().map(DeviceMap::Cuda)
    }
}

/// The CUDA replay's options for a submission mode named as the command line's `--mode` and the
/// host's `cuda_mode` name it (`shared::protocol::CUDA_MODES`): `graph` (programmatic edges where
/// the GPU has them), `graph-pdl`, `graph-pdl-wait` (without the early trigger), `graph-plain` or
/// `stream`.
pub fn cuda_mode(name: &str) -> Option<crate::cuda::ReplayOptions> {
    use crate::cuda::{Mode, Pdl, ReplayOptions};
    let (mode, pdl, pdl_wait_only) = match name {
        "graph" => (Mode::Graph, Pdl::Auto, false),
        "graph-pdl" => (Mode::Graph, Pdl::On, false),
        "graph-pdl-wait" => (Mode::Graph, Pdl::On, true),
        "graph-plain" => (Mode::Graph, Pdl::Off, false),
        "stream" => (Mode::Stream, Pdl::Auto, false),
        _ => return None,
    };
    Some(ReplayOptions { mode, pdl, pdl_wait_only, ..Default::default() })
}

/// How an archive is opened on a device: each engine's options, the one the device does not use
/// ignored.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The CPU replay's; its engine gives way to one the [`DeviceSpec`] names.
    pub cpu: shared::replay::ReplayOptions,
    /// The CUDA replay's.
    pub cuda: crate::cuda::ReplayOptions,
    /// GPU ordinals per logical device of a multi-device archive (`None`: every device on the
    /// spec's GPU).
    pub gpus: Option<Vec<u32>>,
}

/// An archive opened on a device, ready to replay: the CPU replay or the CUDA one.
pub enum DeviceReplay<'a> {
    Cpu(Box<CpuReplay<'a>>),
    Cuda(Box<CudaReplay>),
}

/// Why a replay on a device failed: the engine's own error, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(transparent)]
    Cpu(#[from] ReplayError),
    #[error(transparent)]
    Cuda(#[from] CudaError),
}

impl<'a> DeviceReplay<'a> {
    /// Loads `archive` on `device`: its modules compiled, its regions allocated, on a GPU its
    /// graph instantiated.
    pub fn open(archive: &Archive<'a>, device: DeviceSpec, options: OpenOptions) -> Result<Self, DeviceError> {
        match device {
            DeviceSpec::Cpu(engine) => {
                let mut cpu = options.cpu;
                if let Some(engine) = engine {
                    cpu.engine = engine;
                }
                Ok(DeviceReplay::Cpu(Box::new(CpuReplay::new(archive, cpu)?)))
            }
            DeviceSpec::Cuda(ordinal) => {
                let ordinals: Vec<usize> = match &options.gpus {
                    Some(gpus) => gpus.iter().map(|&g| g as usize).collect(),
                    None => vec![ordinal as usize],
                };
                Ok(DeviceReplay::Cuda(Box::new(CudaReplay::open(archive, &ordinals, options.cuda)?)))
            }
        }
    }

    /// Loads `archive` on GPUs already open (the capture API's devices, whose memory its buffers
    /// live in), as [`DeviceReplay::open`] does on the GPUs it opens. The replay keeps nothing of
    /// `archive`.
    pub fn load_on(
        archive: &Archive<'_>,
        gpus: &[std::sync::Arc<crate::cuda::Device>],
        options: crate::cuda::ReplayOptions,
    ) -> Result<Self, DeviceError> {
        Ok(DeviceReplay::Cuda(Box::new(CudaReplay::load_on(gpus, archive, options)?)))
    }

    /// The engine's address of `region`, where the replay has mapped it.
    pub fn region_address(&self, region: RegionId) -> Option<u64> {
        match self {
            DeviceReplay::Cpu(r) => r.region_address(region),
            DeviceReplay::Cuda(r) => r.region_address(region),
        }
    }
}

impl Replayer for DeviceReplay<'_> {
    type Error = DeviceError;

    fn restore_initial(&mut self, archive: &Archive<'_>) -> Result<(), DeviceError> {
        match self {
            DeviceReplay::Cpu(r) => Ok(Replayer::restore_initial(r.as_mut(), archive)?),
            DeviceReplay::Cuda(r) => Ok(Replayer::restore_initial(r.as_mut(), archive)?),
        }
    }
    fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), DeviceError> {
        match self {
            DeviceReplay::Cpu(r) => Ok(Replayer::write_region(r.as_mut(), region, bytes)?),
            DeviceReplay::Cuda(r) => Ok(Replayer::write_region(r.as_mut(), region, bytes)?),
        }
    }
    fn run_iteration(&mut self, archive: &Archive<'_>, observer: &mut dyn ReplayObserver) -> Result<Ran, DeviceError> {
        match self {
            DeviceReplay::Cpu(r) => Ok(Replayer::run_iteration(r.as_mut(), archive, observer)?),
            DeviceReplay::Cuda(r) => Ok(Replayer::run_iteration(r.as_mut(), archive, observer)?),
        }
    }
    fn read_region(&mut self, region: RegionId) -> Result<Vec<u8>, DeviceError> {
        match self {
            DeviceReplay::Cpu(r) => Ok(Replayer::read_region(r.as_mut(), region)?),
            DeviceReplay::Cuda(r) => Ok(Replayer::read_region(r.as_mut(), region)?),
        }
    }
    fn set_block_order(&mut self, seed: Option<u64>) {
        match self {
            DeviceReplay::Cpu(r) => Replayer::set_block_order(r.as_mut(), seed),
            DeviceReplay::Cuda(r) => Replayer::set_block_order(r.as_mut(), seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_and_prints_back() {
        for (text, spec, shown) in [
            ("cpu", DeviceSpec::Cpu(None), "cpu"),
            ("cpu:jit", DeviceSpec::Cpu(Some(Engine::Jit)), "jit"),
            ("jit", DeviceSpec::Cpu(Some(Engine::Jit)), "jit"),
            ("cpu:jit-scalar", DeviceSpec::Cpu(Some(Engine::JitScalar)), "jit-scalar"),
            ("jit-scalar", DeviceSpec::Cpu(Some(Engine::JitScalar)), "jit-scalar"),
            ("cpu:interp", DeviceSpec::Cpu(Some(Engine::Interpreter)), "interp"),
            ("interp", DeviceSpec::Cpu(Some(Engine::Interpreter)), "interp"),
            ("cuda", DeviceSpec::Cuda(0), "cuda:0"),
            ("cuda:3", DeviceSpec::Cuda(3), "cuda:3"),
        ] {
            let parsed: DeviceSpec = text.parse().unwrap();
            assert_eq!(parsed, spec, "{text}");
            assert_eq!(parsed.to_string(), shown, "{text}");
            assert_eq!(shown.parse::<DeviceSpec>().unwrap(), spec, "{shown}");
        }
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap().engine_or(Engine::Interpreter).to_string(), "interp");
    }

    #[test]
    fn bad_spellings_say_what_is_accepted() {
        let e = "tpu".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(e.contains("\"tpu\"") && e.contains("expected cpu, cuda or cuda:N"), "{e}");
        let e = "cuda:x".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(e.contains("\"cuda:x\"") && e.contains("cuda:N"), "{e}");
        let e = "cpu:fast".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(e.contains("\"fast\"") && e.contains("jit, jit-scalar or interp"), "{e}");
        assert!("CPU".parse::<DeviceSpec>().is_err());
        assert!("cuda:-1".parse::<DeviceSpec>().is_err());
    }

    #[test]
    fn every_cuda_mode_the_protocol_names_has_options() {
        for name in shared::protocol::CUDA_MODES {
            assert!(cuda_mode(name).is_some(), "{name}");
        }
        let stream = cuda_mode("stream").unwrap();
        assert_eq!((stream.mode, stream.pdl), (crate::cuda::Mode::Stream, crate::cuda::Pdl::Auto));
        let plain = cuda_mode("graph-plain").unwrap();
        assert_eq!((plain.mode, plain.pdl), (crate::cuda::Mode::Graph, crate::cuda::Pdl::Off));
        let wait = cuda_mode("graph-pdl-wait").unwrap();
        assert_eq!((wait.mode, wait.pdl, wait.pdl_wait_only), (crate::cuda::Mode::Graph, crate::cuda::Pdl::On, true));
        assert!(!cuda_mode("graph-pdl").unwrap().pdl_wait_only && !cuda_mode("graph").unwrap().pdl_wait_only);
        assert!(cuda_mode("graphs").is_none());
    }

    #[test]
    fn device_maps_parse() {
        assert_eq!("cpu".parse::<DeviceMap>(), Ok(DeviceMap::Cpu));
        assert_eq!("cuda:0,cuda:1".parse::<DeviceMap>(), Ok(DeviceMap::Cuda(vec![0, 1])));
        assert_eq!("1=cuda:0, 0=cuda:1".parse::<DeviceMap>(), Ok(DeviceMap::Cuda(vec![1, 0])));
        assert_eq!("cuda,cuda".parse::<DeviceMap>(), Ok(DeviceMap::Cuda(vec![0, 0])));
        let err = |s: &str| s.parse::<DeviceMap>().unwrap_err().to_string();
        assert!(err("0=cuda:0,2=cuda:1").contains("places no GPU for device 1"));
        assert!(err("cuda:0,cpu").contains("\"cpu\" in --devices is not a GPU"));
        assert!(err("0=cuda:0,0=cuda:1").contains("placed twice"));
        assert!(err("0=cuda:0,cuda:1").contains("not both"));
        assert!(err("x=cuda:0").contains("not a device index"));
    }

    #[test]
    fn a_cpu_spec_opens_the_cpu_replay_and_replays() {
        // The smallest archive the capture API makes: one fill of one buffer, recorded.
        let dev = crate::Device::cpu();
        let out = dev.alloc::<u32>(4).unwrap();
        let graph = dev.capture(|d| d.fill(&out, 7u32)).unwrap();
        let bytes = graph.to_archive_bytes(&[], &[("out", out.raw())]).unwrap();
        let archive = Archive::open(&bytes).unwrap();
        let mut replay = DeviceReplay::open(&archive, "cpu:interp".parse().unwrap(), OpenOptions::default())
            .unwrap_or_else(|e| panic!("opening on the CPU: {e}"));
        assert!(matches!(replay, DeviceReplay::Cpu(_)), "a CPU spec opened a GPU replay");
        replay.run_iteration(&archive, &mut shared::replay::NoObserver).unwrap();
        let region = archive.binding("out").unwrap().region;
        assert_eq!(
            replay.read_region(region).unwrap(),
            [7u32; 4].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()
        );
    }
}

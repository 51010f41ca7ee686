//! The capture API: eager work, capture, save, load and replay on the CPU, the same on CUDA, and
//! archives crossing between the two devices.

use recap::capture::Result;
use recap::{args, Buffer, CaptureError, Device, Graph, Kernel, StructArg};

const BASICS: &str = include_str!("../../native-host/recap/examples/kernels/basics.ptx");
const BASICS_CU: &str = include_str!("../../native-host/recap/examples/kernels/basics.cu");
const HEAT: &str = include_str!("../../native-host/recap/examples/kernels/heat.ptx");

const N: usize = 1000;
const NX: usize = 40;
const NY: usize = 25;

/// The CUDA device, or None after a clear message when this machine has no driver or GPU.
fn cuda_or_skip(test: &str) -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipping {test}: no CUDA device ({e})");
            None
        }
    }
}

/// Buffers and kernels of a workload that uses every kind of op the capture API records.
struct Workload {
    axpy: Kernel,
    table_scale: Kernel,
    count_up: Kernel,
    diffuse: Kernel,
    x: Buffer<f32>,
    y: Buffer<f32>,
    table: Buffer<u64>,
    scaled: Buffer<f32>,
    counter: Buffer<u32>,
    flag: Buffer<u32>,
    heat_u: Buffer<f32>,
    heat_v: Buffer<f32>,
}

fn inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..N).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = (0..N).map(|i| i as f32 * 0.01).collect();
    let u: Vec<f32> = (0..NX * NY).map(|i| ((i * 7919) % 101) as f32).collect();
    (x, y, u)
}

impl Workload {
    fn new(dev: &Device) -> Result<Workload> {
        Workload::with_heat(dev, HEAT)
    }

    /// The workload with another heat kernel's PTX (the same entry and parameters).
    fn with_heat(dev: &Device, heat_ptx: &str) -> Result<Workload> {
        let basics = dev.load_ptx("basics", BASICS)?;
        let heat = dev.load_ptx("heat", heat_ptx)?;
        let (x, y, u) = inputs();
        let w = Workload {
            axpy: basics.kernel("axpy")?,
            table_scale: basics.kernel("table_scale")?,
            count_up: basics.kernel("count_up")?,
            diffuse: heat.kernel("heat_diffuse")?,
            x: dev.upload(&x)?.named("x"),
            y: dev.upload(&y)?.named("y"),
            table: dev.alloc::<u64>(2)?.named("table"),
            scaled: dev.alloc::<f32>(N)?.named("scaled"),
            counter: dev.alloc::<u32>(1)?.named("counter"),
            flag: dev.alloc::<u32>(1)?.named("flag"),
            heat_u: dev.upload(&u)?.named("heat_u"),
            heat_v: dev.alloc::<f32>(NX * NY)?.named("heat_v"),
        };
        // struct Table { const float* data; int n; int pad; } in device memory, pointing at y.
        dev.write(&w.table, &[0, N as u64])?;
        dev.write_pointer(w.table.raw(), 0, w.y.raw(), 0)?;
        Ok(w)
    }

    fn field(&self, u: &Buffer<f32>) -> StructArg {
        StructArg::new(16).pointer(0, u.raw(), 0).value(8, &(NX as i32)).value(12, &(NY as i32))
    }

    /// Launches with buffers, scalars, a by-value struct and a pointer inside a buffer; a device
    /// while loop and an if; copies, zero and fills; and scratch allocated inside the scope.
    fn run(&self, d: &Device) -> Result<()> {
        let n = N as u32;
        let blocks = n.div_ceil(128);
        d.launch(&self.axpy, blocks, 128, 0, &args![&self.x, &self.y, 0.5f32, n])?;
        d.launch(&self.table_scale, blocks, 128, 0, &args![&self.table, &self.scaled, 3.0f32])?;
        let tmp = d.alloc::<f32>(N)?;
        d.copy(&self.scaled, &tmp)?;
        d.launch(&self.axpy, blocks, 128, 0, &args![&tmp, &self.y, -1.0f32, n])?;
        d.free(tmp)?;
        d.zero(&self.counter)?;
        d.fill(&self.flag, 1u32)?;
        d.while_nonzero(&self.flag, 0, |d| {
            d.launch(&self.axpy, blocks, 128, 0, &args![&self.x, &self.y, 0.25f32, n])?;
            d.launch(&self.count_up, 1, 32, 0, &args![&self.counter, &self.flag, 7u32])
        })?;
        d.if_nonzero(&self.counter, |d| d.fill(&self.scaled, -2.5f32))?;
        d.if_nonzero(&self.flag, |d| d.zero(&self.y))?;
        let grid = ((NX as u32).div_ceil(8), (NY as u32).div_ceil(8));
        for _ in 0..3 {
            d.launch(
                &self.diffuse,
                grid,
                (8, 8),
                0,
                &args![self.field(&self.heat_u), self.field(&self.heat_v), 0.2f32],
            )?;
            d.copy(&self.heat_v, &self.heat_u)?;
        }
        d.copy_range(&self.y, 10, &self.heat_v, 0, 5)
    }

    fn reset(&self, d: &Device) -> Result<()> {
        let (x, y, u) = inputs();
        d.write(&self.x, &x)?;
        d.write(&self.y, &y)?;
        d.write(&self.heat_u, &u)?;
        d.zero(&self.scaled)?;
        d.zero(&self.heat_v)
    }

    fn outputs(&self) -> Result<Vec<Vec<u8>>> {
        [self.y.raw(), self.scaled.raw(), self.counter.raw(), self.flag.raw(), self.heat_u.raw(), self.heat_v.raw()]
            .iter()
            .map(|b| b.read_bytes())
            .collect()
    }

    fn save(&self, g: &Graph, path: &std::path::Path) -> Result<()> {
        g.save(
            path,
            &[("x", self.x.raw()), ("y", self.y.raw()), ("heat_u", self.heat_u.raw())],
            &[
                ("y", self.y.raw()),
                ("scaled", self.scaled.raw()),
                ("counter", self.counter.raw()),
                ("flag", self.flag.raw()),
                ("heat_u", self.heat_u.raw()),
                ("heat_v", self.heat_v.raw()),
            ],
        )
    }
}

fn loaded_outputs(g: &Graph) -> Result<Vec<Vec<u8>>> {
    ["y", "scaled", "counter", "flag", "heat_u", "heat_v"].iter().map(|n| g.get_param(n)).collect()
}

fn as_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Equal within a relative tolerance (devices may differ in the last bits of float math).
fn assert_close(label: &str, got: &[Vec<u8>], want: &[Vec<u8>], rtol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{label}: output {i} size");
        let (g, w) = (as_f32(g), as_f32(w));
        for (k, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = a.to_bits() == b.to_bits() || (a - b).abs() <= rtol * b.abs().max(1.0);
            assert!(ok, "{label}: output {i} element {k}: {a} vs {b}");
        }
    }
}

/// Eager, captured, and saved-then-loaded runs of the workload on one device all agree.
/// The workload captured on `dev` with `heat_ptx` as its heat kernel and saved to `dir/name`: an
/// archive of every kind of op (a while loop, ifs, alloc/free, copies, fills) with expected states.
pub(crate) fn saved_workload(dev: &Device, heat_ptx: &str, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let w = Workload::with_heat(dev, heat_ptx).unwrap();
    let graph = dev.capture(|d| w.run(d)).unwrap();
    w.reset(dev).unwrap();
    let path = dir.join(name);
    w.save(&graph, &path).unwrap();
    path
}

/// The heat kernel's PTX, for [`saved_workload`].
pub(crate) const HEAT_PTX: &str = HEAT;

fn capture_save_load_matches_eager(dev: &Device) -> (Vec<Vec<u8>>, tempfile::TempDir, std::path::PathBuf) {
    let w = Workload::new(dev).unwrap();
    w.run(dev).unwrap();
    let eager = w.outputs().unwrap();
    // The loop ran 7 times and left its flag down; the if bodies saw that.
    assert_eq!(as_f32(&eager[1])[0], -2.5);
    assert_eq!(eager[2], 7u32.to_le_bytes());
    assert_eq!(eager[3], 0u32.to_le_bytes());

    w.reset(dev).unwrap();
    let graph = dev.capture(|d| w.run(d)).unwrap();
    assert!(graph.op_count() > 15, "{graph:?}");
    // Nothing ran during the capture.
    assert_eq!(as_f32(&w.scaled.raw().read_bytes().unwrap())[0], 0.0);
    w.reset(dev).unwrap();
    graph.launch().unwrap();
    assert_eq!(w.outputs().unwrap(), eager, "graph replay differs from eager execution");

    w.reset(dev).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workload.recap");
    w.save(&graph, &path).unwrap();
    let loaded = Graph::load(&path, dev).unwrap();
    loaded.launch().unwrap();
    assert_eq!(loaded_outputs(&loaded).unwrap(), eager, "loaded archive differs from eager execution");
    (eager, dir, path)
}

#[test]
fn cpu_capture_save_load_replay_equals_eager() {
    capture_save_load_matches_eager(&Device::cpu());
}

#[test]
fn saved_archive_is_valid_and_holds_no_raw_addresses() {
    let dev = Device::cpu();
    let (_, _dir, path) = capture_save_load_matches_eager(&dev);
    let bytes = std::fs::read(&path).unwrap();
    let a = shared::archive::Archive::open(&bytes).unwrap();
    a.validate().unwrap();
    let names: Vec<&str> = a.bindings().map(|b| b.name).collect();
    assert_eq!(names, ["x", "y", "heat_u", "scaled", "counter", "flag", "heat_v"]);
    assert_eq!(a.binding("y").unwrap().direction, shared::archive::Direction::InOut);
    assert_eq!(a.binding("x").unwrap().direction, shared::archive::Direction::In);
    // The table's pointer is a region relocation, its stored bytes zero.
    let table = a.region_by_name("table").unwrap();
    let relocs: Vec<_> = a.region_relocs().filter(|(owner, _)| *owner == table.id).collect();
    assert_eq!(relocs.len(), 1);
    assert_eq!(a.region(relocs[0].1.target).name, "y");
    assert_eq!(&table.initial.unwrap().decode().unwrap()[..8], &[0u8; 8]);
    // Every launch's pointer parameters are relocations with zeroed bytes.
    let mut launches = 0;
    for op in a.ops() {
        if let shared::archive::Op::Launch(l) = op {
            launches += 1;
            let relocs: Vec<_> = a.relocs(l.relocs.clone()).collect();
            assert!(!relocs.is_empty());
            for r in relocs {
                assert_eq!(&l.params[r.offset as usize..r.offset as usize + 8], &[0u8; 8]);
            }
        }
    }
    assert!(launches >= 8);
    let kinds: Vec<&str> = a.ops().map(|o| o.kind_name()).collect();
    for kind in ["launch", "copy", "memset", "alloc", "free", "while", "if"] {
        assert!(kinds.contains(&kind), "no {kind} op in {kinds:?}");
    }
}

#[test]
fn bindings_take_new_inputs_and_refuse_wrong_names_and_sizes() {
    let dev = Device::cpu();
    let (_, _dir, path) = capture_save_load_matches_eager(&dev);
    let g = Graph::load(&path, &dev).unwrap();
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    g.set_param("x", &x).unwrap();
    g.set_param("y", &vec![0.0f32; N]).unwrap();
    g.launch().unwrap();
    // y = 0.5 x, then - 3 (0.5 x) through the table, then 7 times + 0.25 x: 0.75 x.
    let y = g.get_param_as::<f32>("y").unwrap();
    assert_eq!(y[4], 3.0);

    let e = g.set_param("nope", &x).unwrap_err();
    assert!(matches!(e, CaptureError::Binding { .. }));
    assert!(e.to_string().contains("no such binding") && e.to_string().contains("heat_u"), "{e}");
    let e = g.set_param("x", &x[..10]).unwrap_err().to_string();
    assert!(e.contains("4000 bytes") && e.contains("40 bytes were given"), "{e}");
    assert!(g.get_param("missing").is_err());
}

#[test]
fn misuse_is_a_clear_error() {
    let dev = Device::cpu();
    let m = dev.load_ptx("basics", BASICS).unwrap();
    let e = m.kernel("axpyy").unwrap_err().to_string();
    assert!(e.contains("no entry named axpyy") && e.contains("axpy"), "{e}");
    let axpy = m.kernel("axpy").unwrap();
    let x = dev.alloc::<f32>(4).unwrap();
    let e = dev.launch(&axpy, 1, 4, 0, &args![&x, &x, 1.0f32]).unwrap_err().to_string();
    assert!(e.contains("takes 4 parameters") && e.contains("3 arguments"), "{e}");
    let e = dev.launch(&axpy, 1, 4, 0, &args![&x, &x, 1.0f64, 4u32]).unwrap_err().to_string();
    assert!(e.contains("4 bytes") && e.contains("value of 8 bytes"), "{e}");
    assert!(dev.load_ptx("bad", ".version 8.0\n.target sm_75\nthis is not ptx").is_err());

    // Scratch from a capture cannot be read, and a capture cannot be nested.
    let mut scratch = None;
    let g = dev.capture(|d| {
        scratch = Some(d.alloc::<f32>(4)?);
        assert!(d.begin_capture().is_err());
        assert!(x.read().is_err(), "reading inside a capture must fail");
        d.launch(&axpy, 1, 4, 0, &args![&x, scratch.as_ref().unwrap(), 1.0f32, 4u32])
    });
    let g = g.unwrap();
    assert!(scratch.unwrap().read().unwrap_err().to_string().contains("graph scratch"));
    g.launch().unwrap();
    assert!(dev.end_capture().is_err());
}

#[test]
fn cuda_without_a_driver_is_an_error_not_a_panic() {
    match Device::cuda(0) {
        Ok(d) => eprintln!("skipping: this machine has a CUDA device ({})", d.name()),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("CUDA") || text.contains("cuda"), "{text}");
            assert!(matches!(e, CaptureError::NoCudaDriver | CaptureError::Cuda { .. }));
        }
    }
    assert!(Device::from_spec("tpu").unwrap_err().to_string().contains("unknown device"));
}

#[test]
fn cuda_c_through_nvrtc_runs_on_the_cpu_when_nvrtc_is_installed() {
    let dev = Device::cpu();
    match dev.compile_cuda("basics", BASICS_CU) {
        Err(CaptureError::NoNvrtc) => eprintln!("skipping the NVRTC half: NVRTC is not installed"),
        Err(e) => panic!("compiling basics.cu: {e}"),
        Ok(m) => {
            let axpy = m.kernel("axpy").unwrap();
            let x = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
            let y = dev.upload(&[10.0f32, 20.0, 30.0]).unwrap();
            dev.launch(&axpy, 1, 32, 0, &args![&x, &y, 2.0f32, 3u32]).unwrap();
            assert_eq!(y.read().unwrap(), [12.0, 24.0, 36.0]);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_capture_save_load_replay_equals_eager() {
    let Some(dev) = cuda_or_skip("cuda_capture_save_load_replay_equals_eager") else { return };
    capture_save_load_matches_eager(&dev);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn archive_captured_on_cuda_replays_on_the_cpu_and_back() {
    let Some(gpu) = cuda_or_skip("archive_captured_on_cuda_replays_on_the_cpu_and_back") else { return };
    let cpu = Device::cpu();
    let (gpu_eager, _d1, gpu_path) = capture_save_load_matches_eager(&gpu);
    let (cpu_eager, _d2, cpu_path) = capture_save_load_matches_eager(&cpu);
    assert_close("cpu eager vs cuda eager", &cpu_eager, &gpu_eager, 1e-5);

    let on_cpu = Graph::load(&gpu_path, &cpu).unwrap();
    on_cpu.launch().unwrap();
    assert_close("cuda capture on cpu", &loaded_outputs(&on_cpu).unwrap(), &gpu_eager, 1e-5);

    let on_gpu = Graph::load(&cpu_path, &gpu).unwrap();
    on_gpu.launch().unwrap();
    assert_close("cpu capture on cuda", &loaded_outputs(&on_gpu).unwrap(), &cpu_eager, 1e-5);
}

/// A producer device and a consumer device: `y0 = 2 x0 + y0` on device 0, `y0` copied into
/// device 1's `x1`, `y1 = 3 x1 + y1` there, and a loop on device 1 that counts down.
fn two_device_work(d: &[Device], k: &[Kernel], bufs: &TwoDevice) -> Result<()> {
    let n = N as u32;
    d[0].launch(&k[0], n.div_ceil(128), 128, 0, &args![&bufs.x0, &bufs.y0, 2.0f32, n])?;
    d[1].copy_between(&bufs.y0, &bufs.x1)?;
    d[1].launch(&k[1], n.div_ceil(128), 128, 0, &args![&bufs.x1, &bufs.y1, 3.0f32, n])?;
    Ok(())
}

struct TwoDevice {
    x0: Buffer<f32>,
    y0: Buffer<f32>,
    x1: Buffer<f32>,
    y1: Buffer<f32>,
}

fn two_device_buffers(d0: &Device, d1: &Device) -> Result<TwoDevice> {
    let x: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
    Ok(TwoDevice {
        x0: d0.upload(&x)?.named("x0"),
        y0: d0.upload(&vec![1.0f32; N])?.named("y0"),
        x1: d1.alloc::<f32>(N)?.named("x1"),
        y1: d1.upload(&vec![10.0f32; N])?.named("y1"),
    })
}

fn two_device_run(d0: &Device, d1: &Device) {
    let k = [
        d0.load_ptx("basics", BASICS).unwrap().kernel("axpy").unwrap(),
        d1.load_ptx("basics", BASICS).unwrap().kernel("axpy").unwrap(),
    ];
    let want: Vec<f32> = (0..N).map(|i| 3.0 * (2.0 * (i as f32 * 0.5) + 1.0) + 10.0).collect();

    // Eagerly, each device runs its part and the copy goes through the host.
    let eager = two_device_buffers(d0, d1).unwrap();
    two_device_work(&[d0.clone(), d1.clone()], &k, &eager).unwrap();
    assert_eq!(eager.y1.read().unwrap(), want);

    // Captured into one graph over both devices, launched in place.
    let b = two_device_buffers(d0, d1).unwrap();
    let graph = recap::capture_devices(&[d0, d1], |d| two_device_work(d, &k, &b)).unwrap();
    assert_eq!(graph.devices().len(), 2);
    assert_eq!(graph.op_count(), 3);
    let bytes = graph.to_archive_bytes(&[("x0", b.x0.raw())], &[("y1", b.y1.raw())]).unwrap();
    graph.launch().unwrap();
    assert_eq!(b.y1.read().unwrap(), want);
    assert_eq!(b.x1.read().unwrap(), b.y0.read().unwrap());

    // Saved: a two-device archive whose ops and regions keep their devices.
    let archive = shared::archive::Archive::open(&bytes).unwrap();
    assert_eq!(archive.device_count(), 2);
    let devices: Vec<u32> = (0..archive.op_count() as u32).map(|i| archive.op_device(i)).collect();
    assert_eq!(devices, vec![0, 1, 1]);
    for (name, device) in [("x0", 0), ("y0", 0), ("x1", 1), ("y1", 1)] {
        let r = archive.region(archive.region_named(name).unwrap());
        assert_eq!(r.device, device, "{name}");
    }
    // Replayed from the archive on the CPU (both devices in one memory): the same bytes.
    let mut cpu = shared::replay::CpuReplay::new(&archive, Default::default()).unwrap();
    cpu.run_iteration(&mut shared::replay::NoObserver).unwrap();
    let y1: Vec<f32> = cpu
        .read_region(archive.region_named("y1").unwrap())
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(y1, want);
}

#[test]
fn a_capture_of_two_devices_records_one_graph_and_a_two_device_archive() {
    two_device_run(&Device::cpu(), &Device::cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_of_two_gpus_launches_in_place_and_saves_a_two_device_archive() {
    let Some(d0) = cuda_or_skip("a_capture_of_two_gpus_launches_in_place_and_saves_a_two_device_archive") else {
        return;
    };
    // A second GPU where there is one; else a second device on the same GPU, which must work too.
    let d1 = Device::cuda(1).or_else(|_| Device::cuda(0)).unwrap();
    two_device_run(&d0, &d1);
}

#[test]
fn a_capture_of_several_devices_refuses_what_it_cannot_record() {
    let (d0, d1, d2) = (Device::cpu(), Device::cpu(), Device::cpu());
    let stranger = d2.upload(&[1.0f32; 4]).unwrap().named("stranger");
    let mine = d1.alloc::<f32>(4).unwrap().named("mine");
    let err = recap::capture_devices(&[&d0, &d1], |d| d[1].copy_between(&stranger, &mine)).unwrap_err().to_string();
    assert!(err.contains("buffer stranger belongs to a device outside this capture"), "{err}");
    assert!(!d0.is_capturing() && !d1.is_capturing(), "the capture ended on every device");
    let theirs = d2.alloc::<f32>(4).unwrap().named("theirs");
    let err = d0.copy_between(&stranger, &theirs).unwrap_err().to_string();
    assert!(err.contains("neither buffer belongs to"), "{err}");
    let err = recap::capture_devices(&[&d0, &d0], |_| Ok(())).unwrap_err().to_string();
    assert!(err.contains("is given twice"), "{err}");
    d1.begin_capture().unwrap();
    let err = recap::capture_devices(&[&d0, &d1], |_| Ok(())).unwrap_err().to_string();
    assert!(err.contains("already open on cpu"), "{err}");
    assert!(!d0.is_capturing(), "a refused capture leaves no device capturing");
    d1.end_capture().unwrap();
}

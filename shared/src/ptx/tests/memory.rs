//! The host side of device memory.

use super::run_kernel;
use crate::ptx::*;

#[test]
fn regions_are_checked_filled_copied_and_freed() {
    let mut mem = Memory::new();
    let a = mem.add_region(10, 16).unwrap();
    let b = mem.add_region(1000, 256).unwrap();
    assert_eq!(a % 256, 0);
    assert_eq!(b % 256, 0);
    mem.write(a, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
    assert!(mem.write(a + 5, &[0; 6]).is_err(), "write past the end");
    assert!(mem.read(a + 10, &mut [0; 1]).is_err());
    assert!(mem.read(b + 1000, &mut [0; 0]).is_ok(), "empty read at the end");
    mem.copy(a + 2, a, 6).unwrap();
    let mut v = [0u8; 10];
    mem.read(a, &mut v).unwrap();
    assert_eq!(v, [1, 2, 1, 2, 3, 4, 5, 6, 9, 10], "overlapping copy behaves as memmove");
    mem.fill(b + 3, 9, &[0xAB, 0xCD]).unwrap();
    let r = mem.read_region(b).unwrap();
    assert_eq!(&r[..14], &[0, 0, 0, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0, 0]);
    mem.write(b + 4, &0xDEAD_BEEFu32.to_le_bytes()).unwrap();
    assert_eq!(mem.read_u32(b + 4).unwrap(), 0xDEAD_BEEF);
    assert_eq!(mem.region_size(b), Some(1000));
    mem.remove_region(a).unwrap();
    assert!(mem.read(a, &mut [0; 1]).is_err(), "freed");
    assert!(mem.remove_region(a).is_err());
    assert!(mem.remove_region(b + 4).is_err(), "not a base");
    assert!(matches!(mem.add_region(1 << 40, 8), Err(MemError::TooLarge { .. })));
    assert!(mem.add_region(8, 3).is_err());
}

/// Native code looks up the region of an access through the kernel parameter its address derives
/// from. An address computed from one parameter that lands in another parameter's region, or in
/// none, must still reach that region or fault, exactly as the interpreter does.
#[test]
fn a_pointer_derived_from_one_parameter_may_reach_another_region() {
    let ptx = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 delta)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd5, [delta];
    cvta.to.global.u64 %rd6, %rd1;
    sub.s64 %rd3, %rd2, %rd1;
    add.s64 %rd4, %rd6, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.u32 %r2, [%rd8];
    add.s32 %r3, %r2, 100;
    st.global.u32 [%rd8], %r3;
    add.s64 %rd9, %rd6, %rd7;
    st.global.u32 [%rd9], %r1;
    add.s64 %rd10, %rd9, %rd5;
    ld.global.u32 %r4, [%rd10];
    ret;
}";
    let b: Vec<u8> = (0..8u32).flat_map(|v| (v * 3).to_le_bytes()).collect();
    let out = run_kernel(ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 32], b], &0u64.to_le_bytes()).unwrap();
    let words = |v: &[u8]| -> Vec<u32> { v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() };
    assert_eq!(words(&out[0]), (0..8).collect::<Vec<u32>>());
    assert_eq!(words(&out[1]), (0..8).map(|v| v * 3 + 100).collect::<Vec<u32>>());
    // The same pointer pushed one region further lands in no region: a fault on both engines.
    let err = run_kernel(ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 32], vec![0; 32]], &(1u64 << 37).to_le_bytes())
        .unwrap_err();
    assert!(err.contains("out-of-bounds read"), "{err}");
    assert!(err.contains("thread [0, 0, 0]"), "{err}");
}

/// The same through `mad`: a pointer that is a parameter plus a scaled index (`mad.wide`, 64-bit
/// `mad.lo`) is taken to point into that parameter's region, and must still reach another region,
/// or fault past its own, exactly as the interpreter does.
#[test]
fn a_pointer_scaled_from_one_parameter_by_mad_may_reach_another_region() {
    let ptx = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 a, .param .u64 b, .param .u32 far)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u32 %r9, [far];
    cvta.to.global.u64 %rd6, %rd1;
    sub.s64 %rd3, %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mad.lo.u64 %rd4, %rd3, 1, %rd6;
    mad.wide.u32 %rd8, %r1, 4, %rd4;
    ld.global.u32 %r2, [%rd8];
    add.s32 %r3, %r2, 100;
    st.global.u32 [%rd8], %r3;
    mad.wide.s32 %rd9, %r1, 4, %rd6;
    st.global.u32 [%rd9], %r1;
    mad.wide.u32 %rd10, %r9, 4, %rd9;
    ld.global.u32 %r4, [%rd10];
    ret;
}";
    let b: Vec<u8> = (0..8u32).flat_map(|v| (v * 3).to_le_bytes()).collect();
    let out = run_kernel(ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 32], b], &0u32.to_le_bytes()).unwrap();
    let words = |v: &[u8]| -> Vec<u32> { v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() };
    assert_eq!(words(&out[0]), (0..8).collect::<Vec<u32>>());
    assert_eq!(words(&out[1]), (0..8).map(|v| v * 3 + 100).collect::<Vec<u32>>());
    // A scaled index 4 GiB past `a`: a fault on every engine.
    let far = 1u32 << 30;
    let err = run_kernel(ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 32], vec![0; 32]], &far.to_le_bytes()).unwrap_err();
    assert!(err.contains("out-of-bounds read"), "{err}");
    assert!(err.contains("thread [0, 0, 0]"), "{err}");
}

/// Native code checks a run of shared accesses through one base once, by its lowest and highest
/// address. When that fails, each access is checked on its own: the ones in bounds still happen
/// and the first one out of bounds is the fault, as on the interpreter.
#[test]
fn a_run_of_shared_accesses_through_one_base_is_checked_as_a_group() {
    let ptx = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 step)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b32 sh[16];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r9, [step];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, sh;
    mul.lo.u32 %r3, %r1, %r9;
    add.u32 %r4, %r2, %r3;
    st.shared.u32 [%r4], %r1;
    st.shared.u32 [%r4+32], %r1;
    ld.shared.u32 %r5, [%r4];
    ld.shared.u32 %r6, [%r4+32];
    add.u32 %r7, %r5, %r6;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
    ret;
}";
    let words = |v: &[u8]| -> Vec<u32> { v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect() };
    let out = run_kernel(ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 32]], &4u32.to_le_bytes()).unwrap();
    assert_eq!(words(&out[0]), (0..8).map(|t| 2 * t).collect::<Vec<u32>>());
    // Thread 8's base is in bounds, its +32 is not: the fault is the second store.
    let err = run_kernel(ptx, "k", [1, 1, 1], [9, 1, 1], &[vec![0; 36]], &4u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("out-of-bounds write"), "{err}");
    assert!(err.contains("thread [8, 0, 0]"), "{err}");
    assert!(err.contains("shared address 0x40 (line 17)"), "{err}");
    // A misaligned base: the group check fails and the first access faults on its own.
    let err = run_kernel(ptx, "k", [1, 1, 1], [2, 1, 1], &[vec![0; 8]], &2u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("misaligned") || err.contains("align"), "{err}");
    assert!(err.contains("thread [1, 0, 0]"), "{err}");
}

/// Regions placed at given addresses: several share a 64 GiB window at their own offsets, each
/// stays a region of its own, the bytes between them read as zeros, and addresses no region may
/// have are refused, naming the region.
#[test]
fn placed_regions_keep_their_addresses_and_share_a_window() {
    let w = 5u64 << 36;
    let (a, b, c) = (w + 0x2000, w + 0x40_0100, 9u64 << 36);
    for window_start in [true, false] {
        let mut mem = Memory::new();
        mem.place_regions_from(&[(b, 64), (a, 16), (c, 8)], 1 << 40, window_start).unwrap();
        assert_eq!(mem.region_size(a), Some(16));
        assert_eq!(mem.region_size(b), Some(64));
        assert_eq!(mem.region_size(w), None, "the window's start is no region");
        mem.write(a, &[7; 16]).unwrap();
        mem.write(b + 60, &[9; 4]).unwrap();
        assert!(mem.write(b + 61, &[9; 4]).is_err(), "past the highest region of the window");
        assert_eq!(mem.read_region(a).unwrap(), vec![7; 16]);
        let mut gap = [1u8; 8];
        mem.read(a + 16, &mut gap).unwrap();
        assert_eq!(gap, [0; 8], "bytes between placed regions read as zeros");
        assert_eq!(
            mem.read(w, &mut [0; 1]).is_ok(),
            window_start,
            "below the lowest region: storage only from the window's start"
        );
        // A fresh region goes above every placed one.
        let fresh = mem.add_region(32, 256).unwrap();
        assert_eq!(fresh, 10 << 36);
        mem.remove_region(a).unwrap();
        assert_eq!(mem.region_size(a), None);
        assert_eq!(mem.read_region(b).unwrap()[60..], [9; 4], "the window's other region stays");
        assert!(mem.remove_region(w).is_err());
    }
    let refused = |regions: &[(u64, u64)]| Memory::new().place_regions(regions, 1 << 20).unwrap_err();
    assert!(matches!(refused(&[(0x1000, 8)]), PlaceError::Reserved { index: 0, .. }), "window 0 holds no region");
    let above = refused(&[(a, 8), (0x0100_0000_0000_0000, 8)]);
    assert!(matches!(above, PlaceError::Reserved { index: 1, .. }), "{above}");
    assert!(above.to_string().contains("0x100000000000000"), "{above}");
    assert!(matches!(refused(&[((6 << 36) - 8, 16)]), PlaceError::CrossesWindow { index: 0, .. }));
    assert!(matches!(refused(&[(a, 16), (a + 8, 8)]), PlaceError::Overlap { index: 1, other: 0, .. }));
    let wide = refused(&[(a, 8), (b, 8)]);
    assert!(matches!(wide, PlaceError::Span { index: 0, .. }), "{wide}");
    let mut mem = Memory::new();
    let fresh = mem.add_region(8, 8).unwrap();
    assert!(matches!(mem.place_regions(&[(fresh + 64, 8)], 1 << 30), Err(PlaceError::InUse { index: 0, .. })));
}

/// A kernel follows pointers stored in one placed region into another, on every engine, whether
/// the window's storage starts at the window (native code checks it inline) or at its lowest
/// region (native code takes the checked slow path).
#[test]
fn kernels_follow_pointers_between_placed_regions_on_every_engine() {
    let ptx = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 table)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [table];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u64 %rd4, [%rd3];
    ld.global.u32 %r2, [%rd4];
    add.s32 %r3, %r2, %r1;
    st.global.u32 [%rd4], %r3;
    ret;
}";
    let m = Module::parse(ptx).unwrap();
    let w = 3u64 << 36;
    let (table, data) = (w + 0x10_0000, w + 0x10_4000);
    let mut results = Vec::new();
    for window_start in [true, false] {
        for engine in [Engine::Interpreter, Engine::Jit, Engine::JitScalar] {
            let mut mem = Memory::new();
            mem.place_regions_from(&[(table, 64), (data, 64)], 1 << 30, window_start).unwrap();
            let pointers: Vec<u8> = (0..8u64).flat_map(|i| (data + 4 * (7 - i)).to_le_bytes()).collect();
            mem.write(table, &pointers).unwrap();
            let dims = LaunchDims { grid: [1, 1, 1], block: [8, 1, 1], dynamic_shared: 0 };
            let opts = ExecOptions { engine, ..ExecOptions::default() };
            launch(&m, "k", &dims, &table.to_le_bytes(), &mem, &opts).unwrap();
            results.push(mem.read_region(data).unwrap());
            // A pointer into the gap below the lowest region faults where there is no storage.
            mem.write(table, &(w + 0x100).to_le_bytes()).unwrap();
            let gap = launch(&m, "k", &dims, &table.to_le_bytes(), &mem, &opts);
            assert_eq!(gap.is_err(), !window_start, "{engine:?}: {gap:?}");
        }
    }
    let want: Vec<u8> = (0..16u32).flat_map(|k| if k < 8 { 7 - k } else { 0 }.to_le_bytes()).collect();
    assert!(results.iter().all(|r| *r == want), "{results:?}");
}

/// A region lent host memory is those bytes: a kernel's stores (on every engine) land in the
/// host's buffer, the host's writes are what kernels and copies read, and removing the region
/// leaves the buffer to its owner. A window already holding a region is refused.
#[test]
fn a_host_region_shares_its_bytes_with_the_host() {
    // The CPU driver's tests of mapped host memory run the same kernel through the driver API.
    let ptx = include_str!("ptx/add_one.ptx");
    let m = Module::parse(ptx).unwrap();
    for engine in [Engine::Interpreter, Engine::Jit, Engine::JitScalar] {
        let mut host: Vec<u32> = (0..8).map(|i| i * 10).collect();
        let mut mem = Memory::new();
        let other = mem.add_region(64, 16).unwrap();
        let ptr = std::ptr::NonNull::new(host.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: `host` outlives the region (removed below) and is not touched meanwhile but
        // through `mem`, or read back after each call.
        let base = unsafe { mem.add_host_region(ptr, 32, None) }.unwrap();
        assert_ne!(base, other);
        let dims = LaunchDims { grid: [1, 1, 1], block: [8, 1, 1], dynamic_shared: 0 };
        let opts = ExecOptions { engine, ..ExecOptions::default() };
        launch(&m, "add_one", &dims, &base.to_le_bytes(), &mem, &opts).unwrap();
        assert_eq!(host, (0..8).map(|i| i * 10 + 1).collect::<Vec<_>>(), "{engine:?}: the kernel's stores");
        host[3] = 1000;
        assert_eq!(mem.read_u32(base + 12).unwrap(), 1000, "the host's write, read as device memory");
        mem.copy(other, base, 32).unwrap();
        mem.fill(base, 8, &[0xFF]).unwrap();
        assert_eq!(&host[..3], &[u32::MAX, u32::MAX, 21]);
        assert!(mem.read(base + 32, &mut [0; 1]).is_err(), "past the lent bytes");
        mem.remove_region(base).unwrap();
        assert!(mem.read(base, &mut [0; 1]).is_err(), "the loan is over");
        assert_eq!(host[2], 21);
        assert_eq!(mem.read_u32(other + 12).unwrap(), 1000);
    }
    let mut mem = Memory::new();
    let taken = mem.add_region(8, 8).unwrap();
    let mut word = [0u32; 2];
    let ptr = std::ptr::NonNull::new(word.as_mut_ptr() as *mut u8).unwrap();
    // SAFETY: `word` outlives `mem`'s use of it (the region is removed before it goes).
    unsafe {
        assert_eq!(mem.add_host_region(ptr, 8, Some(taken)), Err(MemError::WindowInUse { addr: taken }));
        assert_eq!(mem.add_host_region(ptr, 8, Some(taken + 4)), Err(MemError::WindowInUse { addr: taken + 4 }));
        let unaligned = std::ptr::NonNull::new((word.as_mut_ptr() as *mut u8).add(1)).unwrap();
        assert!(matches!(mem.add_host_region(unaligned, 4, None), Err(MemError::HostMisaligned { .. })));
        let at = 100u64 << 36;
        assert_eq!(mem.add_host_region(ptr, 8, Some(at)), Ok(at), "a window of its own choosing");
        mem.write(at + 4, &7u32.to_le_bytes()).unwrap();
        assert_eq!(word[1], 7);
        let fresh = mem.add_region(8, 8).unwrap();
        assert!(fresh > at, "fresh regions go past it");
        mem.remove_region(at).unwrap();
    }
}

//! The host side of device memory.

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
    assert!(
        mem.read(b + 1000, &mut [0; 0]).is_ok(),
        "empty read at the end"
    );
    mem.copy(a + 2, a, 6).unwrap();
    let mut v = [0u8; 10];
    mem.read(a, &mut v).unwrap();
    assert_eq!(
        v,
        [1, 2, 1, 2, 3, 4, 5, 6, 9, 10],
        "overlapping copy behaves as memmove"
    );
    mem.fill(b + 3, 9, &[0xAB, 0xCD]).unwrap();
    let r = mem.read_region(b).unwrap();
    assert_eq!(
        &r[..14],
        &[0, 0, 0, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0xCD, 0xAB, 0, 0]
    );
    mem.write(b + 4, &0xDEAD_BEEFu32.to_le_bytes()).unwrap();
    assert_eq!(mem.read_u32(b + 4).unwrap(), 0xDEAD_BEEF);
    assert_eq!(mem.region_size(b), Some(1000));
    mem.remove_region(a).unwrap();
    assert!(mem.read(a, &mut [0; 1]).is_err(), "freed");
    assert!(mem.remove_region(a).is_err());
    assert!(mem.remove_region(b + 4).is_err(), "not a base");
    assert!(matches!(
        mem.add_region(1 << 40, 8),
        Err(MemError::TooLarge { .. })
    ));
    assert!(mem.add_region(8, 3).is_err());
}

//! Any bytes as a `.npy` file: `npy::parse` and the fit to every kind of region return errors,
//! never panic, and what parses says exactly how many data bytes follow its header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::archive::DType;
use shared::npy;

fuzz_target!(|data: &[u8]| {
    let Ok((header, body)) = npy::parse(data) else { return };
    assert!(body.len() <= data.len());
    for dtype in DType::ALL {
        let size = body.len() as u64;
        let _ = npy::check_fit(&header, "r", dtype, size, &header.shape);
        let _ = npy::check_fit(&header, "r", dtype, size, &[]);
    }
    // What parses is what a writer of the same header would write, data after it.
    if let Some(dtype) = DType::ALL.into_iter().find(|d| npy::descr(*d) == header.descr && !header.fortran_order) {
        let mut again = npy::header(dtype, &header.shape);
        again.extend_from_slice(body);
        let (h, b) = npy::parse(&again).expect("a written header parses");
        assert_eq!((h.shape, b), (header.shape.clone(), body));
    }
});

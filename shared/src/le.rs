//! Little-endian integer reads at a byte offset, the one set the archive reader, the fatbin
//! parser and the CUDA graph layouts share.
//!
//! The caller has checked the bounds: every parser here validates lengths before it reads, so an
//! offset past the end is a bug in that check, not bad input, and panics as slice indexing does.

/// The `u16` at `b[at..at + 2]`.
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at `b[at..at + 4]`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at `b[at..at + 8]`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_words_at_an_offset() {
        let b = [0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xee];
        assert_eq!(u16_at(&b, 1), 0x0201);
        assert_eq!(u32_at(&b, 1), 0x0403_0201);
        assert_eq!(u64_at(&b, 1), 0x0807_0605_0403_0201);
    }

    #[test]
    #[should_panic]
    fn a_read_past_the_end_panics_as_indexing_does() {
        u32_at(&[1, 2, 3, 4], 1);
    }
}

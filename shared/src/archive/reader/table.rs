//! Fixed-size little-endian records of one table section ([`Table`]), read in place.

use super::error::{err, FormatError};
use crate::archive::layout::{SectionKind, TABLE_HEADER_LEN};
use crate::le::u32_at;

/// Fixed-size records of one table section.
#[derive(Clone, Copy, Debug)]
pub(in crate::archive) struct Table<'a> {
    pub(super) kind: SectionKind,
    /// The records, starting after the table header.
    data: &'a [u8],
    /// File offset of the first record.
    pub(super) file_offset: u64,
    pub(in crate::archive) count: usize,
    stride: usize,
}

impl<'a> Table<'a> {
    pub(super) fn empty(kind: SectionKind) -> Self {
        Table { kind, data: &[], file_offset: 0, count: 0, stride: kind.record_len().unwrap_or(1) }
    }

    pub(super) fn parse(kind: SectionKind, bytes: &'a [u8], file_offset: u64) -> Result<Self, FormatError> {
        let known = kind.record_len().expect("table section");
        if bytes.len() < TABLE_HEADER_LEN {
            return err(kind.name(), file_offset, "section is shorter than its 8-byte table header");
        }
        let count = u32_at(bytes, 0) as usize;
        let stride = u32_at(bytes, 4) as usize;
        if stride < known {
            return err(
                kind.name(),
                file_offset + 4,
                format!("record size {stride} is smaller than the {known} bytes of format v1"),
            );
        }
        let need = (count as u128) * (stride as u128);
        let have = (bytes.len() - TABLE_HEADER_LEN) as u128;
        if need > have {
            return err(
                kind.name(),
                file_offset,
                format!("{count} records of {stride} bytes need {need} bytes but the section holds {have}"),
            );
        }
        Ok(Table {
            kind,
            data: &bytes[TABLE_HEADER_LEN..TABLE_HEADER_LEN + need as usize],
            file_offset: file_offset + TABLE_HEADER_LEN as u64,
            count,
            stride,
        })
    }

    pub(in crate::archive) fn rec(&self, i: usize) -> &'a [u8] {
        &self.data[i * self.stride..i * self.stride + self.stride]
    }

    pub(in crate::archive) fn at(&self, i: usize, field: usize) -> u64 {
        self.file_offset + (i * self.stride + field) as u64
    }

    pub(super) fn name(&self) -> &'static str {
        self.kind.name()
    }
}

//! What opening or reading an archive can refuse: [`FormatError`] (what is wrong with the bytes,
//! and where), [`MetadataError`] (metadata a replay cannot follow) and [`UnknownName`].

/// Archive metadata a replay cannot follow: one of the keys captures write for replays
/// (`capture.placement`, `capture.addresses`, `capture.launch_attributes`) holds something the
/// replay does not understand, or a key another asks for is absent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("archive metadata {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("{why}, but the archive has no metadata {key}")]
    Missing { key: &'static str, why: &'static str },
}

impl MetadataError {
    pub fn invalid(key: &'static str, reason: impl std::fmt::Display) -> MetadataError {
        MetadataError::Invalid { key, reason: reason.to_string() }
    }
}

/// A name that is neither a binding nor a region of the archive; says which names there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no binding or region named {name:?} (bindings: {bindings}; regions: {regions})")]
pub struct UnknownName {
    pub name: String,
    pub(super) bindings: String,
    pub(super) regions: String,
}

/// What is wrong with an archive, and where.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{section} at byte {offset}: {reason}")]
pub struct FormatError {
    /// `header`, `section table`, or a section's name (`ops`, `regions`, ...).
    pub section: &'static str,
    /// Byte offset in the file where the problem is.
    pub offset: u64,
    pub reason: String,
}

pub(in crate::archive) fn err<T>(
    section: &'static str,
    offset: u64,
    reason: impl Into<String>,
) -> Result<T, FormatError> {
    Err(FormatError { section, offset, reason: reason.into() })
}

//! Regions at their captured addresses: the fallback for pointers a capture cannot find.
//!
//! A capture turns every pointer it sees (in parameters, uploaded host data, a region's contents
//! at first touch) into a relocation, so a replay may put regions anywhere. A pointer a kernel
//! computes from integers, or writes into a region during the range, is not seen. Where the
//! capture cannot be certain it saw them all, it keeps each region's captured address
//! (`capture.addresses`) and asks replays to place regions there (`capture.placement:
//! captured`): the captured pointers are then right as they are. Relocations still apply (they
//! patch in the same addresses). Replays may override the archive's choice (`--placement`).

use serde::{Deserialize, Serialize};

use crate::archive::{Archive, MetadataError, RegionId};

/// Metadata key: a JSON list of [`Address`], every captured region's device address.
pub const ADDRESSES_KEY: &str = "capture.addresses";
/// Metadata key: `captured` where a replay must place regions at their captured addresses,
/// `fresh` (or no key) where it may put them anywhere.
pub const PLACEMENT_KEY: &str = "capture.placement";

/// Where a replay puts regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// At their captured addresses.
    Captured,
    /// Wherever the replay's memory gives them.
    Fresh,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Captured => "captured",
            Placement::Fresh => "fresh",
        }
    }
}

/// One region's captured device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    pub region: RegionId,
    pub address: u64,
}

/// The placement an archive asks for: `fresh` where it says nothing.
pub fn asked(archive: &Archive<'_>) -> Result<Placement, MetadataError> {
    match archive.meta_value(PLACEMENT_KEY) {
        None | Some("fresh") => Ok(Placement::Fresh),
        Some("captured") => Ok(Placement::Captured),
        Some(other) => Err(MetadataError::invalid(PLACEMENT_KEY, format!("{other:?} is neither captured nor fresh"))),
    }
}

/// The regions a replay places and where, in region order, under `choice` (the replay's
/// override) or else the archive's own placement; empty for a fresh placement. Regions the
/// archive keeps no address for (host data a capture uploaded) get fresh addresses.
pub fn placed_regions(archive: &Archive<'_>, choice: Option<Placement>) -> Result<Vec<Address>, MetadataError> {
    let placement = match choice {
        Some(p) => p,
        None => asked(archive)?,
    };
    if placement == Placement::Fresh {
        return Ok(Vec::new());
    }
    let json = archive.required_meta(ADDRESSES_KEY, "regions are to be placed at their captured addresses")?;
    let mut list: Vec<Address> = serde_json::from_str(json).map_err(|e| MetadataError::invalid(ADDRESSES_KEY, e))?;
    list.sort_by_key(|a| a.region);
    for pair in list.windows(2) {
        if pair[0].region == pair[1].region {
            return Err(MetadataError::invalid(ADDRESSES_KEY, format!("region {} has two addresses", pair[0].region)));
        }
    }
    if let Some(a) = list.iter().find(|a| a.region as usize >= archive.region_count()) {
        return Err(MetadataError::invalid(
            ADDRESSES_KEY,
            format!("region {} does not exist (the archive has {})", a.region, archive.region_count()),
        ));
    }
    Ok(list)
}

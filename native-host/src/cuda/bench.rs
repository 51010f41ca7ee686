//! `recap bench cuda`: placeholder

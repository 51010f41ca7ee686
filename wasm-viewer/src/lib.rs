//! The recap viewer.

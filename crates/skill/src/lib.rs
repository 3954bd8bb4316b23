//! The skill document: SKILL.md grammar, the declaration, and the OpenWOP projection.
//!
//! Pure: nothing in this crate does I/O. Parsing returns the declaration and the body as separate
//! values so the caller decides where the body goes (the node writes it to the source store and
//! drops it); [`Declaration`] has no field that can hold the body.

mod provider;

pub use provider::{ProviderId, UnknownProvider};
